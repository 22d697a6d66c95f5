"""The CLI's plain HTTP client for a server on the loopback: the commands
users run in loops never load libcurl, and an answer that is not HTTP as
the client reads it is refused with a message, never taken as whole."""
import os
import socket
import subprocess
import threading

from conftest import KILN, job_yaml


def loaded_libraries(server, *args, url=None):
    """The shared objects the dynamic linker loaded for one CLI run."""
    env = dict(os.environ, KILN_HOME=str(server.home), LD_DEBUG="files")
    env.pop("KILN_TOKEN", None)
    if url:
        env["KILN_SERVER"] = url
    else:
        env.pop("KILN_SERVER", None)
    r = subprocess.run([KILN, *args], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout, [ln for ln in r.stderr.splitlines() if "file=" in ln]


def test_loopback_commands_never_load_libcurl(server, tmp_path):
    spec = tmp_path / "j.yaml"
    spec.write_text(job_yaml("j", ["/bin/echo", "hi"]))
    out, libs = loaded_libraries(server, "submit", "--wait", str(spec))
    assert not [ln for ln in libs if "libcurl" in ln], libs
    jid = out.split()[0]
    for args in (("ls",), ("show", jid), ("logs", jid),
                 ("logs", "--all", "--timestamps", jid), ("nodes",)):
        _, libs = loaded_libraries(server, *args)
        assert not [ln for ln in libs if "libcurl" in ln], (args, libs)
    # localhost is the loopback too.
    port = server.url.rsplit(":", 1)[1]
    out, libs = loaded_libraries(server, "show", jid,
                                 url=f"http://localhost:{port}")
    assert f"job {jid}" in out
    assert not [ln for ln in libs if "libcurl" in ln], libs


class Hostile:
    """A loopback server that answers every request with the same bytes,
    then closes."""

    def __init__(self, answer):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.answer = answer
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                try:
                    conn.sendall(self.answer)
                except OSError:
                    pass

    def close(self):
        self.sock.close()


def ls_against(tmp_path, answer):
    """`kiln ls` against a server that answers with these bytes."""
    hostile = Hostile(answer)
    env = dict(os.environ, KILN_HOME=str(tmp_path), KILN_TOKEN="t",
               KILN_SERVER=hostile.url)
    try:
        return subprocess.run([KILN, "ls"], env=env, capture_output=True,
                              text=True, timeout=60)
    finally:
        hostile.close()


def test_a_malformed_answer_is_refused(tmp_path):
    for answer, words in [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5"
         b"\r\n\r\n{}{}{", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
         "chunk"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 20000 + b"\r\n{}",
         "too long"),
        (b"SSH-2.0-OpenSSH_9.2\r\n", "not HTTP"),
    ]:
        r = ls_against(tmp_path, answer)
        assert r.returncode == 1, r.stderr
        assert "cannot read the answer" in r.stderr and words in r.stderr, \
            r.stderr
    # Cut off mid-answer: the connection was lost, said as such.
    r = ls_against(tmp_path,
                   b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
    assert r.returncode == 3 and "lost the connection" in r.stderr, r.stderr
