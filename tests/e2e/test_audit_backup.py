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

from conftest import KILN, Server, azurite_env, job_yaml, wait_for


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
    s = tampered(stopped_home, tmp_path, sql)
    # Without a server first: the home's own files.
    offline = subprocess.run([KILN, "audit", "verify", "--home", str(s.home),
                              "-o", "json"], capture_output=True, text=True,
                             timeout=30)
    assert offline.returncode == 1, offline.stderr
    s.start()
    try:
        rc, out = verify(s)
        assert rc == 1 and out["ok"] is False, out
        assert json.loads(offline.stdout) == out
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


def test_database_from_before_the_chain(stopped_home, tmp_path):
    """A schema 4 file (no chain columns, no key, no anchor) is migrated
    and its rows chained, in id order, once, by the next start."""
    s = tampered(stopped_home, tmp_path,
                 "ALTER TABLE audit DROP COLUMN prev_hash;"
                 " ALTER TABLE audit DROP COLUMN hash;"
                 " DROP TABLE node_states; DROP TABLE job_deployments;"
                 " DROP TABLE model_signatures; DROP TABLE model_alias_history;"
                 " DROP TABLE model_aliases; DROP TABLE model_versions;"
                 " DROP TABLE models;"
                 " DROP TABLE workflow_steps; DROP TABLE workflow_runs;"
                 " DROP TABLE model_evaluations; DROP TABLE model_revalidations;"
                 " DROP TABLE job_revisions; DROP TABLE workflow_attempts;"
                 " DROP TABLE task_usage;"
                 " DROP TABLE job_inputs; DROP TABLE idempotency_keys;"
                 " DROP INDEX jobs_by_array; ALTER TABLE jobs DROP COLUMN"
                 " array_id; ALTER TABLE jobs DROP COLUMN array_index;"
                 " DROP INDEX jobs_by_name; DROP TABLE devenv_runs;"
                 " PRAGMA user_version = 4;")
    (s.home / "audit.key").unlink()
    (s.home / "audit.head").unlink()
    s.start()
    try:
        assert "chained" in s.log.read_text()
        res = s.cli("audit", "-o", "json", "verify", check=True)
        out = json.loads(res.stdout)
        assert out["ok"] is True and out["rows"] >= 8, out
        assert out["anchor"]["id"] == out["head"]["id"]
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


def backup_dirs(store):
    """The backups in a file:// store directory: complete ones (with a
    manifest) and every backup name that has any blob left."""
    root = store / "backups"
    if not root.exists():
        return [], []
    names = sorted(d.name for d in root.iterdir()
                   if d.is_dir() and any(p.is_file() for p in d.rglob("*")))
    complete = [n for n in names if (root / n / "MANIFEST.json").exists()]
    return complete, names


