"""The test harness itself: which processes count as a test's own, so
that cleaning up after one test never ends another's; and the check of
every answer against the API's document, which must still find what
breaks it when it has checked answers of the same shape before."""
import copy
import json
import subprocess
import sys

import requests

import contract
from conftest import KILN, job_yaml, processes_under


def test_processes_under_matches_the_whole_path(tmp_path):
    root = tmp_path / "test_x1"
    (root / "task").mkdir(parents=True)
    (tmp_path / "test_x10").mkdir()
    # A process that waits, with one argument it does not look at.
    argv = [sys.executable, "-c", "import time; time.sleep(600)"]
    mine = subprocess.Popen(argv + [f"{root}/task"])
    by_env = subprocess.Popen(argv, env={"KILN_HOME": str(root)})
    other = subprocess.Popen(argv + [f"{tmp_path}/test_x10/task"],
                             env={"KILN_HOME": f"{tmp_path}/test_x10"})
    sibling = subprocess.Popen(argv + [f"{root}.log"])
    try:
        found = {pid for pid, _ in processes_under(root)}
        assert mine.pid in found and by_env.pid in found
        assert other.pid not in found and sibling.pid not in found
    finally:
        for p in (mine, by_env, other, sibling):
            p.kill()
            p.wait()


def test_contract_finds_a_broken_answer_after_good_ones(server):
    jid = server.submit(job_yaml("j", ["/bin/true"]))
    good = server.request("GET", f"/v1/jobs/{jid}")
    assert good.status_code == 200, good.text
    # Twice: the second check reuses what the first one set up.
    for _ in range(2):
        assert contract.answer_problem(KILN, "GET", good) == (
            "/v1/jobs/{id}", None)
    body = copy.deepcopy(good.json())
    body["job"]["state"] = "sideways"  # JobState, by reference from Job
    bad = requests.Response()
    bad.status_code, bad.url, bad.headers = 200, good.url, good.headers
    bad._content = json.dumps(body).encode()
    template, problem = contract.answer_problem(KILN, "GET", bad)
    assert template == "/v1/jobs/{id}"
    assert problem and problem.startswith(
        "job/state: 'sideways' is not one of"), problem
    assert contract.answer_problem(KILN, "GET", good)[1] is None
