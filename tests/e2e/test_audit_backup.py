"""The audit hash chain (kiln audit verify, ls --since) and backups
(kiln backup create/ls/restore, scheduled backups with retention).

One server makes some history; each tampering case then works on its own
copy of the stopped server's home, edited with python's sqlite3 the way
someone with write access to kiln.db alone would."""
import json
import os
import shutil
import sqlite3
import subprocess

import pytest

from conftest import KILN, Server, job_yaml, wait_for


def make_history(s):
    """Tokens, jobs (queued: they ask for more GPUs than there are), a
    cancel and a gateway key: a dozen audit rows."""
    alice = s.create_token("alice", "user")
    s.create_token("bob", "viewer")
    spec = job_yaml("big", ["/bin/true"], resources={"gpus": 8})
    first = s.submit(spec, token=alice)
    s.submit(spec, token=alice)
    r = s.request("POST", f"/v1/jobs/{first}/cancel", token=alice)
    assert r.status_code == 200, r.text
    r = s.request("POST", "/v1/keys", json={"name": "app",
                                            "deployments": ["chat"]})
    assert r.status_code == 201, r.text
    r = s.request("DELETE", "/v1/tokens/bob")
    assert r.status_code == 200, r.text
    return alice, r


@pytest.fixture(scope="module")
def stopped_home(tmp_path_factory):
    """A home whose server made some history and stopped cleanly."""
    home = tmp_path_factory.mktemp("audit") / "home"
    home.mkdir()
    s = Server(home).start()
    try:
        make_history(s)
        ok = s.cli("audit", "verify", check=True)
        assert ok.stdout.startswith("audit log ok: ")
    finally:
        s.stop()
    return home


def tampered(stopped_home, tmp_path, sql):
    home = tmp_path / "home"
    shutil.copytree(stopped_home, home)
    db = sqlite3.connect(home / "kiln.db")
    db.executescript(sql)
    db.commit()
    db.close()
    return Server(home)


def verify(s):
    res = s.cli("audit", "verify", "-o", "json")
    return res.returncode, json.loads(res.stdout)


def test_chain_and_anchor_files(stopped_home):
    key = stopped_home / "audit.key"
    head = stopped_home / "audit.head"
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert oct(head.stat().st_mode & 0o777) == "0o600"
    assert len(key.read_text().strip()) == 64
    db = sqlite3.connect(stopped_home / "kiln.db")
    rows = db.execute("SELECT id, prev_hash, hash FROM audit"
                      " ORDER BY id").fetchall()
    db.close()
    assert len(rows) >= 8
    assert rows[0][1] == "0" * 64
    for before, row in zip(rows, rows[1:]):
        assert row[1] == before[2]          # each row links to the last
    last_id, last_hash = head.read_text().split()
    assert (int(last_id), last_hash) == (rows[-1][0], rows[-1][2])


def test_untouched_copy_verifies(stopped_home, tmp_path):
    s = tampered(stopped_home, tmp_path, "").start()
    try:
        rc, out = verify(s)
        assert rc == 0 and out["ok"] is True, out
        assert out["head"]["id"] == out["anchor"]["id"] == out["rows"]
        # Human output and the viewer's refusal.
        viewer = s.create_token("val", "viewer")
        res = s.cli("audit", "verify", token=viewer)
        assert res.returncode == 1 and "admin" in res.stderr
    finally:
        s.stop()


@pytest.mark.parametrize("sql, problem, bad_row, words", [
    ("UPDATE audit SET outcome = 'error' WHERE id = 3", "edited", 3,
     "row 3 ("),
    ("DELETE FROM audit WHERE id = 4", "deleted", 4, "row 4 is missing"),
    ("UPDATE audit SET id = -1 WHERE id = 2;"
     " UPDATE audit SET id = 2 WHERE id = 5;"
     " UPDATE audit SET id = 5 WHERE id = -1", "reordered", 2,
     "written as row 5"),
    ("DELETE FROM audit WHERE id = (SELECT max(id) FROM audit)",
     "truncated", None, "deleted from the end"),
])
def test_tampering_is_found(stopped_home, tmp_path, sql, problem, bad_row,
                            words):
    last = int((stopped_home / "audit.head").read_text().split()[0])
    s = tampered(stopped_home, tmp_path, sql).start()
    try:
        rc, out = verify(s)
        assert rc == 1 and out["ok"] is False, out
        assert out["problem"] == problem, out
        assert out["bad_row"] == (bad_row or last), out
        assert words in out["message"], out
        res = s.cli("audit", "verify")
        assert res.returncode == 1
        assert res.stdout.startswith(
            f"audit log broken at row {out['bad_row']} ({problem}): ")
        # New writes do not launder a cut end: the anchor stays.
        s.create_token("carol", "user")
        rc, again = verify(s)
        assert rc == 1 and again["bad_row"] == out["bad_row"], again
    finally:
        s.stop()


def test_missing_key_refuses_start(stopped_home, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(stopped_home, home)
    (home / "audit.key").unlink()
    env = dict(os.environ, KILN_HOME=str(home))
    res = subprocess.run([KILN, "server", "--listen", "127.0.0.1:0",
                          "--gpus", "1xH100-80GB"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    assert "audit.key is missing" in res.stderr


def test_audit_ls_filters(server):
    make_history(server)
    res = server.cli("audit", "ls", "--since", "1h", "--action", "token.",
                     "-o", "json", check=True)
    rows = json.loads(res.stdout)["audit"]
    assert {r["action"] for r in rows} == {"token.create", "token.revoke"}
    assert all(len(r["hash"]) == 64 for r in rows)
    res = server.cli("audit", "--since", "2099-01-01T00:00:00Z")
    assert res.returncode == 0 and "no audit records match" in res.stderr
    res = server.cli("audit", "--actor", "alice", check=True)
    assert "job.submit" in res.stdout and "token.create" not in res.stdout
    res = server.cli("audit", "ls", "--since", "yesterday")
    assert res.returncode == 2 and "--since" in res.stderr
