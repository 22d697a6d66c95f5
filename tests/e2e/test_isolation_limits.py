"""Local tasks under cgroup limits: memory (and the OOM reason), the pid
cap, the CPU quota, device nodes of the task's own GPUs only, and the
cgroup removed when the task ends. Needs root and cgroup v1 (this
machine); cgroup v2 is covered by unit tests on a fake tree only."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
import requests

from conftest import KILN, Server, job_yaml, wait_for, kill_processes_under

V1 = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "cpu", "pids", "devices")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not (V1 / "memory" / "cgroup.procs").exists()
    or (V1 / "cgroup.controllers").exists(),
    reason="needs root and cgroup v1 hierarchies at /sys/fs/cgroup")

PY = "/usr/bin/python3"


def own_cgroups(text):
    """{controller: path} from a task's /proc/self/cgroup lines."""
    out = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for c in parts[1].split(","):
                if c in CONTROLLERS:
                    out[c] = parts[2]
    return out


def task_cgroups(paths, parent):
    """{controller: path} of the task's own cgroups among paths; a task
    without a CPU quota is in none of cpu (it stays in the server's)."""
    return {c: p for c, p in paths.items() if p.startswith(parent + "/task-")}


@pytest.fixture
def limited(tmp_path):
    """Servers whose tasks' cgroups go under a parent of this test's own;
    the parent is removed (and must be empty) at the end."""
    parent = f"/kiln-e2e-{uuid.uuid4().hex[:12]}"
    servers = []

    def start(*extra, gpus="4xH100-80GB"):
        s = Server(tmp_path / f"home{len(servers)}", gpus=gpus,
                   extra=["--cgroup-parent", parent, *extra])
        s.home.mkdir()
        servers.append(s)
        return s.start()

    yield start, parent
    for s in servers:
        s.stop()
        kill_processes_under(s.home)
    for c in CONTROLLERS:
        d = V1 / c / parent.lstrip("/")
        if d.exists():
            leftovers = [p.name for p in d.iterdir() if p.is_dir()]
            os.rmdir(d)
            assert not leftovers, f"{d} still holds {leftovers}"


def test_memory_hog_ends_out_of_memory(limited):
    start, _ = limited
    s = start()
    jid = s.submit(job_yaml("hog", [PY, "-c", "b = b'a' * (512 << 20)"],
                            resources={"memory": "64Mi"}))
    job = s.wait_state(jid, "failed", timeout=60)
    assert job["reason"].endswith("out of memory (limit 64Mi)"), job
    shown = s.cli("show", str(jid), check=True).stdout
    assert "out of memory (limit 64Mi)" in shown
    listed = s.cli("ls", "--all", check=True).stdout
    assert "out of memory" in listed, listed


def test_fork_bomb_stops_at_the_pid_cap(limited):
    start, _ = limited
    s = start("--pids-max", "64")
    # Forks sleeping children until the kernel refuses (or 2000 of them,
    # so that without a cap the test ends too), then reports how many.
    bomb = (
        "import os, time\n"
        "kids = []\n"
        "why = 'none'\n"
        "for i in range(2000):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as e:\n"
        "        why = e.strerror\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print('forked', len(kids), why, flush=True)\n"
        "time.sleep(1)\n")
    jid = s.submit(job_yaml("bomb", [PY, "-c", bomb]))
    s.wait_state(jid, "running", timeout=30)
    # The server keeps answering while the bomb runs.
    for _ in range(10):
        assert s.request("GET", "/healthz", token=None).status_code == 200
    s.wait_state(jid, "succeeded", timeout=60)
    words = s.logs(jid).split()
    n = int(words[words.index("forked") + 1])
    assert n < 64, words
    assert "Resource temporarily unavailable" in " ".join(words)


