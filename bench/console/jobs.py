#!/usr/bin/python3
"""How fast the console's jobs page's API calls answer, by store size.

For each size N: a server home whose store holds N ended jobs (a mix of
succeeded, failed and cancelled, five owners, each with its spec and one
attempt; written straight into the SQLite file while no server runs,
after a first start made the schema, as bench/metrics/scrape.py does), then a server with 8 simulated
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "metrics"))
from scrape import fill as fill_succeeded, served, summary  # noqa: E402

STATES = ("succeeded", "succeeded", "succeeded", "failed", "cancelled")
OWNERS = ("alice", "bob", "carol", "dana", "erin")
SPEC = json.dumps({"kind": "Job", "name": "j", "command": ["/bin/true"],
                   "resources": {"gpus": 1, "cpus": 1, "memory_bytes": 1 << 30},
                   "retries": 0, "preemptible": False})


def fill(db, n):
    """n ended jobs with one attempt each (bench/metrics' store), then
    their owners, states and specs varied by id."""
    fill_succeeded(db, n)

    def by_id(values):
        return "CASE id % {} {} END".format(len(values), " ".join(
            f"WHEN {i} THEN '{v}'" for i, v in enumerate(values)))
    con = sqlite3.connect(db)
    con.execute(f"UPDATE jobs SET owner = {by_id(OWNERS)},"
                f" state = {by_id(STATES)}, spec_yaml = 'kind: Job',"
                " spec_json = ?", (SPEC,))
    con.execute("UPDATE attempts SET state ="
                " (SELECT state FROM jobs WHERE id = job_id)")
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
    out = {"jobs": n, "rounds": rounds}
    with served(kiln, n, fill, "console", "kiln-bench-console-") as (url, s):
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
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True, help="the kiln binary to run")
    ap.add_argument("--sizes", default="100,100000",
                    help="store sizes to measure, comma-separated")
    ap.add_argument("--rounds", type=int, default=100,
                    help="timed requests per call and size")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    for n in map(int, args.sizes.split(",")):
        print(json.dumps(measure(kiln, n, args.rounds)), flush=True)


if __name__ == "__main__":
    main()
