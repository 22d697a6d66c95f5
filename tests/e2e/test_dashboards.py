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
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from conftest import KILN, Server, job_yaml, wait_for
from test_exporter import FAKE_NVML, FIXTURES, promtool_check
from test_gateway import Gateway, Upstream, deployment, key, routes

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
