"""The console's pages against a priced cluster of simulated nodes (one
with MIG, one cordoned, one unhealthy): the overview's grid shows MIG
slices and the GPUs no job may use, a workflow's steps carry their cost,
and the cost page answers every view (by day, user, job, deployment and
node) with its advice, including a job that asks for far more GPU
memory than it uses."""
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import Server, job_yaml, kill_processes_under, wait_for
from test_console import (assert_same_origin, js_errors, login, shot,
                          wait_text)
from test_cost import CATALOG, SIM_NODES
from test_rightsize import MIN_SAMPLES, SIM_GPU, samples_of
from test_workflows import run, steps, wait_run, write_workflow

pytest.importorskip("selenium")
from selenium.webdriver.common.by import By  # noqa: E402
from test_console import browser  # noqa: E402,F401 (fixture)

ON_DEMAND = {"selector": {"sku": "Test_G2", "pricing": "on_demand"}}


@pytest.fixture
def priced(tmp_path):
    """test_cost's priced simulated nodes, their tasks' usage sampled
    every 200 ms."""
    cat = tmp_path / "catalog.csv"
    cat.write_text(CATALOG)
    s = Server(tmp_path / "home", gpus=None,
               extra=SIM_NODES + ["--catalog", str(cat), "--health-interval",
                                  "0", "--usage-interval", "200ms"])
    s.home.mkdir()
    s.start()
    # Where a task looks for its stop: one its user can reach.
    gate = Path(tempfile.mkdtemp(prefix="kiln-console-"))
    gate.chmod(0o755)
    yield s, gate / "stop"
    s.stop()
    kill_processes_under(s.home)
    shutil.rmtree(gate)


def test_mig_unusable_gpus_and_cost_views(priced, browser, tmp_path):
    s, stop = priced
    alice = s.create_token("alice", "user")
    # Asks for a whole 80 GB GPU, uses 8 GiB of it.
    hog = s.submit(job_yaml("hog", ["/usr/bin/python3", "-c", SIM_GPU],
                            resources={"gpus": 1}, env={"STOP": str(stop)},
                            placement={"selector": {"sku": "Test_G2",
                                                    "pricing": "spot"}}),
                   token=alice)
    mig = s.submit(job_yaml("sliced", ["/bin/sleep", "300"],
                            resources={"gpus": "mig:1g.10gb"}), token=alice)
    whole = s.submit(job_yaml("whole", ["/bin/sh", "-c", "sleep 0.5"],
                              resources={"gpus": 1}, placement=ON_DEMAND),
                     token=alice)
    step_job = json.dumps({"command": ["/bin/sh", "-c", "sleep 0.5"],
                           "resources": {"gpus": 1},
                           "placement": ON_DEMAND})
    run_id = run(s, write_workflow(tmp_path, (
        "kind: Workflow\nname: priced\nsteps:\n"
        f"  - name: train\n    job: {step_job}\n")))
    s.wait_state(mig, "running")
    s.wait_state(whole, "succeeded")
    w = wait_run(s, run_id, timeout=60)
    assert w["state"] == "succeeded", json.dumps(w["steps"])
    step_cost = steps(w)["train"]["cost_usd"]
    assert step_cost and step_cost > 0
    wait_for(lambda: samples_of(s, "hog", "gpu_memory") >= MIN_SAMPLES + 2,
             timeout=60, what="GPU memory samples of the hog")
    stop.write_text("")
    s.wait_state(hog, "succeeded")
    assert s.request("POST", "/v1/nodes/unk/cordon").status_code == 200
    r = s.request("POST", "/v1/nodes/sp/health",
                  json={"healthy": False, "reason": "a test's"})
    assert r.status_code == 200, r.text

    login(browser, s, s.admin_token)
    driver = browser
    driver.get(f"{s.url}/#/overview")
    nodes = {n["name"]: n for n in
             s.request("GET", "/v1/nodes").json()["nodes"]}
    dev = nodes["mg"]["devices"][0]
    assert dev["mig"] and dev["mig_slices_used"] >= 1
    wait_text(driver, '[data-node="mg"] .gpu.mig',
              f"MIG {dev['mig_slices_used']}/{dev['mig_slices']}")
    # The MIG slice counts as a GPU in use.
    wait_text(driver, "#page-overview p", "4 nodes, 6 GPUs, 1 in use")
    wait_text(driver, '[data-node="unk"]', "cordoned")
    wait_text(driver, '[data-node="sp"]', "unhealthy")
    for node in ("unk", "sp"):
        assert driver.find_elements(By.CSS_SELECTOR,
                                    f'[data-node="{node}"] .gpu.off'), node
    assert not driver.find_elements(By.CSS_SELECTOR,
                                    '[data-node="od"] .gpu.off')
    wait_text(driver, '[data-node="od"]', "Fragmentation")
    shot(driver, "overview-mig")

    # The step's cost, in the DAG and in the table.
    driver.get(f"{s.url}/#/workflow/{run_id}")
    wait_text(driver, "#page-workflow tr", f"${step_cost:.2f}")
    label = driver.find_element(By.CSS_SELECTOR,
                                '#page-workflow g[data-step="train"]')
    assert f"${step_cost:.2f}" in label.get_attribute("textContent")

    # Every view of the cost page, each with its own rows.
    want = {"user": "alice", "job": f"#{whole}", "node": "od", "day": "20",
            "deployment": "(no deployment)"}
    for by, row in want.items():
        driver.get(f"{s.url}/#/cost?by={by}")
        wait_text(driver, "#page-cost th", by)
        wait_text(driver, "#page-cost td", row)
        assert driver.find_elements(By.CSS_SELECTOR,
                                    "#page-cost svg.chart rect.bar")
        for heading in ("Right-size advice", "Reservations",
                        "Spot candidates"):
            wait_text(driver, "#page-cost h2", heading)
    # The hog's GPU memory: asked for, against the p95 it used.
    driver.get(f"{s.url}/#/cost?by=user")
    wait_text(driver, "#page-cost td", "alice")
    advice = wait_text(driver, "#page-cost tr", "hog")
    assert "gpu_memory 80.0 GiB 8.0 GiB" in advice.text, advice.text
    shot(driver, "cost-priced")
    assert not js_errors(driver), js_errors(driver)
    assert_same_origin(driver, s)
