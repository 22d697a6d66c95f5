#!/usr/bin/python3
"""bench/verify: `kiln model verify` against `openssl dgst -sha256`, in one run.

Two models are pushed to a fresh `kiln server` (file:// store) and signed
with a trusted key:

  8 files   4 GiB in 8 files of 512 MiB (random bytes)
  1 file    one file of 4 GiB

Then, --rounds times in alternating order, median kept: `kiln model verify
NAME@1` (signature check, then every blob hashed in place with one thread
per CPU) against `openssl dgst -sha256 F1 ... F8`, one process hashing the
same blob files one after another. The blobs stay in the page cache for
both sides (each side reads them once before the timed rounds). Each
push's time (hash, upload of every blob in 1 MiB API parts, the server's
check and store) is reported too, for information. The ratio
is openssl's time / kiln's: above 1.0 kiln is faster. Goals:
>= 1.8 for 8 files on 2 cores, >= 0.95 for the single file.

The model files live under --dir (default: a temporary directory in
/tmp) and are deleted at the end. Prints a table, writes JSON to --out.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIB = 1 << 30
CHUNK = 64 << 20


def run(args, env):
    proc = subprocess.run(args, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench/verify: {' '.join(map(str, args[:4]))}: "
                 f"{proc.stderr.strip()}")
    return proc.stdout


def write_random(path, size):
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(CHUNK, left)
            f.write(os.urandom(n))
            left -= n


def timed(args, env):
    t0 = time.monotonic()
    run(args, env)
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gib", type=int, default=4, help="model size")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kiln-bench-verify-", dir=args.dir))
    home = work / "home"
    home.mkdir()
    env = dict(os.environ, KILN_HOME=str(home))
    env.pop("KILN_SERVER", None)
    env.pop("KILN_TOKEN", None)
    server = subprocess.Popen(
        [args.kiln, "server", "--listen", "127.0.0.1:0", "--gpus",
         "1xT4-16GB", "--alert-rules", "", "--health-interval", "0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = {}
    try:
        deadline = time.monotonic() + 30
        while not (home / "server.url").exists():
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("bench/verify: the server did not start")
            time.sleep(0.05)
        key = work / "signer"
        run([args.kiln, "model", "keygen", "--out", str(key)], env)
        (home / "keys" / "trusted").mkdir(parents=True)
        shutil.copy(f"{key}.pub", home / "keys" / "trusted" / "signer.pub")

        cases = [("8 files", "eight", 8), ("1 file", "single", 1)]
        size = args.gib * GIB
        for label, name, n in cases:
            src = work / name
            src.mkdir()
            for i in range(n):
                write_random(src / f"part-{i}.bin", size // n)
            t0 = time.monotonic()
            run([args.kiln, "model", "push", str(src), "--name", name], env)
            push_s = time.monotonic() - t0
            shutil.rmtree(src)
            run([args.kiln, "model", "sign", f"{name}@1", "--key", str(key)],
                env)
            shown = json.loads(run([args.kiln, "model", "show", f"{name}@1",
                                    "-o", "json"], env))
            blobs = [str(home / "blobs" / "sha256" / f["sha256"])
                     for f in shown["manifest"]["files"]]
            kiln_cmd = [args.kiln, "model", "verify", f"{name}@1"]
            openssl_cmd = ["openssl", "dgst", "-sha256", *blobs]
            timed(kiln_cmd, env)  # warm: blobs in the page cache
            timed(openssl_cmd, env)
            kiln_t, openssl_t, ratios = [], [], []
            for r in range(args.rounds):
                if r % 2 == 0:
                    k = timed(kiln_cmd, env)
                    o = timed(openssl_cmd, env)
                else:
                    o = timed(openssl_cmd, env)
                    k = timed(kiln_cmd, env)
                kiln_t.append(k)
                openssl_t.append(o)
                ratios.append(o / k)
            results[label] = {
                "bytes": size, "files": n,
                "kiln_s": statistics.median(kiln_t),
                "openssl_s": statistics.median(openssl_t),
                "kiln_gbps": size / statistics.median(kiln_t) / 1e9,
                "openssl_gbps": size / statistics.median(openssl_t) / 1e9,
                "ratio": statistics.median(ratios),
                "rounds": args.rounds,
                "push_s": push_s,
            }
            # Free the disk before the next case.
            for b in blobs:
                os.unlink(b)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)

    print(f"{'case':<8} {'kiln s':>8} {'openssl s':>10} {'kiln GB/s':>10} "
          f"{'openssl GB/s':>13} {'ratio':>6} {'push s':>7}")
    for label, r in results.items():
        print(f"{label:<8} {r['kiln_s']:>8.2f} {r['openssl_s']:>10.2f} "
              f"{r['kiln_gbps']:>10.2f} {r['openssl_gbps']:>13.2f} "
              f"{r['ratio']:>6.2f} {r['push_s']:>7.1f}")
    results["cpus"] = os.cpu_count()
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