def test_backup_and_restore(server, tmp_path):
    make_history(server)
    (server.home / "keys" / "trusted").mkdir(parents=True)
    # A real public key: the registry reads the trusted ones at start.
    server.cli("model", "keygen", "--out", str(tmp_path / "ops"), check=True)
    ops_pub = (tmp_path / "ops.pub").read_text()
    (server.home / "keys" / "trusted" / "ops.pub").write_text(ops_pub)
    old_admin = server.admin_token
    store = f"file://{server.home}/blobs"
    res = server.cli("backup", "create", "--with-audit-key", check=True)
    name = res.stdout.strip()
    assert "with audit.key" in res.stderr
    # The copy holds the database and the audit key: the server's alone.
    top = server.home / "blobs" / "backups"
    for p in [top, *top.rglob("*")]:
        want = 0o700 if p.is_dir() else 0o600
        assert p.stat().st_mode & 0o777 == want, (p, oct(p.stat().st_mode))
    listed = json.loads(server.cli("backup", "ls", "-o", "json",
                                   check=True).stdout)
    assert listed["store"] == store
    (manifest,) = listed["backups"]
    assert manifest["name"] == name and manifest["schema_version"] >= 5
    parts = {p["path"]: p for p in manifest["parts"]}
    assert set(parts) == {"kiln.db", "keys/trusted/ops.pub", "audit.key"}
    assert parts["audit.key"]["secret"] is True
    jobs = server.request("GET", "/v1/jobs").json()["jobs"]
    tokens = server.request("GET", "/v1/tokens").json()["tokens"]
    keys = server.request("GET", "/v1/keys").json()["keys"]

    # Into an empty home, with no server needed: --from.
    new = tmp_path / "restored"
    res = server.cli("backup", "restore", name, "--home", str(new),
                     "--from", store)
    assert res.returncode == 0, res.stderr
    assert oct((new / "audit.key").stat().st_mode & 0o777) == "0o600"
    assert oct((new / "kiln.db").stat().st_mode & 0o777) == "0o600"
    assert (new / "keys/trusted/ops.pub").read_text() == ops_pub
    res = server.cli("audit", "verify", "--home", str(new))
    assert res.returncode == 0 and res.stdout.startswith("audit log ok: ")
    res = server.cli("backup", "restore", name, "--home", str(new),
                     "--from", store)
    assert res.returncode == 1 and "not empty" in res.stderr

    s2 = Server(new).start()
    try:
        r = s2.request("GET", "/v1/jobs", token=old_admin)
        assert r.status_code == 200, r.text
        assert [(j["id"], j["name"], j["state"]) for j in r.json()["jobs"]] \
            == [(j["id"], j["name"], j["state"]) for j in jobs]
        # last_used_at moves with use; the rest is the same.
        def fixed(ts):
            return [{k: v for k, v in t.items() if k != "last_used_at_ms"}
                    for t in ts]
        r = s2.request("GET", "/v1/tokens", token=old_admin)
        assert fixed(r.json()["tokens"]) == fixed(tokens)
        r = s2.request("GET", "/v1/keys", token=old_admin)
        assert r.json()["keys"] == keys
        res = s2.cli("audit", "verify", token=old_admin)
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.startswith("audit log ok: ")
    finally:
        s2.stop()

    # A corrupted part is named, and nothing is restored.
    db = server.home / "blobs" / "backups" / name / "kiln.db"
    data = bytearray(db.read_bytes())
    data[len(data) // 2] ^= 0xff
    db.write_bytes(bytes(data))
    bad = tmp_path / "bad"
    res = server.cli("backup", "restore", name, "--home", str(bad),
                     "--from", store)
    assert res.returncode == 1
    assert "part kiln.db is corrupt" in res.stderr
    assert list(bad.iterdir()) == []


def test_backup_without_key_needs_the_key(server, tmp_path):
    make_history(server)
    name = server.cli("backup", "create", check=True).stdout.strip()
    new = tmp_path / "restored"
    res = server.cli("backup", "restore", name, "--home", str(new))
    assert res.returncode == 0, res.stderr
    assert "has no audit.key" in res.stderr
    assert not (new / "audit.key").exists()
    env = dict(os.environ, KILN_HOME=str(new))
    res = subprocess.run([KILN, "server", "--listen", "127.0.0.1:0",
                          "--gpus", "1xH100-80GB"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode != 0 and "audit.key is missing" in res.stderr
    # With the original key back, it starts and the chain verifies.
    shutil.copy(server.home / "audit.key", new / "audit.key")
    s2 = Server(new).start()
    try:
        res = s2.cli("audit", "verify", token=server.admin_token)
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        s2.stop()


def test_scheduled_backups_keep_n(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, extra=["--backup-every", "200ms", "--backup-keep",
                            "2"]).start()
    try:
        def done_runs():
            runs = s.request("GET", "/v1/backups").json()["runs"]
            done = [r["name"] for r in runs if r["state"] == "done"]
            return done if len(done) >= 4 else None
        done = wait_for(done_runs, what="4 scheduled backups")
        rows = s.request("GET", "/v1/audit",
                         params={"action": "backup."}).json()["audit"]
        assert {r["actor"] for r in rows} == {"system"}
        assert any(r["action"] == "backup.prune" for r in rows)
    finally:
        s.stop()
    complete, names = backup_dirs(home / "blobs")
    assert len(complete) == 2 and names == complete
    assert all(n >= sorted(done)[-2] for n in complete)
    assert not list((home / "backup-staging").iterdir())


def test_failing_scheduled_backup_alerts(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    s = Server(home, extra=["--backup-every", "200ms", "--backup-to",
                            f"file://{blocker}/store"]).start()
    try:
        def firing():
            alerts = s.request("GET", "/v1/alerts").json()["alerts"]
            return [a for a in alerts if a["rule"] == "backup_failed"
                    and a["state"] == "firing"]
        (alert,) = wait_for(firing, what="the backup_failed alert")
        assert "failed" in alert["summary"]
        rows = s.request("GET", "/v1/audit",
                         params={"action": "backup.create"}).json()["audit"]
        assert rows and rows[0]["outcome"] == "error"
    finally:
        s.stop()


def test_backup_to_azure_blob(azurite, tmp_path):
    """The same round trip through an Azure Blob store (Azurite): the
    server uploads, the CLI lists and restores with its own credentials."""
    env = azurite_env(azurite)
    store = f"{azurite}/kiln-backups/site-a"
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, env=env, extra=["--backup-to", store]).start()
    try:
        make_history(s)
        cli_env = dict(env, KILN_HOME=str(home))
        res = subprocess.run([KILN, "backup", "create", "--with-audit-key"],
                             env=cli_env, capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0, res.stderr
        name = res.stdout.strip()
        res = subprocess.run([KILN, "backup", "ls"], env=cli_env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and name in res.stdout, res.stderr
        new = tmp_path / "restored"
        res = subprocess.run([KILN, "backup", "restore", name, "--home",
                              str(new), "--from", store], env=env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        res = subprocess.run([KILN, "audit", "verify", "--home", str(new)],
                             env=env, capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0 and res.stdout.startswith("audit log ok")
    finally:
        s.stop()
