#!/usr/bin/python3
"""bench/ckpt: checkpoint upload and restore against plain copies, in one run.

A 1 GiB checkpoint (16 files of 64 MiB, random bytes) is saved once into a
temporary directory (its save time is reported; it is the same for every
side). Then, each repeated --rounds times in alternating order, median kept:

  file://   `kiln ckpt upload file://DIR JOB CKPT` (copy + sha256 + fsync of
            each file + manifest) against `dd bs=16M` copies of the same 16
            files, plain and with conv=fsync (kiln's durability).
  Azurite   `kiln ckpt upload http://127.0.0.1:PORT/devstoreaccount1/bench`
            (Shared Key; each 64 MiB file in one Put Blob, the default
            single-put limit) against `curl -T` Put Blob of the same files with a SAS
            token: one curl process sending them one after another
            (keep-alive), and one with --parallel (6 at once). A fresh
            Azurite (in memory) for each measurement.
  restore   `kiln ckpt restore` (download + sha256 verify) from each store.

Ratios are peer time / kiln time, the median of each round's ratio: above
1.0 kiln is faster. The source files
stay in the page cache throughout, for every side alike. Prints a table and
writes JSON to --out.
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = "devstoreaccount1"
KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
       "K1SZFPTOtr/KBHBeksoGMGw==")
FILES = 16
FILE_MIB = 64


def timed(fn):
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def run(args, env=None):
    proc = subprocess.run(args, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench/ckpt: {' '.join(map(str, args[:3]))}: {proc.stderr}")
    return proc.stdout


def save(ckpt):
    """Write the checkpoint the way a trainer would: file by file."""
    ckpt.mkdir(parents=True)
    block = os.urandom(FILE_MIB << 20)
    for i in range(FILES):
        # each file distinct: a counter in its first bytes
        with open(ckpt / f"shard-{i:02d}.bin", "wb") as f:
            f.write(i.to_bytes(8, "little"))
            f.write(memoryview(block)[8:])


def sas(container):
    fields = ["racwdl", "", "2099-01-01T00:00:00Z", f"/blob/{ACCOUNT}/{container}",
              "", "", "", "2023-11-03", "c", "", "", "", "", "", "", ""]
    sig = base64.b64encode(hmac.new(base64.b64decode(KEY), "\n".join(fields).encode(),
                                    hashlib.sha256).digest()).decode()
    return ("sv=2023-11-03&se=2099-01-01T00%3A00%3A00Z&sr=c&sp=racwdl&sig="
            + urllib.parse.quote(sig, safe=""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-azurite", action="store_true")
    a = ap.parse_args()
    kiln = a.kiln
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-ckpt-", dir="/var/tmp"))
    gib = FILES * FILE_MIB / 1024
    times = {k: [] for k in ("kiln_file", "dd", "dd_fsync", "restore_file",
                             "kiln_azurite", "curl_seq", "curl_par",
                             "restore_azurite")}
    azurite_state = work / "azurite"
    try:
        ckpt = work / "step-000100"
        save_s = timed(lambda: save(ckpt))
        files = sorted(ckpt.iterdir())
        store = work / "store"
        dd_dir = work / "dd"

        def kiln_file():
            shutil.rmtree(store, ignore_errors=True)
            run(["sync"])
            return timed(lambda: run([kiln, "ckpt", "upload", f"file://{store}", "1",
                                      str(ckpt)]))

        def dd(extra):
            shutil.rmtree(dd_dir, ignore_errors=True)
            dd_dir.mkdir()
            run(["sync"])
            def copy():
                for f in files:
                    run(["dd", f"if={f}", f"of={dd_dir / f.name}", "bs=16M",
                         "status=none", *extra])
            return timed(copy)

        def restore(url, env=None):
            dest = work / "restore"
            shutil.rmtree(dest, ignore_errors=True)
            run(["sync"])
            return timed(lambda: run([kiln, "ckpt", "restore", url, "1", str(dest)],
                                      env=env))

        for r in range(a.rounds):
            order = [("kiln_file", kiln_file), ("dd", lambda: dd([])),
                     ("dd_fsync", lambda: dd(["conv=fsync"]))]
            if r % 2:
                order.reverse()
            for name, fn in order:
                times[name].append(fn())
            times["restore_file"].append(restore(f"file://{store}"))
        shutil.rmtree(dd_dir, ignore_errors=True)

        if not a.no_azurite:
            # A fresh Azurite for each measurement: it keeps blobs (even
            # deleted ones, until its 10-minute collection) in its heap and
            # slows down as that grows, which would favour whoever goes first.
            def with_azurite(measure):
                endpoint = run(["bash", str(ROOT / "scripts/azurite.sh"), "start",
                                str(azurite_state)]).strip().splitlines()[-1]
                env = dict(os.environ, AZURE_STORAGE_CONNECTION_STRING=(
                    f"AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={endpoint}"))
                for k in ("AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"):
                    env.pop(k, None)
                url = f"{endpoint}/bench"
                try:
                    # the container, and a warm Azurite, outside the timing
                    run([kiln, "blob", "put", url, "warm", str(files[0])], env=env)
                    return measure(url, env)
                finally:
                    run(["bash", str(ROOT / "scripts/azurite.sh"), "stop",
                         str(azurite_state)])

            def kiln_az(url, env):
                t = timed(lambda: run([kiln, "ckpt", "upload", url, "1", str(ckpt)],
                                      env=env))
                times["restore_azurite"].append(restore(url, env))
                return t

            def curl(parallel):
                def measure(url, env):
                    args = ["curl", "-sS", "--fail", "-H", "x-ms-blob-type: BlockBlob",
                            "-H", "x-ms-version: 2023-11-03", "-H", "Expect:"]
                    if parallel:
                        args += ["--parallel", "--parallel-max", "6"]
                    for f in files:
                        args += ["-T", str(f), f"{url}/curl/{f.name}?{sas('bench')}",
                                 "-o", "/dev/null"]
                    return timed(lambda: run(args))
                return measure

            for r in range(a.rounds):
                order = [("kiln_azurite", kiln_az), ("curl_seq", curl(False)),
                         ("curl_par", curl(True))]
                if r % 2:
                    order.reverse()
                for name, fn in order:
                    times[name].append(with_azurite(fn))
    finally:
        if azurite_state.exists():
            subprocess.run(["bash", str(ROOT / "scripts/azurite.sh"), "stop",
                            str(azurite_state)])
        shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in times.items() if v}
    result = {"gib": gib, "files": FILES, "save_s": save_s, "rounds": a.rounds,
              "times_s": times, "median_s": med}
    print(f"checkpoint: {FILES} files, {gib:.2f} GiB; saved in {save_s:.2f} s")
    print(f"{'':34} {'median s':>9} {'GB/s':>7} {'peer/kiln':>10}")

    def row(label, key, kiln_key=None):
        if key not in med:
            return
        gbs = gib * (1 << 30) / 1e9 / med[key]
        # the median of each round's ratio: both sides of a round ran
        # minutes apart at most, under the same load
        ratio = (f"{statistics.median(p / k for p, k in zip(times[key], times[kiln_key])):.2f}"
                 if kiln_key else "")
        print(f"{label:34} {med[key]:9.2f} {gbs:7.2f} {ratio:>10}")
    row("kiln ckpt upload file://", "kiln_file")
    row("dd bs=16M", "dd", "kiln_file")
    row("dd bs=16M conv=fsync", "dd_fsync", "kiln_file")
    row("kiln ckpt restore file://", "restore_file")
    row("kiln ckpt upload azurite", "kiln_azurite")
    row("curl -T, one after another", "curl_seq", "kiln_azurite")
    row("curl -T --parallel 6", "curl_par", "kiln_azurite")
    row("kiln ckpt restore azurite", "restore_azurite")
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
