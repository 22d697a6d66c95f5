#!/usr/bin/python3
"""bench/transfer: kiln model push and pull against plain copies, in one run.

Each set (--sets, N x MiB; default 1x1024 and 16x256) is a directory of N
files of random bytes, written once and left in the page cache (for every
side alike). A fresh `kiln server` with its default file store in a
temporary KILN_HOME on the same file system. Each round (--rounds), in
alternating order, each side once per set:

  push       `kiln model push DIR` on the server's machine: each file by
             its open descriptor, copied and hashed by the server.
  push_http  the same with --http: read once and hashed here, sent as
             16 MiB parts four at once over loopback TCP, hashed again by
             the server as they come.
  cp         `cp -r DIR NEW && sync -f NEW`: a copy and its flush (a push
             ends with a sync of the store too).
  pull       `kiln model pull NAME@V NEW` (reads the store, checks the
             signature and every digest) against
  cp_pull    `cp` of the same blobs from the store to NEW, and sync -f.

Before each push the set's blobs are deleted from the store and the
push gets an empty digest cache, so every push sends every byte.

Reports mean +- sd of each over the rounds, and the ratios cp / push,
cp / push_http and cp_pull / pull (above 1.0 kiln is faster), with the
machine's load average before and after: other work on the machine shows
as spread. JSON to --out.
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MiB = 1 << 20


def timed(args, env=None):
    t0 = time.monotonic()
    proc = subprocess.run(args, env=env, capture_output=True, text=True)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"bench/transfer: {' '.join(map(str, args[:4]))}: "
                 f"{proc.stderr}")
    return took, proc.stdout


def write_set(root, files, mib):
    """files of mib MiB of random bytes under root; their digests."""
    root.mkdir(parents=True)
    digests = []
    for i in range(files):
        h = hashlib.sha256()
        with open(root / f"part-{i:03d}.bin", "wb") as f:
            for _ in range(mib):
                chunk = os.urandom(MiB)
                h.update(chunk)
                f.write(chunk)
        digests.append(h.hexdigest())
    return digests


def start_server(kiln, home):
    env = dict(os.environ, KILN_HOME=str(home))
    server = subprocess.Popen([kiln, "server", "--listen", "127.0.0.1:0",
                               "--gpus", "1xH100-80GB",
                               "--upload-max-staged", "64Gi"], env=env,
                              stdout=subprocess.DEVNULL,
                              stderr=open(home / "server.log", "wb"))
    deadline = time.monotonic() + 60
    while not (home / "server.url").exists():
        if time.monotonic() > deadline or server.poll() is not None:
            sys.exit("kiln server did not start: " +
                     (home / "server.log").read_text())
        time.sleep(0.05)
    return server, env


def stats(xs):
    return {"mean_s": statistics.mean(xs),
            "sd_s": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            "times_s": xs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sets", default="1x1024,16x256",
                    help="comma-separated FILESxMIB")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-transfer-",
                                 dir="/var/tmp"))
    home = work / "home"
    home.mkdir()
    results = {"rounds": a.rounds, "load_before": os.getloadavg(),
               "sets": {}}
    server = None
    try:
        server, env = start_server(a.kiln, home)
        # pull takes only signed versions: each push is signed, untimed.
        key = work / "key"
        timed([a.kiln, "model", "keygen", "--out", str(key)], env=env)
        (home / "keys" / "trusted").mkdir(parents=True, exist_ok=True)
        shutil.copy(f"{key}.pub", home / "keys" / "trusted" / "key.pub")
        sets = []
        for spec in a.sets.split(","):
            n, mib = (int(x) for x in spec.split("x"))
            src = work / f"src-{spec}"
            sets.append((spec, src, write_set(src, n, mib), n * mib))
        blobs = home / "blobs" / "sha256"
        version = {}

        def drop_blobs(digests):
            for d in digests:
                try:
                    os.unlink(blobs / d)
                except FileNotFoundError:
                    pass

        def push(spec, src, digests, extra):
            drop_blobs(digests)
            cache = Path(tempfile.mkdtemp(dir=work))
            e = dict(env, XDG_CACHE_HOME=str(cache))
            took, out = timed([a.kiln, "model", "push", str(src), "--name",
                               f"m{spec.replace('x', '-')}", "-o", "json",
                               *extra], env=e)
            shutil.rmtree(cache)
            version[spec] = json.loads(out)["version"]
            timed([a.kiln, "model", "sign",
                   f"m{spec.replace('x', '-')}@{version[spec]}", "--key",
                   str(key)], env=env)
            return took

        def cp(spec, src, digests, extra):
            dest = work / "cp"
            took, _ = timed(["sh", "-c", f'cp -r "{src}" "{dest}" && '
                             f'sync -f "{dest}"'])
            shutil.rmtree(dest)
            return took

        def pull(spec, src, digests, extra):
            dest = work / "pulled"
            took, _ = timed([a.kiln, "model", "pull",
                             f"m{spec.replace('x', '-')}@{version[spec]}",
                             str(dest)], env=env)
            shutil.rmtree(dest)
            return took

        def cp_pull(spec, src, digests, extra):
            dest = work / "cp-pull"
            dest.mkdir()
            paths = " ".join(f'"{blobs / d}"' for d in digests)
            took, _ = timed(["sh", "-c", f'cp {paths} "{dest}" && '
                             f'sync -f "{dest}"'])
            shutil.rmtree(dest)
            return took

        sides = [("push", push, ()), ("push_http", push, ("--http",)),
                 ("cp", cp, ()), ("pull", pull, ()), ("cp_pull", cp_pull, ())]
        times = {spec: {name: [] for name, _, _ in sides}
                 for spec, _, _, _ in sets}
        for r in range(a.rounds):
            # pull needs a version: a push goes first; then alternate.
            order = sides if r % 2 == 0 else [sides[1], sides[0]] + \
                list(reversed(sides[2:]))
            for spec, src, digests, _ in sets:
                for name, fn, extra in order:
                    times[spec][name].append(fn(spec, src, digests, extra))
                print(f"round {r + 1}/{a.rounds} {spec}: " + ", ".join(
                    f"{n} {times[spec][n][-1]:.2f}s" for n, _, _ in sides),
                    flush=True)
        for spec, _, _, mib in sets:
            t = {n: stats(xs) for n, xs in times[spec].items()}
            ratio = {
                "cp/push": statistics.mean(
                    c / p for c, p in zip(times[spec]["cp"],
                                          times[spec]["push"])),
                "cp/push_http": statistics.mean(
                    c / p for c, p in zip(times[spec]["cp"],
                                          times[spec]["push_http"])),
                "cp_pull/pull": statistics.mean(
                    c / p for c, p in zip(times[spec]["cp_pull"],
                                          times[spec]["pull"])),
            }
            results["sets"][spec] = {"mib": mib, "times": t, "ratios": ratio}
        results["load_after"] = os.getloadavg()
    finally:
        if server:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average before {results['load_before'][0]:.1f}, after "
          f"{results['load_after'][0]:.1f}; {a.rounds} rounds")
    print(f"{'set':>8} {'side':>10} {'mean s':>8} {'sd':>6} {'GB/s':>6}")
    for spec, r in results["sets"].items():
        for name, t in r["times"].items():
            gbs = r["mib"] * MiB / t["mean_s"] / 1e9
            print(f"{spec:>8} {name:>10} {t['mean_s']:8.2f} "
                  f"{t['sd_s']:6.2f} {gbs:6.2f}")
        print("         " + ", ".join(f"{k} {v:.2f}x"
                                       for k, v in r["ratios"].items()))
    Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
