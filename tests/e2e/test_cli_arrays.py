"""Job arrays through the CLI: `array:` in a spec and --array on submit,
each element its own job (index variables, attempts, logs), one row in
`kiln ls`, the elements in `kiln show`, and cancel of one element or all."""
import json

from conftest import Server, job_yaml, kill_processes_under, wait_for

PRINT_INDEX = ["/bin/sh", "-c",
               "echo index=$KILN_ARRAY_INDEX slurm=$SLURM_ARRAY_TASK_ID "
               "count=$KILN_ARRAY_COUNT array=$KILN_ARRAY_JOB_ID "
               "min=$SLURM_ARRAY_TASK_MIN max=$SLURM_ARRAY_TASK_MAX"]


def spec_file(tmp_path, text, name="job.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def elements(server, array_id):
    r = server.request("GET", "/v1/jobs", params={"array": array_id})
    assert r.status_code == 200, r.text
    return r.json()["jobs"]


def test_each_element_runs_with_its_index(server, tmp_path):
    path = spec_file(tmp_path, job_yaml("sweep", PRINT_INDEX, array="3-6"))
    r = server.cli("submit", path, "--wait")
    assert r.returncode == 0, r.stderr
    array_id = int(r.stdout.split()[0])
    assert f"job {array_id}: 4 succeeded" in r.stdout
    els = elements(server, array_id)
    assert [e["array"]["index"] for e in els] == [3, 4, 5, 6]
    # Consecutive ids, the first naming the array, as Slurm numbers them.
    assert [e["id"] for e in els] == list(range(array_id, array_id + 4))
    for e in els:
        k = e["array"]["index"]
        out = server.cli("logs", f"{array_id}[{k}]", check=True).stdout
        assert out.strip() == (f"index={k} slurm={k} count=4 "
                               f"array={array_id} min=3 max=6")

    # One row in the listing, with its indexes and counts by state.
    ls = server.cli("ls", check=True).stdout
    rows = [line for line in ls.splitlines() if line.startswith(str(array_id))]
    assert len(rows) == 1
    assert rows[0].startswith(f"{array_id}[3-6]")
    assert "succeeded" in rows[0] and "4 succeeded" in rows[0]
    assert max(len(line) for line in ls.splitlines()) <= 80
    listed = json.loads(server.cli("ls", "-o", "json", check=True).stdout)
    (row,) = [j for j in listed["jobs"] if j["id"] == array_id]
    assert row["array"]["counts"] == {"succeeded": 4}

    show = server.cli("show", str(array_id), check=True).stdout
    assert "4 elements, indexes 3-6" in show
    for k in range(3, 7):
        assert any(line.split()[:3] == [str(k), str(array_id + k - 3),
                                        "succeeded"]
                   for line in show.splitlines())
    one = server.cli("show", f"{array_id}[5]", check=True).stdout
    assert f"job {array_id + 2}: sweep" in one
    assert f"element 5 of job array {array_id}" in one


def test_parallel_limit_and_cancel_of_one_element_or_all(server, tmp_path):
    path = spec_file(tmp_path, job_yaml(
        "slow", ["/bin/sleep", "60"], array={"count": 4, "parallel": 2}))
    array_id = int(server.cli("submit", path, check=True).stdout)
    ids = list(range(array_id, array_id + 4))

    def states():
        return [server.job(i)["state"] for i in ids]
    wait_for(lambda: states().count("running") == 2, what="two running")
    # The limit holds the other two back, and says so.
    queued = [i for i in ids if server.job(i)["state"] == "queued"]
    assert len(queued) == 2
    assert "limit" in server.job(queued[0])["reason"]
    assert states().count("running") == 2

    # One element alone: ID[K] names it.
    last = queued[-1]
    index = last - array_id
    r = server.cli("cancel", f"{array_id}[{index}]", check=True)
    assert f"job {last}: cancel requested" in r.stdout
    server.wait_state(last, "cancelled")
    assert states().count("running") == 2

    # The array's id: every element still queued or running.
    server.cli("cancel", str(array_id), check=True)
    for i in ids:
        server.wait_state(i, "cancelled")
    r = server.cli("show", f"{array_id}[9]")
    assert r.returncode != 0 and "no element 9" in r.stderr


def test_each_element_retries_on_its_own(server, tmp_path):
    fail_once_at_1 = ["/bin/sh", "-c",
                      '[ "$KILN_ARRAY_INDEX" != 1 ] || [ "$KILN_ATTEMPT" = 2 ]']
    path = spec_file(tmp_path, job_yaml("retry", fail_once_at_1,
                                        array="0-2", retries=1,
                                        backoff="100ms"))
    array_id = int(server.cli("submit", path, check=True).stdout)
    for i in range(array_id, array_id + 3):
        server.wait_state(i, "succeeded")
    attempts = [server.job(i)["attempts"] for i in range(array_id, array_id + 3)]
    assert attempts == [1, 2, 1]


def test_array_on_the_command_line_and_bad_input(server, tmp_path):
    path = spec_file(tmp_path, job_yaml("cli", ["/bin/true"]))
    r = server.cli("submit", path, "--array", "0-2%1")
    assert r.returncode == 0, r.stderr
    array_id = int(r.stdout.split()[0])
    job = server.job(array_id)
    assert job["array"]["count"] == 3 and job["array"]["parallel"] == 1
    assert job["spec"]["overrides"]["array"] == "0-2%1"

    r = server.cli("submit", path, "--array", "5")
    assert r.returncode == 2
    assert "--array: must be a range" in r.stderr

    bad = spec_file(tmp_path, "kind: Job\nname: x\ncommand: [a]\n"
                    "array: 9-3\n", "bad.yaml")
    r = server.cli("submit", bad)
    assert r.returncode != 0
    assert ("bad.yaml:4:8: array: the range's last index must not be below "
            "its first") in r.stderr

    r = server.cli("show", "7[x]")
    assert r.returncode == 2 and "ID[INDEX]" in r.stderr
    r = server.cli("show", f"{array_id + 5}[0]")
    assert r.returncode != 0 and "not found" in r.stderr


def test_elements_survive_a_restart(server, tmp_path):
    path = spec_file(tmp_path, job_yaml(
        "kept", PRINT_INDEX, array="0-1%1"))
    # Held back by a limit of one, behind a first element that waits.
    blocker = spec_file(tmp_path, job_yaml(
        "kept", ["/bin/sleep", "60"], array="0-1%1"), "blocker.yaml")
    first = int(server.cli("submit", blocker, check=True).stdout)
    server.wait_state(first, "running")
    assert server.job(first + 1)["state"] == "queued"
    array_id = int(server.cli("submit", path, check=True).stdout)
    server.kill9()
    server.start()
    server.cli("cancel", f"{first}", check=True)
    for k in range(2):
        server.wait_state(array_id + k, "succeeded")
        assert f"index={k} " in server.logs(array_id + k)


def test_a_large_array_is_one_shape_to_placement(tmp_path):
    """Every queued element is placed each turn, and each placement builds
    its typical workload from the jobs seen: counted by shape, a large
    array of alike elements is one entry, so the turns (and the API waiting
    behind them) do not slow with the array's size. The nodes' measure
    still weighs every element."""
    home = tmp_path / "home"
    home.mkdir()
    server = Server(home, extra=["--max-queued-jobs-per-user",
                                 "100000"]).start()
    try:
        jid = server.submit(job_yaml("wide", ["/bin/true"],
                                     resources={"gpus": 8}, array="0-1999"))
        r = server.cli("ls", check=True)
        assert f"{jid}[0-1999]" in r.stdout and "2000 queued" in r.stdout
        r = server.cli("show", str(jid), check=True)
        assert r.stdout.count("queued  0         -     can never fit") == 2000
        node = server.request("GET", "/v1/nodes").json()["nodes"][0]
        assert node["fragmentation"]["workload_jobs"] == 2000
        assert node["fragmentation"]["typical_shapes"] == 1
        server.cli("cancel", str(jid), check=True)
        server.stop()
    finally:
        if server.proc.poll() is None:
            server.kill9()
        kill_processes_under(home)
