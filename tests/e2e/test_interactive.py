"""Interactive sessions: `kiln run -it`, `kiln attach` and `kiln exec`
driven through a real pseudo-terminal (Python's pty) against a real
server, shim and sandbox; and the session protocol (docs/api.md,
"Interactive sessions") spoken by hand, to try what a hostile client
would: a frame only the server may send, DATA past its credit, a session
that never reads while its command floods it."""
import fcntl
import json
import os
import pty
import select
import signal
import socket
import struct
import termios
import time

import pytest

from conftest import KILN, job_yaml, wait_for


def spawn(server, *args, token=None, rows=24, cols=80):
    """kiln ARGS on a new pseudo-terminal: (pid, master fd)."""
    env = dict(os.environ, KILN_HOME=str(server.home), TERM="xterm")
    env.pop("KILN_SERVER", None)
    env.pop("KILN_TOKEN", None)
    if token:
        env["KILN_TOKEN"] = token
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execve(KILN, [KILN, *args], env)
        finally:
            os._exit(127)
    set_size(fd, rows, cols)
    return pid, fd


def set_size(fd, rows, cols):
    """The window's size; the kernel tells the terminal's foreground
    process (kiln) with SIGWINCH, as a terminal emulator's resize does."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def expect(fd, needle, timeout=20.0):
    """Read the terminal until needle (bytes or str) has appeared: all
    read so far."""
    if isinstance(needle, str):
        needle = needle.encode()
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {needle!r} on the terminal: {seen!r}")
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                raise AssertionError(f"the terminal closed before {needle!r}: "
                                     f"{seen!r}")
            seen += chunk
    return seen


def wait_exit(pid, timeout=20.0):
    """kiln's exit status."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("kiln did not exit")


def drain(fd):
    """What is left on the terminal after kiln exited."""
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(fd)
    return out


SHELL = ["bash", "--norc", "--noprofile", "-i"]


def start_shell(server, *extra):
    """kiln run -it with a plain bash: (pid, fd, job id), at its prompt."""
    pid, fd = spawn(server, "run", "-it", *extra, "--", *SHELL)
    seen = expect(fd, "$ ")
    job_id = int(seen.split(b"kiln: job ", 1)[1].split()[0])
    return pid, fd, job_id


def test_run_it_terminal(server):
    """A prompt, a command's output, the window's size as stty sees it,
    Ctrl-C ending the shell's child but not the shell, and the exit
    status coming back as kiln's and the job's."""
    pid, fd, job_id = start_shell(server, "--gpus", "1")
    os.write(fd, b"echo answer-$((6*7))\r")
    expect(fd, "answer-42")
    set_size(fd, 40, 132)
    os.write(fd, b"stty size\r")
    expect(fd, "40 132")
    os.write(fd, b"sh -c 'echo started-$((1+1)); exec sleep 300'; "
                 b"echo not-$((1+1))\r")
    expect(fd, "started-2")  # the child is in the foreground
    os.write(fd, b"\x03")
    # Typed on after the prompt is back, as a person would: keys sent
    # with the interrupt may be discarded with the line it cut.
    seen = expect(fd, "$ ")
    os.write(fd, b"echo alive-$((1+1))\r")
    seen += expect(fd, "alive-2")
    assert b"not-2" not in seen
    os.write(fd, b"exit 3\r")
    assert wait_exit(pid) == 3
    drain(fd)
    job = server.wait_state(job_id, "failed")
    assert job["exit_code"] == 3
    # The terminal's output is the job's log too.
    assert "answer-42" in server.logs(job_id)


