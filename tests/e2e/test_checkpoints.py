"""The checkpoint contract end to end on the default file:// store: sync
of committed checkpoints, retention, restore with KILN_RESUME_FROM,
corrupt checkpoints skipped, outputs, and uploads cut by a crash."""
import hashlib
import json
import os
import re
import threading
import time

from conftest import job_yaml, wait_for

# A task that commits checkpoints by the contract: write NAME.tmp, rename.
COMMIT = ('ck() { d="$KILN_CHECKPOINT_DIR/$1"; mkdir -p "$d.tmp"; '
          'echo "$2" > "$d.tmp/state"; mv "$d.tmp" "$d"; }; ')


def manifest(home, job, name):
    p = home / "blobs" / str(job) / "checkpoints" / name / "MANIFEST.json"
    return json.loads(p.read_text()) if p.exists() else None


def test_sync_retention_resume_and_outputs(server, tmp_path):
    gate = tmp_path / "gate"
    script = COMMIT + (
        'if [ -z "$KILN_RESUME_FROM" ]; then '
        '  for i in 1 2 3; do ck step-00000$i "state $i"; sleep 0.3; done; '
        f'  touch {gate}; sleep 300 & wait; '
        'else '
        '  echo "resumed with $(cat $KILN_RESUME_FROM/state)"; '
        '  echo "weights" > "$KILN_OUTPUT_DIR/final_weights.bin"; '
        '  mkdir -p "$KILN_OUTPUT_DIR/sub"; echo "{}" > "$KILN_OUTPUT_DIR/sub/m.json"; '
        'fi')
    jid = server.submit(job_yaml("ckpt", ["/bin/sh", "-c", script],
                                 preemptible=True,
                                 checkpoint={"keep": 2, "grace": "5s"}))
    wait_for(lambda: gate.exists(), what="three checkpoints")
    wait_for(lambda: manifest(server.home, jid, "step-000003"),
             what="step-000003 synced")
    # Retention keeps the newest two.
    wait_for(lambda: manifest(server.home, jid, "step-000001") is None,
             what="step-000001 pruned")
    m = manifest(server.home, jid, "step-000003")
    files = {f["path"]: f for f in m["files"]}
    assert files["state"]["sha256"] == hashlib.sha256(b"state 3\n").hexdigest()
    assert files["state"]["size"] == 8

    server.request("POST", f"/v1/jobs/{jid}/evict", params={"grace": "1s"})
    job = server.wait_state(jid, "succeeded")
    a = job["attempts_detail"]
    assert [x["state"] for x in a] == ["preempted", "succeeded"]
    assert a[0]["checkpoint"] == "step-000003"
    assert a[0]["useful_task_ms"] > 0  # work up to step 3 was kept
    log = server.logs(jid, attempt=2)
    assert "kiln: resuming from checkpoint step-000003" in log
    assert "resumed with state 3" in log
    outs = {o["name"]: o for o in job["outputs"]}
    assert set(outs) == {"final_weights.bin", "sub/m.json"}
    assert outs["final_weights.bin"]["sha256"] == hashlib.sha256(b"weights\n").hexdigest()
    assert outs["final_weights.bin"]["size"] == 8
    assert outs["final_weights.bin"]["url"].endswith(f"/{jid}/outputs/final_weights.bin")
    stored = server.home / "blobs" / str(jid) / "outputs" / "final_weights.bin"
    assert stored.read_bytes() == b"weights\n"


