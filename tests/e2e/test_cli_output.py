"""The CLI's output formats: tables cut to 80 columns, wide, JSON, YAML,
ids alone, and tables without headers."""
import json

import yaml

from conftest import job_yaml

LONG_NAME = "a-job-name-long-enough-to-push-the-table-past-eighty-columns"


def submit_queued(server, tmp_path, name=LONG_NAME):
    """A job that waits: it wants more GPUs than the node has."""
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(job_yaml(name, ["/bin/true"], resources={"gpus": 8}))
    r = server.cli("submit", "--hold", str(spec))
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def test_ls_fits_80_columns_unless_wide(server, tmp_path):
    jid = submit_queued(server, tmp_path)
    r = server.cli("ls", check=True)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("ID")
    assert all(len(line) <= 80 for line in lines), r.stdout
    assert "\u2026" in lines[1] and LONG_NAME not in r.stdout
    assert lines[1].split()[0] == str(jid)
    r = server.cli("ls", "-o", "wide", check=True)
    assert LONG_NAME in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) > 80
    r = server.cli("ls", "--no-headers", check=True)
    assert r.stdout.splitlines()[0].split()[0] == str(jid)


def test_ls_name_json_yaml(server, tmp_path):
    a = submit_queued(server, tmp_path, "a")
    b = submit_queued(server, tmp_path, "b")
    r = server.cli("ls", "-o", "name", check=True)
    assert r.stdout.split() == [str(a), str(b)]
    as_json = json.loads(server.cli("ls", "-o", "json", check=True).stdout)
    as_yaml = yaml.safe_load(server.cli("ls", "-o", "yaml", check=True).stdout)
    assert [j["id"] for j in as_yaml["jobs"]] == [a, b]
    assert as_yaml["jobs"][0]["name"] == as_json["jobs"][0]["name"] == "a"
    r = server.cli("show", str(a), "-o", "yaml", check=True)
    assert yaml.safe_load(r.stdout)["job"]["id"] == a


def test_output_format_is_checked(server):
    r = server.cli("ls", "-o", "xml")
    assert r.returncode == 2
    assert "table, wide, json, yaml, name" in r.stderr
    # name is for listings of things with ids or names, not every command.
    r = server.cli("nodes", "-o", "name")
    assert r.returncode == 2
