"""Model-blob uploads are bounded per token (uploads open, bytes staged),
idle ones expire with their staging files and descriptors, and staging
stops with 507 before the upload file system is full."""
import hashlib
import os
import subprocess

import pytest

from conftest import Server, wait_for

PART = 1 << 20


def put(server, digest, upload, offset, body, token="admin", final=0):
    return server.request("POST", f"/v1/model-blobs/{digest}", token=token,
                          params={"upload": upload, "offset": offset,
                                  "final": final}, data=body)


def staged(server):
    return os.listdir(server.home / "registry" / "uploads")


def server_fds(server):
    return len(os.listdir(f"/proc/{server.proc.pid}/fd"))


def test_caps_per_token_and_idle_expiry(tmp_path):
    srv = Server(tmp_path / "home", extra=[
        "--upload-max-open", "2", "--upload-max-staged", "3Mi",
        "--upload-idle", "2s"])
    srv.home.mkdir()
    srv.start()
    try:
        bob = srv.create_token("bob", "user")
        digest = "a" * 64
        base_fds = server_fds(srv)
        assert put(srv, digest, "u1", 0, b"x" * PART).status_code == 200
        assert put(srv, digest, "u2", 0, b"x" * PART).status_code == 200
        r = put(srv, digest, "u3", 0, b"x")
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "limit_exceeded"
        assert "--upload-max-open" in r.json()["error"]["message"]
        # Another token has caps of its own; it cannot touch admin's u1.
        assert put(srv, digest, "u1", 0, b"y", token=bob).status_code == 200
        assert put(srv, digest, "u1", PART, b"y", token=bob).status_code == 409
        # Bytes staged: admin has 2 MiB; a third MiB fits, a fourth not.
        assert put(srv, digest, "u1", PART, b"x" * PART).status_code == 200
        r = put(srv, digest, "u2", PART, b"x" * PART)
        assert r.status_code == 429, r.text
        assert "--upload-max-staged" in r.json()["error"]["message"]
        # Idle uploads go by themselves, files and descriptors with them.
        assert staged(srv)
        wait_for(lambda: not staged(srv), timeout=15,
                 what="idle uploads to expire")
        wait_for(lambda: server_fds(srv) <= base_fds, timeout=5,
                 what="staging descriptors to close")
        assert put(srv, digest, "u1", 2 * PART, b"x").status_code == 409
        assert put(srv, digest, "u4", 0, b"x").status_code == 200
    finally:
        srv.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting tmpfs needs root")
def test_staging_stops_before_the_disk_is_full(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs",
                    str(home)], check=True)
    srv = Server(home, extra=["--staging-reserve", "10",
                              "--upload-max-staged", "1Gi",
                              "--upload-max-open", "100"])
    try:
        srv.start()
        digest = "b" * 64
        codes = []
        for n in range(80):
            r = put(srv, digest, f"f{n}", 0, b"z" * PART)
            codes.append(r.status_code)
            if r.status_code != 200:
                break
        assert codes[-1] == 507, codes
        err = r.json()["error"]
        assert err["code"] == "insufficient_storage"
        assert "--staging-reserve" in err["message"]
        st = os.statvfs(home)
        # Refused while a tenth was still free: the disk never filled.
        assert st.f_bavail * 100 >= st.f_blocks * 9
        # The server still records what it must (a job is accepted).
        r = srv.request("POST", "/v1/jobs", data="kind: Job\nname: ok\n"
                        "command: [\"true\"]\n")
        assert r.status_code == 201, r.text
        # A finished blob still goes through once space is returned.
        srv.stop()
        srv.start()
        data = b"q" * 1000
        good = hashlib.sha256(data).hexdigest()
        r = put(srv, good, "h", 0, data, final=1)
        assert r.status_code == 201, r.text
    finally:
        srv.stop()
        subprocess.run(["pkill", "-KILL", "-f", f"shim --dir {home}"],
                       check=False)
        subprocess.run(["umount", "-l", str(home)], check=False)
