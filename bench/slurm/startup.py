#!/usr/bin/python3
"""Start-up of `kiln server --executor slurm` on a cluster of many nodes.

No real Slurm has 10,000 nodes here, so `sinfo` and `scontrol` are two
small scripts on PATH that print a recorded-format answer: `sinfo --json`
in Slurm 22.05's shape (the fields kiln reads, as in
tests/fuzz/corpus/slurm/sinfo-typed.json) with N nodes gpu00001.. of
8 A100 GPUs each, and `scontrol show partition -o` with one partition
holding them all. Everything else is the real server: its store, its
inventory reading, its scheduler's node table and its cost ledger.

The server waits for its first reading of the cluster before it listens,
so its start-up is the time from exec to its URL file (then GET /v1/nodes
must list all N nodes). Each run starts a server on a fresh home (every
node is new), stops it cleanly, and starts it again on the same home (a
restart: the nodes come back from the store and are read again from
Slurm). With --baseline, each run does the same with that binary first,
so both are measured side by side under the same load. Prints one JSON
object: each run's seconds, their mean and spread, and the ratios.

Standard library only; run with /usr/bin/python3.

    bench/slurm/startup.py --kiln build/src/cmd/kiln --nodes 10000 --runs 3
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Bound on any one start (the slow path took about a minute).
START_LIMIT_S = 600


def node(i):
    name = f"gpu{i:05d}"
    return {
        "name": name, "hostname": name, "address": "127.0.0.1",
        "state": "idle", "state_flags": [], "reason": "",
        "partitions": ["gpu"], "active_features": "ib",
        "cpus": 64, "alloc_cpus": 0, "real_memory": 512000,
        "alloc_memory": 0, "gres": "gpu:a100:8", "gres_used": "gpu:a100:0",
    }


def write_fakes(bindir, n):
    sinfo = {"meta": {"Slurm": {"version": {"major": 22, "minor": 5,
                                            "micro": 8},
                                "release": "22.05.8"}},
             "errors": [], "nodes": [node(i) for i in range(1, n + 1)]}
    (bindir / "sinfo.json").write_text(json.dumps(sinfo))
    (bindir / "partitions.txt").write_text(
        "PartitionName=gpu AllowGroups=ALL Default=YES MaxNodes=UNLIMITED"
        " MaxTime=UNLIMITED MinNodes=0 MaxCPUsPerNode=UNLIMITED"
        f" Nodes=gpu[00001-{n:05d}] State=UP TotalCPUs={64 * n}"
        f" TotalNodes={n} DefMemPerNode=UNLIMITED"
        " MaxMemPerNode=UNLIMITED\n")
    for cmd, body in (("sinfo", f'cat "{bindir}/sinfo.json"\n'),
                      ("scontrol", f'cat "{bindir}/partitions.txt"\n')):
        path = bindir / cmd
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)


def nodes_listed(url, token):
    req = urllib.request.Request(url + "/v1/nodes",
                                 headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(req, timeout=60) as r:
        return len(json.load(r)["nodes"])


def start_once(kiln, home, env, n):
    url_file = home / "server.url"
    if url_file.exists():
        url_file.unlink()
    t0 = time.monotonic()
    log = open(home / "server.log", "ab")
    proc = subprocess.Popen([kiln, "server", "--listen", "127.0.0.1:0",
                             "--executor", "slurm"], env=env, stdout=log,
                            stderr=log)
    try:
        while not (url_file.exists() and url_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() - t0 > START_LIMIT_S:
                raise RuntimeError("server did not start:\n" +
                                   (home / "server.log").read_text()[-2000:])
            time.sleep(0.02)
        took = time.monotonic() - t0
        url = url_file.read_text().strip()
        token = (home / "admin.token").read_text().strip()
        listed = nodes_listed(url, token)
        if listed != n:
            raise RuntimeError(f"{listed} nodes listed, not {n}")
        return took
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--baseline", help="another kiln binary to compare")
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    bins = {"kiln": os.path.abspath(args.kiln)}
    if args.baseline:
        bins = {"baseline": os.path.abspath(args.baseline), **bins}
    times = {name: {"first_start": [], "restart": []} for name in bins}
    load_before = os.getloadavg()
    tmp = tempfile.mkdtemp(prefix="kiln-slurm-startup-")
    try:
        root = Path(tmp)
        bindir = root / "bin"
        bindir.mkdir()
        write_fakes(bindir, args.nodes)
        for r in range(args.runs):
            for name, kiln in bins.items():
                home = root / f"{name}{r}"
                home.mkdir()
                env = dict(os.environ, KILN_HOME=str(home),
                           PATH=f"{bindir}:{os.environ.get('PATH', '')}")
                # The binaries may be copies outside the tree.
                env.setdefault("KILN_DATA_DIR", str(REPO / "data"))
                env.pop("KILN_SERVER", None)
                env.pop("KILN_TOKEN", None)
                t = times[name]
                t["first_start"].append(start_once(kiln, home, env,
                                                   args.nodes))
                t["restart"].append(start_once(kiln, home, env, args.nodes))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def summary(xs):
        return {"runs_s": [round(x, 3) for x in xs],
                "mean_s": round(statistics.mean(xs), 3),
                "stdev_s": round(statistics.stdev(xs), 3)
                if len(xs) > 1 else 0.0}
    out = {"nodes": args.nodes, "loadavg_before": load_before,
           "loadavg_after": os.getloadavg()}
    for name, t in times.items():
        out[name] = {k: summary(v) for k, v in t.items()}
    if args.baseline:
        out["speedup"] = {
            k: round(statistics.mean(times["baseline"][k]) /
                     statistics.mean(times["kiln"][k]), 2)
            for k in ("first_start", "restart")}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
