#!/usr/bin/python3
"""What starting the CLI costs: CPU time (perf stat task-clock) and wall
time of one call, over --runs sequential calls each, mean ± sd.

  kiln version            no server, nothing but start-up
  kiln ls                 one GET to a local server (started here)
  kiln submit --hold      one POST: a job that never runs (held, 8 GPUs)
  sbatch --version        Slurm's CLI start-up, when sbatch is installed
                          (it needs a slurm.conf even for --version:
                          --slurm-conf, $SLURM_CONF, else the one
                          scripts/slurm-up.sh writes; no daemon is asked)
  /bin/true               the floor: one exec

Wall time is measured on separate runs, without perf (whose own start
costs far more than what is measured).

Usage: bench/cli/startup.py --kiln build/src/cmd/kiln [--runs 50]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def task_clock_ms(cmd, env):
    """CPU time of one run of cmd, as perf counts it (user + system)."""
    r = subprocess.run(["perf", "stat", "-x,", "-e", "task-clock", *cmd],
                       env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    for line in r.stderr.splitlines():
        if "task-clock" in line:
            return float(line.split(",")[0])
    raise RuntimeError(r.stderr)


def measure(name, cmd, runs, env):
    cpu, wall = [], []
    for _ in range(runs):
        cpu.append(task_clock_ms(cmd, env))
        t = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        wall.append((time.perf_counter() - t) * 1000)
    print(f"{name:24} cpu {statistics.mean(cpu):6.2f} ± "
          f"{statistics.stdev(cpu):5.2f} ms   wall "
          f"{statistics.mean(wall):6.2f} ± {statistics.stdev(wall):5.2f} ms"
          f"   (n={runs})", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--slurm-conf", default=os.environ.get(
        "SLURM_CONF", "/var/lib/kiln-slurm/slurm.conf"))
    args = ap.parse_args()
    kiln = str(Path(args.kiln).resolve())
    home = Path(tempfile.mkdtemp(prefix="kiln-startup-"))
    env = dict(os.environ, KILN_HOME=str(home))
    env.pop("KILN_SERVER", None)
    env.pop("KILN_TOKEN", None)
    spec = home / "job.yaml"
    spec.write_text("kind: Job\nname: held\ncommand: [/bin/true]\n"
                    "resources: {gpus: 8}\n")
    server = subprocess.Popen([kiln, "server", "--listen", "127.0.0.1:0",
                               "--gpus", "4xH100-80GB"], env=env,
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (home / "server.url").exists():
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("the server did not start")
            time.sleep(0.05)
        measure("kiln version", [kiln, "version"], args.runs, env)
        measure("kiln ls", [kiln, "ls"], args.runs, env)
        measure("kiln submit --hold", [kiln, "submit", "--hold", str(spec)],
                args.runs, env)
        if shutil.which("sbatch") and Path(args.slurm_conf).exists():
            measure("sbatch --version", ["sbatch", "--version"], args.runs,
                    dict(env, SLURM_CONF=args.slurm_conf))
        measure("/bin/true", ["/bin/true"], args.runs, env)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
