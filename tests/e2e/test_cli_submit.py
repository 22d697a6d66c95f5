"""kiln submit: a job that can never fit is refused unless held."""
from conftest import job_yaml


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_never_fit_is_refused_at_submit(server, tmp_path):
    spec = write(tmp_path, "big.yaml",
                 job_yaml("big", ["/bin/true"], resources={"gpus": 8}))
    r = server.cli("submit", spec)
    assert r.returncode == 1
    assert "big.yaml: can never fit: needs 8 GPUs per task" in r.stderr
    assert "largest node has 4" in r.stderr
    assert server.request("GET", "/v1/jobs").json()["jobs"] == []
    r = server.request("POST", "/v1/jobs", data=open(spec).read())
    assert r.status_code == 409, r.text
    assert r.json()["error"]["field"] == "resources"
    # Held, it waits (for a node that may join), saying why.
    r = server.cli("submit", "--hold", spec, check=True)
    job = server.job(int(r.stdout))
    assert job["state"] == "queued"
    assert job["reason"].startswith("can never fit")
    r = server.request("POST", "/v1/jobs", data=open(spec).read(),
                       params={"hold": "2"})
    assert r.status_code == 400 and "hold" in r.text


def test_a_job_that_fits_later_is_not_refused(server, tmp_path):
    """Busy now is not never: 4 GPUs wait for the 4 in use."""
    first = server.submit(job_yaml("first", ["/bin/sleep", "30"],
                                   resources={"gpus": 4}), hold=False)
    server.wait_state(first, "running")
    spec = write(tmp_path, "next.yaml",
                 job_yaml("next", ["/bin/true"], resources={"gpus": 4}))
    r = server.cli("submit", spec, check=True)
    assert server.job(int(r.stdout))["state"] == "queued"
    server.cli("cancel", "--all", "--yes", check=True)
