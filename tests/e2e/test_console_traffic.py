"""A deployment's traffic as the gateway reports it to the server: real
requests through a real `kiln gateway` (some refused with 429, some
served by the fallback) show up in the deployment API's `traffic` and
on the console's deployment pages; what the report route takes is
bounded and refused to a viewer."""
from decimal import Decimal, ROUND_HALF_UP
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import kiln  # noqa: E402
from conftest import wait_for  # noqa: E402
from test_console import (assert_same_origin, js_errors, login,  # noqa: E402
                          shot, stack, wait_text)  # noqa: F401 (fixture)
from test_deployments import deploy, deployment_yaml, detail, wait_ready  # noqa: E402

pytest.importorskip("selenium")
from test_console import browser  # noqa: E402,F401 (fixture)


def ms(v):
    """A latency as the console writes it: JavaScript's toFixed rounds a
    tie (6.25, exact in binary) up, where Python's format rounds it to
    even."""
    places = Decimal("0.1") if v < 10 else Decimal("1")
    return f"{Decimal(v).quantize(places, rounding=ROUND_HALF_UP)} ms"


def key(s, name, deployments, **limits):
    r = s.request("POST", "/v1/keys", json={"name": name,
                                            "deployments": deployments,
                                            **limits})
    assert r.status_code == 201, r.text
    return r.json()["secret"]


def drive_traffic(s, g):
    """Requests to chat: served, refused by a key's limit, and served by
    its fallback once chat has no replica. Returns what the client saw:
    {"requests", "rate_limited", "errors", "fallbacks"}."""
    deploy(s, deployment_yaml("small", replicas=1))
    deploy(s, deployment_yaml("chat", replicas=1, extra="fallback: small\n"))
    wait_ready(s, "small", 1, timeout=60)
    wait_ready(s, "chat", 1, timeout=60)
    limited = key(s, "limited", ["chat"], rpm=4)
    bulk = key(s, "bulk", ["chat", "small"])
    g.start()
    wait_for(lambda: g.call(bulk, "chat").status_code == 200,
             what="the gateway to route chat")
    seen = {"requests": 1, "rate_limited": 0, "errors": 0, "fallbacks": 0}

    def call(secret):
        r = g.call(secret, "chat")
        seen["requests"] += 1
        seen["rate_limited"] += r.status_code == 429
        seen["errors"] += r.status_code >= 500
        seen["fallbacks"] += "x-kiln-fallback" in r.headers
        return r
    for _ in range(8):
        assert call(bulk).status_code == 200
    codes = [call(limited).status_code for _ in range(7)]
    assert codes == [200] * 4 + [429] * 3, codes
    r = s.request("POST", "/v1/deployments/chat/scale", json={"replicas": 0})
    assert r.status_code == 200, r.text
    wait_for(lambda: "x-kiln-fallback" in call(bulk).headers,
             what="the fallback to answer for chat")
    for _ in range(2):
        assert call(bulk).headers["x-kiln-fallback"] == "small"
    return seen


def test_deployment_traffic_from_the_gateway(stack, browser):
    s, g = stack
    seen = drive_traffic(s, g)

    def settled():
        t = detail(s, "chat")["traffic"]
        return t if t and t["requests"] == seen["requests"] else None
    t = wait_for(settled, timeout=30, what=f"traffic to reach {seen}")
    assert t["rate_limited"] == seen["rate_limited"] == 3
    assert t["fallbacks"] == seen["fallbacks"] >= 3
    assert t["errors"] == seen["errors"]
    assert t["gateways"] == 1
    assert 0 < t["latency_p50_ms"] <= t["latency_p99_ms"]
    assert t["requests_per_s"] > 0 and t["window_s"] > 0
    # `kiln deployments chat` says it too.
    shown = s.cli("deployments", "chat", check=True).stdout
    line = next(x for x in shown.splitlines() if x.startswith("traffic:"))
    assert f" {seen['requests']} requests in " in line
    assert f", {seen['errors']} 5xx, 3 429, {seen['fallbacks']} fallbacks " \
        "(1 gateway)" in line
    assert f"p50 {t['latency_p50_ms']:.1f} ms" in line
    # The Python client's Deployment has it.
    client = kiln.Client(s.url, token=s.admin_token, timeout=30)
    assert client.deployments.get("chat").traffic["rate_limited"] == 3
    # The list carries it too.
    listed = {d["name"]: d for d in
              s.request("GET", "/v1/deployments").json()["deployments"]}
    assert listed["chat"]["traffic"]["requests"] == seen["requests"]

    login(browser, s, s.create_token("watcher", "viewer"))
    browser.get(f"{s.url}/#/deployments")
    row = wait_text(browser, "#page-deployments tr", "chat")
    assert str(seen["fallbacks"]) in row.text
    browser.get(f"{s.url}/#/deployment/chat")
    box = wait_text(browser, "#page-deployment .traffic",
                    f"{seen['requests']} in")
    assert "Rate limited (429)\n3" in box.text
    assert f"Fallbacks\n{seen['fallbacks']}" in box.text
    assert "Latency p50 / p99\n" + " / ".join(
        ms(v) for v in (t["latency_p50_ms"], t["latency_p99_ms"])) in box.text
    shot(browser, "deployment-traffic")
    assert not js_errors(browser), js_errors(browser)
    assert_same_origin(browser, s)


def test_traffic_reports_are_checked(server):
    s = server
    viewer = s.create_token("watcher", "viewer")
    good = {"instance": "abc", "uptime_ms": 1000, "deployments": [{
        "name": "chat", "requests": 2, "errors": 0, "rate_limited": 1,
        "fallbacks": 0, "upstream_errors": 0, "tokens": 0,
        "latency_bounds_s": [0.1, 1], "latency_counts": [1, 1, 0]}]}
    assert s.request("POST", "/v1/gateway/metrics", token=viewer,
                     json=good).status_code == 403
    for body, field in (({**good, "instance": "../x"}, "instance"),
                        ({**good, "uptime_ms": "soon"}, "uptime_ms"),
                        ({**good, "deployments": [{"name": "chat"}]},
                         "deployments")):
        r = s.request("POST", "/v1/gateway/metrics", json=body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["field"] == field
    r = s.request("POST", "/v1/gateway/metrics", data="{",
                  headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert s.request("POST", "/v1/gateway/metrics",
                     json=good).status_code == 202
