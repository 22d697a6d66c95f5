#!/usr/bin/python3
"""bench/coll: kiln's cpu all-reduce against OpenMPI's MPI_Allreduce and
one thread's memcpy, in one run, on one machine, as ratios.

For every size from --min to --max bytes (doubling), in each of --rounds
rounds, one after another:
  - kiln:    kiln bench all_reduce -g RANKS -c 0 (threads, shared memory),
             out-of-place bus bandwidth;
  - OpenMPI: mpi_allreduce.c under mpirun -np RANKS, with
             MALLOC_MMAP_MAX_=0 (glibc then keeps OpenMPI's large temporary
             buffers on the heap instead of mapping and faulting in fresh
             pages on every call: the fair setting on machines where first
             touch is slow) and with glibc's defaults, for reference;
  - memcpy:  mpi_allreduce.c --memcpy, one thread, bytes copied per second.
Both all-reduces time the same way (warm-up at the largest and smallest
sizes; per size a barrier, ITERS calls, elapsed / ITERS, mean over ranks)
and report busbw = bytes / time * 2(n-1)/n. The median of the rounds is
kept per size.

Goal: kiln >= 1.0x OpenMPI (fair setting) at every size and
>= 0.5x memcpy. memcpy is the physical bound once buffers exceed the
caches; below that it runs from cache. Both ratios are printed: against
memcpy at the same size, and against memcpy from memory (the median of the
sizes of 64 MiB and more); the goal is judged on the second, the bound that
matters (about 15 GB/s per thread). Prints a table and writes JSON to
--out.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MPIRUN_FLAGS = ["--allow-run-as-root", "--oversubscribe", "--mca", "btl",
                "self,vader", "--mca", "btl_vader_single_copy_mechanism",
                "none"]


def rows(text):
    """'bytes seconds GB/s' lines -> {bytes: GB/s}."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 3:
            out[int(f[0])] = float(f[2])
    return out


def kiln_rows(text):
    """kiln bench's table -> {bytes: out-of-place busbw}."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        f = line.split()
        out[int(f[0])] = float(f[7])
    return out


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env,
                       timeout=900)
    if p.returncode != 0:
        sys.exit(f"bench/coll: {' '.join(cmd)} failed:\n{p.stdout}{p.stderr}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--min", type=int, default=1 << 20)
    ap.add_argument("--max", type=int, default=256 << 20)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    mpicc, mpirun = shutil.which("mpicc"), shutil.which("mpirun")
    if not mpicc or not mpirun:
        sys.exit("bench/coll: mpicc and mpirun are needed "
                 "(scripts/install-deps.sh installs OpenMPI)")
    out_dir = Path(args.out).resolve().parent
    out_dir.mkdir(parents=True, exist_ok=True)
    peer = out_dir / "mpi_allreduce"
    run([mpicc, "-O2", "-std=c17", "-D_GNU_SOURCE", "-Wall", "-Wextra",
         "-Werror", "-o", str(peer), str(HERE / "mpi_allreduce.c")])

    sizes = [args.min << i for i in range(64) if args.min << i <= args.max]
    sweep = [str(args.min), str(args.max), str(args.iters)]
    fair_env = dict(os.environ, MALLOC_MMAP_MAX_="0")
    series = {"kiln": [], "openmpi": [], "openmpi_default": [], "memcpy": []}
    for r in range(args.rounds):
        print(f"bench/coll: round {r + 1}/{args.rounds}", file=sys.stderr)
        series["kiln"].append(kiln_rows(run([
            args.kiln, "bench", "all_reduce", "-b", str(args.min), "-e",
            str(args.max), "-f", "2", "-g", str(args.ranks), "-c", "0",
            "-n", str(args.iters), "-w", "5"])))
        series["openmpi"].append(rows(run(
            [mpirun, *MPIRUN_FLAGS, "-x", "MALLOC_MMAP_MAX_", "-np",
             str(args.ranks), str(peer), *sweep], env=fair_env)))
        series["openmpi_default"].append(rows(run(
            [mpirun, *MPIRUN_FLAGS, "-np", str(args.ranks), str(peer),
             *sweep])))
        series["memcpy"].append(rows(run([str(peer), "--memcpy", *sweep])))

    dram = statistics.median(
        statistics.median(s[size] for s in series["memcpy"])
        for size in sizes if size >= 64 << 20) if args.max >= 64 << 20 \
        else None
    result = {"ranks": args.ranks, "iters": args.iters,
              "rounds": args.rounds, "memcpy_dram": dram, "sizes": []}
    met = dram is not None
    print(f"{'size':>10} {'kiln':>8} {'OpenMPI':>8} {'(default)':>9} "
          f"{'memcpy':>8} {'vs MPI':>7} {'vs memcpy':>9} {'vs DRAM':>8}")
    for size in sizes:
        med = {k: statistics.median(s[size] for s in v)
               for k, v in series.items()}
        vs_mpi = med["kiln"] / med["openmpi"] if med["openmpi"] else 0
        vs_copy = med["kiln"] / med["memcpy"] if med["memcpy"] else 0
        vs_dram = med["kiln"] / dram if dram else 0
        met = met and vs_mpi >= 1.0 and vs_dram >= 0.5
        result["sizes"].append({"bytes": size, **med, "vs_openmpi": vs_mpi,
                                "vs_memcpy": vs_copy, "vs_dram": vs_dram})
        print(f"{size >> 20:>7}MiB {med['kiln']:8.2f} {med['openmpi']:8.2f} "
              f"{med['openmpi_default']:9.2f} {med['memcpy']:8.2f} "
              f"{vs_mpi:6.2f}x {vs_copy:8.2f}x {vs_dram:7.2f}x")
    result["goal_met"] = met
    print("GB/s: kiln and OpenMPI bus bandwidth, memcpy bytes copied per "
          "second (medians of the rounds)")
    print(f"memcpy from memory (median, sizes >= 64 MiB): {dram} GB/s")
    print(f"goal (>= 1.0x OpenMPI and >= 0.5x memcpy from memory at every "
          f"size): "
          f"{'met' if met else 'NOT met'}")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
