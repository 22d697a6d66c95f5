"""A push to a server on the same machine passes each file's open
descriptor over the server's push.sock: the client reads nothing and no
byte crosses TCP. The server reads only what the descriptor lets it (the
client opened it with its own rights), never a path, and refuses every
descriptor that is not a regular file open for reading."""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from conftest import KILN, Server, kill_processes_under
from test_transfer import MiB, proc_io, push_env, stored


def sock_path(server):
    return str(server.home / "registry" / "push.sock")


def ask(server, request, fds):
    """One request on push.sock: its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(60)
        s.connect(sock_path(server))
        socket.send_fds(s, [json.dumps(request).encode()], fds)
        return json.loads(s.recv(4096))


def push(env, model, name, *extra):
    child = subprocess.Popen([KILN, "model", "push", str(model), "--name",
                              name, "-o", "json", *extra], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    io = proc_io(child.pid)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    return json.loads(out), io


def test_the_server_says_where_its_socket_is(server):
    r = server.request("POST", "/v1/model-blobs/missing",
                       json={"digests": []})
    local = r.json()["local"]
    assert local["socket"] == sock_path(server)
    with open("/proc/sys/kernel/random/boot_id") as f:
        assert local["boot_id"] == f.read().strip()


def test_a_push_on_the_servers_machine_reads_nothing(server, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    data = os.urandom(40 * MiB)
    (model / "w.bin").write_bytes(data)
    (model / "empty").write_bytes(b"")
    env = push_env(server, tmp_path)
    out, io = push(env, model, "near")
    assert (out["uploaded"], out["uploaded_bytes"]) == (2, len(data)), out
    assert io["rchar"] < MiB and io["wchar"] < MiB, io
    assert stored(server, hashlib.sha256(data).hexdigest()) == data
    assert stored(server, hashlib.sha256(b"").hexdigest()) == b""
    # --http: the same file over HTTP, read here once.
    (model / "w.bin").write_bytes(data[::-1])
    out, io = push(env, model, "far", "--http")
    assert io["rchar"] >= len(data), io
    assert stored(server, hashlib.sha256(data[::-1]).hexdigest()) == \
        data[::-1]


def test_a_push_falls_back_to_http_without_the_socket(server, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    data = os.urandom(4 * MiB)
    (model / "w.bin").write_bytes(data)
    os.unlink(sock_path(server))
    out, io = push(push_env(server, tmp_path), model, "fallback")
    assert out["uploaded_bytes"] == len(data)
    assert io["rchar"] >= len(data), io
    assert stored(server, hashlib.sha256(data).hexdigest()) == data


def ask_file(server, path, size):
    """path's descriptor on push.sock with the admin's token."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return ask(server, {"token": server.admin_token, "size": size}, [fd])
    finally:
        os.close(fd)


def test_a_descriptor_is_copied_and_hashed_by_the_server(server, tmp_path):
    data = os.urandom(3 * MiB + 1)
    (tmp_path / "f").write_bytes(data)
    a = ask_file(server, tmp_path / "f", len(data))
    assert a["digest"] == hashlib.sha256(data).hexdigest(), a
    assert (a["stored"], a["existed"], a["size"]) == (True, False, len(data))
    assert stored(server, a["digest"]) == data
    assert os.listdir(server.home / "registry" / "uploads") == []


def refused(server, tmp_path, request, open_flags, why):
    secret = os.urandom(MiB)
    path = tmp_path / "secret"
    path.write_bytes(secret)
    fds = [os.open(path, flags) for flags in open_flags]
    try:
        a = ask(server, request, fds)
    finally:
        for fd in fds:
            os.close(fd)
    assert "error" in a and why in a["error"]["message"], a
    assert stored(server, hashlib.sha256(secret).hexdigest()) is None
    assert os.listdir(server.home / "registry" / "uploads") == []
    return a


def test_a_write_only_descriptor_is_not_read(server, tmp_path):
    """The confused deputy: a file the client may write but not read must
    not be read by the server for it."""
    refused(server, tmp_path, {"token": server.admin_token, "size": MiB},
            [os.O_WRONLY], "not open for reading")


def test_an_o_path_descriptor_is_not_read(server, tmp_path):
    refused(server, tmp_path, {"token": server.admin_token, "size": MiB},
            [os.O_PATH], "not open for reading")


def test_a_path_is_never_taken_for_a_descriptor(server, tmp_path):
    a = refused(server, tmp_path,
                {"token": server.admin_token, "size": MiB,
                 "path": str(tmp_path / "secret")},
                [os.O_RDONLY], "never a path")
    assert a["error"]["field"] == "path"
    # Nor with no descriptor at all.
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(60)
        s.connect(sock_path(server))
        s.send(json.dumps({"token": server.admin_token,
                           "size": MiB}).encode())
        a = json.loads(s.recv(4096))
    assert "exactly one open descriptor" in a["error"]["message"], a


