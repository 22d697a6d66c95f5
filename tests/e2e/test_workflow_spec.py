"""`kiln validate` on workflow files: the DAG's order, job files found
beside the workflow, and errors that name the file, line, column and
step. Running them is tested in test_workflows.py (docs/workflows.md)."""
import json
import subprocess

from conftest import KILN

PIPELINE = """\
kind: Workflow
name: pipeline
steps:
  - name: evaluate
    needs: [train]
    job: {command: [python3, eval.py]}
  - name: prepare
    job: jobs/prepare.yaml
  - name: train
    needs: [prepare]
    inputs: [prepare.outputs/train.bin]
    on_failure: retry
    job: {command: [python3, train.py], tasks: 2, preemptible: true}
  - name: register
    needs: [evaluate]
    when: "evaluate.metrics.loss < 1.8"
    register: {from: train, model: gpt-tiny, alias: prod}
"""


def validate(tmp_path, *args):
    env = {"KILN_HOME": str(tmp_path / "none"), "PATH": "/usr/bin:/bin"}
    return subprocess.run([KILN, "validate", *args], capture_output=True,
                          text=True, env=env, timeout=30)


def test_workflow_validates_in_dependency_order(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "prepare.yaml").write_text(
        "kind: Job\nname: prepare\ncommand: [python3, prepare.py]\n")
    wf = tmp_path / "pipeline.yaml"
    wf.write_text(PIPELINE)
    r = validate(tmp_path, str(wf))
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"{wf}: ok (workflow pipeline, 4 steps: prepare -> "
                        "train -> evaluate -> register)\n")
    r = validate(tmp_path, "-o", "json", str(wf))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["order"] == ["prepare", "train", "evaluate", "register"]
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["prepare"]["job"]["command"] == ["python3", "prepare.py"]
    assert steps["train"]["job"]["name"] == "train"
    assert steps["train"]["on_failure"] == "retry"
    assert steps["evaluate"]["on_failure"] == "stop"
    assert steps["register"]["when"] == ["evaluate.metrics.loss < 1.8"]
    assert steps["register"]["register"]["model"] == "gpt-tiny"


def test_workflow_errors_name_the_place(tmp_path):
    wf = tmp_path / "w.yaml"
    wf.write_text(PIPELINE)  # jobs/prepare.yaml is missing
    r = validate(tmp_path, str(wf))
    assert r.returncode == 1
    assert f"{wf}: steps[1].job: cannot read {tmp_path}/jobs/prepare.yaml" \
        in r.stderr

    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "prepare.yaml").write_text(
        "kind: Job\nname: prepare\ncommand: [x]\ntasks: 0\n")
    r = validate(tmp_path, str(wf))
    assert r.returncode == 1
    assert f"{tmp_path}/jobs/prepare.yaml:4:8: tasks: must be an integer" \
        in r.stderr

    wf.write_text(PIPELINE.replace("needs: [prepare]", "needs: [register]"))
    r = validate(tmp_path, str(wf))
    assert r.returncode == 1
    assert (f"{wf}:4:5: steps[0].needs: the steps' needs form a cycle: "
            "evaluate -> train -> register -> evaluate") in r.stderr

    (tmp_path / "jobs" / "prepare.yaml").write_text(
        "kind: Job\nname: prepare\ncommand: [x]\n")
    wf.write_text(PIPELINE.replace('when: "evaluate', 'when: "prepare'))
    r = validate(tmp_path, str(wf))
    assert r.returncode == 0, r.stderr  # prepare is needed through train

    wf.write_text(PIPELINE.replace("needs: [evaluate]", "needs: [train]"))
    r = validate(tmp_path, str(wf))
    assert r.returncode == 1
    assert ('steps[3].when: the condition reads step "evaluate", which step '
            '"register" does not need (add it to needs)') in r.stderr
