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

The source files of these stay in the page cache throughout, for every
side alike.

Then save and upload, what a user waits for: from the moment the trainer
starts saving until the checkpoint is complete in the store. save.py
writes the same 1 GiB checkpoint into CKPT_DIR/step-000100.tmp/, file by
file, and renames it to step-000100 (the commit). Each side writes fresh
files into a fresh directory; what a round wrote is deleted when the next
round begins, before an untimed save, since on these VMs whatever runs
right after a deletion of gigabytes runs 3-4x slower. In alternating
order per round:

  kiln      `kiln shim --kube -- python3 save.py ...`: the pod shim,
            kiln's checkpoint sync beside a task, run standalone (no
            Kubernetes). Timed until the shim exits, which it does only
            once the task has exited and its last committed checkpoint is
            uploaded (MANIFEST.json last, checked afterwards).
  file://   against save.py, then the plain `dd bs=16M` copies as above.
  Azurite   against save.py, then the one-after-another `curl -T` as
            above; a fresh Azurite for each measurement.
  save      save.py alone, once per round: the part of each that is the
            save.
Each kiln and peer measurement also reports the part after the save: for
the peers, from save.py's exit to the last copy's; for kiln, from the
task's end (its status.json) to the shim's exit.

--only-save-upload runs only these (after the one-off save, whose first
file warms each Azurite); --no-azurite leaves Azurite out of both.

Ratios are peer time / kiln time, the median of each round's ratio: above
1.0 kiln is faster. Prints a table and writes JSON to --out: times_s and
median_s per measurement, and under "shim" each kiln save + sync's task
time (save.py under the shim) and the shim's "checkpoint ... synced" line.
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

from save import FILE_MIB, FILES, write_checkpoint

ROOT = Path(__file__).resolve().parents[2]
SAVE_PY = Path(__file__).resolve().parent / "save.py"
NAME = "step-000100"
ACCOUNT = "devstoreaccount1"
KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
       "K1SZFPTOtr/KBHBeksoGMGw==")


