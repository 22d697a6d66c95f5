"""Metrics and dashboards end to end.

The server's GET /metrics against a live server (valid exposition by
promtool's parser, refused without a token, the numbers after a job ran);
then Debian's Prometheus scraping a live server, gateway and exporter on
loopback with the dashboards' rules loaded, and every panel's query of
every dashboard under dashboards/ and every rule's expression evaluated
through its HTTP API: one that returns no series fails, naming it. The
rules also pass `promtool check rules` and their `promtool test rules`
unit tests."""
import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlparse

import requests
import yaml

from conftest import job_yaml, wait_for
from test_exporter import exporters, promtool_check  # noqa: F401 (fixture)
from test_gateway import (deployment, gateways, key,  # noqa: F401
                          routes, upstreams)

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = REPO / "dashboards"
RULES = sorted((DASHBOARDS / "rules").glob("*.yml"))
RULE_TESTS = sorted((DASHBOARDS / "rules" / "tests").glob("*.yml"))

# A task that commits one checkpoint by the contract, then ends.
CHECKPOINT_TASK = ('d="$KILN_CHECKPOINT_DIR/step-000001"; mkdir -p "$d.tmp"; '
                   'head -c 4096 /dev/zero > "$d.tmp/state"; mv "$d.tmp" "$d"; '
                   'sleep 2')


def scrape(server, token="admin"):
    r = server.request("GET", "/metrics", token=token)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return r.text


def value(text, series):
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {series!r} in:\n{text}")


def at(name, **labels):
    """The series name{labels...} as the exposition writes it."""
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def test_server_metrics_need_a_token(server):
    r = server.request("GET", "/metrics", token=None)
    assert r.status_code == 401, r.text
    r = server.request("GET", "/metrics", token="not-a-token")
    assert r.status_code == 401, r.text
    viewer = server.create_token("grafana", "viewer")
    promtool_check(scrape(server, token=viewer))


def test_server_metrics_count_what_happened(server):
    node = server.request("GET", "/v1/nodes").json()["nodes"][0]["name"]
    before = scrape(server)
    assert value(before, 'kiln_jobs{state="queued"}') == 0
    assert value(before, at("kiln_node_gpus", node=node)) == 4
    assert value(before, at("kiln_node_state", node=node, state="ready")) == 1
    assert value(before, at("kiln_node_state", node=node, state="cordoned")) == 0
    assert 'kiln_build_info{version="' in before

    jid = server.submit(job_yaml("ck", ["/bin/sh", "-c", CHECKPOINT_TASK],
                                 priority=7, resources={"gpus": 2},
                                 checkpoint={"keep": 1}))
    wait_for(lambda: value(scrape(server),
                           at("kiln_gpu_allocated_ratio", node=node, gpu="1")) == 1,
             what="two GPUs allocated")
    running = scrape(server)
    promtool_check(running)
    assert value(running, at("kiln_node_gpus_allocated", node=node)) == 2
    assert value(running, 'kiln_jobs{state="running"}') == 1
    assert value(running, 'kiln_scheduler_placements_total{outcome="placed"}') == 1
    assert value(running, 'kiln_queue_wait_seconds_count{priority="7"}') == 1
    # The priority's queue series stay, at 0, once its jobs have left.
    assert value(running, 'kiln_queue_jobs{priority="7"}') == 0
    assert value(running, 'kiln_queue_oldest_wait_seconds{priority="7"}') == 0
    server.wait_state(jid, "succeeded")
    done = wait_for(lambda: (lambda t: t if value(
        t, "kiln_checkpoint_sync_duration_seconds_count") >= 1 else None)(
            scrape(server)), what="the checkpoint's sync counted")
    assert value(done, "kiln_checkpoint_sync_bytes_total") >= 4096
    assert value(done, "kiln_checkpoint_sync_failures_total") == 0
    assert value(done, 'kiln_jobs{state="succeeded"}') == 1
    assert value(done, "kiln_goodput_useful_task_seconds_total") > 0
    assert value(done, "kiln_store_commit_duration_seconds_count") > 0
    # The GPU job gives fragmentation a workload to measure against.
    assert value(done, at("kiln_node_gpu_fragmentation", node=node)) >= 0
    promtool_check(done)


def test_exporter_identity_series_are_this_machines(exporters):
    """node_uname_info carries uname(2)'s fields, as node_exporter's
    does; node_os_info os-release's; node_time_seconds the clock."""
    e = exporters()
    before = time.time()
    text = requests.get(e.url, timeout=10).text
    promtool_check(text)
    u = os.uname()
    want = at("node_uname_info", domainname=nis_domainname(),
              machine=u.machine, nodename=u.nodename, release=u.release,
              sysname=u.sysname, version=u.version)
    assert value(text, want) == 1
    os_release = dict(line.split("=", 1) for line in Path(
        "/etc/os-release").read_text().splitlines() if "=" in line)
    assert f'id="{os_release["ID"].strip(chr(34))}"' in \
        next(line for line in text.splitlines()
             if line.startswith("node_os_info{"))
    assert abs(value(text, "node_time_seconds") - before) < 60
    assert value(text, "node_time_seconds") > value(
        text, "node_boot_time_seconds")


