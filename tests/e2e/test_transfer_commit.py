"""A commit sent again (the client's request timed out while a slow store
took the blob) gets the first commit's answer: it waits for the commit in
flight without holding up other calls, or, once that ended, is answered
from it. Another digest or size than the first commit's is refused by
name. The slow store is a real Azurite behind a TCP relay here that holds
new connections until told to let them through."""
import hashlib
import os
import subprocess
import threading

import pytest

from conftest import (KILN, GateRelay, azurite_env, store_server,
                      wait_for)

MiB = 1 << 20


@pytest.fixture
def relay(azurite):
    r = GateRelay(azurite)
    yield r
    r.close()


def put_unnamed(server, upload, offset, size, body):
    return server.request("POST", f"/v1/model-uploads/{upload}",
                          params={"offset": offset, "size": size}, data=body)


def commit(server, upload, body):
    return server.request("POST", f"/v1/model-uploads/{upload}/commit",
                          json=body)


def staged(server):
    return os.listdir(server.home / "registry" / "uploads")


def test_a_commit_sent_again_while_the_first_runs_gets_its_answer(
        relay, tmp_path):
    env = azurite_env(relay.endpoint)
    s, store = store_server(tmp_path, relay.endpoint, env)
    answers = {}

    def send(name, body):
        answers[name] = commit(s, "slow", body)

    try:
        data = os.urandom(3 * MiB + 7)
        digest = hashlib.sha256(data).hexdigest()
        for at in range(0, len(data), MiB):
            r = put_unnamed(s, "slow", at, len(data), data[at:at + MiB])
            assert r.status_code == 200, r.text
        relay.open.clear()
        first = threading.Thread(target=send, args=("first",
                                                    {"digest": digest}))
        first.start()
        # Out of the list of uploads in progress: its commit is running,
        # held at the relay.
        wait_for(lambda: s.request("GET", "/v1/model-uploads/slow")
                 .status_code == 404, what="the commit to start")
        wait_for(lambda: relay.waiting > 0, what="the store to be called")
        second = threading.Thread(target=send, args=("second",
                                                     {"digest": digest,
                                                      "size": len(data)}))
        second.start()
        wait_for(lambda: "sent again while it runs" in s.log.read_text(),
                 what="the second commit to wait")
        # The loop still serves: another digest or size is refused by
        # name at once, while both commits wait.
        r = commit(s, "slow", {"digest": "e" * 64})
        assert r.status_code == 409, r.text
        assert r.json()["error"]["field"] == "digest", r.text
        r = commit(s, "slow", {"digest": digest, "size": len(data) + 1})
        assert r.status_code == 409, r.text
        assert r.json()["error"]["field"] == "size", r.text
        # At most 4 wait; one more is refused rather than held.
        more = [threading.Thread(target=send, args=(f"more{i}",
                                                    {"digest": digest}))
                for i in range(3)]
        for t in more:
            t.start()
        wait_for(lambda: s.log.read_text().count("sent again while it "
                                                 "runs") == 4,
                 what="four commits to wait")
        r = commit(s, "slow", {"digest": digest})
        assert r.status_code == 429, r.text
        assert r.json()["error"]["field"] == "upload", r.text
        waiting = [first, second, *more]
        assert all(t.is_alive() for t in waiting)
        relay.open.set()
        for t in waiting:
            t.join(timeout=120)
        a = answers["first"]
        assert a.status_code == 201, a.text
        assert (a.json()["digest"], a.json()["received"]) == (digest,
                                                              len(data))
        assert (a.json()["stored"], a.json()["existed"]) == (True, False)
        for name in ("second", "more0", "more1", "more2"):
            b = answers[name]
            assert (b.status_code, b.json()) == (201, a.json()), name
        # After it ended: the same answer, from what it stored.
        c = commit(s, "slow", {"digest": digest})
        assert (c.status_code, c.json()) == (201, a.json())
        assert staged(s) == []
        got = tmp_path / "got"
        res = subprocess.run([KILN, "blob", "get",
                              store,
                              f"sha256/{digest}", str(got)], env=env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        assert got.read_bytes() == data
    finally:
        relay.open.set()
        s.stop()


def test_a_commit_sent_again_after_it_ended_gets_its_answer(server):
    data = os.urandom(MiB + 3)
    digest = hashlib.sha256(data).hexdigest()
    r = put_unnamed(server, "done", 0, len(data), data)
    assert r.status_code == 200, r.text
    first = commit(server, "done", {"digest": digest, "size": len(data)})
    assert first.status_code == 201, first.text
    for _ in range(2):
        again = commit(server, "done", {"digest": digest})
        assert (again.status_code, again.json()) == (201, first.json())
    # Another token's commit of that id is not this one: no answer of
    # it, only whether the store holds the blob (and a digest it lacks:
    # nothing).
    other = server.create_token("other", "user")
    r = server.request("POST", "/v1/model-uploads/done/commit", token=other,
                       json={"digest": digest})
    assert r.status_code == 200 and r.json()["existed"], r.text
    r = server.request("POST", "/v1/model-uploads/done/commit", token=other,
                       json={"digest": "f" * 64})
    assert r.status_code == 404, r.text
    r = commit(server, "done", {"digest": "f" * 64})
    assert r.status_code == 409 and r.json()["error"]["field"] == "digest"
    r = commit(server, "done", {"digest": digest, "size": 1})
    assert r.status_code == 409 and r.json()["error"]["field"] == "size"
    assert staged(server) == []
    blobs = list((server.home.parent).rglob(f"*{digest}*"))
    assert len(blobs) == 1, blobs


def test_a_refused_commit_sent_again_is_refused_the_same(server):
    data = os.urandom(MiB)
    claimed = hashlib.sha256(b"not these bytes").hexdigest()
    assert put_unnamed(server, "liar", 0, len(data), data).status_code == 200
    first = commit(server, "liar", {"digest": claimed})
    assert first.status_code == 400 and "hash to" in first.text, first.text
    again = commit(server, "liar", {"digest": claimed})
    assert (again.status_code, again.json()) == (400, first.json())
    assert staged(server) == []


def test_the_commits_kept_per_token_are_capped(server):
    """64 kept per token: a client committing many small uploads cannot
    grow the server's memory; the oldest ended one goes first."""
    answers = {}
    for i in range(65):
        data = b"blob %d" % i
        digest = hashlib.sha256(data).hexdigest()
        upload = f"small{i}"
        r = put_unnamed(server, upload, 0, len(data), data)
        assert r.status_code == 200, r.text
        r = commit(server, upload, {"digest": digest})
        assert r.status_code == 201, r.text
        answers[upload] = (digest, r.json())
    # The oldest was let go: only whether the store holds its blob.
    digest, _ = answers["small0"]
    r = commit(server, "small0", {"digest": "f" * 64})
    assert r.status_code == 404, r.text
    r = commit(server, "small0", {"digest": digest})
    assert r.status_code == 200 and r.json()["existed"], r.text
    # The newer are kept: their own answer, and another digest refused.
    digest, first = answers["small1"]
    r = commit(server, "small1", {"digest": digest})
    assert (r.status_code, r.json()) == (201, first)
    r = commit(server, "small1", {"digest": "f" * 64})
    assert r.status_code == 409 and r.json()["error"]["field"] == "digest"


def test_a_store_that_does_not_answer_holds_no_other_call(relay, tmp_path):
    """The missing-blobs check and the commit of an upload that is gone
    ask the store about each blob; with the store held, both wait for
    it while every other call is served, then get their answers."""
    env = azurite_env(relay.endpoint)
    s, store = store_server(tmp_path, relay.endpoint, env)
    answers = {}

    def ask(name, path, body):
        answers[name] = s.request("POST", path, json=body)

    digest = hashlib.sha256(b"never sent").hexdigest()
    asks = [threading.Thread(target=ask, args=(
                "missing", "/v1/model-blobs/missing", {"digests": [digest]})),
            threading.Thread(target=ask, args=(
                "gone", "/v1/model-uploads/gone/commit",
                {"digest": digest}))]
    try:
        relay.open.clear()
        for t in asks:
            t.start()
        wait_for(lambda: relay.waiting >= 2, what="both to ask the store")
        for _ in range(3):
            r = s.request("GET", "/v1/jobs")
            assert r.status_code == 200, r.text
        assert answers == {}
        relay.open.set()
        for t in asks:
            t.join(timeout=60)
        assert answers["missing"].status_code == 200, answers["missing"].text
        assert answers["missing"].json()["missing"] == [digest]
        assert answers["gone"].status_code == 404, answers["gone"].text
        assert "no upload gone in progress" in answers["gone"].text
    finally:
        relay.open.set()
        s.stop()
