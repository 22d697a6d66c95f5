#!/usr/bin/python3
"""How long one scrape of `kiln server`'s GET /metrics takes, by store size.

For each size N: a server home whose store holds N ended jobs with one
attempt each (written straight into the SQLite file while no server runs,
after a first start made the schema), then a server with 8 simulated GPUs
on it, scraped R times over one kept-alive connection with a viewer's
token, as Prometheus scrapes. Prints per size the median, p90, p99, max,
and mean ± standard deviation of the wall time per scrape (request to
last byte), and the answer's size; then the same for GET /healthz from
a second client while the first scrapes without pause (healthz_*), which
shows whether a scrape holds up the server's loop. The store's part is
two queries per scrape (jobs by state, the attempts' goodput summed), run
on a request worker.

    bench/metrics/scrape.py --kiln build/src/cmd/kiln [--sizes 100,100000]
"""
import argparse
import contextlib
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import requests


def start(kiln, home):
    url_file = home / "server.url"
    if url_file.exists():
        url_file.unlink()
    env = dict(os.environ, KILN_HOME=str(home))
    env.pop("KILN_SERVER", None)
    env.pop("KILN_TOKEN", None)
    log = open(home / "server.log", "ab")
    proc = subprocess.Popen([kiln, "server", "--listen", "127.0.0.1:0",
                             "--gpus", "8xH100-80GB", "--no-limits"],
                            env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while not (url_file.exists() and url_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit((home / "server.log").read_text()[-2000:])
        time.sleep(0.05)
    return proc, url_file.read_text().strip()


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def fill(db, n):
    """n succeeded jobs, one attempt each, as the store writes them."""
    con = sqlite3.connect(db)
    now = int(time.time() * 1000)
    con.executemany(
        "INSERT INTO jobs (name, owner, state, priority, tasks, filename,"
        " submitted_at, started_at, ended_at, not_before, attempts,"
        " retries_used, cancel_requested, reason, exit_code)"
        " VALUES (?, 'bench', 'succeeded', 0, 1, 'job.yaml', ?, ?, ?, 0, 1,"
        " 0, 0, NULL, 0)",
        ((f"j{i}", now, now, now + 1000) for i in range(n)))
    con.execute(
        "INSERT INTO attempts (job_id, number, state, started_at, ended_at,"
        " exit_code, signal, useful_ms, lost_ms)"
        " SELECT id, 1, 'succeeded', started_at, ended_at, 0, 0, 1000, 0"
        " FROM jobs")
    con.commit()
    con.close()


@contextlib.contextmanager
def served(kiln, n, filler, viewer, prefix):
    """A server on a fresh home whose store filler(db, n) filled while no
    server ran (a first start made the schema): yields its URL and a
    kept-alive session with the token of a new viewer named viewer."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        proc, _ = start(kiln, home)
        stop(proc)
        filler(home / "kiln.db", n)
        proc, url = start(kiln, home)
        try:
            admin = (home / "admin.token").read_text().strip()
            r = requests.post(url + "/v1/tokens", json={
                "name": viewer, "role": "viewer"},
                headers={"Authorization": f"Bearer {admin}"}, timeout=30)
            s = requests.Session()
            s.headers["Authorization"] = f"Bearer {r.json()['secret']}"
            yield url, s
        finally:
            stop(proc)


def measure(kiln, n, rounds):
    with served(kiln, n, fill, "prom", "kiln-bench-metrics-") as (url, s):
        times, size = [], 0
        for i in range(rounds + 5):
            t0 = time.perf_counter()
            r = s.get(url + "/metrics", timeout=30)
            took = time.perf_counter() - t0
            assert r.status_code == 200, r.text
            size = len(r.content)
            if i >= 5:  # warm-up: first statements, page cache
                times.append(took * 1000)
        healthz = during_scrapes(url, s, rounds)
    return dict({"jobs": n, "scrapes": rounds, "bytes": size},
                **summary(times, ""), **summary(healthz, "healthz_"))


def summary(times, prefix):
    times = sorted(times)
    pick = lambda q: times[min(len(times) - 1, int(q * len(times)))]
    return {prefix + "median_ms": round(statistics.median(times), 3),
            prefix + "p90_ms": round(pick(0.9), 3),
            prefix + "p99_ms": round(pick(0.99), 3),
            prefix + "max_ms": round(times[-1], 3),
            prefix + "mean_ms": round(statistics.mean(times), 3),
            prefix + "sd_ms": round(statistics.stdev(times), 3)}


def during_scrapes(url, scraper, rounds):
    """GET /healthz's wall times while another client scrapes without
    pause: whether a scrape holds up the server's loop."""
    stop_flag = threading.Event()

    def scrape_on():
        while not stop_flag.is_set():
            scraper.get(url + "/metrics", timeout=30)
    t = threading.Thread(target=scrape_on)
    t.start()
    times = []
    try:
        probe = requests.Session()
        for _ in range(rounds):
            t0 = time.perf_counter()
            assert probe.get(url + "/healthz", timeout=30).status_code == 200
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        stop_flag.set()
        t.join()
    return times


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
