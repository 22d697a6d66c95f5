#!/usr/bin/python3
"""What the gateways' traffic reports cost the server, by deployment count.

For each count D: a server on a fresh home with D deployments of no
replica (nothing runs), then:

  list_bare      GET /v1/deployments before any report (no traffic)
  report         POST /v1/gateway/metrics, the G gateways in turn, every
                 deployment in each report with its 14-bucket histogram
                 (as a gateway sends them, counters growing each round)
  list_traffic   GET /v1/deployments once G gateways reported all D
                 (each deployment's traffic summed over G)

each timed R times over one kept-alive connection (after 5 unmeasured),
request to last byte, with the admin's token; one JSON line per count
with the median, p90, p99, max and mean ± standard deviation in ms.

    bench/console/traffic.py --kiln build/src/cmd/kiln [--counts 10,1000]
"""
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "metrics"))
from scrape import start, stop, summary  # noqa: E402

PER_USER = 100  # kiln server --max-deployments-per-user's default
BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]


def report(instance, names, k):
    """A gateway's report after round k: every deployment with k * 10
    requests spread over the buckets."""
    return {"instance": instance, "uptime_ms": 1000 * (k + 1),
            "deployments": [{
                "name": n, "requests": 10 * k, "errors": k, "rate_limited": k,
                "fallbacks": 0, "upstream_errors": 0, "tokens": 100 * k,
                "latency_bounds_s": BOUNDS,
                "latency_counts": [k] * 10 + [0] * 4} for n in names]}


def timed(fn, rounds):
    times = []
    for i in range(rounds + 5):
        t0 = time.perf_counter()
        r = fn(i)
        took = time.perf_counter() - t0
        assert r.status_code in (200, 202), r.text
        if i >= 5:
            times.append(took * 1000)
    return summary(times, "")


def measure(kiln, count, gateways, rounds):
    out = {"deployments": count, "gateways": gateways, "rounds": rounds}
    with tempfile.TemporaryDirectory(prefix="kiln-bench-traffic-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        proc, url = start(kiln, home)
        try:
            s = requests.Session()
            s.headers["Authorization"] = "Bearer " + \
                (home / "admin.token").read_text().strip()
            names = [f"d{i}" for i in range(count)]
            for i, n in enumerate(names):
                # A user may own PER_USER deployments: a user per so many.
                if i % PER_USER == 0:
                    r = s.post(url + "/v1/tokens", timeout=60, json={
                        "name": f"owner{i}", "role": "user"})
                    owner = {"Authorization": "Bearer " + r.json()["secret"]}
                r = s.post(url + "/v1/deployments", params={"file": "d.yaml"},
                           data=f"kind: Deployment\nname: {n}\nmodel: /tmp\n"
                           "command: [\"/bin/true\"]\nreplicas: 0\n",
                           headers=owner, timeout=60)
                assert r.status_code in (200, 201), r.text
            out["list_bare"] = timed(
                lambda i: s.get(url + "/v1/deployments", timeout=60), rounds)
            # Call i is gateway i % G's report of round i // G.
            bodies = [[json.dumps(report(f"gw{g}", names, k))
                       for k in range((rounds + 5) // gateways + 1)]
                      for g in range(gateways)]
            out["report_bytes"] = len(bodies[0][-1])
            out["report"] = timed(lambda i: s.post(
                url + "/v1/gateway/metrics", timeout=60,
                data=bodies[i % gateways][i // gateways],
                headers={"Content-Type": "application/json"}), rounds)
            listed = s.get(url + "/v1/deployments", timeout=60).json()
            t = listed["deployments"][0]["traffic"]
            assert t and t["gateways"] == gateways, t
            out["list_traffic"] = timed(
                lambda i: s.get(url + "/v1/deployments", timeout=60), rounds)
        finally:
            stop(proc)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag, kw in (
            ("--kiln", {"required": True, "help": "the kiln binary to run"}),
            ("--counts", {"default": "10,1000",
                          "help": "deployment counts, comma-separated"}),
            ("--gateways", {"type": int, "default": 4,
                            "help": "gateways reporting every deployment"}),
            ("--rounds", {"type": int, "default": 50,
                          "help": "timed requests per call and count"})):
        ap.add_argument(flag, **kw)
    args = ap.parse_args()
    results = (measure(os.path.abspath(args.kiln), int(n), args.gateways,
                       args.rounds) for n in args.counts.split(","))
    for line in map(json.dumps, results):
        print(line, flush=True)


if __name__ == "__main__":
    main()