def test_cpu_quota_and_cgroup_removed(limited):
    start, parent = limited
    s = start()
    # The task reads its own cgroup: the quota for 0.5 CPU is 50 ms of
    # every 100 ms.
    script = (
        "import json\n"
        "paths = {}\n"
        "for line in open('/proc/self/cgroup'):\n"
        "    n, ctl, path = line.rstrip('\\n').split(':', 2)\n"
        "    for c in ctl.split(','):\n"
        "        paths[c] = path\n"
        "cpu = '/sys/fs/cgroup/cpu' + paths['cpu']\n"
        "pids = '/sys/fs/cgroup/pids' + paths['pids']\n"
        "print(json.dumps({'paths': paths,\n"
        "    'quota': open(cpu + '/cpu.cfs_quota_us').read().strip(),\n"
        "    'period': open(cpu + '/cpu.cfs_period_us').read().strip(),\n"
        "    'pids': open(pids + '/pids.max').read().strip()}))\n")
    # The spec's own process cap wins over the server's default.
    jid = s.submit(job_yaml("quota", [PY, "-c", script],
                            resources={"cpus": 0.5, "pids": 100}))
    s.wait_state(jid, "succeeded", timeout=60)
    got = json.loads(s.logs(jid).strip().splitlines()[-1])
    assert got["quota"] == "50000" and got["period"] == "100000", got
    assert got["pids"] == "100", got
    paths = own_cgroups("\n".join(f"0:{c}:{p}" for c, p in
                                  got["paths"].items()))
    for c in CONTROLLERS:
        assert paths[c].startswith(parent + "/task-"), paths
        assert not (V1 / c / paths[c].lstrip("/")).exists(), paths[c]


def test_task_opens_only_its_own_gpu_node(limited, tmp_path):
    start, _ = limited
    devdir = tmp_path / "dev"
    devdir.mkdir()
    try:
        for n in range(4):
            # 0666, as the NVIDIA driver makes them: tasks run as another
            # user, and only the cgroup is to decide.
            subprocess.run(["mknod", "-m", "0666", str(devdir / f"nvidia{n}"),
                            "c", "195", str(n)], check=True)
        s = start("--gpu-dev-dir", str(devdir))
        # Opening a node reaches the driver (none here: ENXIO) only when
        # the cgroup allows it; otherwise EPERM.
        script = (
            "import errno, json, os, sys\n"
            "out = {'visible': os.environ['CUDA_VISIBLE_DEVICES']}\n"
            "for n in range(4):\n"
            "    try:\n"
            "        os.close(os.open(sys.argv[1] + '/nvidia%d' % n, os.O_RDWR))\n"
            "        out[n] = 'opened'\n"
            "    except OSError as e:\n"
            "        out[n] = errno.errorcode[e.errno]\n"
            "print(json.dumps(out))\n")
        jid = s.submit(job_yaml("gpu", [PY, "-c", script, str(devdir)],
                                resources={"gpus": 1}))
        s.wait_state(jid, "succeeded", timeout=60)
        got = json.loads(s.logs(jid).strip().splitlines()[-1])
        own = got.pop("visible")
        assert got == {str(n): "ENXIO" if str(n) == own else "EPERM"
                       for n in range(4)}, got
    finally:
        for n in range(4):
            (devdir / f"nvidia{n}").unlink(missing_ok=True)
        devdir.rmdir()


def make_mig_dev(devdir, instances):
    """Simulated device nodes of one MIG GPU, as the NVIDIA driver lays
    them out: nvidia0, nvidia-caps/nvidia-cap<minor> per instance, and
    the table of minors (GPU instance N: access 100+2N, its compute
    instance 0: 101+2N) for the given instances."""
    caps = devdir / "nvidia-caps"
    caps.mkdir(parents=True)
    subprocess.run(["mknod", "-m", "0666", str(devdir / "nvidia0"), "c",
                    "195", "0"], check=True)
    lines = ["config 1", "monitor 2"]
    for gi in range(7):
        for minor in (100 + 2 * gi, 101 + 2 * gi):
            subprocess.run(["mknod", "-m", "0666",
                            str(caps / f"nvidia-cap{minor}"), "c", "195",
                            str(minor)], check=True)
        if gi in instances:
            lines += [f"gpu0/gi{gi}/access {100 + 2 * gi}",
                      f"gpu0/gi{gi}/ci0/access {101 + 2 * gi}"]
    (devdir / "mig-minors").write_text("\n".join(lines) + "\n")


MIG_PROBE = (
    "import errno, json, os, sys, time\n"
    "caps = sys.argv[1] + '/nvidia-caps'\n"
    "out = {'visible': os.environ['CUDA_VISIBLE_DEVICES']}\n"
    "for name in sorted(os.listdir(caps)):\n"
    "    try:\n"
    "        os.close(os.open(caps + '/' + name, os.O_RDWR))\n"
    "        out[name] = 'opened'\n"
    "    except OSError as e:\n"
    "        out[name] = errno.errorcode[e.errno]\n"
    "print(json.dumps(out), flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n")


def test_mig_tasks_open_only_their_own_instance(limited, tmp_path):
    """Two tasks on instances of one MIG GPU: each may open its own
    instance's capability nodes (ENXIO: no driver here) and no other's
    (EPERM from the device cgroup)."""
    start, _ = limited
    devdir = tmp_path / "dev"
    make_mig_dev(devdir, range(7))
    s = start("--gpu-dev-dir", str(devdir), gpus="1xA100-80GB:mig")
    first = s.submit(job_yaml("mig-a", [PY, "-c", MIG_PROBE, str(devdir),
                                        "60"],
                              resources={"gpus": "mig:1g.10gb"}))
    wait_for(lambda: "visible" in s.logs(first), what="the first task")
    second = s.submit(job_yaml("mig-b", [PY, "-c", MIG_PROBE, str(devdir),
                                         "0"],
                               resources={"gpus": "mig:1g.10gb"}))
    s.wait_state(second, "succeeded", timeout=60)
    s.cli("cancel", str(first), check=True)
    starts = set()
    for jid in (first, second):
        got = json.loads(s.logs(jid).strip().splitlines()[0])
        gi = int(got.pop("visible").rsplit("-", 1)[1])
        starts.add(gi)
        own = {f"nvidia-cap{100 + 2 * gi}", f"nvidia-cap{101 + 2 * gi}"}
        assert len(got) == 14, got
        assert got == {n: "ENXIO" if n in own else "EPERM" for n in got}, \
            (jid, got)
    assert len(starts) == 2, starts


def test_mig_instance_unknown_to_the_driver_is_not_started(limited,
                                                            tmp_path):
    """A MIG instance missing from the driver's table of minors fails
    closed: its task does not start, and the reason names the instance."""
    start, _ = limited
    devdir = tmp_path / "dev"
    make_mig_dev(devdir, ())
    s = start("--gpu-dev-dir", str(devdir), gpus="1xA100-80GB:mig")
    jid = s.submit(job_yaml("mig-unknown", [PY, "-c", MIG_PROBE,
                                            str(devdir), "0"],
                            resources={"gpus": "mig:1g.10gb"}))
    job = s.wait_state(jid, "failed", timeout=60)
    assert "cannot start: no minor for gpu0/gi" in job["reason"], job
    assert "visible" not in s.logs(jid)


def test_nodes_report_the_limits(limited):
    start, _ = limited
    s = start("--pids-max", "512")
    node = s.request("GET", "/v1/nodes").json()["nodes"][0]
    assert node["limits"] == {"enforced": True, "cgroup": "v1",
                              "memory": True, "cpu": True, "pids_max": 512,
                              "devices": True}
    out = s.cli("nodes", check=True).stdout
    assert "limits: cgroup v1: memory, cpu, 512 processes, devices" in out


@pytest.fixture
def nobody_home():
    """A home the user nobody can reach (pytest's tmp_path is root's)."""
    top = Path(tempfile.mkdtemp(prefix="kiln-e2e-"))
    os.chmod(top, 0o755)
    home = top / "home"
    home.mkdir()
    os.chown(home, 65534, 65534)
    yield home
    shutil.rmtree(top)


