"""Models made from jobs: `kiln model push --from-job` with lineage back to
the input data's digest, and the workflow's register and deploy steps."""
import hashlib
import json
import shutil
import subprocess

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


def add_signer(server, key, name="ops", grant="roles: [admin]"):
    """A fresh key, trusted, as the server's signer NAME (granted as
    given) through server.yaml in its home; the server restarts to read
    it."""
    keygen(server, key)
    conf = server.home / "server.yaml"
    conf.write_text(f"signers:\n  - name: {name}\n    key-file: {key}\n"
                    f"    {grant}\n")
    conf.chmod(0o600)
    server.stop()
    server.start()
    return name


def prepare_train(extra=""):
    return ("kind: Workflow\nname: pipe\nsteps:\n"
            f"  - name: prepare\n    job: {{command: {sh(PREPARE)}}}\n"
            "  - name: train\n    needs: [prepare]\n"
            "    inputs: [prepare.outputs/data.txt]\n"
            f"    job: {{command: {sh(TRAIN)}}}\n" + extra)


def git_commit(d):
    git = ["git", "-C", str(d)]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["-c", "user.email=t@t", "-c", "user.name=t",
                          "commit", "-q", "--allow-empty", "-m", "x"],
                   check=True)
    return subprocess.run(git + ["rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_push_from_job_records_lineage_to_the_data(server, tmp_path):
    path = write_workflow(tmp_path, prepare_train())
    # The jobs' workdir is the workflow's directory: its code revision.
    revision = git_commit(path.parent)
    run_id = run(server, path)
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
    assert lin["code_revision"] == revision
    assert lin["checkpoint"] is None
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
    assert out.count(f"code revision {revision}") == 2
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
    # An output whose bytes no longer match its outputs manifest is refused.
    w = wait_run(server, run(server, write_workflow(tmp_path, prepare_train())))
    train_job = steps(w)["train"]["job"]
    blob = server.home / "blobs" / str(train_job) / "outputs" / "weights.bin"
    blob.write_text("tampered\n")
    res = server.cli("model", "push", "--from-job", str(train_job),
                     "--name", "tiny")
    assert res.returncode == 1
    assert f"output weights.bin of job {train_job} hashes to" in res.stderr
    assert server.request("GET", "/v1/models/tiny").status_code == 404


def register_steps(signer, threshold, deploy=False):
    text = ("  - name: register\n    needs: [train]\n"
            f"    when: \"train.metrics.loss < {threshold}\"\n"
            "    register: {from: train, model: tiny, alias: prod, "
            f"signer: {signer}}}\n")
    if deploy:
        text += ("  - name: deploy\n    needs: [register]\n"
                 "    deploy: {deployment: chat, from: register}\n")
    return text


def test_register_step_signs_with_lineage_and_deploy_rolls(server, tmp_path):
    key = add_signer(server, tmp_path / "ops")
    path = write_workflow(tmp_path, prepare_train(register_steps(key, 1.8)))
    # A deploy step needs its deployment to exist already.
    wf2 = write_workflow(tmp_path, prepare_train(
        register_steps(key, 1.8, deploy=True)), name="wf2.yaml")
    res = server.cli("workflow", "run", str(wf2))
    assert res.returncode == 1
    assert "deploy: no deployment named chat" in res.stderr

    w = wait_run(server, run(server, path))
    assert w["state"] == "succeeded", json.dumps(w["steps"])
    st = steps(w)
    assert st["register"]["state"] == "succeeded"
    assert st["register"]["kind"] == "register"
    assert st["register"]["model"] == "tiny@1"
    assert st["register"]["reason"].startswith(
        f"registered tiny@1 from job {st['train']['job']} of step train; "
        "alias prod; signed by ops, key ")
    assert st["register"]["reason"].endswith("(trusted)")
    # Signed by a trusted key: verify passes, and it leads to the data.
    server.cli("model", "verify", "tiny@prod", check=True)
    out = server.cli("model", "lineage", "tiny@1", check=True).stdout
    assert f"input prepare/data.txt " in out
    assert f"sha256:{sha256(DATA)}" in out
    assert f"job {st['prepare']['job']} (" in out
    assert "code revision none (workdir not in a git repository)" in out

    spec = ("kind: Deployment\nname: chat\nmodel: tiny@1\n"
            "command: [/bin/true]\nreplicas: 0\n")
    r = server.request("POST", "/v1/deployments", data=spec)
    assert r.status_code == 201, r.text
    w = wait_run(server, run(server, wf2))
    assert w["state"] == "succeeded", json.dumps(w["steps"])
    st = steps(w)
    assert st["register"]["model"] == "tiny@2"
    assert st["deploy"]["reason"] == "deployment chat rolled to tiny@2"
    d = server.request("GET", "/v1/deployments/chat").json()["deployment"]
    assert d["spec"]["model"] == "tiny@2", d
    assert d["model_dir"].endswith("/registry/models/tiny/2")
    assert d["generation"] == 2
    shown = server.cli("workflow", "show", str(w["id"]), check=True).stdout
    assert "deployment chat rolled to tiny@2" in shown


def test_when_skips_registration(server, tmp_path):
    key = add_signer(server, tmp_path / "ops")
    path = write_workflow(tmp_path, prepare_train(register_steps(key, 1.0)))
    w = wait_run(server, run(server, path))
    assert w["state"] == "succeeded", json.dumps(w["steps"])
    reg = steps(w)["register"]
    assert reg["state"] == "skipped" and reg["skipped_by_condition"]
    assert "loss = 1.25" in reg["reason"]
    assert "model" not in reg
    r = server.request("GET", "/v1/models/tiny")
    assert r.status_code == 404, r.text


def test_register_step_with_a_bad_key_fails_naming_it(server, tmp_path):
    key = tmp_path / "ops"
    add_signer(server, key)
    # Unknown signers are refused before any job runs.
    other = write_workflow(tmp_path, prepare_train(register_steps("nope", 1.8)),
                           name="other.yaml")
    res = server.cli("workflow", "run", str(other))
    assert res.returncode == 1
    assert "no signer named nope" in res.stderr
    # A key gone since the start fails the step, naming signer and file.
    key.unlink()
    path = write_workflow(tmp_path, prepare_train(register_steps("ops", 1.8)))
    w = wait_run(server, run(server, path))
    assert w["state"] == "failed"
    reg = steps(w)["register"]
    assert reg["state"] == "failed"
    assert reg["reason"].startswith("tiny@1 registered but not signed: "
                                    "signer ops: ")
    assert str(key) in reg["reason"]


REPO = __import__("pathlib").Path(__file__).resolve().parents[2]


def test_lineage_of_the_example_model_leads_to_its_data(server, tmp_path):
    """examples/train/train.py, small, fed its corpus by a prepare step:
    the registered model's lineage names the checkpoint, the corpus's
    digest and the job that produced it."""
    # A copy the task's user can read wherever the checkout lies.
    work = tmp_path / "train"
    __import__("shutil").copytree(REPO / "examples" / "train", work)
    corpus = work / "data" / "gpl-3.txt"
    train = work / "train.py"
    prepare = f"mkdir -p $KILN_OUTPUT_DIR && cp {corpus} $KILN_OUTPUT_DIR/corpus.txt"
    fit = (f"exec /usr/bin/python3 {train} --data $KILN_INPUT_DIR/prepare/corpus.txt "
           "--steps 20 --checkpoint-every 10 --log-every 100 --batch 4 "
           "--context 32 --dim 32 --layers 1 --heads 2")
    key = add_signer(server, tmp_path / "ops")
    text = ("kind: Workflow\nname: example\nsteps:\n"
            f"  - name: prepare\n    job: {{command: {sh(prepare)}}}\n"
            "  - name: train\n    needs: [prepare]\n"
            "    inputs: [prepare.outputs/corpus.txt]\n"
            f"    job: {{command: {sh(fit)}, checkpoint: {{every: 1s}},"
            " env: {OMP_NUM_THREADS: \"1\"}}\n"
            "  - name: register\n    needs: [train]\n"
            "    register: {from: train, model: gpt, "
            f"signer: {key}}}\n")
    w = wait_run(server, run(server, write_workflow(tmp_path, text)),
                 timeout=120)
    assert w["state"] == "succeeded", json.dumps(w["steps"])
    st = steps(w)
    assert st["register"]["model"] == "gpt@1"
    lin = server.request("GET", "/v1/models/gpt@1/lineage").json()
    assert lin["metrics"]["steps"] == 20
    job = lin["lineage"]
    assert job["job"] == st["train"]["job"]
    assert job["checkpoint"]["name"] == "step-000020"
    manifest = (server.home / "blobs" / str(job["job"]) / "checkpoints" /
                "step-000020" / "MANIFEST.json")
    assert job["checkpoint"]["manifest_sha256"] == hashlib.sha256(
        manifest.read_bytes()).hexdigest()
    data = job["inputs"][0]
    assert data["sha256"] == hashlib.sha256(corpus.read_bytes()).hexdigest()
    assert data["produced_by"]["job"] == st["prepare"]["job"]
    assert data["produced_by"]["inputs"] == []
    out = server.cli("model", "lineage", "gpt@1", check=True).stdout
    assert f"checkpoint step-000020 manifest sha256:{job['checkpoint']['manifest_sha256']}" in out
    assert f"sha256:{data['sha256']}" in out
