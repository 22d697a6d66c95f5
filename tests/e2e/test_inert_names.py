"""Names and text from users stay inert where kiln writes them: a
checkpoint name cannot forge server log lines, `kiln logs` cannot drive
the terminal it prints to (unless --raw), pipes get the exact bytes, token
names are checked, and CSV cells are never formulas."""
import csv
import io
import os
import pty
import select
import subprocess

from conftest import KILN, job_yaml, wait_for

FORGED = "2026-12-03T00:00:00Z kiln: admin token rotated"
HOSTILE = b"\x1b[2J\x1b]0;pwned\x07 done\n"


def test_checkpoint_name_cannot_forge_a_log_line(server):
    name = "x\n" + FORGED
    script = ('d="$KILN_CHECKPOINT_DIR/$NAME"; mkdir -p "$d.tmp"; '
              'echo s > "$d.tmp/state"; mv "$d.tmp" "$d"')
    spec = job_yaml("forge", ["/bin/sh", "-c", script],
                    env={"NAME": name}, checkpoint={"keep": 1})
    jid = server.submit(spec)
    server.wait_state(jid, "succeeded")
    log = server.home / "server.log"
    wait_for(lambda: "synced" in log.read_text(errors="replace"),
             what="the checkpoint's sync logged")
    lines = log.read_text(errors="replace").splitlines()
    assert not any(line.startswith(FORGED) for line in lines)
    synced = [line for line in lines if "synced" in line]
    assert any(f"checkpoint x\\n{FORGED} synced" in line for line in synced), \
        synced


def run_on_pty(args, env):
    """Run the CLI with a pseudo-terminal as stdout; its bytes."""
    main, sub = pty.openpty()
    proc = subprocess.Popen([KILN, *args], env=env, stdout=sub,
                            stderr=subprocess.PIPE)
    os.close(sub)
    out = b""
    while True:
        ready, _, _ = select.select([main], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(main, 4096)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=30)
    os.close(main)
    assert proc.returncode == 0, proc.stderr.read()
    return out


def test_logs_on_a_terminal_are_inert(server):
    script = "printf '\\033[2J\\033]0;pwned\\007 done\\n'"
    jid = server.submit(job_yaml("esc", ["/bin/sh", "-c", script]))
    server.wait_state(jid, "succeeded")
    env = dict(os.environ, KILN_HOME=str(server.home))
    env.pop("KILN_SERVER", None)
    env.pop("KILN_TOKEN", None)

    shown = run_on_pty(["logs", str(jid)], env)
    assert b"\x1b" not in shown and b"\x07" not in shown, shown
    assert b"\\x1b[2J\\x1b]0;pwned\\x07 done" in shown, shown

    raw = run_on_pty(["logs", str(jid), "--raw"], env)
    assert b"\x1b[2J\x1b]0;pwned\x07 done" in raw, raw

    # A pipe gets the bytes exactly as the task wrote them.
    piped = subprocess.run([KILN, "logs", str(jid)], env=env,
                           capture_output=True, check=True).stdout
    assert piped == HOSTILE


def test_token_names_are_checked(server):
    r = server.cli("token", "create", "--name", "bad\nname", "--role", "user")
    assert r.returncode != 0
    assert "name must be 1-64 characters" in r.stderr
    assert "\n" == r.stderr[-1] and r.stderr.count("\n") == 1, r.stderr
    for reserved in ("system", "SYSTEM"):
        r = server.cli("token", "create", "--name", reserved, "--role", "user")
        assert r.returncode != 0
        assert "is reserved" in r.stderr, r.stderr
    names = [t["name"] for t in
             server.request("GET", "/v1/tokens").json()["tokens"]]
    assert names == ["admin"]


def test_csv_cells_are_never_formulas(server):
    alice = server.create_token("@SUM.alice", "user")
    jid = server.submit(job_yaml("one", ["/bin/sleep", "0.2"],
                                 resources={"gpus": 1}), token=alice)
    server.wait_state(jid, "succeeded")
    r = server.cli("cost", "--by", "user", "-o", "csv", check=True)
    assert "\"'@SUM.alice\"," in r.stdout, r.stdout
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert rows[0]["user"] == "'@SUM.alice"
    float(rows[0]["cost_usd"])  # numbers stay numbers
