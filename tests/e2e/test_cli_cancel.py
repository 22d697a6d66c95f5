"""kiln cancel and evict with several ids and with filters, as scancel."""
from conftest import job_yaml, wait_for


def submit(server, name, command=("/bin/sleep", "60"), **fields):
    return server.submit(job_yaml(name, list(command), **fields))


def test_cancel_several_ids_and_a_missing_one(server):
    a = submit(server, "a")
    b = submit(server, "b")
    r = server.cli("cancel", str(a), str(b), "999")
    assert r.returncode == 1
    assert f"job {a}: cancel requested" in r.stdout
    assert f"job {b}: cancel requested" in r.stdout
    assert "999" in r.stderr and "not found" in r.stderr
    for jid in (a, b):
        server.wait_state(jid, "cancelled")


def test_cancel_by_name_and_state(server):
    keep = submit(server, "keep")
    sweep = [submit(server, "sweep") for _ in range(3)]
    server.wait_state(keep, "running")
    r = server.cli("cancel", "--name", "sweep", check=True)
    assert r.stdout.count("cancel requested") == 3
    for jid in sweep:
        server.wait_state(jid, "cancelled")
    assert server.job(keep)["state"] == "running"
    # Nothing left to match: said, and not an error.
    r = server.cli("cancel", "--name", "sweep", check=True)
    assert "no job to cancel matches" in r.stderr
    r = server.cli("cancel", "--state", "running", check=True)
    server.wait_state(keep, "cancelled")


def test_cancel_all_needs_confirmation(server):
    a = submit(server, "a")
    r = server.cli("cancel", "--all", input="")
    assert r.returncode == 2 and "--yes" in r.stderr
    assert server.job(a)["state"] in ("queued", "running")
    r = server.cli("cancel", "--all", "--yes", check=True)
    server.wait_state(a, "cancelled")


def test_ids_and_filters_do_not_mix(server):
    r = server.cli("cancel", "1", "--state", "queued")
    assert r.returncode == 2 and "not both" in r.stderr
    r = server.cli("cancel")
    assert r.returncode == 2 and "missing ID" in r.stderr
    r = server.cli("evict", "x1")
    assert r.returncode == 2 and "job ID" in r.stderr


def test_evict_by_name(server):
    jobs = [submit(server, "spot", preemptible=True) for _ in range(2)]
    for jid in jobs:
        server.wait_state(jid, "running")
    r = server.cli("evict", "--name", "spot", "--grace", "1s", check=True)
    assert r.stdout.count("eviction started") == 2
    for jid in jobs:
        wait_for(lambda: server.job(jid)["attempts_detail"][0]["state"]
                 == "preempted", what=f"job {jid}'s attempt preempted")
    r = server.cli("cancel", "--all", "--yes", check=True)