def nis_domainname():
    """The NIS domain name as uname(2) has it ("(none)" when unset)."""
    return Path("/proc/sys/kernel/domainname").read_text().strip()


# ---- Prometheus against the live processes ----

# Grafana's variables as the dashboards use them: each =~ matcher takes
# every value; rates take a window holding several 1 s scrapes.
VARIABLES = {"$__rate_interval": "1m", "$datasource": "prometheus"}
ALL = ".*"
# An alert's expression is `SERIES OP NUMBER` (dashboards/rules/kiln.yml):
# the series it watches must exist even while it does not fire.
THRESHOLD = re.compile(r"^(?P<series>.*?)\s*(==|!=|>=|<=|>|<)\s*-?[0-9.]+$",
                       re.S)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def substitute(expr):
    for name, v in VARIABLES.items():
        expr = expr.replace(name, v)
    return re.sub(r"\$\{?[a-z_]+\}?", ALL, expr)


class Prometheus:
    """Debian's prometheus on a loopback port with its data under dir."""

    def __init__(self, dir, scrape_configs):
        self.dir = dir
        self.dir.mkdir()
        # Scrapes and rule runs come quickly, so that the few a test
        # waits for take a second or so.
        config = {"global": {"scrape_interval": "250ms",
                             "evaluation_interval": "250ms"},
                  "rule_files": [str(r) for r in RULES],
                  "scrape_configs": scrape_configs}
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = open(self.dir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [shutil.which("prometheus"),
             f"--config.file={self.dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address={self.url[len('http://'):]}"],
            stdout=self.log, stderr=self.log, cwd=self.dir)
        wait_for(lambda: self.ready() or self.proc.poll() is not None,
                 timeout=60, what="prometheus to be ready")
        assert self.proc.poll() is None, self.log_text()

    def log_text(self):
        return (self.dir / "prometheus.log").read_text()[-4000:]

    def ready(self):
        try:
            return requests.get(self.url + "/-/ready", timeout=2).ok
        except requests.ConnectionError:
            return False

    def query(self, expr):
        r = requests.get(self.url + "/api/v1/query", params={"query": expr},
                         timeout=30)
        body = r.json()
        assert body["status"] == "success", f"{expr}: {body}"
        return body["data"]["result"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()
        shutil.rmtree(self.dir)


def gateway_traffic(gateways, home, upstreams):
    """A gateway whose deployment `chat` has one dead replica and falls
    back to `chat-small`; key `app` calls it, key `tight` (1 request a
    minute) gets a 429."""
    dead = upstreams("dead")
    dead.kill()
    small = upstreams("small")
    doc = routes([deployment("chat", [dead], fallback="chat-small"),
                  deployment("chat-small", [small])],
                 [key("app", "sk-app", ["chat", "chat-small"]),
                  key("tight", "sk-tight", ["chat-small"], rpm=1)])
    g = gateways(home, doc, args=["--breaker-failures", "1",
                                  "--breaker-cooldown", "100ms"])
    for _ in range(3):
        r = g.call("sk-app", "chat")
        assert r.status_code == 200, r.text
        assert r.headers["x-kiln-fallback"] == "chat-small"
    assert g.call("sk-tight", "chat-small").status_code == 200
    assert g.call("sk-tight", "chat-small").status_code == 429
    assert g.metric("kiln_gateway_fallbacks_total", deployment="chat") == 3
    assert g.metric("kiln_gateway_breaker_opens_total", deployment="chat") >= 1
    assert g.metric("kiln_gateway_key_requests_total", key="app") == 3
    assert g.metric("kiln_gateway_key_tokens_total", key="app") == 30
    assert g.metric("kiln_gateway_key_rate_limited_total", key="tight") == 1
    assert g.metric("kiln_gateway_key_fallbacks_total", key="app") == 3
    assert g.metric("kiln_gateway_key_request_duration_seconds_count",
                    key="tight") == 2
    promtool_check(requests.get(g.url + "/metrics", timeout=10, headers={
        "Authorization": f"Bearer {g.metrics_key}"}).text)
    return g


def target(url):
    return urlparse(url).netloc


def panels(board):
    for p in board["panels"]:
        yield from panels(p) if p.get("type") == "row" and p.get("panels") \
            else [p]


def no_series_in_dashboards(prom):
    """Every dashboard variable's and panel target's query that returns
    no series, as 'file: panel: expr'."""
    missing = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for var in board["templating"]["list"]:
            if var["type"] != "query":
                continue
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)",
                             var["query"]["query"])
            assert m, f"{path.name}: variable {var['name']}: not label_values"
            if not prom.query(substitute(m.group(1))):
                missing.append(f"{path.name}: variable ${var['name']}: "
                               f"{var['query']['query']}")
        for p in panels(board):
            if p["type"] == "row":
                continue
            assert p["targets"], f"{path.name}: {p['title']}: no query"
            for t in p["targets"]:
                if not prom.query(substitute(t["expr"])):
                    missing.append(f"{path.name}: panel {p['title']!r}: "
                                   f"{t['expr']}")
    return missing