def test_without_writable_cgroups_the_server_refuses(nobody_home):
    """As an unprivileged user with no delegated cgroup: refuse to start,
    saying why and how, unless --no-limits; then say nothing is enforced."""
    home = nobody_home
    env = dict(os.environ, KILN_HOME=str(home))
    env.pop("KILN_SERVER", None)
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
           KILN, "server", "--listen", "127.0.0.1:0", "--gpus", "1xT4-16GB"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True,
                         timeout=30)
    assert res.returncode != 0
    assert "cannot enforce task limits" in res.stderr, res.stderr
    assert "--no-limits" in res.stderr
    log = open(home / "server.log", "ab")
    proc = subprocess.Popen(cmd + ["--no-limits"], env=env, stdout=log,
                            stderr=log)
    try:
        url_file = home / "server.url"
        wait_for(lambda: url_file.exists() and url_file.read_text().strip()
                 or proc.poll() is not None, what="server.url")
        assert proc.poll() is None, (home / "server.log").read_text()
        token = (home / "admin.token").read_text().strip()
        r = requests.get(url_file.read_text().strip() + "/v1/nodes",
                         headers={"Authorization": f"Bearer {token}"},
                         timeout=10)
        limits = r.json()["nodes"][0]["limits"]
        assert limits["enforced"] is False
        assert limits["why"].startswith("--no-limits: "), limits
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_adopted_task_keeps_its_limits_and_cgroup_goes(limited, tmp_path):
    """A server killed and restarted adopts the running task: it is still
    in its cgroup, and the cgroup is gone once the task ends."""
    start, parent = limited
    s = start()
    go = tmp_path / "go"
    script = (f"cat /proc/self/cgroup; while [ ! -e {go} ]; do sleep 0.05; "
              "done; echo finished")
    jid = s.submit(job_yaml("adopted", ["/bin/sh", "-c", script],
                            resources={"memory": "256Mi"}))
    s.wait_state(jid, "running")
    wait_for(lambda: ":memory:" in s.logs(jid), what="the task's cgroups")
    paths = own_cgroups(s.logs(jid))
    mem = V1 / "memory" / paths["memory"].lstrip("/")
    assert paths["memory"].startswith(parent + "/task-"), paths
    own = task_cgroups(paths, parent)
    assert sorted(own) == ["devices", "memory", "pids"], paths
    s.kill9()
    s.start()
    assert s.job(jid)["state"] == "running"
    assert (mem / "memory.limit_in_bytes").read_text().strip() == \
        str(256 << 20)
    go.touch()
    s.wait_state(jid, "succeeded")
    for c, path in own.items():
        assert not (V1 / c / path.lstrip("/")).exists(), path


def descendants(pid):
    """The pids below pid, from /proc's parent links."""
    parents = {}
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text()
        except (OSError, ValueError):
            continue
        if d.name.isdigit():
            parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = [], [pid]
    while todo:
        kids = [p for p, pp in parents.items() if pp == todo[-1]]
        todo.pop()
        out += kids
        todo += kids
    return out


def running(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1] \
            .split()[0] != "Z"
    except OSError:
        return False


def test_task_dies_with_a_killed_shim(limited):
    """A shim killed outright takes its task with it (the namespace's init
    dies with the shim, and everything in the namespace with it), and the
    server, finding the task lost, removes the cgroup the shim left."""
    start, parent = limited
    s = start()
    jid = s.submit(job_yaml("orphan", ["/bin/sh", "-c",
                                       "cat /proc/self/cgroup; sleep 300 & "
                                       "sleep 300 & echo ready; wait"]))
    s.wait_state(jid, "running")
    wait_for(lambda: "ready" in s.logs(jid), what="the task")
    paths = task_cgroups(own_cgroups(s.logs(jid)), parent)
    assert sorted(paths) == ["devices", "memory", "pids"], paths
    shim_pid = int(next(s.home.glob(f"tasks/{jid}/*/0/shim.pid"))
                   .read_text().split()[0])
    below = descendants(shim_pid)
    assert len(below) >= 4, below  # init, sh and two sleeps
    os.kill(shim_pid, signal.SIGKILL)
    try:
        wait_for(lambda: not any(running(p) for p in below), timeout=10,
                 what="the task to die with its shim")
        assert "lost" in (s.wait_state(jid, "failed")["reason"] or "")
        for c, path in paths.items():
            d = V1 / c / path.lstrip("/")
            wait_for(lambda: not d.exists(), what=f"{d} to go")
    finally:
        for p in below:
            if running(p):
                os.kill(p, signal.SIGKILL)


def test_server_start_removes_cgroups_killed_shims_left(limited):
    """Empty task cgroups under the parent, left by shims killed before
    they could remove them, are removed when a server starts; one too
    young to be a leftover (a task being started) and one that is not a
    task's stay."""
    start, parent = limited
    s = start()
    s.stop()
    made = []
    for c in CONTROLLERS:
        base = V1 / c / parent.lstrip("/")
        base.mkdir(exist_ok=True)
        for name, age in (("task-left0", 3600), ("task-young", 0),
                          ("other-old", 3600)):
            d = base / name
            d.mkdir()
            made.append(d)
            if age:
                os.utime(d, (1000, 1000))
    try:
        s.start()
        for c in CONTROLLERS:
            base = V1 / c / parent.lstrip("/")
            assert not (base / "task-left0").exists()
            assert (base / "task-young").exists()
            assert (base / "other-old").exists()
        assert "removed 1 empty task cgroups" in s.log.read_text()
    finally:
        s.stop()
        for d in made:
            if d.exists():
                d.rmdir()