def test_corrupt_checkpoint_is_skipped_with_a_warning(server, tmp_path):
    # step-000002 is written once step-000001 is in the store: committed
    # together, the older would be skipped for the newer, as it should.
    first, gate = tmp_path / "first", tmp_path / "gate"
    script = COMMIT + (
        'if [ "$KILN_ATTEMPT" = 1 ]; then '
        f'  ck step-000001 one; while [ ! -e {first} ]; do sleep 0.05; done; '
        '  ck step-000002 two; '
        f'  while [ ! -e {gate} ]; do sleep 0.05; done; exit 1; '
        'fi; echo "resumed with $(cat $KILN_RESUME_FROM/state)"')
    jid = server.submit(job_yaml("corrupt", ["/bin/sh", "-c", script],
                                 retries=1, backoff="1s",
                                 checkpoint={"keep": 3}))
    wait_for(lambda: manifest(server.home, jid, "step-000001"),
             what="step-000001 synced")
    first.touch()
    wait_for(lambda: manifest(server.home, jid, "step-000002"),
             what="step-000002 synced")
    # Flip one byte of the newest checkpoint in the store.
    blob = server.home / "blobs" / str(jid) / "checkpoints" / "step-000002" / "state"
    data = bytearray(blob.read_bytes())
    data[0] ^= 0x01
    blob.write_bytes(bytes(data))
    gate.touch()
    server.wait_state(jid, "succeeded")
    log = server.logs(jid, attempt=2)
    assert "checkpoint step-000002 skipped" in log
    assert "resuming from checkpoint step-000001" in log
    assert "resumed with one" in log
    assert "step-000002" in (server.home / "server.log").read_text()


def test_final_checkpoint_written_on_eviction_is_synced(server):
    # The task writes its last checkpoint only when told to stop.
    script = COMMIT + ('trap \'ck step-000009 final; exit 143\' TERM; '
                       'if [ -n "$KILN_RESUME_FROM" ]; then exit 0; fi; '
                       'echo ready; sleep 300 & wait')
    jid = server.submit(job_yaml("last", ["/bin/sh", "-c", script],
                                 preemptible=True))
    wait_for(lambda: "ready" in server.logs(jid), what="the task")
    server.request("POST", f"/v1/jobs/{jid}/evict")
    job = server.wait_state(jid, "succeeded")
    assert job["attempts_detail"][0]["checkpoint"] == "step-000009"
    assert manifest(server.home, jid, "step-000009")
    assert "resuming from checkpoint step-000009" in server.logs(jid, attempt=2)


def test_kill9_during_upload_never_shows_half_a_checkpoint(server, tmp_path):
    gate = tmp_path / "gate"
    # 8 files of 48 MiB: long enough to be caught mid-upload.
    script = ('d="$KILN_CHECKPOINT_DIR/step-000001"; mkdir -p "$d.tmp"; '
              'for i in 1 2 3 4 5 6 7 8; do '
              '  head -c 50331648 /dev/urandom > "$d.tmp/part-$i"; done; '
              'mv "$d.tmp" "$d"; '
              f'while [ ! -e {gate} ]; do sleep 0.05; done')
    jid = server.submit(job_yaml("big", ["/bin/sh", "-c", script],
                                 checkpoint={"keep": 3}))
    store = server.home / "blobs" / str(jid) / "checkpoints" / "step-000001"

    def mid_upload():
        return store.exists() and any(store.iterdir()) and \
            not (store / "MANIFEST.json").exists()
    wait_for(mid_upload, timeout=120, interval=0.005, what="an upload in progress")
    server.kill9()
    # Never a manifest without every file in full.
    assert not (store / "MANIFEST.json").exists()
    server.start()
    m = wait_for(lambda: manifest(server.home, jid, "step-000001"), timeout=120,
                 what="the upload to be redone")
    assert len(m["files"]) == 8
    for f in m["files"]:
        assert (store / f["path"]).stat().st_size == f["size"] == 50331648
    gate.touch()
    server.wait_state(jid, "succeeded")


