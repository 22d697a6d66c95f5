"""The task sandbox (docs/security.md), end to end: hostile jobs submitted
with a `user` token try to read the server's secrets and other jobs'
files, look at the environment, signal the server, share /tmp and keep
privileges. Each runs against a server started as root (tasks become
kiln-task) and one started as an unprivileged user (tasks get a user
namespace)."""
import json
import os
import pwd
import re
import signal
import subprocess
import uuid

import pytest

from conftest import KILN, Server, job_yaml, wait_for, kill_processes_under

NOBODY = pwd.getpwnam("nobody")
TASK_USER = "kiln-task"

# What an operator's environment might hold; none of it may reach a task.
SECRETS = {
    "AZURE_STORAGE_KEY": "fake-azure-storage-key-5f1c",
    "AZURE_STORAGE_SAS_TOKEN": "sv=fake-sas-token-77ab",
    "AZURE_CLIENT_SECRET": "fake-client-secret-0d9e",
    "KILN_TOKEN": "kiln_fake_operator_token_3c2b",
    "OPERATOR_DB_PASSWORD": "fake-db-password-91aa",
}


class IsolatedServer(Server):
    """A server with secrets in its environment, run as root or, with
    as_user, as that unprivileged user through setpriv."""

    def __init__(self, home, as_user=None, extra=(), groups=()):
        super().__init__(home, gpus="2xH100-80GB", extra=extra)
        self.as_user = as_user
        self.groups = groups  # supplementary groups of an unprivileged one

    def start(self):
        url_file = self.home / "server.url"
        if url_file.exists():
            url_file.unlink()
        env = {k: v for k, v in os.environ.items()
               if k not in ("KILN_SERVER", "KILN_TOKEN")}
        env.update(SECRETS, KILN_HOME=str(self.home))
        args = [KILN, "server", "--listen", "127.0.0.1:0", "--gpus",
                self.gpus, *self.extra]
        if self.as_user:
            # No cgroup is delegated to it here: its limits are tested in
            # test_isolation_limits.py; this suite is about the sandbox.
            args.append("--no-limits")
            args = ["setpriv", f"--reuid={self.as_user.pw_uid}",
                    f"--regid={self.as_user.pw_gid}",
                    (f"--groups={','.join(map(str, self.groups))}"
                     if self.groups else "--clear-groups"),
                    "--inh-caps=-all", "--", *args]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=log)
        wait_for(lambda: url_file.exists() and url_file.read_text().strip()
                 or self.proc.poll() is not None, what="server.url")
        assert self.proc.poll() is None, self.log.read_text()
        self.url = url_file.read_text().strip()
        return self


def make_home(tmp_path, as_user):
    home = tmp_path / "home"
    home.mkdir()
    if as_user:
        os.chown(home, as_user.pw_uid, as_user.pw_gid)
    return home


@pytest.fixture(params=["root", "unprivileged"])
def iso(request, tmp_path):
    as_user = NOBODY if request.param == "unprivileged" else None
    s = IsolatedServer(make_home(tmp_path, as_user), as_user=as_user)
    s.start()
    s.mode = request.param
    yield s
    s.stop()
    kill_processes_under(s.home)


def run_job(server, name, script, token, **fields):
    jid = server.submit(job_yaml(name, ["/bin/sh", "-c", script], **fields),
                        token=token)
    job = server.wait_state(jid, ("succeeded", "failed"), timeout=60)
    return jid, job, server.logs(jid)


def user_token(server, name="mallory"):
    return server.create_token(name, "user")


