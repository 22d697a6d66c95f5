#!/usr/bin/python3
"""What starting the CLI costs: CPU time (perf stat task-clock) and wall
time of one call, over --runs sequential calls each, mean ± sd.

  kiln version            no server, nothing but start-up
  kiln ls                 one GET to a local server (started here)
  kiln show 1             one GET of one job
  kiln submit --hold      one POST: a job that never runs (held, 8 GPUs)
  kiln submit             one POST of a trivial job (/bin/true) that runs
  sbatch --version        Slurm's CLI start-up, when sbatch is installed
                          (it needs a slurm.conf even for --version:
                          --slurm-conf, $SLURM_CONF, else the one
                          scripts/slurm-up.sh writes; no daemon is asked)
  sbatch --wrap=true      a trivial job, when that Slurm's controller
                          answers (scontrol ping)
  squeue                  Slurm's listing, likewise
  /bin/true               the floor: one exec

--compare OTHER_KILN measures each kiln command with that binary too,
right after this one's, against the same server (before and after a
change, side by side).

Wall time is measured on separate runs, without perf (whose own start
costs far more than what is measured).

Usage: bench/cli/startup.py --kiln build/src/cmd/kiln [--runs 50]
           [--compare OTHER_KILN]
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
    ap.add_argument("--compare", help="another kiln binary, measured too")
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
    trivial = home / "true.yaml"
    trivial.write_text("kind: Job\nname: trivial\ncommand: [/bin/true]\n")
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
        subprocess.run([kiln, "submit", "--hold", str(spec)], env=env,
                       stdout=subprocess.DEVNULL, check=True)
        binaries = [("", kiln)]
        if args.compare:
            binaries.append((" (compare)",
                             str(Path(args.compare).resolve())))
        for name, tail in [("kiln version", ["version"]),
                           ("kiln ls", ["ls"]),
                           ("kiln show 1", ["show", "1"]),
                           ("kiln submit --hold",
                            ["submit", "--hold", str(spec)]),
                           ("kiln submit", ["submit", str(trivial)])]:
            for label, binary in binaries:
                measure(name + label, [binary, *tail], args.runs, env)
        slurm_env = dict(env, SLURM_CONF=args.slurm_conf)
        if shutil.which("sbatch") and Path(args.slurm_conf).exists():
            measure("sbatch --version", ["sbatch", "--version"], args.runs,
                    slurm_env)
            if subprocess.run(["scontrol", "ping"], env=slurm_env,
                              capture_output=True).returncode == 0:
                measure("sbatch --wrap=true", ["sbatch", "--wrap=true",
                                                "-o", "/dev/null"],
                        args.runs, slurm_env)
                measure("squeue", ["squeue"], args.runs, slurm_env)
        measure("/bin/true", ["/bin/true"], args.runs, env)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
