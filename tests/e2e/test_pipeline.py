"""Models made from jobs: `kiln model push --from-job` with lineage back to
the input data's digest, and the workflow's register and deploy steps."""
import hashlib
import json
import shutil

from test_workflows import write_workflow, run, wait_run, steps, sh

DATA = "the quick brown fox jumps over the lazy dog\n"

PREPARE = f"mkdir -p $KILN_OUTPUT_DIR && echo {DATA.strip()} > $KILN_OUTPUT_DIR/data.txt"
TRAIN = ('mkdir -p $KILN_OUTPUT_DIR && cat $KILN_INPUT_DIR/prepare/data.txt | sha256sum > '
         '$KILN_OUTPUT_DIR/weights.bin && '
         'echo \'{"loss": 1.25, "note": "text is dropped"}\' > '
         '$KILN_OUTPUT_DIR/metrics.json')


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def keygen(server, path):
    server.cli("model", "keygen", "--out", str(path), check=True)
    d = server.home / "keys" / "trusted"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(f"{path}.pub", d / f"{path.name}.pub")


def prepare_train(extra=""):
    return ("kind: Workflow\nname: pipe\nsteps:\n"
            f"  - name: prepare\n    job: {{command: {sh(PREPARE)}}}\n"
            "  - name: train\n    needs: [prepare]\n"
            "    inputs: [prepare.outputs/data.txt]\n"
            f"    job: {{command: {sh(TRAIN)}}}\n" + extra)


def test_push_from_job_records_lineage_to_the_data(server, tmp_path):
    run_id = run(server, write_workflow(tmp_path, prepare_train()))
    w = wait_run(server, run_id)
    assert w["state"] == "succeeded", json.dumps(w["steps"])
    st = steps(w)
    prep_job, train_job = st["prepare"]["job"], st["train"]["job"]

    res = server.cli("model", "push", "--from-job", str(train_job),
                     "--name", "tiny", "--alias", "staging")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "tiny@1"
    assert "nothing uploaded" in res.stderr

    v = server.request("GET", "/v1/models/tiny@staging").json()
    m = v["manifest"]
    assert sorted(f["path"] for f in m["files"]) == ["metrics.json",
                                                     "weights.bin"]
    assert m["metrics"] == {"loss": 1.25}
    lin = m["lineage"]
    assert lin["job"] == train_job
    # The stored normalized spec, as the server writes it (sorted, compact).
    spec = json.dumps(server.job(train_job)["spec"], sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    assert lin["spec_sha256"] == sha256(spec)
    assert lin["inputs"] == [{
        "name": "prepare/data.txt", "job": prep_job,
        "url": lin["inputs"][0]["url"], "sha256": sha256(DATA),
        "size": len(DATA)}]
    # The blobs are the registry's own: a pull checks every digest.
    keygen(server, tmp_path / "ops")
    server.cli("model", "sign", "tiny@1", "--key", str(tmp_path / "ops"),
               check=True)
    server.cli("model", "pull", "tiny@1", str(tmp_path / "pulled"),
               check=True)
    assert (tmp_path / "pulled" / "metrics.json").exists()

    res = server.cli("model", "lineage", "tiny@staging")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.splitlines()[0] == "model tiny@1"
    assert "metrics loss=1.25" in out
    assert f"job {train_job} (" in out
    assert f"job {prep_job} (" in out
    assert f"input prepare/data.txt " in out
    assert f"sha256:{sha256(DATA)}" in out
    # prepare had no inputs: the chain ends at the data.
    assert out.rstrip().endswith("inputs none")


def test_push_from_job_refusals(server, tmp_path):
    r = server.request("POST", "/v1/models/tiny/from-job", json={"job": 999})
    assert r.status_code == 404 and "no job 999" in r.text
    j = server.submit("kind: Job\nname: quiet\ncommand: [/bin/true]\n")
    server.wait_state(j, ("succeeded",))
    res = server.cli("model", "push", "--from-job", str(j), "--name", "tiny")
    assert res.returncode == 1
    assert f"job {j} left no outputs" in res.stderr
    res = server.cli("model", "push", "--from-job", "x1", "--name", "tiny")
    assert res.returncode == 2 and "not a job id" in res.stderr
