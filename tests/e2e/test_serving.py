"""Serving end to end, every part real: `kiln server` runs two deployments
of a tiny model server as replicas, `kiln key create` makes keys, and
`kiln gateway` polls the server for its routes and keys. Through the
gateway: key isolation, a rate limit's exact count with its 429, the
fallback when every primary replica is gone and the way back, and serving
on with the server killed."""
import signal
import subprocess
import time

import pytest

from conftest import Server, wait_for, kill_processes_under
from test_deployments import deploy, deployment_yaml, wait_ready
from test_gateway import Gateway


@pytest.fixture
def stack(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    server = Server(home).start()
    gateway = Gateway(home, ["--refresh", "200ms"])
    yield server, gateway
    gateway.stop()
    server.stop()
    kill_processes_under(home)


def key(server, name, *args):
    r = server.cli("key", "create", "--name", name, *args)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split()[-1]


def replica_port(answer):
    assert answer.status_code == 200, answer.text
    return answer.json()["kiln_replica"]["port"]


def test_gateway_serves_the_servers_deployments(stack):
    server, gateway = stack
    deploy(server, deployment_yaml("chat", replicas=2,
                                   extra="fallback: small\n"))
    deploy(server, deployment_yaml("small", replicas=1))
    chat_ports = {int(r["address"].split(":")[1])
                  for r in wait_ready(server, "chat", 2).values()}
    small_ports = {int(r["address"].split(":")[1])
                   for r in wait_ready(server, "small", 1).values()}
    # A key may name a deployment that does not exist yet: the server
    # leaves it out of the gateway's table until it does.
    app = key(server, "app", "--deployments", "chat,later")
    other = key(server, "other", "--deployments", "small")
    limited = key(server, "limited", "--deployments", "small", "--rpm", "2")
    gateway.start()

    first = wait_for(lambda: (lambda r: r if r.status_code == 200 else None)(
        gateway.call(app, "chat")), what="the gateway to route chat")
    assert replica_port(first) in chat_ports
    assert "x-kiln-fallback" not in first.headers
    # Key isolation: each key reaches only its deployments.
    assert gateway.call(other, "chat").status_code == 404
    assert gateway.call(app, "small").status_code == 404
    assert gateway.call("kgw_" + "x" * 43, "chat").status_code == 401
    assert replica_port(gateway.call(other, "small")) in small_ports

    # Exactly 2 requests a minute for this key, then 429 with Retry-After.
    codes = [gateway.call(limited, "small").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    over = gateway.call(limited, "small")
    assert over.status_code == 429 and int(over.headers["Retry-After"]) >= 1
    assert over.headers["x-ratelimit-remaining-requests"] == "0"

    # No primary replica: the fallback answers, and says so.
    assert server.cli("scale", "chat", "0").returncode == 0
    fell = wait_for(lambda: (lambda r: r if r.headers.get("x-kiln-fallback")
                             else None)(gateway.call(app, "chat")),
                    what="the fallback to take over")
    assert fell.headers["x-kiln-fallback"] == "small"
    assert replica_port(fell) in small_ports
    # Back to the primary once it is ready again.
    assert server.cli("scale", "chat", "2").returncode == 0
    back = wait_for(lambda: (lambda r: r if r.status_code == 200 and
                             "x-kiln-fallback" not in r.headers else None)(
        gateway.call(app, "chat")), timeout=30, what="chat back")
    assert replica_port(back) not in small_ports

    # The server dies: the replicas and the gateway go on serving.
    server.kill9()
    for _ in range(3):
        assert gateway.call(app, "chat").status_code == 200
    server.start()


def test_gateway_starts_from_its_saved_table_without_a_server(stack):
    server, gateway = stack
    deploy(server, deployment_yaml("chat", replicas=1))
    wait_ready(server, "chat", 1)
    app = key(server, "app", "--deployments", "chat")
    gateway.start()
    wait_for(lambda: gateway.call(app, "chat").status_code == 200,
             what="the gateway to route chat")
    gateway.stop()
    server.kill9()
    gateway.start()  # the server does not answer: routes.json serves
    assert gateway.call(app, "chat").status_code == 200
    gateway.proc.send_signal(signal.SIGTERM)
    gateway.proc.wait(timeout=10)
    server.start()


def test_latency_shift_raises_exactly_one_alert(stack, tmp_path):
    """Normal traffic teaches the band and raises nothing; the replica then
    answers 60 ms slower and, three windows later, one alert reaches the
    server with its evidence; the shift going on raises no second one; the
    latency coming back resolves it."""
    server, _ = stack
    control = tmp_path / "control"
    control.mkdir()
    deploy(server, deployment_yaml("chat", replicas=1, control=control))
    wait_ready(server, "chat", 1)
    app = key(server, "app", "--deployments", "chat")
    gateway = stack[1]  # the fixture stops it
    gateway.args += ["--anomaly-window", "300ms"]
    gateway.start()
    wait_for(lambda: gateway.call(app, "chat").status_code == 200,
             what="the gateway to route chat")

    def anomalies():
        return [a for a in server.request("GET", "/v1/alerts",
                                          params={"all": "1"}).json()["alerts"]
                if a["rule"].startswith("gateway_anomaly_")]

    def traffic(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            assert gateway.call(app, "chat").status_code == 200

    traffic(5.0)  # 10 windows of warm-up, then 6 in the band
    assert anomalies() == []
    (control / "delay-ms").write_text("60")
    deadline = time.monotonic() + 30
    while not anomalies():
        assert time.monotonic() < deadline, "no alert for the shift"
        traffic(0.3)
    traffic(2.0)  # the shift goes on: no second alert
    alerts = anomalies()
    assert len(alerts) == 1, alerts
    a = alerts[0]
    assert a["rule"] == "gateway_anomaly_latency_ms"
    assert a["labels"]["deployment"] == "chat" and a["state"] == "firing"
    assert a["value"] > 50
    # Back to normal: the same alert is resolved, and no other is raised.
    (control / "delay-ms").unlink()
    deadline = time.monotonic() + 30
    while anomalies()[0]["state"] != "resolved":
        assert time.monotonic() < deadline, "the alert was not resolved"
        traffic(0.3)
    assert len(anomalies()) == 1