def test_task_cannot_read_the_servers_files(iso):
    token = user_token(iso)
    home = iso.home
    secret = uuid.uuid4().hex
    # Another job leaves a secret in its task and output directories.
    jid_a, job, log = run_job(
        iso, "victim",
        f'echo {secret} > "$KILN_TASK_DIR/secret"; '
        f'echo {secret} > "$KILN_OUTPUT_DIR/secret"; echo wrote', token,
        checkpoint={"keep": 1})
    assert job["state"] == "succeeded", log
    victim = json.dumps(iso.job(jid_a))
    a_files = [p for p in home.rglob("secret")]
    assert a_files, victim
    targets = [home / "admin.token", home / "audit.key", home / "kiln.db",
               home / "server.log", *a_files]
    script = "; ".join(f'cat "{p}"' for p in targets) + "; ls " + str(home)
    script += '; echo mine > "$KILN_TASK_DIR/mine" && cat "$KILN_TASK_DIR/mine"'
    # Submitted from a file beside the home: the workdir (the spec's
    # directory) holds $KILN_HOME, which must stay hidden in it.
    spec = home.parent / "thief.yaml"
    spec.write_text(job_yaml("thief", ["/bin/sh", "-c", script]))
    res = iso.cli("submit", str(spec), token=token, check=True)
    jid = int(re.search(r"\d+", res.stdout).group())
    job = iso.wait_state(jid, ("succeeded", "failed"), timeout=60)
    log = iso.logs(jid)
    assert "mine" in log, log
    for p in targets:
        assert f"{p}: No such file or directory" in log or \
            f"{p}: Permission denied" in log, log
    assert iso.admin_token not in log
    assert (home / "audit.key").read_text().strip() not in log
    assert secret not in log
    assert "SQLite format" not in log
    assert "mine" in log  # its own directory still works
    # Nor does the API hand the bytes out through the job.
    assert iso.admin_token not in json.dumps(iso.job(jid))


def test_secret_files_are_private(iso):
    """A home whose secrets were left readable (copied, restored) is
    made private again when the server starts."""
    iso.stop()
    for name in ("admin.token", "audit.key", "kiln.db"):
        os.chmod(iso.home / name, 0o644)
    iso.start()
    assert oct(os.stat(iso.home).st_mode & 0o777) == "0o700"
    for name in ("admin.token", "audit.key", "kiln.db"):
        assert oct(os.stat(iso.home / name).st_mode & 0o777) == "0o600", name


def test_environment_is_built_not_inherited(iso):
    jid, job, log = run_job(iso, "env", "env", user_token(iso),
                            env={"MY_SETTING": "kept"})
    assert job["state"] == "succeeded", log
    for name, value in SECRETS.items():
        assert value not in log, name
    assert "KILN_HOME=" not in log
    assert "MY_SETTING=kept" in log
    assert f"KILN_JOB_ID={jid}" in log
    assert "PATH=" in log


# Tries PTRACE_ATTACH on each pid given; prints "ptrace PID errno".
PTRACE = (
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "for pid in sys.argv[1:]:\n"
    "    rc = libc.ptrace(16, int(pid), None, None)\n"
    "    print('ptrace', pid, 0 if rc == 0 else ctypes.get_errno())\n")