def test_detach_and_attach(server):
    """Ctrl-P Ctrl-Q detaches and the task runs on; a lost connection
    (the client killed) leaves it running too; attach shows what it
    printed last and takes keys again; its end ends attach."""
    pid, fd, job_id = start_shell(server)
    os.write(fd, b"echo first-$((1+1))\r")
    expect(fd, "first-2")
    os.write(fd, b"\x10\x11")
    expect(fd, f"kiln attach {job_id}")
    assert wait_exit(pid) == 0
    drain(fd)
    assert server.job(job_id)["state"] == "running"

    pid, fd = spawn(server, "attach", str(job_id))
    expect(fd, "first-2")  # replayed
    os.write(fd, b"echo second-$((2+2))\r")
    expect(fd, "second-4")
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(fd)
    assert server.job(job_id)["state"] == "running"

    pid, fd = spawn(server, "attach", str(job_id))
    expect(fd, "second-4")
    os.write(fd, b"exit\r")
    assert wait_exit(pid) == 0
    drain(fd)
    server.wait_state(job_id, "succeeded")


def running_job(server, command, token="admin", **fields):
    job_id = server.submit(job_yaml("busy", command, **fields), token=token)
    server.wait_state(job_id, "running")
    return job_id


def test_exec_beside_a_task(server, tmp_path):
    """exec runs in the task's sandbox: its CUDA_VISIBLE_DEVICES, its
    user, its own /tmp; stdout and stderr apart; the exit code back."""
    marker = tmp_path / "env"
    job_id = running_job(
        server, ["sh", "-c", "echo task > /tmp/mine; "
                             f"echo $CUDA_VISIBLE_DEVICES > {marker}; "
                             "sleep 300"],
        resources={"gpus": 2})
    wait_for(lambda: marker.exists() and marker.read_text().strip(),
             what="the task's devices")
    task_devices = marker.read_text().strip()
    res = server.cli("exec", str(job_id), "--", "sh", "-c",
                     "echo devices=$CUDA_VISIBLE_DEVICES; id -un; "
                     "cat /tmp/mine; echo oops >&2; exit 7")
    assert res.returncode == 7, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"devices={task_devices}"
    assert lines[1] == "kiln-task"
    assert lines[2] == "task"  # the task's private /tmp
    assert res.stderr.strip() == "oops"
    # stdin only with -i.
    res = server.cli("exec", str(job_id), "-i", "--", "tr", "a-z", "A-Z",
                     input="shout\n")
    assert res.returncode == 0 and res.stdout == "SHOUT\n", res.stderr
    # On a terminal: the size comes along.
    pid, fd = spawn(server, "exec", str(job_id), "-it", "--", "sh", "-c",
                    "stty size; tty", rows=33, cols=101)
    seen = expect(fd, "33 101")
    assert wait_exit(pid) == 0
    seen += drain(fd)
    assert b"not a tty" not in seen
    # Audited with the command line.
    audit = server.request("GET", "/v1/audit",
                           params={"action": "job.exec"}).json()
    details = [e.get("detail") or "" for e in audit["audit"]]
    assert any("tr a-z A-Z" in d for d in details), audit


def test_exec_output_comes_whole(server):
    """Bulk output (many windows' worth, the relay paused and resumed on
    the way) arrives whole and in order, then the exit status, every
    time, including when the shim closes right after its last bytes."""
    job_id = running_job(server, ["sleep", "300"])
    want = "".join(f"{i}\n" for i in range(1, 1500001))
    for _ in range(3):
        res = server.cli("exec", str(job_id), "--", "seq", "1500000")
        assert res.returncode == 0, res.stderr
        assert len(res.stdout) == len(want) and res.stdout == want


