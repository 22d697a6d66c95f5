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


def env_line(text, name):
    for line in text.splitlines():
        if line.startswith(name + "="):
            return line.split("=", 1)[1]
    return None


def test_overrides_are_applied_validated_and_shown(server, tmp_path):
    spec = write(tmp_path, "j.yaml", job_yaml(
        "file-name", ["/bin/sh", "-c", "env"], env={"A": "file", "B": "file"},
        resources={"gpus": 1}))
    r = server.cli("submit", spec, "--name", "sweep-3", "--env", "A=cli",
                   "--env", "C=x=y", "--gpus", "2", "--tasks", "2",
                   "--priority", "7", "--preemptible", "--wait")
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout.split()[0])
    job = server.job(jid)
    assert job["name"] == "sweep-3"
    assert job["tasks"] == 2 and job["priority"] == 7
    assert job["preemptible"] is True
    assert job["resources"]["gpus"] == 2
    log = server.logs(jid, task=1)
    assert env_line(log, "A") == "cli"
    assert env_line(log, "B") == "file"
    assert env_line(log, "C") == "x=y"
    r = server.cli("show", str(jid), check=True)
    line = next(ln for ln in r.stdout.splitlines() if "overrides:" in ln)
    for flag in ("--name sweep-3", "--env A=cli", "--gpus 2", "--tasks 2",
                 "--priority 7", "--preemptible"):
        assert flag in line, line


def test_overrides_are_checked_like_the_file(server, tmp_path):
    spec = write(tmp_path, "j.yaml", job_yaml("j", ["/bin/true"]))
    r = server.cli("submit", spec, "--gpus", "3.5")
    assert r.returncode == 1
    assert "j.yaml with overrides" in r.stderr
    assert "resources.gpus" in r.stderr
    r = server.cli("submit", spec, "--env", "NOEQUALS")
    assert r.returncode == 2 and "NAME=VALUE" in r.stderr
    r = server.cli("submit", spec, "--env", "1BAD=x")
    assert r.returncode == 1 and "env" in r.stderr
    # Only the fields the CLI offers: the API refuses any other.
    r = server.request("POST", "/v1/jobs", data=open(spec).read(),
                       params={"overrides": '{"command": ["/bin/sh"]}'})
    assert r.status_code == 400 and "cannot be overridden" in r.text
    r = server.request("POST", "/v1/jobs", data=open(spec).read(),
                       params={"overrides": "[1]"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "overrides"
    assert server.request("GET", "/v1/jobs").json()["jobs"] == []


def test_overrides_survive_a_restart(server, tmp_path):
    spec = write(tmp_path, "j.yaml", job_yaml("j", ["/bin/true"],
                                              resources={"gpus": 8}))
    r = server.cli("submit", spec, "--hold", "--name", "renamed",
                   "--priority", "3", check=True)
    jid = int(r.stdout)
    server.stop()
    server.start()
    job = server.job(jid)
    assert job["name"] == "renamed" and job["priority"] == 3
    assert job["spec"]["overrides"] == {"name": "renamed", "priority": 3}
