"""A deployment's traffic as the gateway reports it to the server: real
requests through a real `kiln gateway` (some refused with 429, some
served by the fallback) show up in the deployment API's `traffic` and
on the console's deployment pages; what the report route takes is
bounded and refused to a viewer."""
from decimal import Decimal, ROUND_HALF_UP
import sys
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import kiln  # noqa: E402
from conftest import wait_for  # noqa: E402
from test_console import (assert_same_origin, js_errors, login,  # noqa: E402
                          shot, stack, wait_text)  # noqa: F401 (fixture)
from test_deployments import (MODEL_SERVER, deploy, detail,  # noqa: E402
                              wait_ready)

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


def gateway_counts(g, deployment):
    """The deployment's counts on the gateway's own /metrics."""
    r = requests.get(g.url + "/metrics", timeout=10, headers={
        "Authorization": f"Bearer {g.metrics_key}"})
    assert r.status_code == 200, r.text
    got = {"requests": 0, "errors": 0}
    label = f'deployment="{deployment}"'
    for line in r.text.splitlines():
        if line.startswith("kiln_gateway_requests_total{") and label in line:
            got["requests"] += int(float(line.split()[-1]))
            if 'code="5' in line:
                got["errors"] += int(float(line.split()[-1]))
    got["rate_limited"] = int(g.metric("kiln_gateway_rate_limited_total",
                                       deployment=deployment))
    got["fallbacks"] = int(g.metric("kiln_gateway_fallbacks_total",
                                    deployment=deployment))
    return got


def patient(name, extra=""):
    """A one-replica deployment whose probes are patient enough for a
    loaded machine: a replica restarted by a slow liveness answer would
    make calls fail that the test counts on."""
    return (f"kind: Deployment\nname: {name}\nmodel: /tmp\n"
            f"command: [\"/usr/bin/python3\", \"{MODEL_SERVER}\"]\n"
            "replicas: 1\nreadiness: {path: /health, period_s: 0.5}\n"
            "liveness: {path: /live, period_s: 1, failure_threshold: 30}\n"
            + extra)


def drive_traffic(s, g):
    """Requests to chat: served, refused by a key's limit, and served by
    its fallback once chat has no replica. Returns what the client saw
    of them (after the first that found chat routed): {"requests",
    "rate_limited", "errors", "fallbacks"}."""
    deploy(s, patient("small"))
    deploy(s, patient("chat", "fallback: small\n"))
    wait_ready(s, "small", 1, timeout=60)
    wait_ready(s, "chat", 1, timeout=60)
    # Two a minute: a token back every 30 s, longer than the calls take.
    limited = key(s, "limited", ["chat"], rpm=2)
    bulk = key(s, "bulk", ["chat", "small"])
    g.metrics_key = bulk  # any key reads the gateway's /metrics
    g.start()
    wait_for(lambda: g.call(bulk, "chat").status_code == 200,
             what="the gateway to route chat")
    seen = {"requests": 0, "rate_limited": 0, "errors": 0, "fallbacks": 0}

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
    assert codes[:2] == [200, 200] and codes.count(429) >= 4, codes
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

    # The server's numbers are the gateway's own (its /metrics), which
    # hold what this test saw and whatever the gateway answered before
    # it routed chat.
    truth = gateway_counts(g, "chat")
    assert truth["rate_limited"] == seen["rate_limited"] >= 4
    # A call that fell back and failed there too counts as a fallback
    # without the header on its answer.
    assert truth["fallbacks"] >= seen["fallbacks"] >= 3
    assert truth["requests"] >= seen["requests"]
    assert truth["errors"] >= seen["errors"]

    last = []

    def settled():
        last[:] = [detail(s, "chat")["traffic"]]
        t = last[0]
        return t if t and t["requests"] == truth["requests"] else None
    try:
        t = wait_for(settled, timeout=30, what=f"traffic to reach {truth}")
    except AssertionError as e:
        raise AssertionError(f"{e}; the server has {last}; "
                             f"the gateway's log:\n{g.log.read_text()[-3000:]}")
    for k in ("rate_limited", "fallbacks", "errors"):
        assert t[k] == truth[k], (k, t, truth)
    assert t["gateways"] == 1
    assert 0 < t["latency_p50_ms"] <= t["latency_p99_ms"]
    assert t["requests_per_s"] > 0 and t["window_s"] > 0
    # `kiln deployments chat` says it too.
    shown = s.cli("deployments", "chat", check=True).stdout
    line = next(x for x in shown.splitlines() if x.startswith("traffic:"))
    assert f" {t['requests']} requests in " in line
    assert f", {t['errors']} 5xx, {t['rate_limited']} 429, " \
        f"{t['fallbacks']} fallbacks (1 gateway)" in line
    assert f"p50 {t['latency_p50_ms']:.1f} ms" in line
    # The Python client's Deployment has it.
    client = kiln.Client(s.url, token=s.admin_token, timeout=30)
    got = client.deployments.get("chat").traffic
    assert {k: got[k] for k in truth} == truth
    # The list carries it too.
    listed = {d["name"]: d for d in
              s.request("GET", "/v1/deployments").json()["deployments"]}
    assert listed["chat"]["traffic"]["requests"] == t["requests"]

    login(browser, s, s.create_token("watcher", "viewer"))
    browser.get(f"{s.url}/#/deployments")
    row = wait_text(browser, "#page-deployments tr", "chat")
    assert str(t["fallbacks"]) in row.text
    browser.get(f"{s.url}/#/deployment/chat")
    box = wait_text(browser, "#page-deployment .traffic",
                    f"{t['requests']} in")
    assert f"Rate limited (429)\n{t['rate_limited']}" in box.text
    assert f"Fallbacks\n{t['fallbacks']}" in box.text
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
