#!/usr/bin/env python3
"""The packing benchmark on the full openb traces (docs/scheduling.md,
docs/benchmarks.md):

1. speed: pods placed per second and peak memory of every policy on the
   default trace, one `kiln sim` process per policy so each peak RSS is
   that policy's own (os.wait4 reports it);
2. every trace: kiln against fgd (and best-fit), mean ± sd over seeds of
   the unallocated GPU, the paired difference at 100 % arrived with its t
   statistic, and kiln's worst mean difference over 90-130 % arrived;
3. departures: `kiln sim --departures` on a small cluster (every 50th
   openb GPU node) at a few arrival densities, every policy, paired
   against fgd;
4. the lower bounds of bench/sim/bound.py (needs glpsol).

usage: bench/sim/run.py --kiln PATH [--data DIR] [--seeds 42-51]
                        [--out FILE.json] [--skip speed,traces,...]
Prints tables; --out also writes the figures as JSON. Single-threaded.
Exits 0 without measuring when the openb data is absent (it is not part
of the repository)."""
import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bound  # noqa: E402

POLICIES = ["random", "dot-product", "gpu-clustering", "gpu-packing",
            "best-fit", "fgd", "kiln"]
TRACES = ["default", "gpushare20", "gpushare40", "gpushare60", "gpushare80",
          "gpushare100"]
POINTS = [90, 95, 100, 110, 130]
# The small cluster of the replay in time: openb's sample is so sparse in
# time that the full cluster never queues a pod.
DEPARTURE_NODE_STRIDE = 50
DEPARTURE_LOADS = ["5", "10"]


