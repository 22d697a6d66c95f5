"""Fixtures for end-to-end tests: each test gets its own kiln server, in
its own temporary KILN_HOME, on a free loopback port, with simulated GPUs.
Tests wait on conditions with deadlines, never on fixed sleeps."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

import contract

# Tasks run sandboxed (docs/security.md): as the user kiln-task when the
# server is root, with a private /tmp. Tests share files with their tasks
# through tmp_path, so it lives outside /tmp, where a task sees it, as a
# user's data directory would; see task_readable_tmp_path below.
tempfile.tempdir = os.environ.get("KILN_E2E_TMPDIR", "/var/tmp")

REPO = Path(__file__).resolve().parents[2]
KILN = os.environ.get("KILN_BIN") or str(
    REPO / "build" / "src" / "cmd" / "kiln")


def _searchable_for_tasks(path):
    """Under Slurm the task's user runs `kiln shim` itself, so the binary
    must be reachable by it, as an installed kiln in /usr/bin is. A
    checkout under a private directory (root's home, 0700) gets the search
    bit (o+x, not read) on the way to the binary."""
    if os.geteuid() != 0:
        return
    for d in Path(path).resolve().parents:
        mode = d.stat().st_mode
        if not mode & 0o001:
            d.chmod(mode | 0o001)


_searchable_for_tasks(KILN)
contract.install(KILN)

EATMYDATA = "/usr/lib/x86_64-linux-gnu/libeatmydata.so"


def _without_fsync():
    """Every process the tests start (servers, shims, the CLI, Slurm's and
    Azurite's daemons) runs with libeatmydata preloaded, which makes
    fsync and its kin return at once: the suite checks what kiln does,
    and survives kill -9 through the page cache either way, not power
    loss, while a commit's fsync on a shared disk is often what a test
    waits on most. Not for a sanitized build, whose runtime must be the
    first library loaded, nor with KILN_E2E_FSYNC=1, which keeps the
    real calls."""
    if os.environ.get("KILN_E2E_FSYNC") == "1" or not Path(EATMYDATA).exists():
        return
    linked = subprocess.run(["ldd", KILN], capture_output=True, text=True)
    if linked.returncode != 0 or "libasan" in linked.stdout:
        return
    preload = os.environ.get("LD_PRELOAD", "")
    if EATMYDATA not in preload.split():
        os.environ["LD_PRELOAD"] = " ".join(filter(None, [preload, EATMYDATA]))


_without_fsync()


def _ancestors():
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pids


def processes_under(root):
    """Live processes that belong to the directory root: its path is in
    their command line or environment (KILN_HOME, a task's directory), or
    their working directory is below it. Servers, shims, tasks and model
    replicas started for a test's home all match one of these, whatever
    became of their parents; pytest itself and its ancestors are left
    out. [(pid, command line)]."""
    root = str(root)
    # The path whole, not a prefix of another (test_x1 of test_x10).
    mention = re.compile(rb"(?<![\w./-])" + re.escape(root.encode()) +
                         rb"(?![\w.-])")
    skip = _ancestors()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            if not cmdline:
                continue  # a zombie or a kernel thread
            cwd = os.readlink(entry / "cwd")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        if (mention.search(cmdline) or mention.search(environ) or
                cwd == root or cwd.startswith(root + "/")):
            found.append((int(entry.name),
                          cmdline.replace(b"\0", b" ").decode(
                              errors="replace").strip()))
    return found


def kill_processes_under(root):
    """SIGKILL everything processes_under(root) finds (tasks outlive the
    server by design, so a test ends them itself), and wait until they
    are gone."""
    found = processes_under(root)
    if not found:
        return
    for pid, _ in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    wait_for(lambda: not processes_under(root), timeout=10,
             what=f"the processes of {root} to end")


# (test id, processes) of tests that left processes under their tmp_path.
LEAKS = []


@pytest.fixture(autouse=True)
def end_what_the_test_started(request, tmp_path):
    """After each test and its fixtures: end every process still running
    under its tmp_path (a task it did not stop, a replica), so one test's
    leftovers never load or confuse the next. They are listed at the end of
    the run, naming the test, to be fixed there."""
    yield
    left = processes_under(tmp_path)
    if left:
        LEAKS.append((request.node.nodeid, left))
        kill_processes_under(tmp_path)


# Test modules that share something machine-wide run on one worker of a
# parallel run (pytest-xdist, `--dist loadgroup`), one after another; any
# other module is a group of its own, so its module-scoped fixtures start
# once. Slurm: each cluster has fixed state directories and ports, and the
# one that started munged stops it at its end, so all Slurm tests share a
# worker. Every other module starts its own servers on free ports in its
# own tmp_path.
SAME_WORKER = {
    "slurm": ("test_slurm", "test_isolation_slurm", "test_slurm_health",
              "test_slurm_inventory", "test_slurm_multinode",
              "test_slurm_acct", "test_slurm_preempt", "test_slurm_gres",
              "test_slurm_sessions"),
}
GROUP_OF_MODULE = {m: g for g, mods in SAME_WORKER.items() for m in mods}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "xdist_group(name): run on the same pytest-xdist worker "
        "as the other tests of the group")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            stem = item.path.stem
            item.add_marker(pytest.mark.xdist_group(
                GROUP_OF_MODULE.get(stem, stem)))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """In the controller of a parallel run: what a worker found at its end
    (see pytest_sessionfinish) is reported, and fails the run, here."""
    found = getattr(node, "workeroutput", {})
    LEAKS.extend(found.get("kiln_leaks", []))
    LEFT_AT_END.extend(found.get("kiln_left_at_end", []))
    FAILED_STOPS.extend(found.get("kiln_failed_stops", []))
    contract.merge(found.get("kiln_contract", []))


def pytest_terminal_summary(terminalreporter):
    for nodeid, left in LEAKS:
        terminalreporter.write_line(
            f"left running by {nodeid} (ended by the fixture): " +
            ", ".join(f"{pid} {cmd[:60]}" for pid, cmd in left))
    if LEFT_AT_END:
        terminalreporter.write_line(
            "FAILED: processes the tests started were still running at "
            "the end (killed):\n" +
            "\n".join(f"  {pid} {cmd}" for pid, cmd in LEFT_AT_END),
            red=True)
    for what, out in FAILED_STOPS:
        terminalreporter.write_line(
            f"FAILED: stopping {what}:\n{out[-4000:]}", red=True)


# The Debian package test_install.py checks: KILN_DEB when CI built it,
# else `make deb`'s in build-deb, which scripts/deb.sh builds again only
# when the source changed. A build takes most of a minute of both cores,
# which the tests before test_install.py leave idle much of the time: it
# starts with the run, at the lowest priority, and the fixture that needs
# the package waits for it (build_deb). flock keeps one build at a time,
# so another worker of a parallel run, or the fixture, finds it made.
DEB_OUT = REPO / "build-deb"
DEB_BUILDS = []


def can_build_deb():
    return bool(shutil.which("dpkg-buildpackage") and shutil.which("dh"))


def _deb_build_args():
    return ["flock", str(DEB_OUT / ".lock"), "bash",
            str(REPO / "scripts" / "deb.sh"), str(DEB_OUT)]


def pytest_collection_finish(session):
    wanted = any("deb" in getattr(item, "fixturenames", ())
                 for item in session.items)
    if (not wanted or os.environ.get("KILN_DEB") or
            session.config.option.collectonly or not can_build_deb()):
        return
    DEB_OUT.mkdir(exist_ok=True)
    DEB_BUILDS.append(subprocess.Popen(
        ["nice", "-n", "19", *_deb_build_args()], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True))


def build_deb():
    """The package in build-deb, once the run's own build of it (now
    raised to the normal priority, where allowed) or this call's has made
    it. Fails with the build's output."""
    for proc in DEB_BUILDS:
        try:
            os.setpriority(os.PRIO_PGRP, proc.pid, 0)
        except OSError:
            pass  # not root, or it has ended
    DEB_OUT.mkdir(exist_ok=True)
    res = subprocess.run(_deb_build_args(), capture_output=True, text=True,
                         timeout=1800)
    assert res.returncode == 0, res.stdout + res.stderr
    [pkg] = DEB_OUT.glob("kiln_*.deb")
    return pkg


def _end_deb_builds():
    """A run that ends before test_install.py does not leave the build
    running."""
    for proc in DEB_BUILDS:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                pass
        proc.wait(timeout=60)
    DEB_BUILDS.clear()


SESSION_STARTED = time.time()
FIXTURES_USED = set()
# Where the Slurm fixtures' daemons write their pid files (the scripts'
# defaults; the variables move them).
SLURM_RUN_DIRS = [
    Path(os.environ.get("KILN_SLURM_DIR", "/var/lib/kiln-slurm")) / "run",
    Path(os.environ.get("KILN_SLURM2_DIR", "/var/lib/kiln-slurm2")) / "run",
    Path(os.environ.get("KILN_SLURM_INV_DIR",
                        "/var/lib/kiln-slurm-inv")) / "run",  # slurm_own.py's
    Path(os.environ.get("KILN_SLURMB_DIR", "/var/lib/kiln-slurm-b")) / "run",
]


def pytest_fixture_setup(fixturedef, request):
    FIXTURES_USED.add(fixturedef.argname)


def _started_at(pid):
    """When pid started: (seconds since the epoch, clock ticks since
    boot), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        btime = next(int(line.split()[1]) for line in
                     Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime "))
    except (OSError, StopIteration):
        return None
    ticks = int(stat.rsplit(")", 1)[1].split()[19])
    return btime + ticks / os.sysconf("SC_CLK_TCK"), ticks


def processes_in_pid_files(root):
    """Live processes named by pid files this run wrote, which daemons
    (Azurite, slurmctld, slurmd, a shim) that left the run's directory
    behind in their command line are still found by: *.pid under root,
    and the Slurm run directories when a Slurm fixture ran. Only pid
    files written, and processes started, since the run began. Pids are
    reused, so the process must be the one the file names: the start
    time a shim writes beside its pid must match, and any other process
    must have started before its file was written (a daemon writes it
    as it starts). [(pid, what)]."""
    files = [Path(d) / n for d, _, names in os.walk(root) for n in names
             if n.endswith(".pid")]
    if any(name.startswith("slurm") for name in FIXTURES_USED):
        for d in SLURM_RUN_DIRS:
            files += list(d.glob("*.pid")) if d.is_dir() else []
    found = []
    for f in files:
        try:
            written = f.stat().st_mtime
            fields = f.read_text().split()
            pid = int(fields[0])
            ticks = int(fields[1]) if len(fields) > 1 else None
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        started = _started_at(pid)
        if written < SESSION_STARTED or not cmd or not started:
            continue
        if ticks is not None and ticks != started[1]:
            continue
        if started[0] >= SESSION_STARTED - 1 and started[0] <= written + 5:
            shown = cmd.replace(b"\0", b" ").decode(errors="replace")
            found.append((pid, f"{shown.strip()} (from {f})"))
    return found


def left_running(root):
    named = processes_in_pid_files(root)
    seen = {pid for pid, _ in named}
    return named + [(pid, cmd) for pid, cmd in processes_under(root)
                    if pid not in seen]


# This run's temporary directory, and what was still running in it.
RUN_ROOT = []
LEFT_AT_END = []


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind(tmp_path_factory):
    """Name this run's temporary directory (every home, workdir and
    fixture state lives there) for the check at its end."""
    RUN_ROOT.append(tmp_path_factory.getbasetemp())


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when a process the tests started outlives them: any
    process processes_under() finds for the run's directory, or that a
    pid file the run wrote names (processes_in_pid_files). This runs
    after every fixture is torn down (a session fixture's teardown may
    come before another's), and after the stops they began
    (stop_at_end) have ended. They are listed, then killed. Answers
    that break the API's OpenAPI document fail it too (contract.py), as
    does a stop that failed. A worker of a parallel run hands all it
    found to the controller instead (pytest_testnodedown), whose
    terminal and exit status are the run's."""
    finish_stops()
    _end_deb_builds()
    if RUN_ROOT:
        end_what_the_run_left(RUN_ROOT[0])
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker_output["kiln_leaks"] = LEAKS
        worker_output["kiln_left_at_end"] = LEFT_AT_END
        worker_output["kiln_failed_stops"] = FAILED_STOPS
        worker_output["kiln_contract"] = contract.violations()
        return
    contract.report(session)
    if LEFT_AT_END or FAILED_STOPS:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# Stops begun by session fixtures' teardowns, [(what, process)], and the
# commands to run once they have all ended, [(what, args, env)].
STOPPING = []
AFTER_STOPS = []
# (what, output) of the stops that failed.
FAILED_STOPS = []


def stop_at_end(what, args, env=None, then=None):
    """Begin stopping what a session fixture started (a Slurm cluster,
    Azurite) and go on: each takes seconds, most of them waiting on
    daemons that shut down, so the session's clusters stop side by side
    rather than one after another. pytest_sessionfinish waits for every
    one, and fails the run if one fails. then: a command run after all
    of them have ended (stopping munged, which every cluster talks to
    while it stops)."""
    STOPPING.append((what, subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)))
    if then:
        AFTER_STOPS.append((what, then, env))


