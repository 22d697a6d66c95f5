"""The Slurm executor against a real single-node Slurm (slurm-wlm and munge
from Debian, brought up by scripts/slurm-up.sh with 8 fake GPUs in
gres.conf): a gang of two, GPUs from GRES, cancel, timeout with the
checkpoint signal, eviction and resume from a checkpoint, and `kiln health`
draining the node. The cluster is left as found: no kiln jobs, node idle."""
import os
import signal
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import KILN, Server, job_yaml, stop_at_end, wait_for
from slurm_cluster import squeue_ids

REPO = Path(__file__).resolve().parents[2]
NODE = socket.gethostname().split(".")[0]
COMMIT = ('ck() { d="$KILN_CHECKPOINT_DIR/$1"; mkdir -p "$d.tmp"; '
          'echo "$2" > "$d.tmp/state"; mv "$d.tmp" "$d"; }; ')


@pytest.fixture(scope="session")
def slurm_env():
    if os.geteuid() != 0:
        pytest.skip("slurmctld and slurmd need root to run here")
    up = subprocess.run(["bash", str(REPO / "scripts/slurm-up.sh")],
                        capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stderr
    env = dict(os.environ, SLURM_CONF=up.stdout.strip().splitlines()[-1])
    yield env
    # Undrain, whatever a failed test left behind.
    subprocess.run(["scontrol", "update", f"NodeName={NODE}", "State=RESUME"],
                   env=env, capture_output=True, timeout=30)
    # Tests leave no daemon behind; the state directory stays, so the
    # next start is quick. munged goes once every cluster has stopped.
    down = ["bash", str(REPO / "scripts/slurm-down.sh")]
    stop_at_end("the Slurm cluster", down + ["--keep-munge"], then=down)


def shared_gate_dir(tmp_path):
    """A root server runs Slurm tasks as the unprivileged kiln-task user:
    the gates tasks touch go where that user may write."""
    tmp_path.chmod(0o1777)


@pytest.fixture
def sserver(tmp_path, slurm_env):
    shared_gate_dir(tmp_path)
    s = Server(tmp_path / "slurm-home", gpus="8xH100-80GB",
               extra=["--executor", "slurm"], env=slurm_env)
    s.home.mkdir()
    s.start()
    s.names = []
    yield s
    s.stop()
    for name in s.names:
        subprocess.run(["scancel", "-n", name], env=slurm_env, timeout=30)
    for name in s.names:
        wait_for(lambda: not squeue_ids(slurm_env, name), timeout=30,
                 what=f"Slurm job {name} to leave the queue")


def submit(s, name, command, **fields):
    s.names.append(name)
    return s.submit(job_yaml(name, command, **fields))


def env_line(log, name):
    return next(l for l in log.splitlines() if l.startswith(name + "="))


def test_gang_of_two_in_one_allocation(sserver):
    show = ('echo RANK=$RANK; echo WORLD_SIZE=$WORLD_SIZE; '
            'echo MASTER_ADDR=$MASTER_ADDR; echo MASTER_PORT=$MASTER_PORT; '
            'echo LOCAL_RANK=$LOCAL_RANK; echo SLURM_JOB_ID=$SLURM_JOB_ID')
    jid = submit(sserver, "kiln-gang", ["/bin/sh", "-c", show], tasks=2,
                 resources={"cpus": 1, "memory": "64Mi"})
    job = sserver.wait_state(jid, ("succeeded", "failed"))
    assert job["state"] == "succeeded", job
    logs = [sserver.logs(jid, task=r) for r in (0, 1)]
    for rank, log in enumerate(logs):
        assert f"RANK={rank}" in log and "WORLD_SIZE=2" in log
        assert f"LOCAL_RANK={rank}" in log  # one node: local ranks 0 and 1
        assert f"MASTER_ADDR={NODE}" in log
    # One sbatch for the gang: both ranks ran in the same Slurm job.
    ids = {env_line(l, "SLURM_JOB_ID") for l in logs}
    assert len(ids) == 1 and ids != {"SLURM_JOB_ID="}
    assert env_line(logs[0], "MASTER_PORT") == env_line(logs[1], "MASTER_PORT")
    attempt = sserver.home / "tasks" / str(jid) / "1.slurm"
    assert (attempt / "sbatch.out").read_text().split(";")[0].strip() == \
        env_line(logs[0], "SLURM_JOB_ID").split("=")[1]
    # `kiln logs` reads the same files.
    r = sserver.cli("logs", str(jid), "--task", "1", check=True)
    assert "RANK=1" in r.stdout


def test_array_elements_are_slurm_jobs_with_their_index(sserver):
    show = ('echo SLURM_JOB_ID=$SLURM_JOB_ID; '
            'echo SLURM_ARRAY_TASK_ID=$SLURM_ARRAY_TASK_ID; '
            'echo SLURM_ARRAY_JOB_ID=$SLURM_ARRAY_JOB_ID; '
            'echo KILN_ARRAY_INDEX=$KILN_ARRAY_INDEX')
    first = submit(sserver, "kiln-array", ["/bin/sh", "-c", show],
                   array="2-4", resources={"cpus": 1, "memory": "64Mi"})
    slurm_ids = set()
    for k, jid in enumerate(range(first, first + 3)):
        job = sserver.wait_state(jid, ("succeeded", "failed"))
        assert job["state"] == "succeeded", job
        log = sserver.logs(jid)
        assert env_line(log, "SLURM_ARRAY_TASK_ID") == \
            f"SLURM_ARRAY_TASK_ID={k + 2}"
        assert env_line(log, "KILN_ARRAY_INDEX") == f"KILN_ARRAY_INDEX={k + 2}"
        assert env_line(log, "SLURM_ARRAY_JOB_ID") == \
            f"SLURM_ARRAY_JOB_ID={first}"
        slurm_ids.add(env_line(log, "SLURM_JOB_ID"))
    # One sbatch per element, each its own Slurm job.
    assert len(slurm_ids) == 3 and "SLURM_JOB_ID=" not in slurm_ids


def test_gpu_job_sees_the_gpus_slurm_gave_it(sserver):
    jid = submit(sserver, "kiln-gpu", ["/bin/sh", "-c",
                                       "echo CUDA=$CUDA_VISIBLE_DEVICES; "
                                       "echo STEP=$SLURM_STEP_GPUS"],
                 resources={"gpus": 2})
    job = sserver.wait_state(jid, ("succeeded", "failed"))
    assert job["state"] == "succeeded", job
    log = sserver.logs(jid)
    cuda = env_line(log, "CUDA").split("=")[1]
    assert len(cuda.split(",")) == 2
    # What Slurm bound to the step, not kiln's own choice.
    assert cuda == env_line(log, "STEP").split("=")[1]


def test_cancel_ends_the_slurm_job(sserver, slurm_env):
    jid = submit(sserver, "kiln-cancel", ["/bin/sh", "-c",
                                          "echo up; sleep 300 & wait"])
    wait_for(lambda: "up" in sserver.logs(jid), what="the task to start")
    assert squeue_ids(slurm_env, "kiln-cancel")
    r = sserver.request("POST", f"/v1/jobs/{jid}/cancel")
    assert r.status_code == 200, r.text
    job = sserver.wait_state(jid, "cancelled")
    assert job["attempts_detail"][0]["signal"] == 15
    wait_for(lambda: not squeue_ids(slurm_env, "kiln-cancel"),
             what="the Slurm job to end")


def test_the_tasks_user_cannot_point_the_servers_scancel_elsewhere(
        sserver, slurm_env):
    # The victim: a job of another user (root here), held so it stays
    # pending, which is what a cancel's `scancel --state=PENDING` reaches.
    victim = subprocess.run(["sbatch", "--parsable", "--hold",
                             "--job-name=kiln-victim", "--wrap", "sleep 300"],
                            env=slurm_env, capture_output=True, text=True,
                            timeout=30)
    assert victim.returncode == 0, victim.stderr
    victim_id = victim.stdout.strip().split(";")[0]
    sserver.names.append("kiln-victim")
    # The task writes the victim's id where the server used to keep its
    # job id, in its attempt directory (its user's), and tries the
    # server's own directory beside it (hidden from the task) ...
    jid = submit(sserver, "kiln-deputy", [
        "/bin/sh", "-c",
        f'for f in ../sbatch.out ../../1.slurm/sbatch.out; do '
        f'echo {victim_id} > "$f" && echo "wrote $f"; done; '
        'echo up; sleep 300 & wait'])
    wait_for(lambda: "up" in sserver.logs(jid), what="the task to start")
    assert "wrote ../sbatch.out" in sserver.logs(jid)
    assert "wrote ../../1.slurm" not in sserver.logs(jid)
    attempt = sserver.home / "tasks" / str(jid) / "1"
    control = attempt.with_suffix(".slurm")
    own_id = (control / "sbatch.out").read_text().split(";")[0].strip()
    # ... and its Unix user from outside, where it owns the attempt
    # directory: the job id it puts there is not the server's.
    forge = f'echo {victim_id} > forged && mv -f forged sbatch.out'
    r = subprocess.run(["runuser", "-u", "kiln-task", "--", "sh", "-c", forge],
                       cwd=attempt, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["runuser", "-u", "kiln-task", "--", "sh", "-c",
                        f"echo {victim_id} > {control}/sbatch.out"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "Permission denied" in r.stderr, r
    assert control.stat().st_uid == 0 and control.stat().st_mode & 0o077 == 0
    r = sserver.request("POST", f"/v1/jobs/{jid}/cancel")
    assert r.status_code == 200, r.text
    sserver.wait_state(jid, "cancelled")
    wait_for(lambda: not squeue_ids(slurm_env, "kiln-deputy"),
             what="the kiln job's own Slurm job to end")
    assert own_id != victim_id
    # The server's scancel went to its own job; the victim still waits.
    shown = subprocess.run(["squeue", "-h", "-j", victim_id, "-o", "%T"],
                           env=slurm_env, capture_output=True, text=True,
                           timeout=30)
    assert shown.stdout.strip() == "PENDING", shown


def test_timeout_sends_the_checkpoint_signal_before_the_kill(sserver):
    script = "trap 'echo got-usr1' USR1; echo up; while :; do sleep 0.1; done"
    jid = submit(sserver, "kiln-timeout", ["/bin/sh", "-c", script],
                 timeout="2s", checkpoint={"signal": "SIGUSR1", "grace": "1s"})
    job = sserver.wait_state(jid, ("failed", "succeeded"))
    assert job["state"] == "failed"
    a = job["attempts_detail"][0]
    assert "timeout" in a["reason"], a
    assert a["signal"] == 9  # it ignored the signal: killed after the grace
    assert "got-usr1" in sserver.logs(jid)


def test_evict_then_resume_from_checkpoint(sserver, slurm_env, tmp_path):
    gate = tmp_path / "gate"
    script = COMMIT + (
        'if [ -z "$KILN_RESUME_FROM" ]; then '
        "  trap 'echo got-usr1; exit 143' USR1; "
        f'  ck step-000001 "state 1"; touch {gate}; '
        '  while :; do sleep 0.1; done; '
        'else echo "resumed with $(cat $KILN_RESUME_FROM/state)"; fi')
    jid = submit(sserver, "kiln-evict", ["/bin/sh", "-c", script],
                 preemptible=True,
                 checkpoint={"signal": "SIGUSR1", "grace": "5s"})
    wait_for(lambda: gate.exists(), what="the first checkpoint")
    # What sbatch was given, as Slurm holds it.
    slurm_id = (sserver.home / "tasks" / str(jid) / "1.slurm" / "sbatch.out") \
        .read_text().strip()
    shown = subprocess.run(["scontrol", "show", "job", "-o", slurm_id],
                           env=slurm_env, capture_output=True, text=True,
                           timeout=30).stdout
    assert "Requeue=1" in shown and "JobState=RUNNING" in shown, shown
    wait_for(lambda: (sserver.home / "blobs" / str(jid) / "checkpoints" /
                      "step-000001" / "MANIFEST.json").exists(),
             what="step-000001 synced")
    r = sserver.cli("evict", str(jid), check=True)
    job = sserver.wait_state(jid, ("succeeded", "failed"), timeout=60)
    a = job["attempts_detail"]
    assert [x["state"] for x in a] == ["preempted", "succeeded"], job
    assert "got-usr1" in sserver.logs(jid, attempt=1)
    assert a[0]["exit_code"] == 143
    assert "resumed with state 1" in sserver.logs(jid, attempt=2)
    # Each attempt was its own Slurm job.
    ids = [(sserver.home / "tasks" / str(jid) / f"{n}.slurm" / "sbatch.out")
           .read_text().strip() for n in (1, 2)]
    assert ids[0] != ids[1]
    assert r.returncode == 0


def node_state(env):
    out = subprocess.run(["sinfo", "-h", "-N", "-n", NODE, "-o", "%T|%E"],
                         env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_failed_health_check_drains_the_node(sserver, slurm_env):
    # A real check made to fail: the task directory "needs" 1000 TiB free.
    r = subprocess.run([KILN, "health", "--drain", "--node-name", NODE,
                        "--dir", str(sserver.home), "--min-free", "1000Ti"],
                       env=dict(slurm_env, KILN_HOME=str(sserver.home)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "Health check failed" in r.stdout
    state = node_state(slurm_env)
    # Resume first, so that a failed assertion leaves the node usable.
    subprocess.run(["scontrol", "update", f"NodeName={NODE}", "State=RESUME"],
                   env=slurm_env, check=True, timeout=30)
    assert state.startswith("drain"), state
    assert "kiln health: disk_free:" in state
    # kiln's own view of the node went unhealthy too.
    nodes = sserver.request("GET", "/v1/nodes").json()
    assert "unhealthy" in str(nodes), nodes
    wait_for(lambda: node_state(slurm_env).split("|")[0] in ("idle", "mixed"),
             what="the node to be back")


def test_server_restart_adopts_the_slurm_job(sserver, tmp_path):
    gate = tmp_path / "gate"
    jid = submit(sserver, "kiln-adopt", ["/bin/sh", "-c",
                                         f"echo up; while [ ! -e {gate} ]; do "
                                         "sleep 0.05; done; echo done"])
    wait_for(lambda: "up" in sserver.logs(jid), what="the task to start")
    sserver.kill9()
    sserver.start()
    gate.touch()
    job = sserver.wait_state(jid, ("succeeded", "failed"))
    assert job["state"] == "succeeded", job
    assert len(job["attempts_detail"]) == 1
    assert "done" in sserver.logs(jid)


def test_an_attempt_an_older_kiln_submitted_is_still_followed(sserver,
                                                              tmp_path):
    # An older kiln kept the attempt's Slurm files in the attempt
    # directory itself. After a restart the server reads them from there,
    # only from files it owns: it asks Slurm about that job id.
    gate = tmp_path / "gate"
    jid = submit(sserver, "kiln-older", ["/bin/sh", "-c",
                                         f"echo up; while [ ! -e {gate} ]; do "
                                         "sleep 0.05; done; echo done"])
    wait_for(lambda: "up" in sserver.logs(jid), what="the task to start")
    sserver.kill9()
    attempt = sserver.home / "tasks" / str(jid) / "1"
    control = attempt.with_suffix(".slurm")
    own_id = (control / "sbatch.out").read_text().split(";")[0].strip()
    for f in control.iterdir():
        if f.name in ("sbatch.out", "sbatch.err", "sbatch.pid"):
            shutil.move(f, attempt / f.name)
        else:
            f.unlink()
    control.rmdir()
    sserver.start()
    wait_for(lambda: (attempt / "slurm.state").exists() and
             f"JobId={own_id} " in (attempt / "slurm.state").read_text(),
             what="the server to ask Slurm about the older attempt's job")
    gate.touch()
    job = sserver.wait_state(jid, ("succeeded", "failed"))
    assert job["state"] == "succeeded", job
    assert not control.exists()


def test_partition_map_and_a_refused_submission(tmp_path, slurm_env):
    s = Server(tmp_path / "home", gpus="8xH100-80GB",
               extra=["--executor", "slurm", "--slurm-partitions",
                      "default=kiln,spot=no-such-partition,pool:big=kiln"],
               env=slurm_env)
    s.home.mkdir()
    s.start()
    s.names = []
    try:
        ok = submit(s, "kiln-part", ["/bin/sh", "-c",
                                     "echo partition=$SLURM_JOB_PARTITION"])
        job = s.wait_state(ok, ("succeeded", "failed"))
        assert job["state"] == "succeeded", job
        assert "partition=kiln" in s.logs(ok)
        # Preemptible jobs go to the spot partition, which Slurm refuses.
        bad = submit(s, "kiln-spot", ["/bin/true"], preemptible=True)
        job = s.wait_state(bad, ("succeeded", "failed"))
        assert job["state"] == "failed"
        reason = job["attempts_detail"][0]["reason"]
        assert "cannot submit" in reason and "partition" in reason, reason
        # A pool outranks spot; Slurm, not kiln's one node, honours it.
        pooled = submit(s, "kiln-pool", ["/bin/sh", "-c",
                                         "echo partition=$SLURM_JOB_PARTITION"],
                        preemptible=True, placement={"selector": {"pool": "big"}})
        job = s.wait_state(pooled, ("succeeded", "failed"))
        assert job["state"] == "succeeded", job
        assert "partition=kiln" in s.logs(pooled)
    finally:
        s.stop()
    r = subprocess.run([KILN, "server", "--executor", "slurm",
                        "--slurm-partitions", "gpu", "--home",
                        str(tmp_path / "other")], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1
    assert "--slurm-partitions: \"gpu\" is not" in r.stderr


def test_image_goes_to_pyxis_and_the_local_executor_refuses_it(sserver,
                                                               server):
    # No pyxis on the test cluster: sbatch refuses the option it adds.
    jid = submit(sserver, "kiln-image", ["/bin/true"],
                 image="nvcr.io/nvidia/pytorch:24.01-py3")
    job = sserver.wait_state(jid, ("succeeded", "failed"))
    assert job["state"] == "failed"
    assert "--container-image" in job["attempts_detail"][0]["reason"]
    assert job["spec"]["image"] == "nvcr.io/nvidia/pytorch:24.01-py3"
    r = server.request("POST", "/v1/jobs",
                       data=job_yaml("img", ["/bin/true"], image="debian:12"))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == "image"
    assert "runs no containers" in r.json()["error"]["message"]


def test_a_shim_killed_in_slurm_ends_the_attempt_as_lost(sserver):
    jid = submit(sserver, "kiln-lost", ["/bin/sh", "-c",
                                        "echo up; sleep 300 & wait"])
    wait_for(lambda: "up" in sserver.logs(jid), what="the task to start")
    # The shim dies as on a crashed node: no exit is recorded, so kiln
    # learns the end from Slurm.
    task = sserver.home / "tasks" / str(jid) / "1" / "0"
    os.kill(int((task / "shim.pid").read_text().split()[0]), signal.SIGKILL)
    job = sserver.wait_state(jid, ("failed", "succeeded"))
    assert job["state"] == "failed"
    reason = job["attempts_detail"][0]["reason"]
    assert "lost: Slurm job" in reason, reason


@pytest.fixture(scope="session")
def slurm2_env(slurm_env):
    """Two slurmd in two network namespaces (scripts/slurm-2node.sh), a
    cluster of their own; stopped again at the end of the session."""
    script = str(REPO / "scripts/slurm-2node.sh")
    up = subprocess.run(["bash", script, "up"], capture_output=True,
                        text=True, timeout=120)
    if up.returncode != 0:
        # Whatever of it started (a daemon, the bridge) goes again.
        subprocess.run(["bash", script, "down"], capture_output=True,
                       timeout=120)
    assert up.returncode == 0, up.stderr
    yield dict(slurm_env, SLURM_CONF=up.stdout.strip().splitlines()[-1])
    stop_at_end("the two-node Slurm cluster", ["bash", script, "down"])


def test_two_node_gang_evicted_and_resumed(tmp_path, slurm2_env):
    """The walk-through of docs/scale-out.md, small: a gang of two, one rank
    per node, checkpoints, is evicted and resumes on both nodes."""
    shared_gate_dir(tmp_path)
    s = Server(tmp_path / "home", extra=["--executor", "slurm"],
               env=slurm2_env)
    s.home.mkdir()
    s.start()
    s.names = []
    gate = tmp_path / "gate"
    try:
        show = ('echo NODE=$SLURMD_NODENAME RANK=$RANK LOCAL_RANK=$LOCAL_RANK '
                'NODE_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR; ')
        script = COMMIT + show + (
            'if [ -z "$KILN_RESUME_FROM" ]; then '
            "  trap 'echo got-usr1; exit 143' USR1; "
            f'  if [ $RANK = 0 ]; then ck step-000001 "state 1"; touch {gate}; fi; '
            '  while :; do sleep 0.1; done; '
            'else echo "resumed with $(cat $KILN_RESUME_FROM/state)"; fi')
        jid = submit(s, "kiln-2node", ["/bin/sh", "-c", script], tasks=2,
                     preemptible=True,
                     checkpoint={"signal": "SIGUSR1", "grace": "5s"})
        wait_for(lambda: gate.exists(), what="the first checkpoint")
        wait_for(lambda: (s.home / "blobs" / str(jid) / "checkpoints" /
                          "step-000001" / "MANIFEST.json").exists(),
                 what="step-000001 synced")
        s.cli("evict", str(jid), check=True)
        job = s.wait_state(jid, ("succeeded", "failed"), timeout=60)
        assert [x["state"] for x in job["attempts_detail"]] == \
            ["preempted", "succeeded"], job
        # The script's node names, KILN_SLURM2_NODES 1 and 2.
        prefix = os.environ.get("KILN_SLURM2_NODES", "kn")
        for attempt in (1, 2):
            for rank in (0, 1):
                log = s.logs(jid, task=rank, attempt=attempt)
                assert (f"NODE={prefix}{rank + 1} RANK={rank} LOCAL_RANK=0 "
                        f"NODE_RANK={rank} MASTER_ADDR={prefix}1") in log, log
                if attempt == 1:
                    assert "got-usr1" in log
                else:
                    assert "resumed with state 1" in log
    finally:
        s.stop()
        subprocess.run(["scancel", "-n", "kiln-2node"], env=slurm2_env,
                       timeout=30)
        wait_for(lambda: not squeue_ids(slurm2_env, "kiln-2node"),
                 timeout=30, what="the two-node job to leave the queue")


def test_slurm_signal_to_the_batch_shell_stops_through_the_shim(sserver,
                                                                slurm_env):
    # --signal=B:USR1@GRACE before the time limit, delivered now: the batch
    # shell turns it into a stop for the shim (USR1 to the task, SIGKILL
    # after the grace), rather than a bare signal to every process of the
    # step that a task ignoring it would outlive.
    script = "trap 'echo got-usr1' USR1; echo up; while :; do sleep 0.1; done"
    jid = submit(sserver, "kiln-bsig", ["/bin/sh", "-c", script],
                 checkpoint={"signal": "SIGUSR1", "grace": "1s"})
    wait_for(lambda: "up" in sserver.logs(jid), what="the task to start")
    attempt = sserver.home / "tasks" / str(jid) / "1"
    slurm_id = (attempt.with_suffix(".slurm") / "sbatch.out").read_text() \
        .strip()
    subprocess.run(["scancel", "--batch", "--signal=USR1", slurm_id],
                   env=slurm_env, check=True, timeout=30)
    job = sserver.wait_state(jid, ("failed", "succeeded"))
    assert job["attempts_detail"][0]["signal"] == 9
    assert "got-usr1" in sserver.logs(jid)
    assert (attempt / "0" / "stop.json").read_text().strip() == \
        '{"signal":10,"grace_ms":1000}'
