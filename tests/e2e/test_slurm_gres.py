"""GPU sharing and MIG through Slurm's GRES on the namespace cluster (one
fake GPU per node split into 100 shards, and two MIG instances of type
1g.10gb): a 0.25-GPU job asks for shards and a mig:1g.10gb job for one
instance, and what Slurm allocated, as `scontrol show job -d` and the
task's environment tell it, is what kiln asked for. Without a declared
capacity, Slurm's MIG GRES are the instances kiln's scheduler places on."""
from conftest import job_yaml, wait_for
from slurm_cluster import (scontrol_job, slurm_job_id,  # noqa: F401
                           slurm_server, slurmb_env)

SHOW = ("echo CUDA=$CUDA_VISIBLE_DEVICES SHARDS=$SLURM_SHARDS_ON_NODE "
        "STEP=$SLURM_STEP_GPUS; ")


def held(gate):
    """A task that shows its devices and waits for the gate, so that the
    test can read Slurm's record of the running job."""
    return ["/bin/sh", "-c",
            SHOW + f"while [ ! -e {gate} ]; do sleep 0.1; done"]


def running(env, slurm_id):
    return wait_for(lambda: (lambda j: j["JobState"] == "RUNNING" and j)(
        scontrol_job(env, slurm_id)), what=f"Slurm job {slurm_id} to run")


def env_of(server, jid):
    log = wait_for(lambda: "CUDA=" in server.logs(jid) and server.logs(jid),
                   what=f"job {jid}'s output")
    line = next(l for l in log.splitlines() if l.startswith("CUDA="))
    return dict(w.split("=", 1) for w in line.split())


def test_quarter_gpu_and_mig_slice_are_slurm_gres(tmp_path, slurmb_env):
    # Admission still uses the declared capacity: one MIG-capable A100 and
    # one whole H100.
    s = slurm_server(tmp_path, slurmb_env, gpus="1xA100-80GB:mig,1xH100-80GB")
    gate = tmp_path / "gate"
    try:
        shared = s.submit_named(job_yaml("kiln-shard", held(gate),
                                         resources={"gpus": 0.25}),
                                "kiln-shard")
        mig = s.submit_named(job_yaml("kiln-mig", held(gate),
                                      resources={"gpus": "mig:1g.10gb"}),
                             "kiln-mig")
        # 0.25 GPU with 100 shards per GPU (the server's default): 25.
        job = running(slurmb_env, slurm_job_id(s, shared))
        assert job["TresPerNode"] == "gres:shard:25", job
        assert job["GRES"] == "shard:25(IDX:0)", job  # of GPU 0
        env = env_of(s, shared)
        assert env["SHARDS"] == "25", env
        assert env["CUDA"] == "0", env  # the node's one shardable GPU

        job = running(slurmb_env, slurm_job_id(s, mig))
        assert job["TresPerNode"] == "gres:gpu:1g.10gb:1", job
        # One instance, which the task sees as its only device.
        idx = job["GRES"].split("IDX:")[1].rstrip(")")
        assert job["GRES"].startswith("gpu:1g.10gb:1(") and idx in ("1", "2")
        env = env_of(s, mig)
        assert env["CUDA"] == idx and env["STEP"] == idx, env
        assert env["SHARDS"] == "", env
        gate.touch()
        for jid in (shared, mig):
            job = s.wait_state(jid, ("succeeded", "failed"))
            assert job["state"] == "succeeded", job
    finally:
        gate.touch()
        s.stop()


def test_mig_slice_from_slurms_own_gres(tmp_path, slurmb_env):
    # No --gpus: kiln's nodes are Slurm's, each its whole H100 and its two
    # 1g.10gb instances, and the MIG job is admitted on those instances.
    s = slurm_server(tmp_path, slurmb_env, slurm_nodes=True)
    gate = tmp_path / "gate"
    try:
        listed = s.request("GET", "/v1/nodes").json()["nodes"]
        nodes = [n for n in listed if n.get("slurm")]
        assert len(nodes) == 2, listed
        for n in nodes:
            devs = n["devices"]
            assert [(d["model"], d["mig"]) for d in devs] == [
                ("h100", False), ("1g.10gb", True), ("1g.10gb", True)], n
        mig = s.submit_named(job_yaml("kiln-mig", held(gate),
                                      resources={"gpus": "mig:1g.10gb"}),
                             "kiln-mig")
        job = running(slurmb_env, slurm_job_id(s, mig))
        assert job["TresPerNode"] == "gres:gpu:1g.10gb:1", job
        assert job["GRES"].startswith("gpu:1g.10gb:1("), job
        # kiln holds one instance of the four.
        held_now = sum(d.get("mig_slices_used", 0) for n in
                       s.request("GET", "/v1/nodes").json()["nodes"]
                       for d in n["devices"])
        assert held_now == 1
        gate.touch()
        job = s.wait_state(mig, ("succeeded", "failed"))
        assert job["state"] == "succeeded", job
    finally:
        gate.touch()
        s.stop()
