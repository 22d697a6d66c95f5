"""`kiln health --drain` as slurmd's own HealthCheckProgram, on a real
single-node slurm-wlm (slurm_own.py: slurmd runs the program every 2 s):
a failing check drains the node in Slurm with the check's words, `kiln
nodes` shows Slurm's reason, and a passing one resumes it; with the kiln
server unreachable, Slurm is still told."""
import pytest

from conftest import KILN, Server, wait_for
from slurm_own import (NODE, node_state, own_slurm,  # noqa: F401
                       write_health_check)


def health_program(env, server_url, token, flag):
    """The two-line wrapper docs/scale-out.md shows: slurmd runs it with
    no arguments and little environment. flag holds --min-free's value,
    so a test fails or passes the disk check by rewriting it."""
    write_health_check(
        f"export PATH=/usr/sbin:/usr/bin:/sbin:/bin "
        f"SLURM_CONF={env['SLURM_CONF']} KILN_SERVER={server_url} "
        f"KILN_TOKEN={token}\n"
        f"exec {KILN} health --drain --node-name {NODE} --dir {flag.parent} "
        f"--min-free \"$(cat {flag})\"")


@pytest.fixture
def health_server(tmp_path, own_slurm):  # noqa: F811
    s = Server(tmp_path / "home", gpus=None, extra=["--executor", "slurm"],
               env=own_slurm)
    s.home.mkdir()
    s.start()
    yield s
    write_health_check("exit 0")
    s.stop()


def the_node(s):
    nodes = s.request("GET", "/v1/nodes").json()["nodes"]
    return next(n for n in nodes if n["name"] == NODE)


def test_slurmd_runs_it_a_failure_drains_a_pass_resumes(health_server,
                                                        own_slurm, tmp_path):
    flag = tmp_path / "min-free"
    flag.write_text("1000Ti")
    health_program(own_slurm, health_server.url, health_server.admin_token,
                   flag)
    wait_for(lambda: node_state(own_slurm).startswith("drained|"),
             timeout=30, what="slurmd's health check to drain the node")
    assert node_state(own_slurm).startswith(
        "drained|kiln health: disk_free: "), node_state(own_slurm)
    # kiln saw it twice: the report made the node unhealthy, and the
    # listing carries Slurm's own reason.
    wait_for(lambda: the_node(health_server)["slurm"]["state"] == "drained",
             timeout=30, what="the listing to show the drain")
    node = the_node(health_server)
    assert node["state"] == "unhealthy"
    assert node["slurm"]["reason"].startswith("kiln health: disk_free: ")
    out = health_server.cli("nodes", check=True).stdout
    assert "slurm: drained (kiln health: disk_free: " in out, out
    flag.write_text("1Ki")
    wait_for(lambda: node_state(own_slurm).startswith("idle|"), timeout=30,
             what="a passing check to resume the node")
    wait_for(lambda: the_node(health_server)["state"] == "ready", timeout=30,
             what="kiln's node ready again")


def test_unreachable_server_slurm_still_told(own_slurm, tmp_path):  # noqa
    flag = tmp_path / "min-free"
    flag.write_text("1000Ti")
    # Nothing listens on port 1.
    health_program(own_slurm, "http://127.0.0.1:1", "none", flag)
    try:
        wait_for(lambda: node_state(own_slurm).startswith("drained|"),
                 timeout=30, what="the node drained without kiln's server")
        assert "kiln health: disk_free: " in node_state(own_slurm)
        flag.write_text("1Ki")
        wait_for(lambda: node_state(own_slurm).startswith("idle|"),
                 timeout=30, what="the node resumed without kiln's server")
    finally:
        write_health_check("exit 0")
