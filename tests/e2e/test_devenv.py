"""Dev environments: stopped when idle after a warning, stopped at
max_duration, and started again with the files of their home."""
import json
import time
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import wait_for

# The environments' idle_timeout, in seconds: long enough for Python to
# start on a loaded machine (a start counts as use, and the script's
# first sample says busy), short for the tests that wait it out.
IDLE_S = 3

# Says whether its home holds what the last start left, writes it, keeps
# its simulated GPU busy until GATE exists, then idle.
ENV_SCRIPT = (
    "import os, time\n"
    "home = os.environ['HOME']\n"
    "notes = os.path.join(home, 'notes.txt')\n"
    "p = os.environ['KILN_SIM_GPU_USAGE']\n"
    "def use(u):\n"
    "    with open(p + '.tmp', 'w') as f:\n"
    "        f.write('memory_bytes 1000\\nutilization %s\\n' % u)\n"
    "    os.rename(p + '.tmp', p)\n"
    "if os.path.exists(notes):\n"
    "    print('found:', open(notes).read(), flush=True)\n"
    "else:\n"
    "    print('fresh home', flush=True)\n"
    "    with open(notes, 'w') as f:\n"
    "        f.write('remember ' + os.environ['KILN_JOB_ID'])\n"
    "print('home is', home, flush=True)\n"
    "use(0.9)\n"
    "while not os.path.exists(os.environ['GATE']):\n"
    "    time.sleep(0.1)\n"
    "use(0.0)\n"
    "while True:\n"
    "    time.sleep(1)\n")


def devenv_yaml(name, gate, **fields):
    lines = ["kind: DevEnvironment", f"name: {name}",
             f"command: {json.dumps(['/usr/bin/python3', '-c', ENV_SCRIPT])}",
             "resources: {gpus: 1}",
             f"env: {json.dumps({'GATE': str(gate)})}"]
    lines += [f"{k}: {json.dumps(v)}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"


def events(s):
    return [json.loads(line) for line in
            s.request("GET", "/v1/events").text.splitlines() if line]


@pytest.fixture
def s(gpu_server):
    return gpu_server


@pytest.fixture
def gate_dir():
    """Where a test tells its task to go idle: a directory its user can
    reach."""
    gate = Path(tempfile.mkdtemp(prefix="kiln-devenv-"))
    gate.chmod(0o755)
    yield gate
    shutil.rmtree(gate)


def test_idle_stop_warns_and_home_comes_back(s, gate_dir):
    gate = gate_dir / "idle"
    spec = devenv_yaml("box", gate, idle_timeout=f"{IDLE_S}s")
    first = s.submit(spec, filename="box.yaml")
    s.wait_state(first, "running")
    wait_for(lambda: "home is" in s.logs(first), what="the first start")
    assert "fresh home" in s.logs(first)
    # Busy GPUs keep it up past its idle_timeout, the warning's lead (a
    # fifth of it) and a tick.
    time.sleep(IDLE_S * 1.2 + 2)
    assert s.job(first)["state"] == "running", s.job(first)

    gate.write_text("")
    job = s.wait_state(first, ("cancelled", "failed", "succeeded"), timeout=45)
    assert job["state"] == "cancelled", job
    assert job["reason"].startswith(f"stopped: idle for {IDLE_S}s"), \
        job["reason"]
    ev = events(s)
    kinds = [e["type"] for e in ev if e.get("job") == first]
    assert "devenv.idle_warning" in kinds, kinds
    warning = next(e for e in ev if e["type"] == "devenv.idle_warning")
    assert warning["name"] == "box" and warning["stops_in_ms"] > 0
    assert kinds.index("devenv.idle_warning") < kinds.index("devenv.home_saved")
    saved = next(e for e in ev if e["type"] == "devenv.home_saved")
    assert saved["files"] == 1, saved
    audit = s.request("GET", "/v1/audit").json()["audit"]
    stop = [a for a in audit if a["action"] == "devenv.stop"]
    assert stop and stop[0]["actor"] == "system"
    assert stop[0]["object"] == f"job/{first}"

    # The next start of the same name resumes its files; the gate is
    # still there, so it goes idle at once and stops again.
    second = s.submit(spec, filename="box.yaml")
    s.wait_state(second, "running")
    wait_for(lambda: "home is" in s.logs(second), what="the second start")
    assert f"found: remember {first}" in s.logs(second)
    assert f"home.{second}.1" in s.logs(second)
    s.wait_state(second, "cancelled", timeout=45)

    # kiln cost: how long each sat idle, and what the first's idle stop
    # saved: its GPU from the stop to the second start.
    cost = s.request("GET", "/v1/cost").json()["devenvs"]
    rows = {r["job"]: r for r in cost["rows"]}
    one, two = s.job(first), s.job(second)
    assert rows[first]["stopped_for"] == "idle"
    assert rows[first]["gpus"] == 1
    assert IDLE_S - 1 <= rows[first]["idle_hours"] * 3600 <= 40, rows[first]
    gap_s = (two["started_at_ms"] - one["ended_at_ms"]) / 1000
    assert abs(rows[first]["saved_gpu_hours"] * 3600 - gap_s) < 2, (
        rows[first], gap_s)
    assert cost["total"]["idle_stops"] == 2
    out = s.cli("cost", check=True).stdout
    assert "dev environments:" in out and "box" in out, out
    assert "2 idle stops saved" in out, out


def test_another_owner_gets_a_home_of_its_own(s, gate_dir):
    gate = gate_dir / "idle"
    gate.write_text("")
    alice = s.create_token("alice", "user")
    bob = s.create_token("bob", "user")
    spec = devenv_yaml("box", gate, idle_timeout=f"{IDLE_S}s")
    a = s.submit(spec, token=alice)
    s.wait_state(a, "cancelled", timeout=45)
    wait_for(lambda: "home is" in s.logs(a), what="alice's start")
    b = s.submit(spec, token=bob)
    s.wait_state(b, "cancelled", timeout=45)
    assert "fresh home" in s.logs(b)
    assert "found:" not in s.logs(b)


def test_max_duration_stops_a_busy_environment(s, gate_dir):
    spec = devenv_yaml("long", gate_dir / "never", idle_timeout="1h",
                       max_duration="3s")
    jid = s.submit(spec)
    job = s.wait_state(jid, ("cancelled", "failed", "succeeded"), timeout=45)
    assert job["state"] == "cancelled", job
    assert job["reason"] == "stopped: ran for its max_duration of 3s", job


def test_a_bad_field_names_its_place(s, gate_dir):
    spec = devenv_yaml("box", gate_dir / "x", tasks=2)
    r = s.request("POST", "/v1/jobs", data=spec, params={"file": "box.yaml"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["field"] == "tasks"
    assert err["message"] == ('box.yaml:6:1: unknown field "tasks" in dev '
                              'environment')
