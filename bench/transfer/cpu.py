#!/usr/bin/python3
"""bench/transfer/cpu.py: CPU-seconds and wall of a 1 GiB model push by
descriptor and of its pull, the kernel's copy (copy_file_range, what a
store on the same file system gets) against the copy through memory
(pread and write, what a store on another file system gets), side by
side in one run, with `cp` and `cp` + `sync -f` of the same file.

Two fresh servers share the machine: one as shipped, one started with
KILN_TEST_COPY_THROUGH_MEMORY=1 (the tests' knob that makes the file
store and the descriptor copy take the path through memory); pull runs
with the same environment as its server. A push's CPU is the server's
(its /proc stat, user + system) plus the client's; a pull's and cp's are
the child's rusage. Each round runs the sides in alternating order with
an untimed `sync` before each; every push starts from an empty store and
an empty digest cache. Reports mean +- sd over --rounds and the load
average before and after. Usage: bench/transfer/cpu.py --kiln KILN
[--rounds N] [--mib M]

With --http it measures `kiln model push --http` instead, the server's
CPU and the client's apart, for --kiln and, side by side in alternating
order, for each --against binary (another build, to compare).
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as transfer_bench  # noqa: E402


def server_cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed_push(kiln, server, src, work, extra):
    """One push of src to server (proc, env, home) from an empty store
    and digest cache: wall, the server's CPU, the client's, its output."""
    proc, env, home = server
    shutil.rmtree(home / "blobs" / "sha256", ignore_errors=True)
    cache = Path(tempfile.mkdtemp(dir=work))
    subprocess.run(["sync"])
    c0, k0, t0 = server_cpu(proc.pid), children_cpu(), time.monotonic()
    out = subprocess.run([kiln, "model", "push", *extra, str(src), "--name",
                          "m", "-o", "json"],
                         env=dict(env, XDG_CACHE_HOME=str(cache)),
                         capture_output=True, text=True, check=True)
    wall = time.monotonic() - t0
    shutil.rmtree(cache)
    return (wall, server_cpu(proc.pid) - c0, children_cpu() - k0,
            out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--http", action="store_true")
    ap.add_argument("--against", action="append", default=[])
    a = ap.parse_args()
    kiln = str(Path(a.kiln).resolve())
    if a.http:
        http_main(a, [kiln] + [str(Path(k).resolve()) for k in a.against])
        return
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-cpu-", dir="/var/tmp"))
    servers = {}
    results = {}
    try:
        src = work / "set"
        transfer_bench.write_set(src, 1, a.mib)
        for mode in ("kernel", "memory"):
            home = work / f"home-{mode}"
            home.mkdir()
            env = dict(os.environ)
            if mode == "memory":
                env["KILN_TEST_COPY_THROUGH_MEMORY"] = "1"
            proc, env = transfer_bench.start_server(kiln, home, env=env)
            servers[mode] = (proc, env, home)
        key = work / "key"
        subprocess.run([kiln, "model", "keygen", "--out", str(key)],
                       check=True, capture_output=True,
                       env=servers["kernel"][1])
        for _, _, home in servers.values():
            (home / "keys" / "trusted").mkdir(parents=True, exist_ok=True)
            shutil.copy(f"{key}.pub", home / "keys" / "trusted" / "k.pub")

        def record(side, wall, cpu):
            results.setdefault(side, []).append((wall, cpu))

        def push_and_pull(mode):
            env = servers[mode][1]
            wall, server, client, out = timed_push(kiln, servers[mode],
                                                   src, work, ())
            record(f"push_{mode}", wall, server + client)
            version = json.loads(out)["version"]
            subprocess.run([kiln, "model", "sign", f"m@{version}", "--key",
                            str(key)], env=env, check=True,
                           capture_output=True)
            dest = work / "pulled"
            subprocess.run(["sync"])
            k0, t0 = children_cpu(), time.monotonic()
            subprocess.run([kiln, "model", "pull", f"m@{version}",
                            str(dest)], env=env, check=True,
                           capture_output=True)
            record(f"pull_{mode}", time.monotonic() - t0,
                   children_cpu() - k0)
            shutil.rmtree(dest)

        def copy(side, command):
            dest = work / "cp"
            subprocess.run(["sync"])
            k0, t0 = children_cpu(), time.monotonic()
            subprocess.run(["sh", "-c", command.format(src=src, dest=dest)],
                           check=True)
            record(side, time.monotonic() - t0, children_cpu() - k0)
            shutil.rmtree(dest)

        load_before = os.getloadavg()
        for r in range(a.rounds):
            for mode in (("kernel", "memory") if r % 2 == 0
                         else ("memory", "kernel")):
                push_and_pull(mode)
            copy("cp_sync", 'cp -r "{src}" "{dest}" && sync -f "{dest}"')
            copy("cp", 'cp -r "{src}" "{dest}"')
        load_after = os.getloadavg()
    finally:
        for proc, _, _ in servers.values():
            proc.terminate()
            proc.wait()
        shutil.rmtree(work)
    report(a, results, load_before, load_after)


def report(a, results, load_before, load_after):
    gib = a.mib / 1024
    sd = (lambda v: statistics.stdev(v) if len(v) > 1 else 0.0)
    print(f"{a.mib} MiB, {a.rounds} rounds; load average before "
          f"{load_before[0]:.1f}, after {load_after[0]:.1f}")
    print(f"{'side':16s} {'wall s':>14s} {'CPU-s per GiB':>16s}")
    for side, xs in results.items():
        walls = [x[0] for x in xs]
        cpus = [x[1] / gib for x in xs]
        print(f"{side:16s} {statistics.mean(walls):7.2f} ± {sd(walls):4.2f}"
              f" {statistics.mean(cpus):9.2f} ± {sd(cpus):4.2f}")


def http_main(a, kilns):
    """push --http of one file to a fresh server of each binary in turn:
    wall, the server's CPU and the client's, per GiB."""
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-cpu-", dir="/var/tmp"))
    servers = []
    results = {}
    try:
        src = work / "set"
        transfer_bench.write_set(src, 1, a.mib)
        for i, kiln in enumerate(kilns):
            home = work / f"home-{i}"
            home.mkdir()
            servers.append(transfer_bench.start_server(kiln, home) +
                           (home,))
        load_before = os.getloadavg()
        for r in range(a.rounds):
            order = list(range(len(kilns)))
            for i in (order if r % 2 == 0 else order[::-1]):
                wall, server, client, _ = timed_push(
                    kilns[i], servers[i], src, work, ("--http",))
                for part, cpu in (("server", server), ("client", client),
                                  ("both", server + client)):
                    results.setdefault(f"{i}:{part}", []).append((wall, cpu))
        load_after = os.getloadavg()
    finally:
        for proc, _, _ in servers:
            proc.terminate()
            proc.wait()
        shutil.rmtree(work)
    for i, kiln in enumerate(kilns):
        print(f"{i}: {kiln}")
    report(a, results, load_before, load_after)


if __name__ == "__main__":
    main()
