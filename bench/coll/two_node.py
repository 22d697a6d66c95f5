#!/usr/bin/python3
"""bench/coll/two_node.py: `kiln bench all_reduce --backend mpi` across the
two nodes of scripts/slurm-2node.sh (two network namespaces on one machine,
joined by a bridge), next to OpenMPI's own MPI_Allreduce on the same pair.

Brings up a cluster of its own (names, subnet, port and state directory
apart from the tests'), and in each of --rounds rounds submits one
`sbatch --wait -N2 -n2` whose batch script runs, under mpirun (launched
through Slurm, one rank per node, TCP over the bridge only), first
bench/coll/mpi_allreduce.c and then kiln. Both time the same way (warm-up,
then per size a barrier, ITERS calls, elapsed / ITERS) and report the
out-of-place bus bandwidth, bytes / time * 2(n-1)/n. Prints the median and
the range over the rounds per size, writes JSON to --out, and takes the
cluster down again. Needs root, mpicc and mpirun.

The nodes share one machine's CPUs and memory: the figures are a veth
bridge's and a shared kernel's, not a network's.
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from run import kiln_rows, rows, run

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NET = "10.79.0"
CLUSTER = {"KILN_SLURM2_NAME": "kilnbench", "KILN_SLURM2_NODES": "kc",
           "KILN_SLURM2_NET": NET, "KILN_SLURM2_CTLD_PORT": "6847",
           "KILN_SLURM2_DIR": "/var/lib/kiln-slurm-bench"}
MPIRUN = ["mpirun", "--allow-run-as-root", "-np", "2", "--map-by", "node",
          "--mca", "btl", "self,tcp",
          "--mca", "btl_tcp_if_include", f"{NET}.0/24",
          "--mca", "oob_tcp_if_include", f"{NET}.0/24"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--min", type=int, default=1 << 20)
    ap.add_argument("--max", type=int, default=64 << 20)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not shutil.which("mpicc") or not shutil.which("mpirun"):
        sys.exit("two_node: mpicc and mpirun are needed "
                 "(scripts/install-deps.sh bench installs OpenMPI)")

    env = dict(os.environ, **CLUSTER)
    script = str(REPO / "scripts" / "slurm-2node.sh")
    env["SLURM_CONF"] = run(["bash", script, "up"], env).split()[-1]
    # On the shared file system, where both nodes find it.
    work = Path(tempfile.mkdtemp(prefix="kiln-coll-2node-"))
    work.chmod(0o755)
    try:
        peer = work / "mpi_allreduce"
        run(["mpicc", "-O2", "-std=c17", "-D_GNU_SOURCE", "-o", str(peer),
            str(HERE / "mpi_allreduce.c")])
        sweep = [str(args.min), str(args.max), str(args.iters)]
        kiln = [os.path.abspath(args.kiln), "bench", "all_reduce",
                "-b", str(args.min), "-e", str(args.max), "-f", "2",
                "-n", str(args.iters), "-w", "5", "--backend", "mpi"]
        series = {"kiln": [], "openmpi": []}
        for r in range(args.rounds):
            print(f"two_node: round {r + 1}/{args.rounds}", file=sys.stderr)
            for name, cmd in (("openmpi", [str(peer), *sweep]),
                              ("kiln", kiln)):
                out = work / f"{name}-{r}.out"
                run(["sbatch", "--wait", "-N2", "-n2", f"--output={out}",
                    f"--chdir={work}", "--wrap",
                    " ".join(MPIRUN + cmd)], env)
                text = out.read_text()
                series[name].append(
                    kiln_rows(text) if name == "kiln" else rows(text))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        run(["bash", script, "down"], env)

    sizes = sorted(series["kiln"][0])
    result = {"rounds": args.rounds, "iters": args.iters, "sizes": []}
    print(f"{'size':>10} {'kiln median (range)':>24} "
          f"{'OpenMPI median (range)':>26} {'kiln/OpenMPI':>12}")
    for size in sizes:
        row = {"bytes": size}
        shown = []
        for name in ("kiln", "openmpi"):
            v = [s[size] for s in series[name]]
            row[name] = {"median": statistics.median(v), "min": min(v),
                         "max": max(v)}
            shown.append(f"{row[name]['median']:.3f} "
                         f"({min(v):.3f}-{max(v):.3f})")
        ratio = row["kiln"]["median"] / row["openmpi"]["median"]
        row["ratio"] = ratio
        result["sizes"].append(row)
        print(f"{size >> 20:>7}MiB {shown[0]:>24} {shown[1]:>26} "
              f"{ratio:>11.2f}x")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
