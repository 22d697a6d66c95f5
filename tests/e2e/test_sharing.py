"""GPU sharing end to end: shares of one simulated GPU, time-slicing and
MPS, and the environment each task is given."""
import re

from conftest import Server, job_yaml, wait_for

# Waits until a file appears so both tasks are running at once.
HOLD = ["/bin/sh", "-c",
        "for v in CUDA_VISIBLE_DEVICES KILN_GPU_SHARE "
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; do eval echo $v=\\$$v; done; "
        "i=0; while [ ! -e \"$KILN_TASK_DIR/../../../../../go\" ] && "
        "[ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done"]


def env_line(log, name):
    m = re.search(rf"^{name}=(.*)$", log, re.M)
    assert m, f"{name} missing from:\n{log}"
    return m.group(1)


def running_log(server, jid):
    """The task's log once it has printed its environment."""
    return wait_for(lambda: (lambda l: l if "CUDA_MPS" in l else None)(
        server.logs(jid)), what=f"job {jid} to print its environment")


def test_two_halves_share_one_gpu(server):
    jobs = [server.submit(job_yaml(f"half{i}", HOLD,
                                   resources={"gpus": 0.5}))
            for i in range(2)]
    logs = [running_log(server, j) for j in jobs]
    for j in jobs:
        assert server.job(j)["state"] == "running"
    devs = [env_line(l, "CUDA_VISIBLE_DEVICES") for l in logs]
    assert devs[0] == devs[1] and devs[0] != ""
    assert [env_line(l, "KILN_GPU_SHARE") for l in logs] == ["0.5", "0.5"]
    # Time-slicing is the default: no MPS limit is set.
    assert [env_line(l, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
            for l in logs] == ["", ""]
    # A third half goes to another GPU: the first is full.
    third = server.submit(job_yaml("half2", HOLD, resources={"gpus": 0.5}))
    assert env_line(running_log(server, third),
                    "CUDA_VISIBLE_DEVICES") != devs[0]
    (server.home.parent / "go").write_text("")
    for j in jobs + [third]:
        server.wait_state(j, "succeeded")


def test_mps_gets_thread_percentage(server):
    jid = server.submit(job_yaml(
        "mps", HOLD, resources={"gpus": 0.25, "sharing": "mps"},
        env={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "90"}))
    log = running_log(server, jid)
    assert env_line(log, "KILN_GPU_SHARE") == "0.25"
    assert env_line(log, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "25"
    tiny = server.submit(job_yaml(
        "tiny", HOLD, resources={"gpus": 0.001, "sharing": "mps"}))
    assert env_line(running_log(server, tiny),
                    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "1"
    (server.home.parent / "go").write_text("")
    for j in (jid, tiny):
        server.wait_state(j, "succeeded")


def test_whole_gpu_has_no_share(server):
    jid = server.submit(job_yaml("whole", HOLD, resources={"gpus": 1}))
    (server.home.parent / "go").write_text("")
    server.wait_state(jid, "succeeded")
    log = server.logs(jid)
    assert env_line(log, "KILN_GPU_SHARE") == ""


def test_sharing_on_whole_gpus_is_refused(server):
    r = server.request("POST", "/v1/jobs", params={"file": "job.yaml"},
                       data=job_yaml("bad", ["/bin/true"],
                                     resources={"gpus": 1, "sharing": "mps"}))
    assert r.status_code == 400, r.text
    assert "resources.sharing" in r.text


def test_node_fragmentation_is_fgds_measure_of_the_servers_workload(server):
    """A half-GPU job and a whole-GPU job run on 4 GPUs: the workload is
    half each shape. The 0.5 GPU left beside the half is fragmented for a
    whole-GPU job (half the workload) and usable by a half-GPU job, so
    0.25 GPU of 4 is fragmented: 6.25 %. A job constrained to a model the
    node lacks cannot use anything: with it, a third of the workload sees
    every idle GPU as fragmented. Before any GPU job there is no measure."""
    def frag():
        return server.request("GET", "/v1/nodes").json()["nodes"][0][
            "fragmentation"]
    assert frag() is None
    hold = ["/bin/sleep", "60"]
    server.submit(job_yaml("half", hold, resources={"gpus": 0.5}))
    server.submit(job_yaml("whole", hold, resources={"gpus": 1}))
    wait_for(lambda: sum(j["state"] == "running" for j in
                         server.request("GET", "/v1/jobs").json()["jobs"]) == 2,
             what="both jobs running")
    f = frag()
    assert f["milli"] == 250.0 and f["percent"] == 6.25
    assert f["workload_jobs"] == 2 and f["typical_shapes"] == 2
    assert "fragmentation: 6.2 % of the GPUs" in server.cli("nodes").stdout

    server.submit(job_yaml("elsewhere", ["/bin/true"],
                           resources={"gpus": 1, "gpu_model": ["A100"]}))
    # Idle: 0.5 + 2 GPUs. Whole-GPU job: 0.5 unusable; half: none;
    # the A100 job: all 2.5. Mean over the three shapes.
    f = frag()
    assert f["workload_jobs"] == 3
    assert abs(f["milli"] - (500 + 0 + 2500) / 3) < 1e-6
