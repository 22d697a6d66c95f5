"""Each step's attempts and cost in `kiln workflow show`: every job a
step ran is kept (retries of the step and of the run), survives a server
restart, and is priced as the cost ledger prices it. And a register step
whose end the server did not live to record adopts the version it made
instead of registering another."""
import json
import sqlite3
import subprocess

import pytest

from conftest import Server, kill_processes_under
from test_cost import CATALOG, same
from test_pipeline import add_signer, prepare_train
from test_workflows import get, run, sh, steps, wait_run, write_workflow


@pytest.fixture
def priced(tmp_path):
    """One local node with two priced GPUs (Test_G2 on demand: $10 per
    GPU-second), so that milliseconds of a test job cost cents."""
    cat = tmp_path / "catalog.csv"
    cat.write_text(CATALOG)
    s = Server(tmp_path / "home", gpus="2xH100-80GB",
               extra=["--node-sku", "Test_G2", "--catalog", str(cat),
                      "--health-interval", "0"])
    s.home.mkdir()
    s.start()
    yield s
    s.stop()
    kill_processes_under(s.home)


def ledger_by_job(server):
    out = server.cli("cost", "--by", "job", "-o", "json", check=True).stdout
    return {int(r["key"]): r for r in json.loads(out)["rows"]}


def history(step):
    return [(a["attempt"], a["job"], a["outcome"])
            for a in step["attempt_history"]]


def show_table(server, rid):
    out = server.cli("workflow", "show", str(rid), check=True).stdout
    return {line.split()[0]: line.split() for line in out.splitlines()
            if line.split()}, out


def test_attempts_and_cost_across_step_retry_run_retry_and_restart(
        priced, tmp_path):
    s = priced
    count, fixed = tmp_path / "count", tmp_path / "fixed"
    # flaky fails its first job and succeeds on the step's retry; gate
    # fails (stopping the run) until the file is there.
    flaky = (f"n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); "
             f"echo $n > {count}; [ $n -ge 2 ]")
    text = (
        "kind: Workflow\nname: priced\nsteps:\n"
        "  - name: flaky\n    on_failure: retry\n    retries: 1\n"
        f"    job: {{command: {sh(flaky)}, resources: {{gpus: 1}}}}\n"
        "  - name: gate\n    needs: [flaky]\n"
        f"    job: {{command: {sh(f'test -e {fixed}')}, "
        "resources: {gpus: 1}}\n"
        "  - name: cpu\n    needs: [flaky]\n"
        "    job: {command: [/bin/true]}\n")
    rid = run(s, write_workflow(tmp_path, text))
    w = wait_run(s, rid)
    assert w["state"] == "failed", w
    st = steps(w)
    flaky_jobs = [a["job"] for a in st["flaky"]["attempt_history"]]
    assert st["flaky"]["attempts"] == 2 and len(flaky_jobs) == 2
    assert history(st["flaky"]) == [(1, flaky_jobs[0], "failed"),
                                    (2, flaky_jobs[1], "succeeded")]
    assert st["flaky"]["job"] == flaky_jobs[1]
    first_gate = st["gate"]["job"]
    assert history(st["gate"]) == [(1, first_gate, "failed")]

    # The record is the store's: a restart shows the same.
    s.stop()
    s.start()
    again = steps(get(s, rid))
    for name in ("flaky", "gate", "cpu"):
        assert again[name]["attempt_history"] == st[name]["attempt_history"]

    # A retried run keeps the failed step's first job listed.
    fixed.touch()
    assert s.cli("workflow", "retry", str(rid)).returncode == 0
    w = wait_run(s, rid)
    assert w["state"] == "succeeded", w
    st = steps(w)
    second_gate = st["gate"]["job"]
    assert second_gate != first_gate
    assert st["gate"]["attempts"] == 1  # counts since the run's retry
    assert history(st["gate"]) == [(1, first_gate, "failed"),
                                   (2, second_gate, "succeeded")]
    assert history(st["flaky"])[1] == (2, flaky_jobs[1], "succeeded")

    # Each cost is the ledger's, for every job of the step: the failed
    # attempts' GPU time too.
    ledger = ledger_by_job(s)
    for name, jobs in (("flaky", flaky_jobs),
                       ("gate", [first_gate, second_gate])):
        want = sum(ledger[j]["cost_usd"] for j in jobs)
        assert want > 0 and all(ledger[j]["cost_usd"] > 0 for j in jobs)
        assert same(st[name]["cost_usd"], want), (name, st[name], ledger)
        assert same(st[name]["gpu_seconds"],
                    sum(ledger[j]["gpu_seconds"] for j in jobs))
        assert st[name]["cost_unpriced"] is False
        for a in st[name]["attempt_history"]:
            assert same(a["cost_usd"], ledger[a["job"]]["cost_usd"])
            assert a["ended_at_ms"] >= a["started_at_ms"] > 0
    # A job without GPUs has no GPU time to pay for.
    assert st["cpu"]["cost_usd"] == 0 and st["cpu"]["job"] not in ledger
    assert same(w["cost_usd"], st["flaky"]["cost_usd"] +
                st["gate"]["cost_usd"])

    table, out = show_table(s, rid)
    assert f"cost:      ${w['cost_usd']:.2f} (" in out, out
    assert table["flaky"][:5] == ["flaky", "succeeded", "-", table["flaky"][3],
                                  "2"]
    assert table["flaky"][5:7] == [f"{flaky_jobs[0]},{flaky_jobs[1]}",
                                   f"${st['flaky']['cost_usd']:.2f}"]
    assert table["gate"][4:7] == ["1", f"{first_gate},{second_gate}",
                                  f"${st['gate']['cost_usd']:.2f}"]
    as_json = json.loads(s.cli("workflow", "show", str(rid), "-o", "json",
                               check=True).stdout)["workflow"]
    assert steps(as_json)["gate"]["attempt_history"] == \
        st["gate"]["attempt_history"]


