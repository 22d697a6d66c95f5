"""Deployments that follow a registry alias, and scheduled re-validation,
end to end: a real kiln server, versions pushed and signed with `kiln
model`, replicas of the tiny HTTP model server that report the
KILN_MODEL_DIR they were started with (which version a replica serves is
read from the replica itself, not only from kiln's account of it), and an
evaluation job (a sh script) whose loss the test controls."""
import json
import shutil
from pathlib import Path

import requests

from conftest import wait_for

MODEL_SERVER = Path(__file__).resolve().parent / "fixtures" / "model_server.py"


def push(server, tmp_path, name, i):
    d = tmp_path / f"{name}-v{i}"
    d.mkdir()
    (d / "weights").write_text(f"weights {i}\n")
    res = server.cli("model", "push", str(d), "--name", name, "-o", "json",
                     check=True)
    return json.loads(res.stdout)["version"]


def trusted_key(server, tmp_path):
    key = tmp_path / "ops"
    server.cli("model", "keygen", "--out", str(key), check=True)
    d = server.home / "keys" / "trusted"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(f"{key}.pub", d / "ops.pub")
    return key


def sign(server, key, ref):
    server.cli("model", "sign", ref, "--key", str(key), check=True)


def deployment_yaml(name, model, replicas=2):
    return (f"kind: Deployment\nname: {name}\nmodel: {model}\n"
            f"command: [\"/usr/bin/python3\", \"{MODEL_SERVER}\"]\n"
            f"env: {{\"READY_DELAY_S\": \"0.1\"}}\nreplicas: {replicas}\n"
            # A probe times out after its period: a loaded machine may
            # miss a few, and these replicas never mean to be unready.
            "readiness: {path: /health, period_s: 0.1, "
            "failure_threshold: 100}\n"
            "backoff: 200ms\nbackoff_max: 2s\n")


def detail(server, name):
    r = server.request("GET", f"/v1/deployments/{name}")
    assert r.status_code == 200, r.text
    return r.json()["deployment"]


def served_versions(server, name, shown=None):
    """{replica: (version it reports, version kiln reports)}, ready ones,
    of the deployment as shown (default: as detail() shows it now)."""
    out = {}
    for r in (shown or detail(server, name))["replicas"]:
        if not r["ready"]:
            continue
        try:
            got = requests.get(f"http://{r['address']}/", timeout=5).json()
        except requests.ConnectionError:
            continue
        out[r["replica"]] = (int(Path(got["model_dir"]).name),
                             r["model_version"])
    return out


def wait_serving(server, name, version, replicas=2):
    def all_on():
        d = detail(server, name)
        got = served_versions(server, name)
        return (d["rollout"] is None and d["model_version"] == version and
                got == {i: (version, version) for i in range(replicas)})
    wait_for(all_on, timeout=40, what=f"{name} serving version {version}")


def firing(server, rule):
    alerts = server.request("GET", "/v1/alerts").json()["alerts"]
    return [a for a in alerts if a["rule"] == rule and a["state"] == "firing"]


def test_deployment_follows_alias(server, tmp_path):
    key = trusted_key(server, tmp_path)
    for i in (1, 2, 3):
        assert push(server, tmp_path, "gpt", i) == i
    sign(server, key, "gpt@1")
    sign(server, key, "gpt@2")
    server.cli("model", "promote", "gpt@1", "prod", check=True)
    r = server.request("POST", "/v1/deployments",
                       data=deployment_yaml("chat", "gpt@prod"))
    assert r.status_code == 201, r.text
    d = r.json()["deployment"]
    assert (d["follows"], d["model_version"]) == ("prod", 1)
    wait_serving(server, "chat", 1)

    # The alias moves: the deployment rolls to version 2, one at a time.
    server.cli("model", "promote", "gpt@2", "prod", check=True)
    seen = []

    def ready_jobs(shown):
        return {(r["replica"], r["job"], r["attempt"])
                for r in shown["replicas"] if r["ready"]}

    def rolled():
        before = detail(server, "chat")
        got = served_versions(server, "chat", before)
        d = detail(server, "chat")
        # (listed ready, answering, the ready list unchanged meanwhile):
        # a replica shown ready may be stopped before it is called, as
        # soon as the one replacing its neighbour is ready, so only
        # silence from a list that held still is a gap in service.
        seen.append((len(ready_jobs(before)), len(got),
                     ready_jobs(before) == ready_jobs(d)))
        return (d["rollout"] is None and
                got == {0: (2, 2), 1: (2, 2)}) or None
    wait_for(rolled, timeout=40, what="chat rolled to gpt@2")
    assert all(listed >= 1 for listed, _, _ in seen), seen
    assert all(answering >= 1 for _, answering, held in seen if held), seen
    shown = server.cli("deployments", "chat", check=True).stdout
    assert "follows:     alias prod (now version 2)" in shown
    rows = server.request("GET", "/v1/audit",
                          params={"action": "deployment.follow"}).json()
    assert [a["detail"] for a in rows["audit"]] == ["gpt@prod: 1 -> 2"]

    # An unsigned version on the alias is not rolled out, and says why.
    server.cli("model", "promote", "gpt@3", "prod", check=True)
    (alert,) = wait_for(lambda: firing(server, "deployment_model_refused"),
                        what="the deployment_model_refused alert")
    assert alert["summary"].startswith(
        "deployment chat does not follow gpt@prod: ")
    assert "gpt@3 is unsigned" in alert["summary"]
    events = server.request("GET", "/v1/events").text.splitlines()
    assert any('"refused"' in e and "gpt@3 is unsigned" in e for e in events)
    d = detail(server, "chat")
    assert d["model_version"] == 2 and d["rollout"] is None
    assert served_versions(server, "chat") == {0: (2, 2), 1: (2, 2)}

    # Rollback takes the alias back to 2: nothing to roll, alert resolved.
    server.cli("model", "rollback", "gpt", "prod", check=True)
    wait_for(lambda: not firing(server, "deployment_model_refused"),
             what="the alert resolved")
    # And back to 1: the replicas follow.
    server.cli("model", "rollback", "gpt", "prod", check=True)
    wait_serving(server, "chat", 1)