def open_gates(gates, conditions):
    """The task waits on files under gates, since its sandbox hides the
    server's store and log: a thread makes each (name, condition) gate
    once its condition holds, in order."""
    def run():
        deadline = time.monotonic() + 60
        for name, condition in conditions:
            while not condition() and time.monotonic() < deadline:
                time.sleep(0.05)
            (gates / name).parent.mkdir(parents=True, exist_ok=True)
            (gates / name).touch()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_files_go_ahead_of_the_commit(server, tmp_path):
    # Each file the task closes inside step-000001.tmp is sent while it
    # writes the next; the task waits to see each one in the store before
    # going on (closing it again meanwhile: a close before the server
    # follows the new directory is not seen). The last file is rewritten
    # after it went, so it goes again, ahead of the commit or with it.
    blobs = server.home / "blobs"
    gates = tmp_path / "gates"
    gates.mkdir()
    gates.chmod(0o777)
    script = (
        'd="$KILN_CHECKPOINT_DIR/step-000001"; '
        f's="{gates}"; '
        'seen() { n=0; while [ ! -e "$s/$1" ]; do : >> "$d.tmp/$1"; '
        '  n=$((n+1)); [ $n -gt 1200 ] && exit 3; sleep 0.05; done; }; '
        'mkdir -p "$d.tmp/opt"; '
        'head -c 1048576 /dev/urandom > "$d.tmp/a.bin"; seen a.bin; '
        'echo moments > "$d.tmp/opt/b.bin"; seen opt/b.bin; '
        'echo "moments, again" > "$d.tmp/opt/b.bin"; '
        'mv "$d.tmp" "$d"; sleep 300 & wait')
    jid = server.submit(job_yaml("ahead", ["/bin/sh", "-c", script],
                                 preemptible=True))
    store = blobs / str(jid) / "checkpoints" / "step-000001"
    open_gates(gates, [(n, lambda n=n: (store / n).exists())
                       for n in ("a.bin", "opt/b.bin")])
    m = wait_for(lambda: manifest(server.home, jid, "step-000001"),
                 what="step-000001 synced")
    files = {f["path"]: f for f in m["files"]}
    assert set(files) == {"a.bin", "opt/b.bin"}
    store = blobs / str(jid) / "checkpoints" / "step-000001"
    assert files["a.bin"]["sha256"] == \
        hashlib.sha256((store / "a.bin").read_bytes()).hexdigest()
    assert files["opt/b.bin"]["sha256"] == \
        hashlib.sha256(b"moments, again\n").hexdigest()
    assert (store / "opt" / "b.bin").read_bytes() == b"moments, again\n"
    wait_for(lambda: re.search(r"checkpoint step-000001 synced \(2 files, "
                               r"[12] sent before the commit",
                               (server.home / "server.log").read_text()),
             what="the sync's log line")
    server.request("POST", f"/v1/jobs/{jid}/cancel")


def test_a_failing_store_stops_files_going_ahead(server, tmp_path):
    # The store cannot be written (its root is under a regular file): the
    # first file sent ahead fails, and the others wait for the commit
    # instead of failing one by one; the commit's upload then fails too.
    (tmp_path / "not-a-dir").write_text("")
    store = f"file://{tmp_path}/not-a-dir/blobs"
    log = server.home / "server.log"
    gates = tmp_path / "gates"
    gates.mkdir()
    gates.chmod(0o777)
    open_gates(gates, [("sent", lambda: "before its commit" in log.read_text())])
    script = (
        'd="$KILN_CHECKPOINT_DIR/step-000001"; mkdir -p "$d.tmp"; '
        'echo a > "$d.tmp/a.bin"; n=0; '
        f'while [ ! -e {gates}/sent ]; do : >> "$d.tmp/a.bin"; '
        '  n=$((n+1)); [ $n -gt 1200 ] && exit 3; sleep 0.05; done; '
        'for f in b c d; do echo $f > "$d.tmp/$f.bin"; sleep 0.3; done; '
        'mv "$d.tmp" "$d"; sleep 300 & wait')
    jid = server.submit(job_yaml("down", ["/bin/sh", "-c", script],
                                 checkpoint={"store": store}))
    wait_for(lambda: "checkpoint sync failed" in log.read_text(),
             what="the commit's upload to fail")
    text = log.read_text()
    assert text.count("before its commit") == 1, text
    assert f"job {jid}: sending step-000001/a.bin before its commit" in text
    server.request("POST", f"/v1/jobs/{jid}/cancel")


def test_jobs_without_checkpoints_are_not_synced(server):
    # Neither preemptible nor with a checkpoint section: the directories
    # are there for the task (its sandbox hides where they live), empty,
    # and nothing is uploaded.
    script = ('echo "$KILN_CHECKPOINT_DIR $KILN_OUTPUT_DIR"; '
              'test -z "$(ls -A "$KILN_CHECKPOINT_DIR")" && '
              'test -z "$(ls -A "$KILN_OUTPUT_DIR")"')
    jid = server.submit(job_yaml("plain", ["/bin/sh", "-c", script]))
    job = server.wait_state(jid, ("succeeded", "failed"))
    assert job["state"] == "succeeded", server.logs(jid)
    assert not (server.home / "blobs" / str(jid)).exists()