def reopen_register(db_path, rid, forget_alias_and_signature,
                    step_state="running"):
    """The store as a server killed inside the register step leaves it:
    the version made (with its alias and signature, or not yet), the
    step's attempt recorded as begun, its end not, the step running (or
    pending, as a server that did the step on its event loop left it);
    the step after it not started."""
    db = sqlite3.connect(db_path)
    idx = {name: i for i, name in db.execute(
        "SELECT idx, name FROM workflow_steps WHERE run_id = ?", (rid,))}
    db.execute("UPDATE workflow_runs SET state = 'running', reason = NULL,"
               " ended_at = 0 WHERE id = ?", (rid,))
    db.execute("UPDATE workflow_steps SET state = ?, attempts = ?,"
               " ended_at = 0, reason = NULL,"
               " metrics_json = NULL WHERE run_id = ? AND idx = ?",
               (step_state, int(step_state == "running"), rid,
                idx["register"]))
    db.execute("UPDATE workflow_attempts SET outcome = NULL, ended_at = 0"
               " WHERE run_id = ? AND idx = ?", (rid, idx["register"]))
    db.execute("UPDATE workflow_steps SET state = 'pending', attempts = 0,"
               " job_id = 0, started_at = 0, ended_at = 0, reason = NULL"
               " WHERE run_id = ? AND idx = ?", (rid, idx["after"]))
    db.execute("DELETE FROM workflow_attempts WHERE run_id = ? AND idx = ?",
               (rid, idx["after"]))
    if forget_alias_and_signature:
        db.execute("DELETE FROM model_aliases WHERE name = 'tiny'")
        db.execute("DELETE FROM model_signatures WHERE name = 'tiny'")
    db.commit()
    db.close()


@pytest.mark.parametrize("forget_alias_and_signature, step_state", [
    (False, "running"), (True, "running"), (False, "pending")])
def test_register_step_interrupted_adopts_its_version_on_restart(
        server, tmp_path, forget_alias_and_signature, step_state):
    signer = add_signer(server, tmp_path / "ops")
    text = prepare_train(
        "  - name: register\n    needs: [train]\n"
        f"    register: {{from: train, model: tiny, alias: prod, "
        f"signer: {signer}}}\n"
        "  - name: after\n    needs: [register]\n"
        "    job: {command: [/bin/true]}\n")
    rid = run(server, write_workflow(tmp_path, text))
    w = wait_run(server, rid)
    assert w["state"] == "succeeded", json.dumps(w["steps"])
    reg = steps(w)["register"]
    assert reg["model"] == "tiny@1"
    assert history(reg) == [(1, None, "succeeded")]
    assert reg["cost_usd"] is None
    first_after = steps(w)["after"]["job"]

    server.stop()
    reopen_register(server.home / "kiln.db", rid, forget_alias_and_signature,
                    step_state)
    server.start()
    w = wait_run(server, rid)
    assert w["state"] == "succeeded", json.dumps(w["steps"])
    reg = steps(w)["register"]
    # The version made before the crash, not a second one.
    assert reg["model"] == "tiny@1", reg
    assert reg["reason"].startswith(
        f"registered tiny@1 from job {steps(w)['train']['job']} of step "
        "train; alias prod; signed by ops, key ")
    assert reg["reason"].endswith(
        "(trusted); adopted after a server restart"), reg["reason"]
    assert reg["metrics"] == {"version": 1}
    assert history(reg) == [(1, None, "succeeded")]
    model = server.request("GET", "/v1/models/tiny").json()
    assert [v["version"] for v in model["versions"]] == [1]
    assert [(a["alias"], a["version"]) for a in model["aliases"]] == [
        ("prod", 1)]
    v1 = server.request("GET", "/v1/models/tiny@1").json()
    assert len(v1["signatures"]) == 1 and v1["trusted"]
    server.cli("model", "verify", "tiny@prod", check=True)
    # The run went on past the register step.
    after = steps(w)["after"]
    assert after["state"] == "succeeded" and after["job"] != first_after

    table, _ = show_table(server, rid)
    assert table["register"][5:7] == ["-", "-"], table["register"]