EVAL_SH = """set -e
mkdir -p "$KILN_OUTPUT_DIR"
echo "$KILN_MODEL" >> "$SEEN"
cat "$KILN_MODEL_DIR/weights" >> "$SEEN"
printf '{"loss": %s, "note": "text is dropped"}' "$(cat "$LOSS")" \\
  > "$KILN_OUTPUT_DIR/metrics.json"
"""


def evaluations(server, ref):
    r = server.request("GET", f"/v1/models/{ref}/evaluations")
    assert r.status_code == 200, r.text
    return r.json()["evaluations"]


def test_revalidation_alerts_and_rolls_back(server, tmp_path):
    key = trusted_key(server, tmp_path)
    for i in (1, 2):
        push(server, tmp_path, "gpt", i)
        sign(server, key, f"gpt@{i}")
        server.cli("model", "promote", f"gpt@{i}", "prod", check=True)
    r = server.request("POST", "/v1/deployments",
                       data=deployment_yaml("chat", "gpt@prod", replicas=1))
    assert r.status_code == 201, r.text
    wait_serving(server, "chat", 2, replicas=1)

    loss, seen = tmp_path / "loss", tmp_path / "seen"
    loss.write_text("2.5")
    script = tmp_path / "eval.sh"
    script.write_text(EVAL_SH)
    spec = tmp_path / "eval.yaml"
    spec.write_text("kind: Job\nname: gpt-eval\n"
                    f"command: [\"sh\", \"{script}\"]\n"
                    f"env: {{LOSS: \"{loss}\", SEEN: \"{seen}\"}}\n")

    # Bad flags are usage errors, named.
    res = server.cli("model", "revalidate", "gpt", "--alias", "prod",
                     "--job", str(spec), "--every", "1h", "--max", "loss")
    assert res.returncode == 2 and "METRIC=NUMBER" in res.stderr
    res = server.cli("model", "revalidate", "gpt", "--alias", "prod",
                     "--job", str(spec), "--every", "1h")
    assert res.returncode == 1 and "at least one threshold" in res.stderr
    res = server.cli("model", "revalidate", "gpt", "--alias", "prod", "--now")
    assert res.returncode == 1 and "has no re-validation" in res.stderr

    server.cli("model", "revalidate", "gpt", "--alias", "prod", "--job",
               str(spec), "--every", "1h", "--max", "loss=1.8", "--rollback",
               check=True)
    job = int(server.cli("model", "revalidate", "gpt", "--alias", "prod",
                         "--now", check=True).stdout)
    (alert,) = wait_for(lambda: firing(server, "model_revalidation_failed"),
                        what="the model_revalidation_failed alert")
    assert "loss 2.5 > max 1.8" in alert["summary"]
    # The job saw the version under test, in a verified copy.
    assert seen.read_text().splitlines() == ["gpt@2", "weights 2"]
    (ev,) = evaluations(server, "gpt@2")
    assert (ev["job"], ev["outcome"], ev["metrics"], ev["detail"]) == (
        job, "failed", {"loss": 2.5}, "loss 2.5 > max 1.8")
    # Rolled back: the alias, then the deployment that follows it.
    history = json.loads(server.cli("model", "aliases", "gpt", "-o", "json",
                                    check=True).stdout)
    assert [(h["action"], h["from"], h["version"], h["by"])
            for h in history][-1] == ("rollback", 2, 1, "system")
    wait_serving(server, "chat", 1, replicas=1)

    # A passing run (now of version 1) resolves the alert.
    loss.write_text("1.25")
    server.cli("model", "revalidate", "gpt", "--alias", "prod", "--now",
               check=True)
    wait_for(lambda: not firing(server, "model_revalidation_failed"),
             what="the alert resolved")
    (ev,) = evaluations(server, "gpt@prod")
    assert (ev["version"], ev["outcome"], ev["metrics"]) == (
        1, "passed", {"loss": 1.25})
    shown = server.cli("model", "show", "gpt@2", check=True).stdout
    assert "evaluations:" in shown and "loss 2.5 > max 1.8" in shown

    # On a schedule: every second, with no --now.
    server.cli("model", "revalidate", "gpt", "--alias", "prod", "--job",
               str(spec), "--every", "1s", "--max", "loss=1.8", check=True)
    wait_for(lambda: len(evaluations(server, "gpt@1")) >= 3,
             what="scheduled runs")
    assert all(e["outcome"] == "passed" for e in evaluations(server, "gpt@1"))

    # A restart keeps the re-validation and the stored outcomes.
    server.request("POST", "/v1/deployments/chat/scale", json={"replicas": 0})
    server.stop()
    server.start()
    r = server.request("GET", "/v1/models/gpt/revalidation")
    assert r.status_code == 200, r.text
    (kept,) = r.json()["revalidations"]
    assert (kept["alias"], kept["every_ms"], kept["thresholds"],
            kept["rollback"]) == ("prod", 1000, {"max": {"loss": 1.8}}, False)
    assert [e["outcome"] for e in evaluations(server, "gpt@2")] == ["failed"]