def no_series_in_rules(prom):
    missing = []
    for path in RULES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                expr = rule["expr"]
                if "alert" in rule:
                    m = THRESHOLD.match(expr.strip())
                    assert m, f"{rule['alert']}: not `SERIES OP NUMBER`"
                    expr = m.group("series")
                if not prom.query(expr):
                    name = rule.get("record") or rule["alert"]
                    missing.append(f"{path.name}: {name}: {expr}")
    return missing


def test_every_panel_and_rule_has_series(server, exporters, gateways,
                                         upstreams, tmp_path):
    viewer = tmp_path / "viewer.token"
    viewer.write_text(server.create_token("prometheus", "viewer"))
    home = tmp_path / "gateway-home"
    home.mkdir()
    g = gateway_traffic(gateways, home, upstreams)
    key_file = tmp_path / "gateway.key"
    key_file.write_text(g.metrics_key)
    exporter = exporters("--hostname", "gpu-node-1", nvml="h100x2.json")
    # A GPU job that syncs a checkpoint, and one that never fits.
    done = server.submit(job_yaml("ck", ["/bin/sh", "-c", CHECKPOINT_TASK],
                                  resources={"gpus": 1},
                                  checkpoint={"keep": 1}))
    server.submit(job_yaml("huge", ["/bin/true"], priority=5,
                           resources={"gpus": 8}))
    server.wait_state(done, "succeeded")
    wait_for(lambda: value(scrape(server),
                           "kiln_checkpoint_sync_duration_seconds_count") >= 1,
             what="the checkpoint's sync counted")

    prom = Prometheus(tmp_path / "prometheus", [
        {"job_name": "kiln-server",
         "authorization": {"credentials_file": str(viewer)},
         "static_configs": [{"targets": [target(server.url)]}]},
        {"job_name": "kiln-gateway",
         "authorization": {"credentials_file": str(key_file)},
         "static_configs": [{"targets": [target(g.url)]}]},
        {"job_name": "node",
         "static_configs": [{"targets": [target(exporter.url)]}]},
    ])
    try:
        # Several scrapes of each, and the rules evaluated over them.
        wait_for(lambda: len(prom.query(
            "count_over_time(up[1m]) >= 5 and up == 1")) == 3,
            timeout=60, interval=0.1, what="5 good scrapes of each target")
        wait_for(lambda: prom.query("kiln:goodput:ratio"), timeout=30,
                 what="the recording rules evaluated")
        rules = requests.get(prom.url + "/api/v1/rules", timeout=10).json()
        bad = [f"{r['name']}: {r.get('lastError')}"
               for grp in rules["data"]["groups"] for r in grp["rules"]
               if r["health"] != "ok"]
        assert not bad, bad
        missing = no_series_in_dashboards(prom) + no_series_in_rules(prom)
        assert not missing, "no series for:\n" + "\n".join(missing)
    finally:
        prom.stop()


def test_dashboards_import_cleanly():
    """What Grafana needs to import each file as is: a unique uid, panel
    ids unique within it, every panel on the 24-column grid and reading
    the dashboard's own data source variable, every target with a refId
    and an expression."""
    boards = [json.loads(p.read_text()) for p in sorted(
        DASHBOARDS.glob("*.json"))]
    assert len(boards) == 3
    assert len({b["uid"] for b in boards}) == len(boards)
    for b in boards:
        names = [v["name"] for v in b["templating"]["list"]]
        assert "datasource" in names and len(set(names)) == len(names)
        ids = [p["id"] for p in b["panels"]]
        assert len(set(ids)) == len(ids), b["uid"]
        for p in panels(b):
            g = p["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24, (b["uid"], p["title"])
            if p["type"] == "row":
                continue
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            refs = [t["refId"] for t in p["targets"]]
            assert len(set(refs)) == len(refs) and all(
                t["expr"].strip() for t in p["targets"]), p["title"]


def test_promtool_checks_and_tests_the_rules():
    promtool = shutil.which("promtool")
    assert RULES and RULE_TESTS
    res = subprocess.run([promtool, "check", "rules", *map(str, RULES)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([promtool, "test", "rules", *map(str, RULE_TESTS)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout
