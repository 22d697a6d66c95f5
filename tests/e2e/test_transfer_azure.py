"""Downloads from an Azure store in parallel ranges, against a real Azurite
reached through a small HTTP proxy in this file that can cut a reply's
connection partway through its body, rewrite a reply's headers, or run
something before it forwards a request. Every case goes through `kiln blob
get` and `kiln ckpt restore`, the code the server and the shims run."""
import hashlib
import os
import socket
import subprocess
import threading

import pytest

from conftest import KILN, AZURITE_KEY, azurite_env

MiB = 1 << 20


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def kiln(env, *args, ok=True):
    proc = subprocess.run([KILN, *args], env=env, capture_output=True,
                          text=True, timeout=300)
    if ok:
        assert proc.returncode == 0, proc.stderr
    assert AZURITE_KEY[:20] not in proc.stdout + proc.stderr
    return proc


def read_head(sock, buf):
    """One header block (through the blank line) from sock; (head, rest),
    or (None, b"") when the peer closed."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        buf += chunk
    end = buf.index(b"\r\n\r\n") + 4
    return buf[:end], buf[end:]


def header(head, name):
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name.lower().encode():
            return v.strip().decode()
    return None


def fill(sock, buf, length):
    """buf read on from sock to at least length bytes."""
    while len(buf) < length:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise OSError("upstream closed")
        buf += chunk
    return buf


def chunked_length(sock, buf):
    """(length, buf): buf read on from sock through a chunked body's last
    chunk, and how many of its bytes that body takes."""
    at = 0
    while True:
        while b"\r\n" not in buf[at:]:
            buf = fill(sock, buf, len(buf) + 1)
        eol = buf.index(b"\r\n", at)
        size = int(buf[at:eol].split(b";")[0], 16)
        at = eol + 2 + size + 2
        buf = fill(sock, buf, at)
        if size == 0:
            return at, buf


class Proxy:
    """HTTP/1.1 between kiln and Azurite, one upstream connection per
    client connection, one exchange at a time. Requests here carry no
    body (HEAD, GET, a listing). Each ranged GET's range is recorded;
    the first `cut` ranged replies lose their connection after
    `cut_after` body bytes; `rewrite(head)` may change a ranged reply's
    header block; `before_get(n)` runs before the n-th ranged GET (from
    1) goes upstream."""

    def __init__(self, upstream):
        host_port = upstream.split("//", 1)[1].split("/", 1)[0]
        host, port = host_port.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.path = "/" + upstream.split("//", 1)[1].split("/", 1)[1]
        self.ranges = []
        self.cut = 0
        self.cut_after = 0
        self.rewrite = None
        self.before_get = None
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.threads = []
        self.closing = False
        t = threading.Thread(target=self.accept, daemon=True)
        t.start()
        self.threads.append(t)

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}{self.path}"

    def accept(self):
        while not self.closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            t = threading.Thread(target=self.serve, args=(client,), daemon=True)
            t.start()
            self.threads.append(t)

    def serve(self, client):
        up = socket.create_connection(self.upstream)
        try:
            self.exchange_all(client, up)
        except OSError:
            pass
        finally:
            client.close()
            up.close()

    def exchange_all(self, client, up):
        cbuf, ubuf = b"", b""
        while True:
            req, cbuf = read_head(client, cbuf)
            if req is None:
                return
            method = req.split(b" ", 1)[0]
            ranged = header(req, "x-ms-range") is not None
            cut_after = None
            if ranged:
                with self.lock:
                    self.ranges.append(header(req, "x-ms-range"))
                    n = len(self.ranges)
                    if n <= self.cut:
                        cut_after = self.cut_after
                if self.before_get:
                    self.before_get(n)
            up.sendall(req)
            head, ubuf = read_head(up, ubuf)
            if head is None:
                return
            if method == b"HEAD":
                length = 0
            elif header(head, "transfer-encoding") == "chunked":
                length, ubuf = chunked_length(up, ubuf)
            else:
                length = int(header(head, "content-length") or 0)
            ubuf = fill(up, ubuf, length)
            body, ubuf = ubuf[:length], ubuf[length:]
            if ranged and self.rewrite:
                head = self.rewrite(head)
            if cut_after is not None:
                client.sendall(head + body[:cut_after])
                client.shutdown(socket.SHUT_RDWR)
                return
            client.sendall(head + body)

    def close(self):
        self.closing = True
        self.listener.close()


@pytest.fixture
def proxy(azurite):
    p = Proxy(azurite)
    yield p
    p.close()


def random_file(path, size):
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 4 * MiB)
            f.write(os.urandom(n))
            left -= n


def put(azurite, container, name, path):
    kiln(azurite_env(azurite), "blob", "put", f"{azurite}/{container}", name,
         str(path))


def test_parallel_ranges_reassemble_with_the_right_digest(azurite, proxy,
                                                          tmp_path):
    src = tmp_path / "src"
    random_file(src, 10 * MiB + 12345)   # 11 parts of 1 MiB, the last short
    put(azurite, "par", "big", src)
    out = tmp_path / "out"
    got = kiln(azurite_env(proxy.endpoint), "blob", "get",
               f"{proxy.endpoint}/par", "big", str(out), "--parallel", "4",
               "--block-size", "1Mi").stdout.strip()
    assert got == sha256(src) == sha256(out)
    assert sorted(proxy.ranges) == sorted(
        f"bytes={i * MiB}-{min((i + 1) * MiB, 10 * MiB + 12345) - 1}"
        for i in range(11))


def test_a_killed_connection_resumes_mid_part(azurite, proxy, tmp_path):
    src = tmp_path / "src"
    random_file(src, 6 * MiB)
    put(azurite, "cut", "big", src)
    # the first two GETs lose their connection 300,000 bytes in
    proxy.cut, proxy.cut_after = 2, 300000
    out = tmp_path / "out"
    got = kiln(azurite_env(proxy.endpoint), "blob", "get",
               f"{proxy.endpoint}/cut", "big", str(out), "--parallel", "2",
               "--block-size", "2Mi").stdout.strip()
    assert got == sha256(src) == sha256(out)
    # each was asked for again from its first missing byte, not from the top
    first_two = proxy.ranges[:2]
    resumed = [r for r in proxy.ranges[2:]
               if r.split("=")[1].split("-")[0] not in ("0", str(2 * MiB),
                                                        str(4 * MiB))]
    assert set(first_two) == {f"bytes=0-{2 * MiB - 1}",
                              f"bytes={2 * MiB}-{4 * MiB - 1}"}
    assert sorted(resumed) == sorted([
        f"bytes=300000-{2 * MiB - 1}",
        f"bytes={2 * MiB + 300000}-{4 * MiB - 1}"])


def test_a_killed_connection_resumes_mid_file(azurite, proxy, tmp_path):
    # one part, the whole file: cut three times, each time further in
    src = tmp_path / "src"
    random_file(src, 3 * MiB)
    put(azurite, "whole", "f", src)
    proxy.cut, proxy.cut_after = 3, 700000
    out = tmp_path / "out"
    got = kiln(azurite_env(proxy.endpoint), "blob", "get",
               f"{proxy.endpoint}/whole", "f", str(out), "--parallel", "1",
               "--block-size", "8Mi").stdout.strip()
    assert got == sha256(src) == sha256(out)
    last = 3 * MiB - 1
    assert proxy.ranges == [f"bytes=0-{last}", f"bytes=700000-{last}",
                            f"bytes=1400000-{last}", f"bytes=2100000-{last}"]


def test_checkpoint_restore_resumes_and_verifies(azurite, proxy, tmp_path):
    ckpt = tmp_path / "step-000007"
    ckpt.mkdir()
    random_file(ckpt / "model.bin", 5 * MiB + 3)
    (ckpt / "small.json").write_text('{"step": 7}')
    kiln(azurite_env(azurite), "ckpt", "upload", f"{azurite}/ckp", "j1",
         str(ckpt))
    proxy.cut, proxy.cut_after = 1, 123456
    restored = kiln(azurite_env(proxy.endpoint), "ckpt", "restore",
                    f"{proxy.endpoint}/ckp", "j1", str(tmp_path / "r"),
                    "--parallel", "3", "--block-size", "1Mi")
    assert restored.stdout.strip() == "step-000007"
    for name in ("model.bin", "small.json"):
        assert sha256(tmp_path / "r" / "step-000007" / name) == \
            sha256(ckpt / name)


def test_a_blob_replaced_midway_is_refused_with_its_name(azurite, proxy,
                                                         tmp_path):
    src = tmp_path / "src"
    random_file(src, 4 * MiB)
    put(azurite, "chg", "weights.bin", src)
    other = tmp_path / "other"
    random_file(other, 4 * MiB)

    def replace(n):
        if n == 3:   # two parts are in; the blob changes under the third
            put(azurite, "chg", "weights.bin", other)
    proxy.before_get = replace
    out = tmp_path / "out"
    failed = kiln(azurite_env(proxy.endpoint), "blob", "get",
                  f"{proxy.endpoint}/chg", "weights.bin", str(out),
                  "--parallel", "1", "--block-size", "1Mi", ok=False)
    assert failed.returncode == 1
    assert "blob weights.bin: changed while it was downloaded" in failed.stderr
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if "kiln-tmp" in p.name]


@pytest.mark.parametrize("rewrite,message", [
    # a range other than the one asked for
    (lambda h: h.replace(b"content-range: bytes 0-", b"content-range: bytes 1-"),
     "Content-Range is not the range asked for"),
    # a reply that claims the whole blob
    (lambda h: h.replace(b"HTTP/1.1 206 Partial Content", b"HTTP/1.1 200 OK"),
     "the whole blob came where a range was asked for"),
])
def test_a_reply_outside_its_range_is_refused(azurite, proxy, tmp_path,
                                              rewrite, message):
    src = tmp_path / "src"
    random_file(src, 2 * MiB)
    put(azurite, "hostile", "part.bin", src)
    proxy.rewrite = rewrite
    out = tmp_path / "out"
    failed = kiln(azurite_env(proxy.endpoint), "blob", "get",
                  f"{proxy.endpoint}/hostile", "part.bin", str(out),
                  "--parallel", "2", "--block-size", "1Mi", ok=False)
    assert failed.returncode == 1
    assert "blob part.bin: bytes=" in failed.stderr and message in failed.stderr
    assert not out.exists()
