"""The CLI against a real server: exit codes, output, token handling."""
import json

from conftest import job_yaml


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_submit_wait_exit_codes(server, tmp_path):
    ok = write(tmp_path, "ok.yaml", job_yaml("ok", ["/bin/true"]))
    bad = write(tmp_path, "bad.yaml", job_yaml("bad", ["/bin/false"]))
    r = server.cli("submit", ok, "--wait")
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout.strip())
    assert server.job(jid)["state"] == "succeeded"
    r = server.cli("submit", bad, "--wait")
    assert r.returncode == 4, r.stderr
    assert "failed" in r.stderr


def test_submit_without_wait_prints_only_the_id(server, tmp_path):
    spec = write(tmp_path, "j.yaml", job_yaml("j", ["/bin/true"]))
    r = server.cli("submit", spec, check=True)
    assert r.stdout.strip().isdigit()


def test_submit_reports_spec_errors_with_position(server, tmp_path):
    spec = write(tmp_path, "job.yaml",
                 "kind: Job\nname: x\ncommand: [/bin/true]\nretires: 2\n")
    r = server.cli("submit", spec)
    assert r.returncode == 1
    assert "job.yaml:4:1" in r.stderr
    assert 'did you mean "retries"' in r.stderr
    assert server.request("GET", "/v1/jobs").json()["jobs"] == []


def test_validate_needs_no_server(tmp_path):
    from conftest import KILN
    import subprocess
    good = write(tmp_path, "good.yaml", job_yaml("g", ["/bin/true"], tasks=2))
    bad = write(tmp_path, "bad.yaml",
                "kind: Job\nname: x\ncommand: [/bin/true]\nresources:\n  gpus: 9\n")
    env = {"KILN_HOME": str(tmp_path / "none"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([KILN, "validate", good], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout
    r = subprocess.run([KILN, "validate", bad], capture_output=True, text=True, env=env)
    assert r.returncode == 1
    assert "bad.yaml:5:9: resources.gpus" in r.stderr + r.stdout


def test_unknown_choice_names_the_closest_or_all(tmp_path):
    from conftest import KILN
    import subprocess
    env = {"KILN_HOME": str(tmp_path / "none"), "PATH": "/usr/bin:/bin"}
    cases = [
        (["ls", "--state", "runing"],
         "kiln ls: no job state 'runing'; did you mean 'running'?"),
        (["ls", "--state", "zzzzzz"],
         "kiln ls: no job state 'zzzzzz'; states are queued, running, "
         "succeeded, failed, cancelled and preempted"),
        (["token", "create", "--name", "a", "--role", "admn"],
         "kiln token create: no role 'admn'; did you mean 'admin'?"),
        (["token", "create", "--name", "a", "--role", "qqqqqq"],
         "kiln token create: no role 'qqqqqq'; roles are viewer, user, "
         "operator and admin"),
    ]
    for args, want in cases:
        r = subprocess.run([KILN, *args], capture_output=True, text=True,
                           env=env)
        assert (r.returncode, r.stderr.strip()) == (2, want), args


def test_ls_show_json_and_cancel(server, tmp_path):
    spec = write(tmp_path, "big.yaml", job_yaml("big", ["/bin/true"],
                                                resources={"gpus": 8}))
    jid = int(server.cli("submit", "--hold", spec, check=True).stdout)
    r = server.cli("ls", "-o", "json", check=True)
    jobs = json.loads(r.stdout)["jobs"]
    assert [j["id"] for j in jobs] == [jid]
    r = server.cli("ls", check=True)
    assert "big" in r.stdout and "queued" in r.stdout
    r = server.cli("show", str(jid), check=True)
    assert "can never fit" in r.stdout
    r = server.cli("cancel", str(jid), check=True)
    assert server.job(jid)["state"] == "cancelled"
    r = server.cli("show", "999")
    assert r.returncode == 1 and "not found" in r.stderr


def test_token_create_use_and_revoke(server, tmp_path):
    r = server.cli("token", "create", "--name", "carol", "--role", "viewer", check=True)
    secret = r.stdout.strip()
    assert secret.startswith("kiln_")
    assert secret not in r.stderr
    r = server.cli("ls", token=secret)
    assert r.returncode == 0, r.stderr
    spec = write(tmp_path, "j.yaml", job_yaml("j", ["/bin/true"]))
    r = server.cli("submit", spec, token=secret)
    assert r.returncode == 1 and "permission_denied" in r.stderr
    r = server.cli("token", "ls", check=True)
    assert "carol" in r.stdout and secret not in r.stdout
    server.cli("token", "revoke", "carol", check=True)
    r = server.cli("ls", token=secret)
    assert r.returncode == 1 and "unauthenticated" in r.stderr


def test_nodes_say_devices_are_simulated(server):
    r = server.cli("nodes", check=True)
    assert "simulated" in r.stdout
    assert r.stdout.count("H100-80GB") == 4


def test_logs_follow_from_cli(server, tmp_path):
    spec = write(tmp_path, "t.yaml", job_yaml("t", ["/bin/sh", "-c",
                                                     "echo one; sleep 0.3; echo two"]))
    jid = server.cli("submit", spec, check=True).stdout.strip()
    r = server.cli("logs", jid, "-f", check=True)
    assert r.stdout == "one\ntwo\n"


def test_cli_without_server_exits_3(tmp_path):
    from conftest import KILN
    import subprocess
    env = {"KILN_HOME": str(tmp_path / "empty"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([KILN, "ls"], capture_output=True, text=True, env=env)
    assert r.returncode == 3
    r = subprocess.run([KILN, "ls", "--server", "http://127.0.0.1:9"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 3


def test_usage_errors_exit_2(server):
    r = server.cli("ls", "--sate", "queued")
    assert r.returncode == 2 and "--state" in r.stderr
    r = server.cli("sumbit")
    assert r.returncode == 2 and "submit" in r.stderr
    r = server.cli("--help")
    assert r.returncode == 0
    commands = r.stdout.split("Commands:")[1].split("Run `kiln")[0]
    assert "submit" in commands and "shim" not in commands
    r = server.cli("server", "--help")
    assert r.returncode == 0 and "--gpus" in r.stdout
    r = server.cli("server", "--listen", "nowhere")
    assert r.returncode == 2 and "HOST:PORT" in r.stderr
    # A run id one past 64 bits is refused, not clamped to the largest.
    for bad in ("0", "x1", "9223372036854775808"):
        for verb in ("show", "cancel"):
            r = server.cli("workflow", verb, bad)
            assert r.returncode == 2 and "RUN must be a run id" in r.stderr


def test_relative_workdir_from_spec_directory(server, tmp_path):
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    (proj / "sub" / "x.txt").write_text("found\n")
    spec = write(proj, "job.yaml", job_yaml("wd", ["/bin/cat", "x.txt"], workdir="sub"))
    r = server.cli("submit", spec, "--wait")
    assert r.returncode == 0, r.stderr
    assert server.logs(int(r.stdout)) == "found\n"