def finish_stops():
    for what, proc in STOPPING:
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        if proc.returncode != 0:
            FAILED_STOPS.append((what, out))
    STOPPING.clear()
    for what, args, env in AFTER_STOPS:
        done = subprocess.run(args, env=env, capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            FAILED_STOPS.append((what, done.stdout + done.stderr))
    AFTER_STOPS.clear()


def end_what_the_run_left(root):
    try:
        wait_for(lambda: not left_running(root), timeout=10,
                 what="processes to end")
    except AssertionError:
        left = left_running(root)
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        LEFT_AT_END.extend(left)


def wait_for(predicate, timeout=20.0, interval=0.05, what="condition"):
    """Poll predicate until it returns a truthy value; fail after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# How often a starting server or gateway is checked for its URL file: a
# stat. A server starts in some 50 ms, which the 50 ms of wait_for's
# polls would round up to 100, on each of the run's hundreds of starts.
START_POLL_S = 0.005


class Server:
    def __init__(self, home, gpus="4xH100-80GB", extra=(), env=None):
        self.home = Path(home)
        self.gpus = gpus
        self.extra = list(extra)
        self.env = env
        self.proc = None
        self.url = None
        self.log = self.home / "server.log"

    def start(self):
        url_file = self.home / "server.url"
        if url_file.exists():
            url_file.unlink()
        env = dict(self.env or os.environ, KILN_HOME=str(self.home))
        env.pop("KILN_SERVER", None)
        env.pop("KILN_TOKEN", None)
        args = [KILN, "server", "--listen", "127.0.0.1:0"]
        if self.gpus:
            args += ["--gpus", self.gpus]
        # file:// inputs and stores must lie in a directory the server
        # allows: the test's own, as a user's data directory would be.
        if "--file-root" not in self.extra:
            args += ["--file-root", str(self.home.parent)]
        args += self.extra
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=log)
        wait_for(lambda: url_file.exists() and url_file.read_text().strip()
                 or self.proc.poll() is not None, interval=START_POLL_S,
                 what="server.url")
        assert self.proc.poll() is None, self.log.read_text()
        self.url = url_file.read_text().strip()
        contract.watch(self.url)
        return self

    def stop(self):
        """A clean stop must exit 0 (under ASan, also free everything)."""
        if self.url:
            contract.unwatch(self.url)
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.proc.wait(timeout=10)
            assert rc == 0, f"server exited {rc}:\n" + self.log.read_text()[-4000:]

    def kill9(self):
        if self.url:
            contract.unwatch(self.url)
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    @property
    def admin_token(self):
        return (self.home / "admin.token").read_text().strip()

    def request(self, method, path, token="admin", **kw):
        headers = kw.pop("headers", {})
        if token == "admin":
            token = self.admin_token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return requests.request(method, self.url + path, headers=headers,
                                timeout=30, **kw)

    def submit(self, spec, token="admin", filename="job.yaml", hold=True):
        """hold: queue a job even if it can never fit (many tests want one
        that waits); the refusal itself is tested with hold=False."""
        params = {"file": filename}
        if hold:
            params["hold"] = "1"
        r = self.request("POST", "/v1/jobs", token=token, data=spec,
                         params=params)
        assert r.status_code == 201, r.text
        return r.json()["job"]["id"]

    def job(self, job_id, token="admin"):
        r = self.request("GET", f"/v1/jobs/{job_id}", token=token)
        assert r.status_code == 200, r.text
        return r.json()["job"]

    def wait_state(self, job_id, states, timeout=30.0):
        if isinstance(states, str):
            states = (states,)
        return wait_for(lambda: (lambda j: j if j["state"] in states else None)(
            self.job(job_id)), timeout=timeout,
            what=f"job {job_id} to reach {states}")

    def logs(self, job_id, task=0, attempt=None):
        params = {"task": task}
        if attempt:
            params["attempt"] = attempt
        r = self.request("GET", f"/v1/jobs/{job_id}/logs", params=params)
        assert r.status_code == 200, r.text
        return r.text

    def cli(self, *args, token=None, check=False, input=None, timeout=60):
        env = dict(os.environ, KILN_HOME=str(self.home))
        env.pop("KILN_SERVER", None)
        env.pop("KILN_TOKEN", None)
        if token:
            env["KILN_TOKEN"] = token
        res = subprocess.run([KILN, *args], env=env, capture_output=True,
                             text=True, input=input, timeout=timeout)
        if check:
            assert res.returncode == 0, res.stderr
        return res

    def create_token(self, name, role):
        r = self.request("POST", "/v1/tokens", json={"name": name, "role": role})
        assert r.status_code == 201, r.text
        return r.json()["secret"]


@pytest.fixture(autouse=True)
def task_readable_tmp_path(tmp_path):
    """pytest makes its directories 0700; the task user must be able to
    reach a test's tmp_path (its specs' workdir) and write there, as any
    user's tasks must reach their workdir."""
    for parent in (tmp_path.parent, tmp_path.parent.parent):
        parent.chmod(parent.stat().st_mode | 0o711)
    tmp_path.chmod(0o777)
    return tmp_path


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path / "home")
    s.home.mkdir()
    s.start()
    yield s
    s.stop()
    # Tasks outlive the server by design; a test must not leave any behind.
    kill_processes_under(s.home)


