"""Resume after eviction: the 2-task tiny GPT evicted twice finishes,
and its final_weights.bin has the same sha256 as an uninterrupted run's —
with the default file:// store, and with Azure Blob Storage (a real
Azurite); with Azure, the account key appears in no log, error or answer."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import (AZURITE_KEY, KILN, Server, azurite_env, job_yaml,
                      wait_for)

REPO = Path(__file__).resolve().parents[2]
# Paced steps: each attempt must still be running when the test sees its
# first new checkpoint and evicts it, even on a loaded machine under ASan
# (unpaced, the 60 tiny steps take under a second). The second eviction
# comes at step 10 or soon after, 50 steps (about 7.5 s) before the end:
# with 40 steps a loaded machine once let the first attempt end before
# the test saw its checkpoint.
TINY = ["--steps", "60", "--checkpoint-every", "5", "--step-sleep", "0.15",
        "--batch", "4", "--context", "32", "--dim", "32", "--layers", "1",
        "--heads", "2"]


def spec(name):
    return "\n".join([
        "kind: Job", f"name: {name}",
        f"command: {json.dumps(['/usr/bin/python3', 'train.py'] + TINY)}",
        "tasks: 2", "preemptible: true",
        "checkpoint: {keep: 2, grace: 20s, signal: SIGTERM}",
        'env: {OMP_NUM_THREADS: "1"}', ""])


def submit(server, tmp_path, name):
    # The spec lives beside train.py so the tasks start there.
    work = tmp_path / name
    shutil.copytree(REPO / "examples" / "train", work,
                    ignore=shutil.ignore_patterns("checkpoints", "outputs",
                                                  "__pycache__"))
    (work / "job.yaml").write_text(spec(name))
    r = server.request("POST", "/v1/jobs", data=spec(name),
                       params={"file": "job.yaml",
                               "path": str(work / "job.yaml")})
    assert r.status_code == 201, r.text
    return r.json()["job"]["id"]


class FileStore:
    def __init__(self, server):
        self.server = server

    def synced(self, jid):
        d = self.server.home / "blobs" / str(jid) / "checkpoints"
        if not d.exists():
            return []
        return sorted(p.name for p in d.iterdir()
                      if (p / "MANIFEST.json").exists())


class AzureStore:
    def __init__(self, url, env):
        self.url = url
        self.env = env
        self.seen = []

    def synced(self, jid):
        r = subprocess.run([KILN, "ckpt", "ls", self.url, str(jid)],
                           env=self.env, capture_output=True, text=True,
                           timeout=60)
        self.seen.append(r.stdout + r.stderr)
        if r.returncode != 0:
            return []
        return sorted(line for line in r.stdout.split("\n")
                      if line and "incomplete" not in line)


def final_sha(server, jid):
    job = server.wait_state(jid, ("succeeded", "failed"), timeout=300)
    assert job["state"] == "succeeded", job["reason"]
    outs = {o["name"]: o for o in job["outputs"]}
    return outs["final_weights.bin"]["sha256"], job


def evicted_twice_matches_uninterrupted(server, store, tmp_path):
    # The uninterrupted run goes alongside: training is deterministic
    # whatever else runs, and the test takes the longer run's time
    # rather than both.
    clean = submit(server, tmp_path, "clean")
    jid = submit(server, tmp_path, "evicted")
    for n in (1, 2):
        # Let it sync a new checkpoint in this attempt, then evict it.
        before = max(store.synced(jid), default="")
        wait_for(lambda: server.job(jid)["state"] == "running" and
                 server.job(jid)["attempts"] == n and
                 max(store.synced(jid), default="") > before,
                 timeout=180, interval=0.2,
                 what=f"a new checkpoint in attempt {n}")
        r = server.request("POST", f"/v1/jobs/{jid}/evict")
        assert r.status_code == 200, r.text
        wait_for(lambda: len(server.job(jid)["attempts_detail"]) >= n and
                 server.job(jid)["attempts_detail"][n - 1]["state"] == "preempted",
                 timeout=120, what=f"attempt {n} to be preempted")
    want, _ = final_sha(server, clean)
    got, job = final_sha(server, jid)
    states = [a["state"] for a in job["attempts_detail"]]
    assert states == ["preempted", "preempted", "succeeded"]
    assert got == want
    assert "resuming from checkpoint" in server.logs(jid, attempt=3)
    assert 0 < job["goodput"]["percent"] <= 100
    return job


def test_evicted_twice_matches_uninterrupted_file_store(server, tmp_path):
    evicted_twice_matches_uninterrupted(server, FileStore(server), tmp_path)


def test_evicted_twice_matches_uninterrupted_on_azurite(azurite, tmp_path):
    env = azurite_env(azurite)
    url = f"{azurite}/kiln-e2e-{tmp_path.name[-12:].lower().replace('_', '-')}"
    home = tmp_path / "home"
    home.mkdir()
    server = Server(home, extra=["--blob-store", url], env=env).start()
    try:
        job = evicted_twice_matches_uninterrupted(
            server, AzureStore(url, env), tmp_path)
        assert all(o["url"].startswith(url) for o in job["outputs"])
        # The key is in no answer, no log line and no stored file.
        seen = [server.request("GET", f"/v1/jobs/{job['id']}").text,
                server.request("GET", "/v1/jobs").text,
                server.request("GET", "/v1/nodes").text,
                server.request("GET", "/v1/audit").text,
                server.cli("show", str(job["id"]), "-o", "json").stdout]
        for attempt in (1, 2, 3):
            for task in (0, 1):
                seen.append(server.logs(job["id"], task=task, attempt=attempt))
        server.stop()
        seen.append((home / "server.log").read_text())
        for path in home.rglob("*"):
            if path.is_file() and path.stat().st_size < 8 << 20:
                seen.append(path.read_bytes().decode("utf-8", "replace"))
        for text in seen:
            assert AZURITE_KEY not in text
            assert AZURITE_KEY[:24] not in text
    finally:
        server.stop()


def test_bad_store_credentials_are_reported_without_the_secret(tmp_path, azurite):
    env = azurite_env(azurite)
    wrong = AZURITE_KEY[:-8] + "AAAAAAA="
    env["AZURE_STORAGE_CONNECTION_STRING"] = env[
        "AZURE_STORAGE_CONNECTION_STRING"].replace(AZURITE_KEY, wrong)
    home = tmp_path / "home"
    home.mkdir()
    server = Server(home, extra=["--blob-store", f"{azurite}/kiln-badkey"],
                    env=env).start()
    try:
        from conftest import job_yaml
        script = ('d="$KILN_CHECKPOINT_DIR/step-1"; mkdir -p "$d.tmp"; '
                  'echo x > "$d.tmp/f"; mv "$d.tmp" "$d"')
        jid = server.submit(job_yaml("badkey", ["/bin/sh", "-c", script],
                                     checkpoint={"keep": 2}))
        server.wait_state(jid, "succeeded")
        log = (home / "server.log").read_text()
        wait_for(lambda: "checkpoint sync failed" in
                 (home / "server.log").read_text(), what="the sync error")
        log = (home / "server.log").read_text()
        assert "403" in log or "AuthenticationFailed" in log
        assert wrong not in log and wrong[:24] not in log
        assert AZURITE_KEY[:24] not in log
    finally:
        server.stop()


def test_files_go_ahead_of_the_commit_on_azurite(azurite, tmp_path):
    # The task closes a file in step-000001.tmp and waits until the test
    # has seen its blob in Azurite (closing it again meanwhile, as a close
    # before the server follows the new directory is not seen); only then
    # does it commit. The commit's upload finds the blob (HEAD) with its
    # size and sends only the manifest.
    env = azurite_env(azurite)
    url = f"{azurite}/kiln-ahead"
    home = tmp_path / "home"
    home.mkdir()
    gate = tmp_path / "gate"
    gate.mkdir()
    gate.chmod(0o777)  # the task's user writes there
    script = (
        'd="$KILN_CHECKPOINT_DIR/step-000001"; mkdir -p "$d.tmp"; '
        'head -c 3000000 /dev/urandom > "$d.tmp/a.bin"; '
        f'touch {gate}/written; n=0; '
        f'while [ ! -e {gate}/seen ]; do : >> "$d.tmp/a.bin"; '
        '  n=$((n+1)); [ $n -gt 2400 ] && exit 3; sleep 0.05; done; '
        'mv "$d.tmp" "$d"; sleep 300 & wait')
    server = Server(home, extra=["--blob-store", url], env=env).start()
    try:
        jid = server.submit(job_yaml("ahead", ["/bin/sh", "-c", script],
                                     preemptible=True))
        wait_for(lambda: (gate / "written").exists(), what="the file written")
        blob = f"{jid}/checkpoints/step-000001/a.bin"

        def blob_size():
            r = subprocess.run([KILN, "blob", "stat", url, blob], env=env,
                               capture_output=True, text=True, timeout=60)
            return r.returncode == 0 and r.stdout.strip() == "3000000"
        wait_for(blob_size, timeout=120, what="a.bin in Azurite before the commit")
        assert subprocess.run(
            [KILN, "blob", "stat", url,
             f"{jid}/checkpoints/step-000001/MANIFEST.json"],
            env=env, capture_output=True, timeout=60).returncode != 0
        (gate / "seen").touch()
        wait_for(lambda: "checkpoint step-000001 synced (1 files, 1 sent "
                 "before the commit" in (home / "server.log").read_text(),
                 timeout=120, what="the commit's upload")
        server.cli("cancel", str(jid))
        restored = tmp_path / "restored"
        r = subprocess.run([KILN, "ckpt", "restore", url, str(jid),
                            str(restored)], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert (restored / "step-000001" / "a.bin").stat().st_size == 3000000
    finally:
        server.stop()
