"""A running job shows its checkpoints as they are synced: the newest
synced one and when the task committed it, and the one being written
with the bytes of it already sent ahead of its commit."""
from conftest import job_yaml, wait_for


def test_a_running_job_shows_its_synced_and_next_checkpoints(server,
                                                            tmp_path):
    gates = tmp_path / "gates"
    gates.mkdir()
    gates.chmod(0o777)
    blobs = server.home / "blobs"
    script = (
        f's="{gates}"; c="$KILN_CHECKPOINT_DIR"; '
        'mkdir -p "$c/step-000001.tmp"; echo one > "$c/step-000001.tmp/w"; '
        'mv "$c/step-000001.tmp" "$c/step-000001"; '
        'd="$c/step-000002"; mkdir -p "$d.tmp"; '
        'head -c 1048576 /dev/urandom > "$d.tmp/a.bin"; '
        # Closed again until it is sent: a close before the server
        # follows the new directory is not seen.
        'n=0; while [ ! -e "$s/sent" ]; do : >> "$d.tmp/a.bin"; '
        '  n=$((n+1)); [ $n -gt 1200 ] && exit 3; sleep 0.05; done; '
        'while [ ! -e "$s/go" ]; do sleep 0.05; done; '
        'mv "$d.tmp" "$d"')
    jid = server.submit(job_yaml("progress", ["/bin/sh", "-c", script],
                                 preemptible=True))
    sent = blobs / str(jid) / "checkpoints" / "step-000002" / "a.bin"
    wait_for(sent.exists, timeout=60, what="a.bin sent ahead")
    (gates / "sent").touch()

    def shown():
        a = server.job(jid)["attempts_detail"][0]
        return a if a.get("checkpoint_next") and a.get("checkpoint") else None
    a = wait_for(shown, timeout=60, what="both checkpoints shown")
    assert a["state"] == "running"
    assert a["checkpoint"] == "step-000001" and a["checkpoint_at_ms"] > 0
    assert a["checkpoint_next"] == {"name": "step-000002",
                                    "sent_bytes": 1048576}, a
    text = server.cli("show", str(jid), check=True).stdout
    assert "step-000001 (taken " in text, text
    assert "step-000002, 1.0 MiB sent ahead" in text, text

    (gates / "go").touch()
    job = server.wait_state(jid, ("succeeded", "failed"))
    a = job["attempts_detail"][0]
    assert job["state"] == "succeeded", job["reason"]
    assert a["checkpoint"] == "step-000002" and "checkpoint_next" not in a
