#!/usr/bin/env python3
"""Placements per second and peak memory of every packing policy on the
full openb cluster (1,213 nodes, 6,212 GPUs), one `kiln sim` process per
policy so each peak RSS is that policy's own (os.wait4 reports it), then
the whole 10-seed, all-policy experiment once, timed end to end.

usage: bench/sim/run.py --kiln PATH [--data DIR] [--out FILE.json]
Prints a table; --out also writes the figures as JSON. Single-threaded:
kiln sim runs one placement at a time. Exits 0 without measuring when
the openb data is absent (it is not part of the repository)."""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

POLICIES = ["random", "dot-product", "gpu-clustering", "gpu-packing",
            "best-fit", "fgd", "kiln"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--data", default=str(
        Path(__file__).resolve().parents[2].parent / "shared" / "data" / "openb"))
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--out")
    args = ap.parse_args()
    nodes = Path(args.data) / "openb_node_list_gpu_node.csv"
    pods = Path(args.data) / "openb_pod_list_default.csv"
    if not nodes.exists() or not pods.exists():
        print(f"bench/sim: no openb data in {args.data}; skipped")
        return 0
    rows = []
    for policy in POLICIES:
        cmd = [args.kiln, "sim", "--nodes", str(nodes), "--pods", str(pods),
               "--policy", policy, "--seeds", args.seeds]
        # Popen + wait4 so the rusage is this child's alone.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        start = time.monotonic()
        out = proc.stdout.read().decode()
        err = proc.stderr.read().decode()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        if status != 0:
            print(f"bench/sim: {policy} failed: {err}", file=sys.stderr)
            return 1
        speed = next(l.split() for l in out.splitlines()
                     if l.split()[:1] == [policy] and len(l.split()) == 5)
        rows.append({"policy": policy, "pods": int(speed[1]),
                     "seconds": float(speed[3]),
                     "pods_per_s": int(speed[4]),
                     "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
                     "process_wall_s": round(wall, 2)})
    start = time.monotonic()
    whole = subprocess.run([args.kiln, "sim", "--nodes", str(nodes),
                            "--pods", str(pods), "--seeds", args.seeds],
                           capture_output=True, text=True)
    whole_s = time.monotonic() - start
    if whole.returncode != 0:
        print(f"bench/sim: full experiment failed: {whole.stderr}",
              file=sys.stderr)
        return 1
    print(f"{'POLICY':16} {'PODS':>7} {'PODS/S':>9} {'PEAK RSS MB':>12}")
    for r in rows:
        print(f"{r['policy']:16} {r['pods']:7} {r['pods_per_s']:9} "
              f"{r['peak_rss_mb']:12}")
    print(f"whole experiment ({len(POLICIES)} policies x seeds "
          f"{args.seeds}): {whole_s:.1f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(
            {"policies": rows, "whole_experiment_s": round(whole_s, 2),
             "seeds": args.seeds}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
