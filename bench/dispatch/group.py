#!/usr/bin/python3
"""bench/dispatch/group.py: how many submits share a store commit, two
kiln binaries side by side.

C clients (threads, each its own keep-alive connection) send N submits
each, with an Idempotency-Key per submit as `kiln submit` sends (or
without, --no-key), of a job that never fits (hold=1, so nothing starts
and only the accepting path is measured). Each round runs both binaries,
the order alternating, each on a fresh server in a temporary KILN_HOME;
a side reports its store commits per submit (from /metrics: each commit
is one fsync), accepted submits per second and the server's CPU per
submit. Prints each round and the paired new/old ratios with their mean
and sample standard deviation, and writes the JSON to --out.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import requests

from run import load1, server_cpu_s, spread, store_commits

SPEC = ("kind: Job\nname: group\ncommand: [\"/bin/true\"]\n"
        "resources: {gpus: 1, gpu_model: [B200]}\n")


def side(kiln, clients, per_client, keyed):
    home = Path(tempfile.mkdtemp(prefix="kiln-group-"))
    env = dict(os.environ, KILN_HOME=str(home))
    server = subprocess.Popen(
        [kiln, "server", "--listen", "127.0.0.1:0", "--gpus", "8xH100-80GB",
         "--max-queued-jobs-per-user", str(clients * per_client + 1)],
        env=env, stdout=subprocess.DEVNULL,
        stderr=open(home / "server.log", "wb"))
    try:
        deadline = time.monotonic() + 30
        while not (home / "server.url").exists():
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("kiln server did not start: " +
                                 (home / "server.log").read_text())
            time.sleep(0.02)
        url = (home / "server.url").read_text().strip()
        token = (home / "admin.token").read_text().strip()
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {token}"
        errors = []

        def client():
            with requests.Session() as http:
                http.headers["Authorization"] = f"Bearer {token}"
                for _ in range(per_client):
                    headers = ({"Idempotency-Key": uuid.uuid4().hex}
                               if keyed else {})
                    r = http.post(url + "/v1/jobs?hold=1", data=SPEC,
                                  headers=headers)
                    if r.status_code != 201:
                        errors.append(r.text)

        load = load1()
        cpu0, commits0 = server_cpu_s(server.pid), store_commits(session, url)
        threads = [threading.Thread(target=client) for _ in range(clients)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        n = clients * per_client
        if errors:
            raise SystemExit(f"{kiln}: {errors[0]}")
        return {"kiln": kiln, "submits": n, "keyed": keyed,
                "commits_per_submit": round(
                    (store_commits(session, url) - commits0) / n, 3),
                "accepted_per_s": round(n / wall, 2),
                "server_cpu_ms_per_submit": round(
                    (server_cpu_s(server.pid) - cpu0) * 1000 / n, 3),
                "load1_before": load}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kiln", required=True, help="the kiln binary to measure")
    p.add_argument("--before", required=True, help="the kiln to compare with")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--submits", type=int, default=50,
                   help="submits per client")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--no-key", action="store_true",
                   help="submit without an Idempotency-Key")
    p.add_argument("--out", default="bench-group.json")
    a = p.parse_args()
    rounds, ratios = [], {"commits_per_submit": [], "accepted_per_s": [],
                          "server_cpu_ms_per_submit": []}
    for i in range(a.rounds):
        order = [a.before, a.kiln] if i % 2 == 0 else [a.kiln, a.before]
        got = {k: side(k, a.clients, a.submits, not a.no_key) for k in order}
        old, new = got[a.before], got[a.kiln]
        rounds.append({"before": old, "kiln": new})
        line = [f"round {i + 1} (load {old['load1_before']:.1f})"]
        for key in ratios:
            ratios[key].append(new[key] / old[key])
            line.append(f"{key} {new[key]} before {old[key]} "
                        f"({new[key] / old[key]:.2f}x)")
        print("; ".join(line), flush=True)
    Path(a.out).write_text(json.dumps({"rounds": rounds}, indent=2) + "\n")
    for key, values in ratios.items():
        print(f"kiln/before {key}: {spread(values)} "
              f"(rounds: {', '.join(f'{v:.2f}' for v in values)})")
    print(f"results: {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