def speed(kiln, nodes, pods, seeds):
    rows = []
    for policy in POLICIES:
        cmd = [kiln, "sim", "--nodes", str(nodes), "--pods", str(pods),
               "--policy", policy, "--seeds", seeds]
        # Popen + wait4 so the rusage is this child's alone.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        out = proc.stdout.read().decode()
        err = proc.stderr.read().decode()
        _, status, usage = os.wait4(proc.pid, 0)
        if status != 0:
            raise RuntimeError(f"{policy} failed: {err}")
        table = out.split("\nSpeed")[1]
        line = next(l.split() for l in table.splitlines()
                    if l.split()[:1] == [policy])
        rows.append({"policy": policy, "offered": int(line[1]),
                     "placed": int(line[2]), "seconds": float(line[3]),
                     "placed_per_s": int(line[4]),
                     "offered_per_s": int(line[5]),
                     "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)})
    print(f"{'POLICY':16} {'PLACED':>7} {'PLACED/S':>9} {'OFFERED/S':>10} "
          f"{'PEAK RSS MB':>12}")
    for r in rows:
        print(f"{r['policy']:16} {r['placed']:7} {r['placed_per_s']:9} "
              f"{r['offered_per_s']:10} {r['peak_rss_mb']:12}")
    return rows


def trace_comparison(kiln, nodes, data, seeds, tmp):
    out = []
    print(f"\nkiln against fgd, seeds {seeds} (unallocated GPU %, "
          f"mean ± sd; paired difference kiln - fgd):")
    print(f"{'TRACE':12} {'FGD@100':>12} {'KILN@100':>12} {'BEST-FIT@100':>13}"
          f" {'DIFF@100':>9} {'T':>6} {'BETTER/WORSE':>13}"
          f" {'WORST DIFF 90-130':>18}")
    for trace in TRACES:
        pods = Path(data) / f"openb_pod_list_{trace}.csv"
        if not pods.exists():
            continue
        curves = Path(tmp) / f"{trace}.csv"
        subprocess.run([kiln, "sim", "--nodes", str(nodes), "--pods",
                        str(pods), "--policy", "fgd,kiln,best-fit",
                        "--seeds", seeds, "--csv", str(curves)],
                       check=True, capture_output=True)
        rows = {}
        with open(curves, newline="") as f:
            for r in csv.DictReader(f):
                rows[(r["policy"], int(r["arrived_pct"]))] = r
        kiln100 = rows[("kiln", 100)]
        worst = max((float(rows[("kiln", x)]["diff_mean"]), x)
                    for x in range(90, 131)
                    if rows[("kiln", x)]["diff_mean"])
        entry = {"trace": trace, "seeds": seeds, "points": {}}
        for policy in ("fgd", "kiln", "best-fit"):
            entry["points"][policy] = {
                x: [float(rows[(policy, x)]["unallocated_mean"]),
                    float(rows[(policy, x)]["unallocated_sd"])]
                for x in POINTS}
        entry.update({"diff_100": float(kiln100["diff_mean"]),
                      "t_100": float(kiln100["diff_t"]),
                      "better": int(kiln100["seeds_better"]),
                      "worse": int(kiln100["seeds_worse"]),
                      "worst_diff_90_130": worst[0],
                      "worst_at": worst[1]})
        out.append(entry)

        def cell(policy):
            m, s = entry["points"][policy][100]
            return f"{m:.2f}±{s:.2f}"
        print(f"{trace:12} {cell('fgd'):>12} {cell('kiln'):>12} "
              f"{cell('best-fit'):>13} {entry['diff_100']:+9.3f} "
              f"{entry['t_100']:6.2f} "
              f"{entry['better']:>6}/{entry['worse']:<6} "
              f"{worst[0]:+11.4f} @{worst[1]}%")
    return out


def departures(kiln, nodes, data, seeds, tmp):
    small = Path(tmp) / "nodes-small.csv"
    with open(nodes, newline="") as f:
        rows = list(csv.reader(f))
    with open(small, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(rows[0])
        w.writerows(rows[1::DEPARTURE_NODE_STRIDE])
    out = []
    for trace in ("default", "gpushare40"):
        pods = Path(data) / f"openb_pod_list_{trace}.csv"
        for load in DEPARTURE_LOADS:
            per_seed = Path(tmp) / f"dep-{trace}-{load}.csv"
            r = subprocess.run([kiln, "sim", "--nodes", str(small),
                                "--pods", str(pods), "--departures",
                                "--load", load, "--policy",
                                ",".join(POLICIES), "--seeds", seeds,
                                "--csv", str(per_seed)],
                               check=True, capture_output=True, text=True)
            print(f"\n{trace}, every {DEPARTURE_NODE_STRIDE}th node, "
                  f"load {load}:")
            print(r.stdout, end="")
            with open(per_seed, newline="") as f:
                out.append({"trace": trace, "load": float(load),
                            "node_stride": DEPARTURE_NODE_STRIDE,
                            "runs": list(csv.DictReader(f))})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--data", default=str(
        Path(__file__).resolve().parents[2].parent / "shared" / "data" / "openb"))
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--skip", default="",
                    help="comma-separated: speed, traces, departures, bound")
    ap.add_argument("--out")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    nodes = Path(args.data) / "openb_node_list_gpu_node.csv"
    pods = Path(args.data) / "openb_pod_list_default.csv"
    if not nodes.exists() or not pods.exists():
        print(f"bench/sim: no openb data in {args.data}; skipped")
        return 0
    result = {"seeds": args.seeds}
    with tempfile.TemporaryDirectory() as tmp:
        if "speed" not in skip:
            start = time.monotonic()
            result["speed"] = speed(args.kiln, nodes, pods, args.seeds)
            result["speed_all_policies_s"] = round(time.monotonic() - start,
                                                   2)
        if "traces" not in skip:
            result["traces"] = trace_comparison(args.kiln, nodes, args.data,
                                                args.seeds, tmp)
        if "departures" not in skip:
            result["departures"] = departures(args.kiln, nodes, args.data,
                                              args.seeds, tmp)
    if "bound" not in skip:
        if shutil.which("glpsol"):
            result["bound"] = []
            print()
            for trace in TRACES:
                p = Path(args.data) / f"openb_pod_list_{trace}.csv"
                if not p.exists():
                    continue
                shares, whole, gpus = bound.composition(p, nodes)
                lo = bound.solve(shares, whole, gpus, False)
                hi = bound.solve(shares, whole, gpus, True)
                result["bound"].append({"trace": trace, "any_policy_pct": lo,
                                        "all_shares_placed_pct": hi})
                print(f"bound {trace:12} any policy {lo:.2f} %, all shares "
                      "placed " + (f"{hi:.2f} %" if hi is not None
                                   else "infeasible"))
        else:
            print("bench/sim: glpsol not installed (glpk-utils); "
                  "bound skipped")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
