#!/usr/bin/python3
"""How fast the console's jobs page's API calls answer, by store size.

For each size N: a server home whose store holds N ended jobs (a mix of
succeeded, failed and cancelled, five owners, each with its spec and one
attempt; written straight into the SQLite file while no server runs,
after a first start made the schema), then a server with 8 simulated
GPUs on it. Each call the jobs page makes is timed R times over one
kept-alive connection with a viewer's token, request to last byte:

  first    GET /v1/jobs?limit=50&order=desc           the newest page
  deep     ...&before=N/2                              a page half way back
  state    ...&state=failed                            filtered by state
  owner    ...&owner=dana                              filtered by owner
  name     ...&name=j<N-7>                             one name
  detail   GET /v1/jobs/<N/3>                          one job's page

and prints per call the median, p90, p99, max and mean ± standard
deviation in milliseconds, one JSON line per size.

    bench/console/jobs.py --kiln build/src/cmd/kiln [--sizes 100,100000]
"""
import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "metrics"))
from scrape import start, stop, summary  # noqa: E402

STATES = ("succeeded", "succeeded", "succeeded", "failed", "cancelled")
OWNERS = ("alice", "bob", "carol", "dana", "erin")
SPEC = json.dumps({"kind": "Job", "name": "j", "command": ["/bin/true"],
                   "resources": {"gpus": 1, "cpus": 1, "memory_bytes": 1 << 30},
                   "retries": 0, "preemptible": False})


def fill(db, n):
    """n ended jobs with one attempt each, as the store writes them."""
    con = sqlite3.connect(db)
    now = int(time.time() * 1000)
    con.executemany(
        "INSERT INTO jobs (name, owner, state, priority, tasks, filename,"
        " spec_yaml, spec_json, submitted_at, started_at, ended_at,"
        " not_before, attempts, retries_used, cancel_requested, reason,"
        " exit_code) VALUES (?, ?, ?, 0, 1, 'job.yaml', ?, ?, ?, ?, ?, 0, 1,"
        " 0, 0, NULL, 0)",
        ((f"j{i}", OWNERS[i % len(OWNERS)], STATES[i % len(STATES)],
          "kind: Job\n", SPEC, now + i, now + i, now + i + 1000)
         for i in range(n)))
    con.execute(
        "INSERT INTO attempts (job_id, number, state, started_at, ended_at,"
        " exit_code, signal, useful_ms, lost_ms)"
        " SELECT id, 1, state, started_at, ended_at, 0, 0, 1000, 0"
        " FROM jobs")
    con.commit()
    con.close()


def calls(n):
    page = "/v1/jobs?limit=50&order=desc"
    return {"first": page,
            "deep": f"{page}&before={max(1, n // 2)}",
            "state": f"{page}&state=failed",
            "owner": f"{page}&owner=dana",
            "name": f"{page}&name=j{max(0, n - 7)}",
            "detail": f"/v1/jobs/{max(1, n // 3)}"}


def measure(kiln, n, rounds):
    with tempfile.TemporaryDirectory(prefix="kiln-bench-console-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        proc, _ = start(kiln, home)
        stop(proc)
        fill(home / "kiln.db", n)
        proc, url = start(kiln, home)
        try:
            admin = (home / "admin.token").read_text().strip()
            r = requests.post(url + "/v1/tokens", json={
                "name": "console", "role": "viewer"},
                headers={"Authorization": f"Bearer {admin}"}, timeout=30)
            s = requests.Session()
            s.headers["Authorization"] = f"Bearer {r.json()['secret']}"
            out = {"jobs": n, "rounds": rounds}
            for name, path in calls(n).items():
                times = []
                for i in range(rounds + 5):
                    t0 = time.perf_counter()
                    r = s.get(url + path, timeout=30)
                    took = time.perf_counter() - t0
                    assert r.status_code == 200, (path, r.text)
                    if i >= 5:  # warm-up: first statements, page cache
                        times.append(took * 1000)
                out[name] = summary(times, "")
        finally:
            stop(proc)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--sizes", default="100,100000")
    ap.add_argument("--rounds", type=int, default=100)
    args = ap.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        print(json.dumps(measure(os.path.abspath(args.kiln), n, args.rounds)),
              flush=True)


if __name__ == "__main__":
    main()