def timed(fn):
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def run(args, env=None):
    proc = subprocess.run(args, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench/ckpt: {' '.join(map(str, args[:3]))}: {proc.stderr}")
    return proc.stdout


def sas(container):
    fields = ["racwdl", "", "2099-01-01T00:00:00Z", f"/blob/{ACCOUNT}/{container}",
              "", "", "", "2023-11-03", "c", "", "", "", "", "", "", ""]
    sig = base64.b64encode(hmac.new(base64.b64decode(KEY), "\n".join(fields).encode(),
                                    hashlib.sha256).digest()).decode()
    return ("sv=2023-11-03&se=2099-01-01T00%3A00%3A00Z&sr=c&sp=racwdl&sig="
            + urllib.parse.quote(sig, safe=""))


def curl_args(url, files, parallel):
    """One curl process sending files as Put Blob with a SAS token."""
    args = ["curl", "-sS", "--fail", "-H", "x-ms-blob-type: BlockBlob",
            "-H", "x-ms-version: 2023-11-03", "-H", "Expect:"]
    if parallel:
        args += ["--parallel", "--parallel-max", "6"]
    for f in files:
        args += ["-T", str(f), f"{url}/curl/{f.name}?{sas('bench')}",
                 "-o", "/dev/null"]
    return args


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-azurite", action="store_true")
    ap.add_argument("--only-save-upload", action="store_true",
                    help="only the save + upload measurements")
    a = ap.parse_args()
    kiln = a.kiln
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-ckpt-", dir="/var/tmp"))
    gib = FILES * FILE_MIB / 1024
    times = {k: [] for k in ("kiln_file", "dd", "dd_fsync", "restore_file",
                             "kiln_azurite", "curl_seq", "curl_par",
                             "restore_azurite", "save_alone",
                             "kiln_save_sync_file", "save_dd",
                             "kiln_save_sync_azurite", "save_curl",
                             "kiln_save_sync_file_after", "save_dd_after",
                             "kiln_save_sync_azurite_after", "save_curl_after")}
    # per kiln measurement: the task's own run time (save.py, from the
    # shim's status.json) and the shim's line for the upload it made
    shim = {"file": [], "azurite": []}
    azurite_state = work / "azurite"
    try:
        save_s = timed(lambda: write_checkpoint(work, NAME))
        ckpt = work / NAME
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

        for r in range(0 if a.only_save_upload else a.rounds):
            order = [("kiln_file", kiln_file), ("dd", lambda: dd([])),
                     ("dd_fsync", lambda: dd(["conv=fsync"]))]
            if r % 2:
                order.reverse()
            for name, fn in order:
                times[name].append(fn())
            times["restore_file"].append(restore(f"file://{store}"))
        shutil.rmtree(dd_dir, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)

        rnd = work / "round"

        def new_round():
            """A fresh directory for one round's measurements. What a round
            wrote is deleted only when the next begins, and an untimed save
            comes first: freeing gigabytes here slows whatever runs next
            for a while (seen as whichever side followed a deletion taking
            3-4x longer), so no timed side follows one."""
            shutil.rmtree(rnd, ignore_errors=True)
            run(["sync"])
            rnd.mkdir()
            write_checkpoint(rnd / "warm-up", NAME)
            run(["sync"])

        def save_then(copy, label, after_key=None):
            """save.py into a fresh directory, then copy(its files): the
            whole time; the part after the save goes to times[after_key]."""
            save_dir = rnd / f"save-{label}"
            run(["sync"])
            t0 = time.monotonic()
            run(["/usr/bin/python3", str(SAVE_PY), str(save_dir), NAME])
            saved = time.monotonic()
            copy(sorted((save_dir / NAME).iterdir()))
            end = time.monotonic()
            if after_key:
                times[after_key].append(end - saved)
            return end - t0

        def save_sync(url, job, env, manifest_exists, after_key):
            """The shim around save.py until it exits, then the manifest:
            the time and what the shim said of its run. The part after the
            save (the task's end, in its status.json, to the shim's exit)
            goes to times[after_key]."""
            save_dir = rnd / "save-kiln"
            task_dir = rnd / "task"
            env = dict(env, KILN_TASK_DIR=str(task_dir),
                       KILN_CHECKPOINT_DIR=str(save_dir), KILN_STORE=url,
                       KILN_JOB_ID=str(job), KILN_ATTEMPT="1",
                       KILN_CHECKPOINT_KEEP="3")
            # nothing else of a pod's: no outputs, inputs or ranks
            for k in ("KILN_OUTPUT_DIR", "KILN_OUTPUT_STORE", "KILN_INPUTS",
                      "KILN_INPUT_DIR", "KILN_TERMINATION_LOG", "KILN_REQUIRES",
                      "KILN_RESUME_FROM", "RANK"):
                env.pop(k, None)
            args = [kiln, "shim", "--kube", "--", "/usr/bin/python3",
                    str(SAVE_PY), str(save_dir), NAME]
            run(["sync"])
            t0 = time.monotonic()
            proc = subprocess.run(args, env=env, capture_output=True, text=True)
            t = time.monotonic() - t0
            exited = time.time()
            lines = [ln for ln in proc.stderr.splitlines()
                     if ln.startswith(f"kiln: checkpoint {NAME} synced")]
            if proc.returncode != 0 or not lines or not manifest_exists(job):
                sys.exit(f"bench/ckpt: kiln shim --kube (exit "
                         f"{proc.returncode}) left no {job}/checkpoints/"
                         f"{NAME}/MANIFEST.json in {url}: {proc.stderr}")
            status = json.loads((task_dir / "status.json").read_text())
            task_s = (status["ended_at_ms"] - status["started_at_ms"]) / 1000
            times[after_key].append(exited - status["ended_at_ms"] / 1000)
            return t, {"task_s": task_s, "synced": lines[-1]}

        def save_alone():
            return save_then(lambda saved: None, "alone")

        def kiln_save_sync_file(job):
            store = rnd / "store"
            t, report = save_sync(
                f"file://{store}", job, os.environ,
                lambda job: (store / str(job) / "checkpoints" / NAME /
                             "MANIFEST.json").is_file(), "kiln_save_sync_file_after")
            shim["file"].append(report)
            return t

        def save_dd():
            dd_out = rnd / "dd"
            dd_out.mkdir()
            def copy(saved):
                for f in saved:
                    run(["dd", f"if={f}", f"of={dd_out / f.name}", "bs=16M",
                         "status=none"])
            return save_then(copy, "dd", "save_dd_after")

        for r in range(a.rounds):
            new_round()
            order = [("kiln_save_sync_file", lambda: kiln_save_sync_file(100 + r)),
                     ("save_dd", save_dd), ("save_alone", save_alone)]
            if r % 2:
                order.reverse()
            for name, fn in order:
                times[name].append(fn())

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
                    return timed(lambda: run(curl_args(url, files, parallel)))
                return measure

            for r in range(0 if a.only_save_upload else a.rounds):
                order = [("kiln_azurite", kiln_az), ("curl_seq", curl(False)),
                         ("curl_par", curl(True))]
                if r % 2:
                    order.reverse()
                for name, fn in order:
                    times[name].append(with_azurite(fn))

            def kiln_save_sync_az(job):
                def measure(url, env):
                    def manifest_exists(job):
                        return subprocess.run(
                            [kiln, "blob", "stat", url,
                             f"{job}/checkpoints/{NAME}/MANIFEST.json"],
                            env=env, capture_output=True).returncode == 0
                    t, report = save_sync(url, job, env, manifest_exists,
                                          "kiln_save_sync_azurite_after")
                    shim["azurite"].append(report)
                    return t
                return measure

            def save_curl(url, env):
                return save_then(lambda saved: run(curl_args(url, saved, False)),
                                 "curl", "save_curl_after")

            for r in range(a.rounds):
                new_round()
                order = [("kiln_save_sync_azurite", kiln_save_sync_az(100 + r)),
                         ("save_curl", save_curl)]
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
              "times_s": times, "median_s": med, "shim": shim}
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
    row("save.py alone", "save_alone")
    row("kiln save + sync file://", "kiln_save_sync_file")
    row("save, then dd bs=16M", "save_dd", "kiln_save_sync_file")
    row("  kiln: after the save", "kiln_save_sync_file_after")
    row("  dd: after the save", "save_dd_after", "kiln_save_sync_file_after")
    row("kiln save + sync azurite", "kiln_save_sync_azurite")
    row("save, then curl -T", "save_curl", "kiln_save_sync_azurite")
    row("  kiln: after the save", "kiln_save_sync_azurite_after")
    row("  curl: after the save", "save_curl_after",
        "kiln_save_sync_azurite_after")
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