def test_task_cannot_signal_or_inspect_the_server(iso):
    """Neither the server nor the task's own shim can be stopped, traced
    or read by the task."""
    pid = iso.proc.pid
    # The shim's pid (its shim.pid is not the task's to read) comes from
    # the test, once the task runs.
    script = ("t=\"$KILN_TASK_DIR/target\"; "
              "while [ ! -s \"$t\" ]; do sleep 0.05; done; shim=$(cat \"$t\"); "
              f"kill -STOP {pid}; echo kill=$?; "
              "kill -STOP $shim; echo shimkill=$?; "
              f"cat /proc/{pid}/environ; echo cat=$?; "
              "cat /proc/$shim/environ; echo shimcat=$?; "
              f"/usr/bin/python3 -c \"$PTRACE\" {pid} $shim; "
              "ls /proc | grep -c '^[0-9]' ")
    jid = iso.submit(job_yaml("stopper", ["/bin/sh", "-c", script],
                              env={"PTRACE": PTRACE}),
                     token=user_token(iso))
    iso.wait_state(jid, "running")
    task = next(iso.home.glob(f"tasks/{jid}/*/0"))
    # shim.pid is reserved blank before the shim starts, then filled in.
    wait_for(lambda: (task / "shim.pid").exists()
             and (task / "shim.pid").read_text().split(), what="shim.pid")
    shim = int((task / "shim.pid").read_text().split()[0])
    (task / "target.tmp").write_text(f"{shim}\n")
    os.chmod(task / "target.tmp", 0o644)
    os.rename(task / "target.tmp", task / "target")
    job = iso.wait_state(jid, ("succeeded", "failed"), timeout=60)
    log = iso.logs(jid)
    assert job["state"] == "succeeded", log
    for what in ("kill", "shimkill", "cat", "shimcat"):
        assert f"{what}=0" not in log and f"{what}=" in log, log
    ptraced = [l.split() for l in log.splitlines() if l.startswith("ptrace")]
    assert len(ptraced) == 2 and all(p[2] != "0" for p in ptraced), log
    assert SECRETS["AZURE_STORAGE_KEY"] not in log
    for p in (pid, shim):
        try:
            with open(f"/proc/{p}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue  # the shim has ended with its task
        assert state not in ("T", "t"), (p, state)
    assert iso.request("GET", "/v1/nodes").status_code == 200
    # Only its own few processes are in its /proc.
    assert int(log.strip().splitlines()[-1]) < 10, log


def test_tmp_is_private(iso):
    token = user_token(iso)
    name = f"kiln-iso-{uuid.uuid4().hex}"
    jid, job, log = run_job(iso, "writer", f"echo a > /tmp/{name} && "
                            f"ls /tmp/{name}", token)
    assert job["state"] == "succeeded", log
    assert not os.path.exists(f"/tmp/{name}")
    jid, job, log = run_job(iso, "reader", f"cat /tmp/{name}", token)
    assert job["state"] == "failed"
    assert "No such file or directory" in log


def test_task_runs_unprivileged(iso):
    jid, job, log = run_job(iso, "whoami", "id -u; id -un; grep -E "
                            "'Cap|Groups|NoNewPrivs' /proc/self/status",
                            user_token(iso))
    assert job["state"] == "succeeded", log
    lines = log.splitlines()
    groups = next(l for l in lines if l.startswith("Groups:")).split()[1:]
    if iso.mode == "root":
        assert lines[0] == str(pwd.getpwnam(TASK_USER).pw_uid)
        assert lines[1] == TASK_USER
        # The server's supplementary groups (root's 0) are gone: only the
        # task user's own remain.
        task = pwd.getpwnam(TASK_USER)
        want = set(os.getgrouplist(TASK_USER, task.pw_gid))
        assert {int(g) for g in groups} <= want, log
        assert "0" not in groups, log
    else:
        assert lines[0] == str(NOBODY.pw_uid)
        assert "0" not in groups, log
    assert "NoNewPrivs:\t1" in log, log
    for cap in ("CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert f"{cap}:\t0000000000000000" in log, log


def test_nodes_report_isolation(iso):
    nodes = iso.request("GET", "/v1/nodes").json()["nodes"]
    want = ("uid kiln-task, namespaces" if iso.mode == "root"
            else "user namespace")
    assert nodes[0]["isolation"] == want
    out = iso.cli("nodes", check=True, token=iso.admin_token).stdout
    assert f"isolation: {want}" in out


def test_unprivileged_server_says_which_groups_its_tasks_keep(tmp_path):
    """A user namespace cannot drop the server's supplementary groups:
    the task has them, and nodes say so."""
    s = IsolatedServer(make_home(tmp_path, NOBODY), as_user=NOBODY,
                       groups=(100, 4242)).start()
    try:
        nodes = s.request("GET", "/v1/nodes").json()["nodes"]
        assert nodes[0]["isolation"] == \
            "user namespace; supplementary groups kept: 100,4242"
    finally:
        s.stop()
        kill_processes_under(s.home)


def test_owner_maps_to_unix_user(tmp_path):
    user_map = tmp_path / "users.map"
    user_map.write_text("# token name: Unix user\nalice: nobody\n")
    s = IsolatedServer(make_home(tmp_path, None),
                       extra=["--task-user-map", str(user_map)]).start()
    try:
        alice = s.create_token("alice", "user")
        bob = s.create_token("bob", "user")
        _, job, log = run_job(s, "alice", "id -un", alice)
        assert log.strip() == "nobody", log
        _, job, log = run_job(s, "bob", "id -un", bob)
        assert log.strip() == TASK_USER, log
        # The server looked each user up for the shim.
        for jid, user in ((1, NOBODY), (2, pwd.getpwnam(TASK_USER))):
            launch = json.loads((s.home / "tasks" / str(jid) / "1" / "0" /
                                 "launch.json").read_text())
            assert launch["user"] == {
                "name": user.pw_name, "uid": user.pw_uid,
                "gid": user.pw_gid,
                "groups": os.getgrouplist(user.pw_name, user.pw_gid)}
    finally:
        s.stop()


def test_bad_user_map_and_user_stop_the_server(tmp_path):
    user_map = tmp_path / "users.map"
    user_map.write_text("alice: nobody\nbob nobody\n")
    home = make_home(tmp_path, None)
    env = dict(os.environ, KILN_HOME=str(home))
    res = subprocess.run([KILN, "server", "--listen", "127.0.0.1:0",
                          "--task-user-map", str(user_map)], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    assert f"{user_map}:2:5: expected ':' after the token name" in res.stderr
    res = subprocess.run([KILN, "server", "--listen", "127.0.0.1:0",
                          "--task-user", "no-such-kiln-user"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    assert "no Unix user no-such-kiln-user" in res.stderr


def test_unisolated_is_reported_and_runs_as_the_server(tmp_path):
    s = IsolatedServer(make_home(tmp_path, None),
                       extra=["--unisolated"]).start()
    try:
        nodes = s.request("GET", "/v1/nodes").json()["nodes"]
        assert nodes[0]["isolation"] == "none: --unisolated"
        _, job, log = run_job(s, "root", "id -u", s.admin_token)
        assert log.strip() == "0"
    finally:
        s.stop()


def test_dev_shows_only_the_launch_devices(tmp_path):
    """The shim alone, with a launch.json naming one device node: the
    task sees it and the basic nodes, and no other host device."""
    task = tmp_path / "home" / "tasks" / "1" / "1" / "0"
    task.mkdir(parents=True)
    gpu = tmp_path / "dev" / "nvidia0"
    gpu.parent.mkdir()
    subprocess.run(["mknod", "-m", "0666", str(gpu), "c", "1", "3"],
                   check=True)
    script = (f"ls /dev; echo x > {gpu} && echo wrote-gpu; "
              "ls /dev/vda /dev/kmsg /dev/mem")
    launch = {"argv": ["/bin/sh", "-c", script], "env": [],
              "home": str(tmp_path / "home"), "devices": [str(gpu)],
              "timeout_ms": 30000, "grace_ms": 1000}
    (task / "launch.json").write_text(json.dumps(launch))
    res = subprocess.run([KILN, "shim", "--dir", str(task)], timeout=60,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    log = (task / "output.log").read_text()
    listed = log.split(str(gpu))[0].split()
    for name in ("null", "zero", "urandom", "shm", "pts"):
        assert name in listed, log
    assert "wrote-gpu" in log
    for name in ("/dev/vda", "/dev/kmsg", "/dev/mem"):
        assert f"'{name}': No such file or directory" in log, log


def test_task_cannot_replace_the_shims_files(iso):
    """The shim's own files in the task directory are mounted read-only
    for the task: it cannot swap output.log for a link to the admin
    token, and its log keeps coming through."""
    token = user_token(iso)
    script = ('for f in output.log output.times launch.json shim.pid exit.rec; do '
              'rm -f "$KILN_TASK_DIR/$f" || echo "kept $f"; '
              f'ln -sf "{iso.home}/admin.token" "$KILN_TASK_DIR/$f" '
              '2>/dev/null || echo "not linked $f"; done; echo end')
    jid, job, log = run_job(iso, "swap", script, token)
    assert job["state"] == "succeeded", log
    for f in ("output.log", "output.times", "launch.json", "shim.pid",
              "exit.rec"):
        assert f"kept {f}" in log and f"not linked {f}" in log, log
    assert "end" in log
    assert iso.admin_token not in log


def shim_alone(tmp_path, script, **launch):
    """`kiln shim --dir` as root on a launch.json like the server's."""
    task = tmp_path / "home" / "tasks" / "1" / "1" / "0"
    task.mkdir(parents=True)
    doc = {"argv": ["/bin/sh", "-c", script], "env": [],
           "home": str(tmp_path / "home"), "timeout_ms": 30000,
           "grace_ms": 1000, **launch}
    (task / "launch.json").write_text(json.dumps(doc))
    return task


@pytest.mark.parametrize("user,why", [
    ({"name": "root", "uid": 0, "gid": 0, "groups": [0]},
     "tasks may not run as uid 0 (root): root or the server's own"),
    ({"name": TASK_USER, "uid": os.getuid(), "gid": 4242, "groups": []},
     "the server's own"),
    ({"name": TASK_USER, "uid": 4242, "gid": 4242, "groups": [4242, 0]},
     f"tasks may not run as {TASK_USER}: in group 0"),
    ({"name": TASK_USER, "uid": 4242, "gid": -5, "groups": []},
     "launch.json: user.gid: not a gid"),
])
def test_shim_refuses_a_launch_user_of_root_or_the_server(tmp_path, user,
                                                         why):
    """The user the server looked up is taken without a lookup, so the
    shim checks it: root's or the server's ids never run a task."""
    marker = tmp_path / "home" / "tasks" / "1" / "1" / "0" / "ran"
    task = shim_alone(tmp_path, f"touch {marker}", user=user)
    res = subprocess.run([KILN, "shim", "--dir", str(task)], timeout=60,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    status = json.loads((task / "status.json").read_text())
    assert status["exit_code"] == 127 and why in status["reason"], status
    assert why in (task / "output.log").read_text()
    assert not marker.exists()
    # Refused before anything was given to the user.
    assert task.stat().st_uid == 0


def as_nobody(task):
    """Run `kiln shim` on task as an unprivileged server's shim would."""
    for p in [task, *task.parents]:
        if p.name == "home":
            break
    subprocess.run(["chown", "-R", f"{NOBODY.pw_uid}:{NOBODY.pw_gid}",
                    str(p)], check=True)
    return ["setpriv", f"--reuid={NOBODY.pw_uid}",
            f"--regid={NOBODY.pw_gid}", "--clear-groups", "--"]


@pytest.mark.parametrize("mode", ["root", "unprivileged"])
def test_shim_reads_no_user_database(tmp_path, mode):
    """Given the server's lookup (as root: the task's user; unprivileged:
    the server's own, which the task keeps in a user namespace), the shim
    opens neither /etc/passwd nor /etc/group nor nscd's socket, and the
    task still runs as that user."""
    if mode == "root":
        task_user = pwd.getpwnam(TASK_USER)
        launch = {"user": {
            "name": TASK_USER, "uid": task_user.pw_uid,
            "gid": task_user.pw_gid,
            "groups": os.getgrouplist(TASK_USER, task_user.pw_gid)}}
    else:
        task_user = NOBODY
        launch = {"server_user": {"name": NOBODY.pw_name,
                                  "uid": NOBODY.pw_uid,
                                  "home": NOBODY.pw_dir}}
    task = shim_alone(tmp_path, "id -u; id -g; echo $USER", **launch)
    wrap = as_nobody(task) if mode == "unprivileged" else []
    trace = tmp_path / "trace"
    # LeakSanitizer cannot run under ptrace; a sanitized build's shim
    # would end with its fatal error instead of the task's status.
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ":".join(
        filter(None, [env.get("ASAN_OPTIONS"), "detect_leaks=0"]))
    # The shim's own calls only (no -f): its task may look users up.
    res = subprocess.run([*wrap, "strace", "-qq", "-e", "trace=%file,connect",
                          "-o", str(trace), KILN, "shim", "--dir", str(task)],
                         timeout=60, capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    log = (task / "output.log").read_text().split()
    assert log == [str(task_user.pw_uid), str(task_user.pw_gid),
                   task_user.pw_name], log
    calls = trace.read_text()
    assert "launch.json" in calls
    for name in ("/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "nscd"):
        assert name not in calls, calls


def test_unprivileged_shim_refuses_another_server_user(tmp_path):
    """An unprivileged shim takes the server's name and home for its own
    only when the uid is its own."""
    marker = tmp_path / "home" / "tasks" / "1" / "1" / "0" / "ran"
    task = shim_alone(tmp_path, f"touch {marker}",
                      server_user={"name": "root", "uid": 0, "home": "/"})
    res = subprocess.run([*as_nobody(task), KILN, "shim", "--dir", str(task)],
                         timeout=60, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    status = json.loads((task / "status.json").read_text())
    assert status["exit_code"] == 127, status
    assert ("launch.json: server_user.uid: not this shim's uid "
            f"{NOBODY.pw_uid}") in status["reason"], status
    assert not marker.exists()


def stop_pending_at_start():
    """In the shim's process before its exec: a SIGTERM that is already
    there when the shim starts, as a cancel that came at once would be
    (blocked and pending signals survive exec)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.parametrize("unprivileged", [False, True])
def test_stop_that_comes_before_the_task_reaches_it(tmp_path, unprivileged):
    """A stop that reaches the shim while the sandbox is still being
    built (here: before the shim has started anything) ends the task
    with the stop's signal, not with the SIGKILL after the grace: the
    sandbox's init, which the shim signals with the task's process
    group, keeps it for the task."""
    marker = tmp_path / "home" / "tasks" / "1" / "1" / "0" / "ran-on"
    task = shim_alone(tmp_path, f"sleep 30; touch {marker}",
                      grace_ms=20000)
    wrap = as_nobody(task) if unprivileged else []
    res = subprocess.run([*wrap, KILN, "shim", "--dir", str(task)],
                         timeout=60, capture_output=True, text=True,
                         preexec_fn=stop_pending_at_start)
    assert res.returncode == 0, res.stderr
    status = json.loads((task / "status.json").read_text())
    assert status["signal"] == signal.SIGTERM, status
    assert not marker.exists()
