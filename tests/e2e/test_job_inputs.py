"""A job spec's own `inputs:` (docs/registry.md, "A job's inputs"): files
and file:// URLs fetched into $KILN_INPUT_DIR, their digests recorded by
the first attempt, shown by `kiln show -o json`, carried into a model's
lineage, and a later attempt refused when an input changed."""
import hashlib
import json
import subprocess

from conftest import KILN, job_yaml, wait_for
from test_kube_executor import api, start_server  # noqa: F401 (a fixture)
from test_workflows import write_workflow

TRAIN = "0 1 2 3 4 5 6 7 8 9\n"
VOCAB = "a b c\n"


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def project(tmp_path, command, **fields):
    """A spec file in proj/ with a relative input and a file:// URL."""
    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True, exist_ok=True)
    (proj / "data" / "train.txt").write_text(TRAIN)
    shared = tmp_path / "shared"
    shared.mkdir(exist_ok=True)
    (shared / "vocab.txt").write_text(VOCAB)
    lines = ["kind: Job", "name: trainer",
             f"command: {json.dumps(['/bin/sh', '-c', command])}",
             "inputs:", "  - data/train.txt", f"  - file://{shared}/vocab.txt"]
    lines += [f"{k}: {json.dumps(v)}" for k, v in fields.items()]
    spec = proj / "job.yaml"
    spec.write_text("\n".join(lines) + "\n")
    return spec


def kiln(*args, cwd=None):
    """A command that needs no server (validate, render)."""
    return subprocess.run([KILN, *args], capture_output=True, text=True,
                          cwd=cwd, timeout=30)


def submit(server, spec):
    res = server.cli("submit", str(spec))
    assert res.returncode == 0, res.stderr
    return int(res.stdout.strip())


def test_inputs_are_fetched_recorded_and_in_the_lineage(server, tmp_path):
    spec = project(tmp_path,
                   'ls "$KILN_INPUT_DIR" && mkdir -p "$KILN_OUTPUT_DIR" && '
                   'cat "$KILN_INPUT_DIR/train.txt" "$KILN_INPUT_DIR/vocab.txt"'
                   ' > "$KILN_OUTPUT_DIR/weights.bin"')
    jid = submit(server, spec)
    job = server.wait_state(jid, ("succeeded", "failed"))
    assert job["state"] == "succeeded", job["reason"]
    log = server.logs(jid)
    assert "train.txt\nvocab.txt\n" in log, log
    blob = server.home / "blobs" / str(jid) / "outputs" / "weights.bin"
    assert blob.read_text() == TRAIN + VOCAB

    shown = json.loads(server.cli("show", str(jid), "-o", "json",
                                  check=True).stdout)["job"]
    assert shown["inputs"] == [
        {"input": "data/train.txt", "name": "train.txt",
         "url": f"file://{tmp_path}/proj/data/train.txt",
         "sha256": sha256(TRAIN), "size": len(TRAIN), "attempt": 1},
        {"input": f"file://{tmp_path}/shared/vocab.txt", "name": "vocab.txt",
         "url": f"file://{tmp_path}/shared/vocab.txt",
         "sha256": sha256(VOCAB), "size": len(VOCAB), "attempt": 1}]

    # The table shows each input with a short digest and where it came from.
    table = server.cli("show", str(jid), check=True).stdout
    assert (f"  inputs:     train.txt  {len(TRAIN)} B  "
            f"sha256:{sha256(TRAIN)[:16]}…  data/train.txt\n"
            f"              vocab.txt  {len(VOCAB)} B  "
            f"sha256:{sha256(VOCAB)[:16]}…  file://{tmp_path}/shared/vocab.txt\n"
            ) in table, table

    res = server.cli("model", "push", "--from-job", str(jid), "--name", "m")
    assert res.returncode == 0, res.stderr
    lin = server.request("GET", "/v1/models/m@1").json()["manifest"]["lineage"]
    assert lin["inputs"] == [
        {"name": "train.txt", "url": f"file://{tmp_path}/proj/data/train.txt",
         "sha256": sha256(TRAIN), "size": len(TRAIN)},
        {"name": "vocab.txt", "url": f"file://{tmp_path}/shared/vocab.txt",
         "sha256": sha256(VOCAB), "size": len(VOCAB)}]
    out = server.cli("model", "lineage", "m@1", check=True).stdout
    assert (f"input train.txt file://{tmp_path}/proj/data/train.txt "
            f"sha256:{sha256(TRAIN)}") in out, out
    assert f"input vocab.txt file://{tmp_path}/shared/vocab.txt " \
           f"sha256:{sha256(VOCAB)}" in out, out


