"""A deployment spec's revalidate: section, end to end: `kiln deploy`
ships the evaluation job file beside the spec, the server sets the
re-validation of the alias the deployment serves (owned by it), a failing
threshold fires model_revalidation_failed and rolls the alias back (and
the deployment with it), an update changes it, a delete removes it, and
bad specs are refused with file:line:column."""
import json

from conftest import wait_for
from test_revalidate import (EVAL_SH, deployment_yaml, evaluations, firing,
                             push, sign, trusted_key, wait_serving)


def revalidations(server, name):
    r = server.request("GET", f"/v1/models/{name}/revalidation")
    assert r.status_code == 200, r.text
    return {v["alias"]: v for v in r.json()["revalidations"]}


def test_deployment_revalidate(server, tmp_path):
    key = trusted_key(server, tmp_path)
    for i in (1, 2):
        push(server, tmp_path, "gpt", i)
        sign(server, key, f"gpt@{i}")
        server.cli("model", "promote", f"gpt@{i}", "prod", check=True)
    server.cli("model", "promote", "gpt@1", "stable", check=True)

    loss, seen = tmp_path / "loss", tmp_path / "seen"
    loss.write_text("2.5")
    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "eval.sh").write_text(EVAL_SH)
    (evals / "eval.yaml").write_text(
        "kind: Job\nname: gpt-eval\ncommand: [\"sh\", \"eval.sh\"]\n"
        "workdir: .\n"
        f"env: {{LOSS: \"{loss}\", SEEN: \"{seen}\"}}\n")
    spec = tmp_path / "chat.yaml"
    base = deployment_yaml("chat", "gpt@prod", replicas=1)
    spec.write_text(base + "revalidate:\n  job: evals/eval.yaml\n"
                    "  every: 1h\n  max: {loss: 1.8}\n  rollback: true\n")

    # A re-validation set by hand on another alias is left alone.
    hand = tmp_path / "hand.yaml"
    hand.write_text("kind: Job\nname: hand\ncommand: [\"true\"]\n")
    server.cli("model", "revalidate", "gpt", "--alias", "stable", "--job",
               str(hand), "--every", "1h", "--max", "loss=9", check=True)

    server.cli("deploy", str(spec), check=True)
    wait_serving(server, "chat", 2, replicas=1)
    got = revalidations(server, "gpt")
    assert (got["prod"]["deployment"], got["prod"]["every_ms"],
            got["prod"]["thresholds"], got["prod"]["rollback"],
            got["prod"]["filename"]) == (
        "chat", 3600_000, {"max": {"loss": 1.8}}, True,
        str(evals / "eval.yaml"))
    assert got["prod"]["source"] == "deployment chat"
    assert (got["stable"]["deployment"], got["stable"]["source"]) == (
        None, "hand")
    shown = server.cli("model", "revalidate", "gpt", check=True).stdout
    assert "deployment chat" in shown and "by hand" in shown

    # A run: the threshold fails, the alias rolls back, the deployment
    # follows it back.
    job = int(server.cli("model", "revalidate", "gpt", "--alias", "prod",
                         "--now", check=True).stdout)
    (alert,) = wait_for(lambda: firing(server, "model_revalidation_failed"),
                        what="the model_revalidation_failed alert")
    assert "loss 2.5 > max 1.8" in alert["summary"]
    assert seen.read_text().splitlines() == ["gpt@2", "weights 2"]
    (ev,) = evaluations(server, "gpt@2")
    assert (ev["job"], ev["outcome"]) == (job, "failed")
    wait_serving(server, "chat", 1, replicas=1)

    # An update changes it (an inline job now); the replicas stay.
    replica_job = server.request(
        "GET", "/v1/deployments/chat").json()["deployment"]["replicas"][0]
    spec.write_text(base + "revalidate:\n  job:\n    command: [\"true\"]\n"
                    "  every: 2h\n  min: {acc: 0.5}\n")
    server.cli("deploy", str(spec), check=True)
    got = revalidations(server, "gpt")["prod"]
    assert (got["deployment"], got["every_ms"], got["thresholds"],
            got["rollback"]) == ("chat", 7200_000, {"min": {"acc": 0.5}},
                                 False)
    after = server.request(
        "GET", "/v1/deployments/chat").json()["deployment"]["replicas"][0]
    assert after["job"] == replica_job["job"]

    # Bad specs: refused with the place and the field.
    bad = tmp_path / "bad.yaml"
    bad.write_text(deployment_yaml("other", "gpt@2", replicas=0) +
                   "revalidate:\n  job: evals/eval.yaml\n  every: 1h\n"
                   "  max: {loss: 1}\n")
    res = server.cli("deploy", str(bad))
    assert res.returncode == 1
    assert ("bad.yaml:11:3: revalidate: needs model: NAME@ALIAS" in
            res.stderr), res.stderr
    bad.write_text(deployment_yaml("other", "gpt@prod", replicas=0) +
                   "revalidate:\n  job: evals/eval.yaml\n  every: 1h\n"
                   "  max: {loss: x}\n")
    res = server.cli("deploy", str(bad))
    assert res.returncode == 1
    assert "bad.yaml:13:15: revalidate.max.loss: must be a finite number" \
        in res.stderr, res.stderr
    bad.write_text(deployment_yaml("other", "gpt@prod", replicas=0) +
                   "revalidate:\n  job: missing.yaml\n  every: 1h\n"
                   "  max: {loss: 1}\n")
    res = server.cli("deploy", str(bad))
    assert res.returncode == 1 and "revalidate.job: cannot read" in \
        res.stderr, res.stderr
    # Another deployment cannot take over chat's.
    bad.write_text(deployment_yaml("other", "gpt@prod", replicas=0) +
                   "revalidate:\n  job: evals/eval.yaml\n  every: 1h\n"
                   "  max: {loss: 1}\n")
    res = server.cli("deploy", str(bad))
    assert res.returncode == 1 and "re-validated by deployment chat" in \
        res.stderr, res.stderr
    assert server.request("GET", "/v1/deployments/other").status_code == 404
    # A job file that is not a job spec is refused, naming it.
    (evals / "broken.yaml").write_text("kind: Job\nname: x\n")
    spec.write_text(base + "revalidate:\n  job: evals/broken.yaml\n"
                    "  every: 1h\n  max: {loss: 1}\n")
    res = server.cli("deploy", str(spec))
    assert res.returncode == 1
    assert f"{evals}/broken.yaml:1:1: missing required field \"command\"" \
        in res.stderr, res.stderr

    # A restart keeps whose it is.
    server.stop()
    server.start()
    got = revalidations(server, "gpt")
    assert (got["prod"]["deployment"], got["stable"]["deployment"]) == (
        "chat", None)

    # Deleting the deployment removes its re-validation, not the other.
    server.cli("undeploy", "chat", check=True)
    assert list(revalidations(server, "gpt")) == ["stable"]
    audit = server.request("GET", "/v1/audit", params={
        "action": "model.revalidate.remove"}).json()["audit"]
    assert [(a["object"], a["detail"]) for a in audit] == [
        ("model/gpt@prod", "chat")]
    assert json.loads(server.cli("model", "revalidate", "gpt", "-o", "json",
                                 check=True).stdout)[0]["alias"] == "stable"
