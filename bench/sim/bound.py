#!/usr/bin/env python3
"""Lower bounds on the unallocated GPU at 100 % arrived (docs/scheduling.md,
"How low can it go"), from a linear program solved by glpsol (Debian
glpk-utils).

At 100 % arrived the GPU requested equals the capacity, so the unallocated
GPU equals the GPU of the pods that failed. The bound asks: of the pods that
arrive by then, how much GPU can any packing place at most?

What it assumes, exactly:
- The pods arrived by 100 % are the pod list's shapes in the list's
  proportions, scaled so their GPU adds up to the capacity (the expected
  arrivals of the resampled stream; any one seed's differ a little).
- Only GPU milli counts: CPU, memory, GPU models and which node a GPU is on
  are ignored, and a k-GPU pod needs k idle GPUs anywhere. Every real
  packing is a packing of this relaxed problem, so the bound is valid for
  any policy, online or offline.
- Each GPU holds either one whole-GPU pod's GPU or shares whose milli add
  up to at most 1000; the share side is the configuration LP (Gilmore and
  Gomory), written here as the equivalent arc-flow LP over the milli
  values 0..1000 (a GPU is a path from 0 to 1000 whose steps are shares,
  or single milli left idle).
- The LP relaxes pod counts to fractions, so it can only place more: the
  bound stays a lower bound.

Two bounds per trace: "any policy" may leave any pod unplaced; "all
shares placed" forces every sharing pod in (what a policy that never turns
away a share would have to achieve), the whole-GPU pods then taking what
GPUs are left.

usage: bench/sim/bound.py [--data DIR] [--traces default,gpushare40,...]
                          [--out FILE.json]
"""
import argparse
import csv
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

MILLI = 1000


def composition(pods_csv, nodes_csv):
    """(share milli -> expected pods arrived by 100 %, whole GPUs arrived,
    GPUs in the cluster)."""
    gpus = 0
    with open(nodes_csv, newline="") as f:
        for row in csv.DictReader(f):
            gpus += int(row["gpu"])
    shares, whole = Counter(), 0
    with open(pods_csv, newline="") as f:
        for row in csv.DictReader(f):
            num, milli = int(row["num_gpu"]), int(row["gpu_milli"])
            if num == 1 and milli < MILLI:
                shares[milli] += 1
            else:
                whole += num
    volume = sum(m * n for m, n in shares.items()) + MILLI * whole
    scale = gpus * MILLI / volume
    return ({m: n * scale for m, n in shares.items()}, whole * scale, gpus)


def write_lp(path, shares, whole, gpus, all_shares):
    """Maximise the GPU placed. Variables: f_i_m (a share of m milli at
    offset i on some GPUs), l_i (milli i left idle), g (GPUs holding
    shares), z (GPUs given to whole-GPU pods), y_m (shares of m placed)."""
    sizes = sorted(shares)
    out = ["\\ packing bound: arc-flow configuration LP", "Maximize",
           " placed: " + " + ".join([f"{m} y_{m}" for m in sizes] +
                                    [f"{MILLI} z"]),
           "Subject To",
           f" gpus: g + z <= {gpus}",
           f" whole: z <= {whole:.6f}"]
    for i in range(MILLI + 1):
        ins = [f"f_{i - m}_{m}" for m in sizes if i - m >= 0]
        if i > 0:
            ins.append(f"l_{i - 1}")
        outs = [f"f_{i}_{m}" for m in sizes if i + m <= MILLI]
        if i < MILLI:
            outs.append(f"l_{i}")
        if i == 0:
            out.append(" n0: " + " + ".join(outs) + " - g = 0")
        elif i == MILLI:
            out.append(f" n{i}: " + " + ".join(ins) + " - g = 0")
        else:
            out.append(f" n{i}: " + " + ".join(ins) + " - " +
                       " - ".join(outs) + " = 0")
    for m in sizes:
        arcs = " + ".join(f"f_{i}_{m}" for i in range(MILLI - m + 1))
        out.append(f" use_{m}: {arcs} - y_{m} >= 0")
    out.append("Bounds")
    for m in sizes:
        lo = f"{shares[m]:.6f}" if all_shares else "0"
        out.append(f" {lo} <= y_{m} <= {shares[m]:.6f}")
    out.append("End")
    Path(path).write_text("\n".join(out) + "\n")


def solve(shares, whole, gpus, all_shares):
    """The smallest unallocated GPU, % of capacity; None when no packing
    can place what all_shares demands (the shares alone overflow)."""
    with tempfile.TemporaryDirectory() as d:
        lp, sol = Path(d) / "bound.lp", Path(d) / "bound.sol"
        write_lp(lp, shares, whole, gpus, all_shares)
        # --nopresol: with the presolver an infeasible LP ends without a
        # solution file instead of with an infeasible status.
        r = subprocess.run(["glpsol", "--nopresol", "--lp", str(lp),
                            "-w", str(sol)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"glpsol failed: {r.stdout}{r.stderr}")
        # glpsol's plain solution: "s bas ROWS COLS PRIMAL DUAL OBJ", with
        # f (feasible) in both status fields at an optimum.
        for line in sol.read_text().splitlines():
            parts = line.split()
            if parts[:1] == ["s"]:
                if all_shares and parts[4] in ("i", "n"):
                    return None
                if parts[4:6] != ["f", "f"]:
                    raise RuntimeError(f"glpsol: no optimum ({line})")
                placed = float(parts[-1])
                break
        else:
            raise RuntimeError("glpsol: no solution line")
    return 100.0 * (gpus * MILLI - placed) / (gpus * MILLI)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(
        Path(__file__).resolve().parents[2].parent / "shared" / "data" / "openb"))
    ap.add_argument("--traces", default="default,gpushare20,gpushare40,"
                    "gpushare60,gpushare80,gpushare100")
    ap.add_argument("--out")
    args = ap.parse_args()
    nodes = Path(args.data) / "openb_node_list_gpu_node.csv"
    if not nodes.exists():
        print(f"bench/sim: no openb data in {args.data}; skipped")
        return 0
    rows = []
    print(f"{'TRACE':12} {'ANY POLICY %':>13} {'ALL SHARES PLACED %':>20}")
    for trace in args.traces.split(","):
        pods = Path(args.data) / f"openb_pod_list_{trace}.csv"
        if not pods.exists():
            continue
        shares, whole, gpus = composition(pods, nodes)
        any_policy = solve(shares, whole, gpus, False)
        all_placed = solve(shares, whole, gpus, True)
        rows.append({"trace": trace, "any_policy_pct": round(any_policy, 3),
                     "all_shares_placed_pct":
                     None if all_placed is None else round(all_placed, 3)})
        print(f"{trace:12} {any_policy:13.2f} " +
              (f"{all_placed:20.2f}" if all_placed is not None
               else f"{'infeasible':>20}"))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
