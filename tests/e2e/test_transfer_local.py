"""A push to a server on the same machine passes each file's open
descriptor over the server's push.sock: the client reads nothing and no
byte crosses TCP. The server reads only what the descriptor lets it (the
client opened it with its own rights), never a path, and refuses every
descriptor that is not a regular file open for reading."""
import hashlib
import json
import os
import socket
import subprocess

from conftest import KILN
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


def test_a_descriptor_is_copied_and_hashed_by_the_server(server, tmp_path):
    data = os.urandom(3 * MiB + 1)
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        a = ask(server, {"token": server.admin_token, "size": len(data)},
                [fd])
    finally:
        os.close(fd)
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