def test_exec_refused_to_viewers_and_other_users(server):
    """The job's owner and operators may exec; a viewer and another user
    get 403, and the other user's refusal is on the record."""
    alice = server.create_token("alice", "user")
    bob = server.create_token("bob", "user")
    viewer = server.create_token("watcher", "viewer")
    job_id = running_job(server, ["sleep", "300"], token=alice)
    res = server.cli("exec", str(job_id), "--", "true", token=viewer)
    assert res.returncode == 1 and "permission_denied" in res.stderr
    res = server.cli("exec", str(job_id), "--", "true", token=bob)
    assert res.returncode == 1 and "permission_denied" in res.stderr
    assert "belongs to alice" in res.stderr
    res = server.cli("attach", str(job_id), token=bob)
    assert res.returncode == 1 and "permission_denied" in res.stderr
    res = server.cli("exec", str(job_id), "--", "echo", "mine", token=alice)
    assert res.returncode == 0 and res.stdout == "mine\n", res.stderr
    res = server.cli("exec", str(job_id), "--", "echo", "operator")
    assert res.returncode == 0, res.stderr
    audit = server.request("GET", "/v1/audit").json()
    rows = audit["audit"]
    assert any(r.get("actor") == "bob" and r.get("outcome") == "denied" and
               r.get("action") == "job.exec" for r in rows), rows


def test_exec_reads_no_more_than_the_task(server):
    """An exec'd command is the task's user in the task's mount
    namespace: the server's admin token is as hidden from it as from
    the task."""
    job_id = running_job(server, ["sleep", "300"])
    token = server.admin_token
    res = server.cli("exec", str(job_id), "--", "cat",
                     str(server.home / "admin.token"))
    assert res.returncode != 0
    assert token not in res.stdout + res.stderr
    res = server.cli("exec", str(job_id), "--", "sh", "-c",
                     f"ls {server.home} 2>&1; cat /proc/1/environ 2>&1")
    assert token not in res.stdout + res.stderr
    # Nor can it reach its shim's session socket.
    res = server.cli("exec", str(job_id), "--", "sh", "-c",
                     'test -e "$KILN_TASK_DIR.sock" && echo seen || '
                     'echo hidden')
    assert res.stdout == "hidden\n", res.stderr
    assert (server.home / "tasks" / str(job_id) / "1" / "0.sock").exists()


def test_usage_and_refusals(server):
    """run without -it and exec without a command are usage errors;
    attaching to a task with no terminal, or to a job that is not
    running, says why."""
    res = server.cli("run", "--", "true")
    assert res.returncode == 2 and "-it" in res.stderr
    res = server.cli("exec", "1")
    assert res.returncode == 2 and "--" in res.stderr
    job_id = running_job(server, ["sleep", "300"])
    res = server.cli("attach", str(job_id))
    assert res.returncode == 1
    assert "the task has no terminal" in res.stderr, res.stderr
    assert "runs on" not in res.stderr
    server.cli("cancel", str(job_id), check=True)
    server.wait_state(job_id, "cancelled")
    res = server.cli("exec", str(job_id), "--", "true")
    assert res.returncode == 1 and "not running" in res.stderr


# ---- the protocol by hand ----

def frame(ftype, stream, payload=b""):
    return struct.pack(">BBHI", ftype, 0, len(payload), stream) + payload