@pytest.fixture
def gpu_server(tmp_path):
    """A server with one simulated GPU whose use it samples every 200 ms
    (a task writes it to the file KILN_SIM_GPU_USAGE names)."""
    s = Server(tmp_path / "home", gpus="1xH100-80GB",
               extra=["--usage-interval", "200ms"])
    s.home.mkdir()
    s.start()
    yield s
    s.stop()
    kill_processes_under(s.home)


AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (public, in Azure's documentation).
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
               "K1SZFPTOtr/KBHBeksoGMGw==")


@pytest.fixture(scope="session")
def azurite(tmp_path_factory):
    """A real Azurite blob service on a free loopback port, installed from
    npm on first use by scripts/azurite.sh; yields its endpoint URL."""
    state = tmp_path_factory.mktemp("azurite")
    started = subprocess.run(["bash", str(REPO / "scripts/azurite.sh"), "start",
                              str(state)], capture_output=True, text=True,
                             timeout=600)
    assert started.returncode == 0, started.stderr
    endpoint = started.stdout.strip().splitlines()[-1]
    yield endpoint
    stop_at_end("Azurite", ["bash", str(REPO / "scripts/azurite.sh"), "stop",
                            str(state)])


class GateRelay:
    """A TCP relay to upstream (an http://host:port/path endpoint) whose
    new connections wait at a gate while it is held, or are closed at
    once while refuse is set (cut() also breaks the open ones); sent
    counts the bytes it passed upstream."""

    def __init__(self, upstream):
        rest = upstream.split("//", 1)[1]
        host_port, _, path = rest.partition("/")
        host, port = host_port.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.path = "/" + path
        self.open = threading.Event()
        self.open.set()
        self.waiting = 0
        self.refuse = False
        self.sent = 0
        self.live = set()
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        threading.Thread(target=self.accept, daemon=True).start()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}{self.path}"

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(client,),
                             daemon=True).start()

    def serve(self, client):
        if self.refuse:
            client.close()
            return
        with self.lock:
            self.waiting += 1
        self.open.wait()
        with self.lock:
            self.waiting -= 1
        up = socket.create_connection(self.upstream)
        with self.lock:
            self.live.add(client)
        down = threading.Thread(target=self.pump, args=(up, client),
                                daemon=True)
        down.start()
        self.pump(client, up, self)
        down.join()
        with self.lock:
            self.live.discard(client)
        client.close()
        up.close()

    @staticmethod
    def pump(src, dst, counter=None):
        try:
            while True:
                data = src.recv(1 << 20)
                if not data:
                    break
                dst.sendall(data)
                if counter:
                    with counter.lock:
                        counter.sent += len(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def cut(self):
        """Refuse new connections and break the open ones."""
        self.refuse = True
        with self.lock:
            for c in self.live:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.open.set()
        self.listener.close()


def store_server(tmp_path, endpoint, env, container=None):
    """A started server whose blob store is a fresh container (or the
    one named) at endpoint; returns it and the store's URL."""
    store = f"{endpoint}/{container or 'c' + uuid.uuid4().hex[:12]}"
    s = Server(tmp_path / "home", extra=["--blob-store", store], env=env)
    s.home.mkdir()
    s.start()
    return s, store


def azurite_env(endpoint):
    """The environment with Azurite's connection string and no other
    Azure credentials."""
    env = dict(os.environ)
    for k in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY",
              "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_ACCOUNT"):
        env.pop(k, None)
    env["AZURE_STORAGE_CONNECTION_STRING"] = (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
        f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};")
    return env


def job_yaml(name, command, **fields):
    """A job spec as YAML text; command is a list, fields are top-level."""
    lines = ["kind: Job", f"name: {name}", f"command: {json.dumps(command)}"]
    for key, value in fields.items():
        lines.append(f"{key}: {json.dumps(value)}")
    return "\n".join(lines) + "\n"