def test_two_descriptors_are_refused(server, tmp_path):
    refused(server, tmp_path, {"token": server.admin_token, "size": MiB},
            [os.O_RDONLY, os.O_RDONLY], "exactly one open descriptor")


def test_a_directory_is_refused(server, tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        a = ask(server, {"token": server.admin_token, "size": 0}, [fd])
    finally:
        os.close(fd)
    assert "not a regular file" in a["error"]["message"], a


def test_a_wrong_size_is_refused(server, tmp_path):
    refused(server, tmp_path, {"token": server.admin_token, "size": 5},
            [os.O_RDONLY], "not 5")


def test_a_descriptor_needs_a_users_token(server, tmp_path):
    refused(server, tmp_path, {"token": "kiln_not_a_token", "size": MiB},
            [os.O_RDONLY], "token")
    viewer = server.create_token("watcher", "viewer")
    refused(server, tmp_path, {"token": viewer, "size": MiB},
            [os.O_RDONLY], "may not upload blobs")


def test_a_descriptor_copied_in_the_kernel_is_hashed_from_the_copy(
        server, tmp_path):
    """Store and file on one file system: the kernel copies
    (copy_file_range) and the server hashes its staging file. Several
    16 MiB spans and an odd tail; an empty file; the same file twice."""
    data = os.urandom(40 * MiB + 12345)
    (tmp_path / "f").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    for name, want, existed in (("f", data, False), ("empty", b"", False),
                                ("f", data, True)):
        a = ask_file(server, tmp_path / name, len(want))
        assert a["digest"] == hashlib.sha256(want).hexdigest(), a
        assert (a["size"], a["existed"]) == (len(want), existed), a
        assert stored(server, a["digest"]) == want
    assert os.listdir(server.home / "registry" / "uploads") == []


@pytest.fixture
def tmpfs_server(tmp_path):
    """A server whose home (staging and store) is on tmpfs, the pushed
    files on the test's file system: the kernel will not copy between
    the two (EXDEV), and the server copies through its own buffers."""
    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable tmpfs at /dev/shm")
    home = Path(tempfile.mkdtemp(prefix="kiln-test-", dir="/dev/shm"))
    s = Server(home, extra=["--file-root", str(tmp_path)])
    try:
        s.start()
        yield s
        s.stop()
    finally:
        kill_processes_under(home)
        shutil.rmtree(home, ignore_errors=True)


def test_a_push_to_a_store_on_another_file_system_is_copied_right(
        tmpfs_server, tmp_path):
    assert os.stat(tmp_path).st_dev != os.stat(tmpfs_server.home).st_dev
    model = tmp_path / "m"
    model.mkdir()
    data = os.urandom(20 * MiB + 7)
    (model / "w.bin").write_bytes(data)
    out, io = push(push_env(tmpfs_server, tmp_path), model, "across")
    assert out["uploaded_bytes"] == len(data), out
    assert io["rchar"] < MiB, io
    assert stored(tmpfs_server, hashlib.sha256(data).hexdigest()) == data


class Scribbler:
    """Writes one byte in place, over and over, until stopped: a file
    that changes all the while (its size stays, its times move)."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY)
        self.stop = threading.Event()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()
        self.started.wait(timeout=30)

    def run(self):
        n = 0
        while not self.stop.is_set():
            os.pwrite(self.fd, bytes([n & 255]), 5 * MiB)
            n += 1
            self.started.set()

    def close(self):
        self.stop.set()
        self.thread.join(timeout=30)
        os.close(self.fd)


def test_a_file_written_during_the_servers_copy_is_refused(server, tmp_path):
    """The server's own check: the descriptor's times moved between the
    start and the end of its copy, so what it copied may mix old and new
    bytes; nothing is stored."""
    path = tmp_path / "moving"
    path.write_bytes(os.urandom(128 * MiB))
    scribbler = Scribbler(path)
    try:
        a = ask_file(server, path, 128 * MiB)
    finally:
        scribbler.close()
    assert "changed while it was pushed" in a["error"]["message"], a
    assert a["error"]["field"] == "file", a
    blobs = server.home / "blobs" / "sha256"
    assert not blobs.exists() or os.listdir(blobs) == []
    assert os.listdir(server.home / "registry" / "uploads") == []


def test_a_file_written_during_a_local_push_is_refused_by_name(
        server, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    weights = model / "w.bin"
    weights.write_bytes(os.urandom(128 * MiB))
    scribbler = Scribbler(weights)
    try:
        res = subprocess.run([KILN, "model", "push", str(model), "--name",
                              "moving"], env=push_env(server, tmp_path),
                             capture_output=True, text=True, timeout=120)
    finally:
        scribbler.close()
    assert res.returncode != 0, res.stdout
    assert str(weights) in res.stderr, res.stderr
    assert "changed while it was pushed" in res.stderr, res.stderr
    assert server.request("GET", "/v1/models/moving").status_code == 404