def test_an_input_changed_under_a_resumed_attempt_is_refused(server, tmp_path):
    go = tmp_path / "go"
    spec = project(tmp_path,
                   f'if [ "$KILN_ATTEMPT" = 1 ]; then echo ready; '
                   f'while [ ! -e {go} ]; do sleep 0.05; done; fi; echo ran',
                   preemptible=True)
    jid = submit(server, spec)
    # The first attempt's fetch is recorded before its command runs.
    job = wait_for(lambda: (lambda j: j if j.get("inputs") and all(
        "sha256" in i for i in j["inputs"]) else None)(server.job(jid)),
        what="the first attempt's digests")
    assert job["inputs"][0]["sha256"] == sha256(TRAIN)
    wait_for(lambda: "ready" in server.logs(jid), what="attempt 1 to run")

    (tmp_path / "proj" / "data" / "train.txt").write_text(TRAIN + "10\n")
    r = server.request("POST", f"/v1/jobs/{jid}/evict",
                       params={"grace": "1s"})
    assert r.status_code == 200, r.text
    job = server.wait_state(jid, ("failed", "succeeded"))
    assert job["state"] == "failed"
    changed = sha256(TRAIN + "10\n")
    assert job["reason"] == (
        f"rank 0: input changed: train.txt is sha256:{changed[:12]}, "
        f"attempt 1 had sha256:{sha256(TRAIN)[:12]}"), job["reason"]
    # The full digests are in the task's log, and the command never ran.
    log = server.logs(jid, attempt=2)
    assert changed in log and sha256(TRAIN) in log, log
    assert "ran" not in log
    # The record is the first attempt's still.
    assert server.job(jid)["inputs"][0]["sha256"] == sha256(TRAIN)


def test_a_changed_input_is_not_retried(server, tmp_path):
    train = tmp_path / "proj" / "data" / "train.txt"
    spec = project(tmp_path,
                   f'if [ "$KILN_ATTEMPT" = 1 ]; then echo more >> {train}; '
                   f'exit 3; fi', retries=3, backoff="100ms")
    train.chmod(0o666)  # the task's user changes it
    jid = submit(server, spec)
    job = server.wait_state(jid, ("failed", "succeeded"))
    assert job["state"] == "failed"
    assert [a["exit_code"] for a in job["attempts_detail"]] == [3, 1]
    assert "input changed: train.txt" in job["reason"], job["reason"]
    assert job["retries_used"] == 1


def test_bad_inputs_are_refused_naming_the_place(server, tmp_path):
    # Through the API without the spec file's path: a relative input has
    # no directory to be relative to.
    r = server.request("POST", "/v1/jobs", params={"file": "j.yaml"},
                       data="kind: Job\nname: x\ncommand: [/bin/true]\n"
                            "inputs: [a.txt]\n")
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        "j.yaml:4:10: inputs[0]: \"a.txt\" is relative, and the spec file's "
        "directory is unknown (submit it from a file, or give an absolute "
        "path)")
    spec = tmp_path / "dup.yaml"
    spec.write_text("kind: Job\nname: x\ncommand: [/bin/true]\n"
                    "inputs:\n  - a/x.bin\n  - b/x.bin\n")
    res = server.cli("submit", str(spec))
    assert res.returncode == 1
    assert "dup.yaml:6:5: inputs[1]: lands in $KILN_INPUT_DIR as x.bin" \
        in res.stderr, res.stderr
    # A missing file fails the attempt before the command, naming it.
    spec.write_text("kind: Job\nname: x\ncommand: [/bin/true]\n"
                    "inputs: [missing.bin]\n")
    jid = submit(server, spec)
    job = server.wait_state(jid, ("failed", "succeeded"))
    assert job["reason"] == "rank 0: input missing.bin: cannot fetch it"
    assert "inputs" in job and "sha256" not in job["inputs"][0]
    table = server.cli("show", str(jid), check=True).stdout
    assert "  inputs:     missing.bin  not fetched yet  missing.bin\n" \
        in table, table
    # A workflow step's job file keeps its inputs on the step.
    wf = write_workflow(tmp_path, (
        "kind: Workflow\nname: w\nsteps:\n  - {name: a, job: a.yaml}\n"),
        {"a.yaml": "kind: Job\nname: a\ncommand: [/bin/true]\n"
                   "inputs: [d.txt]\n"})
    res = server.cli("workflow", "run", str(wf))
    assert res.returncode == 1
    assert ("a.yaml:4:10: inputs: a step's inputs go in the step's inputs: "
            "list (steps[0] of") in res.stderr, res.stderr
    # kiln validate refuses it with the server's own words.
    checked = kiln("validate", str(wf))
    assert checked.returncode == 1
    assert checked.stderr.strip() and checked.stderr.strip() in res.stderr, \
        (checked.stderr, res.stderr)