def upgrade(server, path, token=None):
    """A raw connection upgraded to kiln-mux/1: (socket, bytes after the
    101), or (None, the refusal's text)."""
    host, port = server.url.split("//", 1)[1].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    token = token or server.admin_token
    method = "POST" if "/exec" in path else "GET"
    sock.sendall((f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
                  f"Authorization: Bearer {token}\r\n"
                  "Connection: Upgrade\r\nUpgrade: kiln-mux/1\r\n\r\n"
                  ).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        sock.close()
        return None, head.decode() + rest.decode(errors="replace")
    return sock, rest


def frames(sock, buf=b"", until=None, timeout=10.0):
    """Frames from sock until one of type until (or the end): [(type,
    stream, payload)]."""
    got = []
    deadline = time.monotonic() + timeout
    sock.settimeout(0.5)
    while time.monotonic() < deadline:
        while len(buf) >= 8:
            ftype, _, length, stream = struct.unpack(">BBHI", buf[:8])
            if len(buf) < 8 + length:
                break
            got.append((ftype, stream, buf[8:8 + length]))
            buf = buf[8 + length:]
            if ftype == until:
                return got
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
    return got


DATA, WINDOW, EXIT, ERROR, SESSION = 1, 2, 8, 10, 11


def exec_path(job_id, argv, tty=0):
    from urllib.parse import quote
    return (f"/v1/jobs/{job_id}/exec?tty={tty}&command="
            f"{quote(json.dumps(argv))}")


def test_hostile_frames_are_refused(server):
    """A client's SESSION frame (which would start an unaudited
    command), or DATA past its stdin's credit, ends its session with an
    ERROR saying why; other sessions go on."""
    job_id = running_job(server, ["sleep", "300"])
    sock, rest = upgrade(server, exec_path(job_id, ["cat"]))
    assert sock
    sock.sendall(frame(SESSION, 0, b'{"op":"exec","argv":["id"]}'))
    got = frames(sock, rest, until=ERROR)
    assert got and got[-1][0] == ERROR and b"may not come from the client" \
        in got[-1][2], got
    sock.close()

    sock, rest = upgrade(server, exec_path(job_id, ["sleep", "300"]))
    chunk = b"x" * 16384
    for _ in range(17):  # 272 KiB: past the 256 KiB of credit
        sock.sendall(frame(DATA, 1, chunk))
    got = frames(sock, rest, until=ERROR)
    assert got and got[-1][0] == ERROR and b"credit" in got[-1][2], got
    sock.close()

    res = server.cli("exec", str(job_id), "--", "echo", "still-here")
    assert res.returncode == 0 and res.stdout == "still-here\n"


def test_flooding_session_does_not_stall_others(server):
    """A session whose command floods its output while the client reads
    nothing holds back only that command: another user's session stays
    responsive, and the server's memory does not grow with the flood."""
    alice = server.create_token("alice", "user")
    bob = server.create_token("bob", "user")
    flood_job = running_job(server, ["sleep", "300"], token=alice)
    other_job = running_job(server, ["sleep", "300"], token=bob)
    sock, _ = upgrade(server, exec_path(flood_job, ["yes", "x" * 200]),
                      token=alice)
    assert sock
    rss_before = server_rss(server)
    # The flood is under way; from now on nothing more is read.
    assert any(f[0] == DATA for f in frames(sock, until=DATA))
    for _ in range(3):
        started = time.monotonic()
        res = server.cli("exec", str(other_job), "--", "echo", "quick",
                         token=bob)
        assert res.returncode == 0 and res.stdout == "quick\n"
        assert time.monotonic() - started < 10
    assert server_rss(server) - rss_before < 64 * 1024 * 1024
    sock.close()


def server_rss(server):
    for line in open(f"/proc/{server.proc.pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def test_sessions_count_against_the_stream_cap(tmp_path):
    """Sessions are streams of their token: past --max-follows-per-token
    the upgrade is refused with 429."""
    from conftest import Server, kill_processes_under
    s = Server(tmp_path / "home", extra=["--max-follows-per-token", "2"])
    s.home.mkdir()
    s.start()
    try:
        job_id = running_job(s, ["sleep", "300"])
        held = [upgrade(s, exec_path(job_id, ["sleep", "300"]))[0]
                for _ in range(2)]
        assert all(held)
        sock, refusal = upgrade(s, exec_path(job_id, ["true"]))
        assert sock is None and "429" in refusal.split("\r\n")[0]
        assert "limit_exceeded" in refusal
        for h in held:
            h.close()
        again = wait_for(lambda: upgrade(s, exec_path(job_id, ["true"]))[0],
                         what="a session once the others closed")
        again.close()
    finally:
        s.stop()
        kill_processes_under(s.home)


def test_a_session_keeps_a_dev_environment_in_use(tmp_path):
    """A dev environment with a session open is in use, however idle its
    GPUs: it outlives its idle_timeout while an exec is attached and
    stops once the session closes."""
    import subprocess
    from conftest import Server, kill_processes_under
    s = Server(tmp_path / "home", gpus="1xH100-80GB",
               extra=["--usage-interval", "200ms"])
    s.home.mkdir()
    s.start()
    try:
        spec = ("kind: DevEnvironment\nname: box\n"
                'command: ["sleep", "300"]\nresources: {gpus: 1}\n'
                "idle_timeout: 2s\n")
        job_id = s.submit(spec, filename="box.yaml")
        s.wait_state(job_id, "running")
        env = dict(os.environ, KILN_HOME=str(s.home))
        held = subprocess.Popen([KILN, "exec", str(job_id), "-i", "--",
                                 "cat"], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
        held.stdin.write(b"ping\n")
        held.stdin.flush()
        assert held.stdout.readline() == b"ping\n"  # the session is open
        time.sleep(4)  # twice its idle_timeout, its GPU idle throughout
        assert s.job(job_id)["state"] == "running"
        held.stdin.close()
        held.wait(timeout=20)
        job = s.wait_state(job_id, ("cancelled", "failed", "succeeded"),
                           timeout=30)
        assert job["reason"].startswith("stopped: idle"), job
    finally:
        s.stop()
        kill_processes_under(s.home)


def test_sessions_over_tls(tmp_path, monkeypatch):
    """Over HTTPS the upgrade and the frames run inside the TLS session
    (the server's front on OpenSSL, the CLI on libcurl's connection):
    a terminal session and a bulk exec both come through whole."""
    from conftest import Server, kill_processes_under
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, extra=["--tls-self-signed"]).start()
    try:
        assert s.url.startswith("https://")
        ca = str(home / "tls" / "ca.pem")
        monkeypatch.setenv("KILN_CA", ca)
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", ca)
        pid, fd, job_id = start_shell(s)
        os.write(fd, b"echo over-$((3*3))\r")
        expect(fd, "over-9")
        res = s.cli("exec", str(job_id), "--", "seq", "300000")
        assert res.returncode == 0, res.stderr
        assert res.stdout == "".join(f"{i}\n" for i in range(1, 300001))
        os.write(fd, b"exit 4\r")
        assert wait_exit(pid) == 4
        drain(fd)
    finally:
        s.stop()
        kill_processes_under(s.home)


def test_attach_after_a_server_restart(tmp_path):
    """Tasks outlive the server; so do their terminals: after a restart
    (the task re-adopted) attach finds the same shell."""
    from conftest import Server, kill_processes_under
    s = Server(tmp_path / "home")
    s.home.mkdir()
    s.start()
    try:
        pid, fd, job_id = start_shell(s)
        os.write(fd, b"x=kept-$((5*5))\r")
        os.write(fd, b"\x10\x11")
        assert wait_exit(pid) == 0
        drain(fd)
        s.kill9()
        s.start()
        s.wait_state(job_id, "running")
        pid, fd = spawn(s, "attach", str(job_id))
        os.write(fd, b"echo $x\r")
        expect(fd, "kept-25\r\n")
        os.write(fd, b"exit\r")
        assert wait_exit(pid) == 0
        drain(fd)
        s.wait_state(job_id, "succeeded")
    finally:
        s.stop()
        kill_processes_under(s.home)


def test_exec_passes_ctrl_c_on(server):
    """Without a terminal, SIGINT to kiln reaches the command (as a
    SIGNAL frame), which decides what it means."""
    import subprocess
    job_id = running_job(server, ["sleep", "300"])
    env = dict(os.environ, KILN_HOME=str(server.home))
    p = subprocess.Popen(
        [KILN, "exec", str(job_id), "--", "sh", "-c",
         'trap "echo got-int; exit 9" INT; echo ready; '
         "while :; do sleep 0.1; done"],
        env=env, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=20) == 9
    assert p.stdout.read() == "got-int\n"
