"""Model blobs move in large parts: the server tells the part size, takes
sized parts in any order over several connections at once, answers a part
sent twice from what it holds, says what an upload holds so a client sends
only the rest after a lost connection, and stores the blob only when the
whole of it hashes to its name. `kiln model push` uses all of it."""
import hashlib
import json
import os
import socket
import subprocess
import threading
import time
import urllib.parse

import pytest

from conftest import KILN, wait_for

MiB = 1 << 20


def put_part(server, digest, upload, offset, size, body, token="admin"):
    return server.request("POST", f"/v1/model-blobs/{digest}", token=token,
                          params={"upload": upload, "offset": offset,
                                  "size": size}, data=body)


def held(server, digest, upload, token="admin"):
    return server.request("GET", f"/v1/model-blobs/{digest}", token=token,
                          params={"upload": upload})


def stored(server, digest):
    path = server.home / "blobs" / "sha256" / digest
    return path.read_bytes() if path.exists() else None


def test_the_server_tells_its_part_size(server):
    r = server.request("POST", "/v1/model-blobs/missing",
                       json={"digests": ["0" * 64]})
    assert r.status_code == 200, r.text
    assert r.json()["part_max"] == 16 * MiB


def test_parallel_parts_out_of_order_make_the_blob(server):
    data = os.urandom(40 * MiB + 12345)
    digest = hashlib.sha256(data).hexdigest()
    part = 16 * MiB
    offsets = list(range(0, len(data), part))
    answers = {}

    def send(off):
        answers[off] = put_part(server, digest, "par1", off, len(data),
                                data[off:off + part])

    # The last part first, then the others at once.
    send(offsets[-1])
    assert answers[offsets[-1]].status_code == 200, answers[offsets[-1]].text
    threads = [threading.Thread(target=send, args=(o,)) for o in offsets[:-1]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(a.status_code for a in answers.values())
    assert codes == [200, 200, 201], [a.text for a in answers.values()]
    done = [a.json() for a in answers.values() if a.status_code == 201][0]
    assert (done["digest"], done["received"], done["stored"]) == \
        (digest, len(data), True)
    assert stored(server, digest) == data
    # Nothing stays staged, and the upload is gone.
    assert os.listdir(server.home / "registry" / "uploads") == []
    assert held(server, digest, "par1").status_code == 404


def test_a_part_sent_twice_is_answered_from_what_is_held(server):
    data = os.urandom(3 * MiB)
    digest = hashlib.sha256(data).hexdigest()
    r = put_part(server, digest, "twice", MiB, len(data), data[MiB:2 * MiB])
    assert r.status_code == 200 and r.json()["received"] == MiB, r.text
    r = put_part(server, digest, "twice", MiB, len(data), data[MiB:2 * MiB])
    assert r.status_code == 200 and r.json()["received"] == MiB, r.text
    # Other bytes for a range it holds, or a part across its edge: 409.
    r = put_part(server, digest, "twice", MiB, len(data), b"x" * MiB)
    assert r.status_code == 409 and "other contents" in r.text, r.text
    r = put_part(server, digest, "twice", MiB // 2, len(data),
                 data[MiB // 2:MiB + MiB // 2])
    assert r.status_code == 409 and "overlap" in r.text, r.text
    r = held(server, digest, "twice")
    assert r.status_code == 200, r.text
    assert r.json()["ranges"] == [[MiB, 2 * MiB]]
    assert r.json()["size"] == len(data)
    for off in (0, 2 * MiB):
        r = put_part(server, digest, "twice", off, len(data),
                     data[off:off + MiB])
    assert r.status_code == 201, r.text
    assert stored(server, digest) == data


def test_sized_parts_that_do_not_hash_to_the_name_are_refused(server):
    data = os.urandom(2 * MiB)
    digest = hashlib.sha256(b"something else").hexdigest()
    put_part(server, digest, "bad", 0, len(data), data[:MiB])
    r = put_part(server, digest, "bad", MiB, len(data), data[MiB:])
    assert r.status_code == 400, r.text
    assert "hash to" in r.text and digest in r.text
    assert stored(server, digest) is None
    assert os.listdir(server.home / "registry" / "uploads") == []


@pytest.mark.parametrize("query,why", [
    ({"offset": 3 * MiB, "size": 3 * MiB}, "not within"),
    ({"offset": 0, "size": MiB - 1}, "not within"),
    ({"offset": 0, "size": "ten"}, "size"),
])
def test_parts_outside_the_blob_are_refused(server, query, why):
    r = server.request("POST", f"/v1/model-blobs/{'a' * 64}",
                       params=dict(query, upload="u"), data=b"x" * MiB)
    assert r.status_code == 400 and why in r.text, r.text


def test_a_part_over_the_part_size_is_refused_before_its_body(server):
    """The head says 17 MiB: 413 with the body never read."""
    u = urllib.parse.urlparse(server.url)
    head = (f"POST /v1/model-blobs/{'a' * 64}?upload=u&offset=0&size="
            f"{17 * MiB} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            f"{server.admin_token}\r\nContent-Length: {17 * MiB}\r\n\r\n")
    with socket.create_connection((u.hostname, u.port), timeout=30) as s:
        s.sendall(head.encode())
        answer = s.recv(4096).decode(errors="replace")
    assert answer.startswith("HTTP/1.1 413"), answer


def test_a_part_is_taken_only_from_a_caller_with_a_token(server):
    """Without a token the large cap is never granted: 401 on the head."""
    u = urllib.parse.urlparse(server.url)
    head = (f"POST /v1/model-blobs/{'a' * 64}?upload=u&offset=0&size="
            f"{8 * MiB} HTTP/1.1\r\nHost: x\r\nContent-Length: {8 * MiB}"
            "\r\n\r\n")
    with socket.create_connection((u.hostname, u.port), timeout=30) as s:
        s.sendall(head.encode())
        answer = s.recv(4096).decode(errors="replace")
    assert answer.startswith("HTTP/1.1 401"), answer


def test_large_parts_in_flight_are_bounded_per_client(server):
    """Parts are held whole while they come: a client address may have
    128 MiB of them in flight (eight 16 MiB parts); the next is 503 from
    its head, and room returns when one is done."""
    u = urllib.parse.urlparse(server.url)

    def head(n):
        return (f"POST /v1/model-blobs/{'b' * 64}?upload=h{n}&offset=0&"
                f"size={16 * MiB} HTTP/1.1\r\nHost: x\r\nAuthorization: "
                f"Bearer {server.admin_token}\r\nContent-Length: "
                f"{16 * MiB}\r\n\r\n").encode()

    held_open = []
    try:
        for n in range(8):
            s = socket.create_connection((u.hostname, u.port), timeout=30)
            s.sendall(head(n) + b"x" * 1024)
            held_open.append(s)
        # A request after them is answered once the loop has read them.
        assert held(server, "b" * 64, "h0").status_code == 404
        with socket.create_connection((u.hostname, u.port), timeout=30) as s:
            s.sendall(head(9))
            answer = s.recv(4096).decode(errors="replace")
        assert answer.startswith("HTTP/1.1 503"), answer
        assert "large request bodies" in answer
        held_open.pop().close()

        def fits():
            try:
                r = put_part(server, "b" * 64, "h9", 0, 32 * MiB,
                             b"y" * 16 * MiB)
            except OSError:
                return False
            return r.status_code == 200
        wait_for(fits, what="room for a part once one is gone")
    finally:
        for s in held_open:
            s.close()


def test_resume_after_a_connection_cut_mid_part(server):
    """A part whose connection dies half-sent leaves nothing of itself;
    the client asks what the upload holds and sends the rest."""
    data = os.urandom(8 * MiB)
    digest = hashlib.sha256(data).hexdigest()
    part = 4 * MiB
    r = put_part(server, digest, "cut", 0, len(data), data[:part])
    assert r.status_code == 200, r.text
    u = urllib.parse.urlparse(server.url)
    head = (f"POST /v1/model-blobs/{digest}?upload=cut&offset={part}&size="
            f"{len(data)} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            f"{server.admin_token}\r\nContent-Length: {part}\r\n\r\n")
    with socket.create_connection((u.hostname, u.port), timeout=30) as s:
        s.sendall(head.encode() + data[part:part + MiB])
    # The cut part added nothing; the server still serves.
    r = held(server, digest, "cut")
    assert r.status_code == 200 and r.json()["ranges"] == [[0, part]], r.text
    r = put_part(server, digest, "cut", part, len(data), data[part:])
    assert r.status_code == 201, r.text
    assert stored(server, digest) == data


def test_parts_whose_clients_go_before_the_answer(server):
    """Whole parts sent at once on connections closed before their
    answers: a worker writes an upload's parts one at a time, so some
    are being written and some wait their turn when their clients go.
    Each is either held whole or not at all; the server keeps serving,
    and the client sends what it does not hold."""
    data = os.urandom(64 * MiB)
    digest = hashlib.sha256(data).hexdigest()
    part = 8 * MiB
    u = urllib.parse.urlparse(server.url)
    socks = []
    for off in range(0, len(data), part):
        head = (f"POST /v1/model-blobs/{digest}?upload=gone&offset={off}"
                f"&size={len(data)} HTTP/1.1\r\nHost: x\r\nAuthorization: "
                f"Bearer {server.admin_token}\r\nContent-Length: {part}"
                "\r\n\r\n")
        s = socket.create_connection((u.hostname, u.port), timeout=30)
        s.sendall(head.encode() + data[off:off + part])
        socks.append(s)
    for s in socks:
        s.close()
    r = held(server, digest, "gone")
    assert r.status_code in (200, 404), r.text
    ranges = r.json()["ranges"] if r.status_code == 200 else []
    for a, b in ranges:
        assert a % part == 0 and b % part == 0, ranges
    last = None
    for off in range(0, len(data), part):
        if any(a <= off < b for a, b in ranges):
            continue
        last = put_part(server, digest, "gone", off, len(data),
                        data[off:off + part])
        assert last.status_code in (200, 201), last.text
    if last is None or last.status_code != 201:
        # Every part was held (or the last sent was not the last
        # needed): the upload completes once the workers are done.
        wait_for(lambda: stored(server, digest) is not None,
                 what="the blob stored")
    assert stored(server, digest) == data


def test_parts_sent_again_while_the_last_is_written_are_answered_held(server):
    """Every part at once, then every part again before the first round
    is all written: the copies that still wait their turn when the last
    part makes the upload whole repeat bytes it holds, and are answered
    as held, never refused for the upload's end."""
    data = os.urandom(48 * MiB)  # twice over: 96 MiB, in the per-client cap
    digest = hashlib.sha256(data).hexdigest()
    part = 8 * MiB
    answers = []

    def send(off):
        answers.append(put_part(server, digest, "twice", off, len(data),
                                data[off:off + part]))

    threads = [threading.Thread(target=send, args=(off,))
               for _ in range(2) for off in range(0, len(data), part)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in answers)
    assert all(c in (200, 201) for c in codes), [r.text for r in answers
                                                  if r.status_code >= 300]
    assert codes.count(201) == 1, codes
    assert stored(server, digest) == data


def test_sized_and_in_order_parts_do_not_mix(server):
    data = os.urandom(2 * MiB)
    digest = hashlib.sha256(data).hexdigest()
    r = put_part(server, digest, "mix", 0, len(data), data[:MiB])
    assert r.status_code == 200, r.text
    r = server.request("POST", f"/v1/model-blobs/{digest}",
                       params={"upload": "mix", "offset": MiB, "final": 1},
                       data=data[MiB:])
    assert r.status_code == 409 and "sized" in r.text, r.text


def test_an_upload_is_its_owners(server):
    data = os.urandom(2 * MiB)
    digest = hashlib.sha256(data).hexdigest()
    other = server.create_token("other", "user")
    put_part(server, digest, "mine", 0, len(data), data[:MiB])
    assert held(server, digest, "mine", token=other).status_code == 404
    assert held(server, digest, "mine").status_code == 200
    # Its parts from another token begin that token's own upload.
    r = put_part(server, digest, "mine", MiB, len(data), data[MiB:],
                 token=other)
    assert r.status_code == 200 and r.json()["received"] == MiB, r.text


def proc_io(pid):
    """What a process moved through read- and write-like calls."""
    with open(f"/proc/{pid}/io") as f:
        return {k: int(v) for k, v in
                (line.split(": ") for line in f.read().splitlines())}


def test_each_byte_is_written_once_and_never_read_back(server):
    """The server hashes parts as they come (one that came early from its
    pages once the gap before it is filled) and links the finished
    staging file into the file store: N bytes pushed are N bytes written,
    not a staging copy and then a store copy, and none read back."""
    data = os.urandom(48 * MiB)
    digest = hashlib.sha256(data).hexdigest()
    before = proc_io(server.proc.pid)
    for off in (16 * MiB, 0, 32 * MiB):
        r = put_part(server, digest, "once", off, len(data),
                     data[off:off + 16 * MiB])
        assert r.status_code in (200, 201), r.text
    assert r.status_code == 201, r.text
    after = proc_io(server.proc.pid)
    written = after["wchar"] - before["wchar"]
    read = after["rchar"] - before["rchar"]
    assert len(data) <= written < 1.25 * len(data), (written, len(data))
    assert read < 1.25 * len(data), (read, len(data))
    assert stored(server, digest) == data
    assert os.stat(server.home / "blobs" / "sha256" / digest).st_nlink == 1
    assert os.listdir(server.home / "registry" / "uploads") == []


def test_a_part_far_past_the_bytes_held_from_the_start_is_refused(server):
    """Parts that came early are hashed once the gap before them fills:
    a part may end at most 256 MiB past the bytes held from 0."""
    r = put_part(server, "c" * 64, "far", 299 * MiB, 300 * MiB, b"z" * MiB)
    assert r.status_code == 409, r.text
    assert "send the parts before them first" in r.text, r.text
    r = put_part(server, "c" * 64, "far", 255 * MiB, 300 * MiB, b"z" * MiB)
    assert r.status_code == 200, r.text


def put_unnamed(server, upload, offset, size, body, token="admin"):
    return server.request("POST", f"/v1/model-uploads/{upload}", token=token,
                          params={"offset": offset, "size": size}, data=body)


def commit(server, upload, digest, token="admin"):
    return server.request("POST", f"/v1/model-uploads/{upload}/commit",
                          token=token, json={"digest": digest})


def test_an_upload_named_at_its_commit(server):
    """A client hashing as it sends learns the digest last: parts under
    its id alone, then a commit naming the digest."""
    data = os.urandom(20 * MiB + 5)
    digest = hashlib.sha256(data).hexdigest()
    r = put_unnamed(server, "late", 16 * MiB, len(data), data[16 * MiB:])
    assert r.status_code == 200 and "digest" not in r.json(), r.text
    r = commit(server, "late", digest)
    assert r.status_code == 409 and "send the rest" in r.text, r.text
    r = put_unnamed(server, "late", 0, len(data), data[:16 * MiB])
    assert r.status_code == 200, r.text
    assert (r.json()["received"], r.json()["stored"]) == (len(data), False)
    r = server.request("GET", "/v1/model-uploads/late")
    assert r.json()["ranges"] == [[0, len(data)]], r.text
    other = server.create_token("other", "user")
    assert commit(server, "late", digest, token=other).status_code == 404
    r = commit(server, "late", digest)
    assert r.status_code == 201, r.text
    assert (r.json()["stored"], r.json()["existed"]) == (True, False)
    assert stored(server, digest) == data
    # Sent again after its answer was lost: the first commit's answer.
    again = commit(server, "late", digest)
    assert again.status_code == 201 and again.json() == r.json(), again.text
    assert os.listdir(server.home / "registry" / "uploads") == []


def test_an_upload_that_hashes_to_another_digest_is_refused(server):
    data = os.urandom(2 * MiB)
    claimed = hashlib.sha256(b"other bytes").hexdigest()
    r = put_unnamed(server, "liar", 0, len(data), data)
    assert r.status_code == 200, r.text
    r = commit(server, "liar", claimed)
    assert r.status_code == 400 and "hash to" in r.text, r.text
    assert stored(server, claimed) is None
    assert server.request("GET", "/v1/model-uploads/liar").status_code == 404
    assert os.listdir(server.home / "registry" / "uploads") == []
    r = commit(server, "liar", "not hex")
    assert r.status_code == 400 and "digest" in r.text, r.text


# ---- kiln model push over these parts ----

class Proxy:
    """A TCP relay to the server on loopback that can cut the first
    connection to carry more than cut_after bytes up, and slow every
    connection to rate bytes a second (a slow or flaky network)."""

    def __init__(self, target, cut_after=None, rate=None):
        self.target = target
        self.cut_after, self.rate = cut_after, rate
        self.cuts = 0
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.closing = False
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while not self.closing:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self.pipe, args=(client, upstream, True),
                             daemon=True).start()
            threading.Thread(target=self.pipe, args=(upstream, client, False),
                             daemon=True).start()

    def pipe(self, src, dst, up):
        moved = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                moved += len(data)
                if up and self.cut_after and moved > self.cut_after:
                    with self.lock:
                        cut = self.cuts == 0
                        self.cuts += 1 if cut else 0
                    if cut:
                        break
                if self.rate:
                    time.sleep(len(data) / self.rate)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.closing = True
        self.sock.close()


def push_via(server, proxy, model_dir, name):
    env = dict(os.environ, KILN_HOME=str(server.home),
               KILN_SERVER=proxy.url if proxy else server.url)
    env.pop("KILN_TOKEN", None)
    return subprocess.run([KILN, "model", "push", str(model_dir), "--name",
                           name, "-o", "json", "--http"], env=env,
                          capture_output=True, text=True, timeout=300)


def target(server):
    u = urllib.parse.urlparse(server.url)
    return (u.hostname, u.port)


def test_push_sends_parallel_parts_with_the_right_digest(server, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    big = os.urandom(50 * MiB + 7)
    (model / "w.bin").write_bytes(big)
    (model / "empty").write_bytes(b"")
    res = push_via(server, None, model, "big")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert (out["uploaded"], out["uploaded_bytes"]) == (2, len(big))
    digest = hashlib.sha256(big).hexdigest()
    assert stored(server, digest) == big
    shown = server.cli("model", "show", "big@1", "-o", "json",
                       check=True).stdout
    assert digest in shown


def test_push_survives_a_connection_cut_mid_part(server, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    big = os.urandom(40 * MiB)
    (model / "w.bin").write_bytes(big)
    proxy = Proxy(target(server), cut_after=5 * MiB)
    try:
        res = push_via(server, proxy, model, "cut")
    finally:
        proxy.close()
    assert res.returncode == 0, res.stderr
    assert proxy.cuts == 1
    assert stored(server, hashlib.sha256(big).hexdigest()) == big


def staged_bytes(server):
    staging = server.home / "registry" / "uploads"
    if not staging.exists():
        return 0
    return sum(os.stat(staging / n).st_blocks * 512
               for n in os.listdir(staging))


def test_a_push_killed_mid_file_and_run_again_sends_only_the_rest(
        server, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    big = os.urandom(64 * MiB)
    (model / "w.bin").write_bytes(big)
    env = dict(os.environ, KILN_HOME=str(server.home))
    env.pop("KILN_TOKEN", None)
    proxy = Proxy(target(server), rate=16 * MiB)
    try:
        child = subprocess.Popen(
            [KILN, "model", "push", str(model), "--name", "again", "-o",
             "json", "--http"], env=dict(env, KILN_SERVER=proxy.url),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: staged_bytes(server) >= 16 * MiB, timeout=120,
                     what="a part staged")
        finally:
            child.kill()
            child.wait()
    finally:
        proxy.close()
    res = push_via(server, None, model, "again")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["resumed_bytes"] >= 16 * MiB, out
    assert out["uploaded_bytes"] + out["resumed_bytes"] == len(big), out
    assert stored(server, hashlib.sha256(big).hexdigest()) == big


def push_counted(env, model, name):
    """kiln model push --http's answer, and what it read and wrote,
    counted once it has exited and before it is reaped."""
    push = subprocess.Popen([KILN, "model", "push", str(model), "--name",
                             name, "-o", "json", "--http"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.waitid(os.P_PID, push.pid, os.WEXITED | os.WNOWAIT)
    io = proc_io(push.pid)
    out, err = push.communicate(timeout=60)
    assert push.returncode == 0, err
    return json.loads(out), io


def push_env(server, tmp_path):
    env = dict(os.environ, KILN_HOME=str(server.home), KILN_SERVER=server.url,
               XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("KILN_TOKEN", None)
    return env


def test_a_file_pushed_before_is_not_read_again(server, tmp_path):
    """A push hashes as it sends; a file pushed before in the same state
    is known by its identity and times, and only asked about."""
    model = tmp_path / "m"
    model.mkdir()
    data = os.urandom(8 * MiB)
    (model / "w.bin").write_bytes(data)
    env = push_env(server, tmp_path)
    out, io = push_counted(env, model, "first")
    assert out["uploaded_bytes"] == len(data)
    assert (tmp_path / "cache" / "kiln" / "digests").exists()
    # Pushed within two seconds of its last change: its times might not
    # show a write in the same tick, so it is hashed (not sent) again.
    out, io = push_counted(env, model, "second")
    assert (out["uploaded"], out["uploaded_bytes"]) == (0, 0), out
    assert io["rchar"] >= len(data), io
    wait_for(lambda: time.time() - os.stat(model / "w.bin").st_ctime > 2.5,
             what="the file's change time to settle")
    out, io = push_counted(env, model, "third")
    assert (out["uploaded"], out["uploaded_bytes"]) == (0, 0), out
    out, io = push_counted(env, model, "fourth")
    assert io["rchar"] < len(data) / 4, io
    # Written since: read and sent again, whatever its times say.
    old = os.stat(model / "w.bin")
    with open(model / "w.bin", "r+b") as f:
        f.write(b"new")
    os.utime(model / "w.bin", ns=(old.st_atime_ns, old.st_mtime_ns))
    out, io = push_counted(env, model, "fifth")
    assert out["uploaded_bytes"] == len(data), out
    shown = server.cli("model", "show", "fifth@1", "-o", "json",
                       check=True).stdout
    assert hashlib.sha256(b"new" + data[3:]).hexdigest() in shown


def test_a_push_reads_each_file_once(server, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    data = os.urandom(48 * MiB)
    (model / "w.bin").write_bytes(data)
    out, io = push_counted(push_env(server, tmp_path), model, "once")
    assert out["uploaded_bytes"] == len(data)
    assert len(data) <= io["rchar"] < 1.25 * len(data), io


def test_a_file_changed_while_pushed_is_refused_by_name(server, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    weights = model / "w.bin"
    weights.write_bytes(os.urandom(32 * MiB))
    # 8 MiB/s: the push takes seconds, and the file changes meanwhile.
    proxy = Proxy(target(server), rate=8 * MiB)
    staging = server.home / "registry" / "uploads"
    try:
        child = threading.Thread(target=lambda: results.append(
            push_via(server, proxy, model, "moving")))
        results = []
        child.start()
        wait_for(lambda: staging.exists() and os.listdir(staging),
                 timeout=60, what="a staged part")
        with open(weights, "r+b") as f:
            f.seek(20 * MiB)
            f.write(b"changed")
        child.join(timeout=300)
    finally:
        proxy.close()
    res = results[0]
    assert res.returncode != 0, res.stdout
    assert f"{weights} changed while it was pushed" in res.stderr, res.stderr
    assert server.request("GET", "/v1/models/moving").status_code == 404


def test_push_shows_progress_on_a_terminal_only(server, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    with open(model / "w.bin", "wb") as f:
        for _ in range(20):
            f.write(os.urandom(16 * MiB))  # 320 MiB: over the 256 MiB floor
    env = dict(os.environ, KILN_HOME=str(server.home), KILN_SERVER=server.url)
    env.pop("KILN_TOKEN", None)
    push = f"{KILN} model push {model} --name shown --http"
    # script(1) gives the push a pseudo-terminal and copies what it wrote.
    res = subprocess.run(["script", "-qefc", push, "/dev/null"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.replace("\r", "\n").splitlines()
    # Hashed as it is sent: one pass, no hashing of its own.
    assert not any(ln.startswith("hashing ") for ln in lines), res.stdout
    moving = [ln for ln in lines if ln.startswith("uploading ")]
    assert moving, res.stdout
    assert any("/s, ETA " in ln for ln in moving), moving
    assert "(100%)" in moving[-1] and "/s in " in moving[-1], moving
    # Not a terminal: nothing but the result.
    res = subprocess.run(push.split() + ["--alias", "again"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "uploading" not in res.stderr and "hashing" not in res.stderr