def test_inputs_survive_a_server_restart(server, tmp_path):
    go = tmp_path / "go"
    spec = project(tmp_path, f'while [ ! -e {go} ]; do sleep 0.05; done; '
                             'cat "$KILN_INPUT_DIR/vocab.txt"')
    jid = submit(server, spec)
    wait_for(lambda: all("sha256" in i for i in
                         server.job(jid).get("inputs", [{}])),
             what="the digests")
    server.kill9()
    server.start()
    go.touch()
    job = server.wait_state(jid, ("succeeded", "failed"))
    assert job["state"] == "succeeded", job["reason"]
    assert VOCAB in server.logs(jid)
    assert [i["sha256"] for i in job["inputs"]] == [sha256(TRAIN),
                                                    sha256(VOCAB)]
    assert job["inputs"][0]["url"] == f"file://{tmp_path}/proj/data/train.txt"


def test_pods_cannot_read_the_servers_files(tmp_path, api):  # noqa: F811
    """Under Kubernetes an input is fetched by the pod's shim: a file the
    server alone sees is refused (test_kube_checkpoints.py runs one)."""
    s = start_server(tmp_path, api.port)
    try:
        r = s.request("POST", "/v1/jobs", params={"file": "j.yaml"},
                      data="kind: Job\nname: x\ncommand: [x]\n"
                           "inputs: [/data/a.bin]\n")
        assert r.status_code == 400
        assert r.json()["error"]["message"] == (
            'j.yaml:4:10: inputs[0]: "/data/a.bin" is a file on the server, '
            "which pods cannot read: give a store URL (https://, azure://) "
            f"or a path under the store's directory {s.home}/blobs "
            "(mounted in the pods)")
        assert not api.sent("POST", "/jobs")
    finally:
        s.stop()


def test_validate_and_render_see_inputs(tmp_path):
    spec = project(tmp_path, "true")
    res = kiln("validate", str(spec))
    assert res.returncode == 0, res.stderr
    assert res.stdout == (f"{spec}: ok (job trainer, 1 task, no GPU, "
                          "priority 0, 2 inputs)\n")
    # An inline step job's own inputs: as the server's parser says.
    wf = write_workflow(tmp_path, (
        "kind: Workflow\nname: w\nsteps:\n"
        "  - name: a\n    job: {command: [x], inputs: [d.txt]}\n"))
    res = kiln("validate", str(wf))
    assert res.returncode == 1
    assert res.stderr == (f"{wf}:5:33: steps[0].job.inputs: a step's inputs "
                          "go in the step's inputs: list, not in its job\n")
    # Under Kubernetes render takes inputs as the server does: a file only
    # the server sees is refused (test_kube_checkpoints has the server's
    # side), a store URL reaches the pod's shim as KILN_INPUTS.
    (tmp_path / "j.yaml").write_text(
        "kind: Job\nname: x\ncommand: [x]\ninputs: [/data/a.bin]\n")
    res = kiln("render", "j.yaml", "--executor", "kubernetes", "--image",
               "img:1", cwd=tmp_path)
    assert res.returncode == 1 and not res.stdout
    assert ('j.yaml:4:10: inputs[0]: "/data/a.bin" is a file on the server, '
            "which pods cannot read") in res.stderr, res.stderr
    url = "https://acct.blob.core.windows.net/data/corpus/train.txt"
    (tmp_path / "j.yaml").write_text(
        f"kind: Job\nname: x\ncommand: [x]\ninputs: [{url}]\n")
    res = kiln("render", "j.yaml", "--executor", "kubernetes", "--image",
               "img:1", "-o", "json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    pod = json.loads(res.stdout)[0]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert json.loads(env["KILN_INPUTS"]) == [{
        "input": url, "name": "train.txt", "url": url,
        "store": "https://acct.blob.core.windows.net/data/corpus",
        "blob": "train.txt"}]
    assert env["KILN_INPUT_DIR"] == "/kiln/inputs"


def test_only_a_task_with_inputs_runs_under_the_whole_kiln(server, tmp_path):
    """A task with nothing to fetch starts under kiln-shim, the lean shim
    beside the binary; one with inputs under `kiln shim`, which fetches
    them. Seen by the task as its namespace's init (the shim's child),
    whose command line is the shim's."""
    init = "tr '\\0' ' ' </proc/1/cmdline; echo"
    plain = server.submit(job_yaml("plain", ["/bin/sh", "-c", init]))
    job = server.wait_state(plain, ("succeeded", "failed"))
    assert job["state"] == "succeeded", job["reason"]
    assert server.logs(plain).startswith("kiln-shim --dir "), server.logs(plain)
    fetched = submit(server, project(tmp_path, init))
    job = server.wait_state(fetched, ("succeeded", "failed"))
    assert job["state"] == "succeeded", job["reason"]
    # After the shim's lines on what it fetched.
    assert "\nkiln shim --dir " in server.logs(fetched), server.logs(fetched)
