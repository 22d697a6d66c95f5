"""Long transfers show their progress: a pull on a terminal (nothing
when not one), and a running job its checkpoints as they are synced:
the newest synced one and when the task committed it, and the one being
written with the bytes of it already sent ahead of its commit."""
import os
import shutil
import subprocess

from conftest import KILN, job_yaml, wait_for

MiB = 1 << 20


def test_pull_shows_progress_on_a_terminal_only(server, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    for i in range(5):
        (model / f"w{i}.bin").write_bytes(os.urandom(64 * MiB))
    server.cli("model", "push", str(model), "--name", "big", check=True,
               timeout=300)
    key = tmp_path / "key"
    server.cli("model", "keygen", "--out", str(key), check=True)
    trusted = server.home / "keys" / "trusted"
    trusted.mkdir(parents=True, exist_ok=True)
    shutil.copy(f"{key}.pub", trusted / "key.pub")
    server.cli("model", "sign", "big@1", "--key", str(key), check=True)
    env = dict(os.environ, KILN_HOME=str(server.home), KILN_SERVER=server.url)
    env.pop("KILN_TOKEN", None)
    pull = f"{KILN} model pull big@1 {tmp_path / 'shown'}"
    # script(1) gives the pull a pseudo-terminal and copies what it wrote.
    res = subprocess.run(["script", "-qefc", pull, "/dev/null"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.replace("\r", "\n").splitlines()
    moving = [ln for ln in lines if ln.startswith("pulling ")]
    assert len(moving) >= 2 and any("/s, ETA " in ln for ln in moving), \
        res.stdout
    assert "(100%)" in moving[-1] and "/s in " in moving[-1], moving
    res = subprocess.run(pull.replace("shown", "quiet").split(), env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "pulling" not in res.stderr, res.stderr


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
