#!/usr/bin/python3
"""bench/ckpt/step.py: does a checkpoint upload slow training down?

Trains examples/train/train.py (1 task, one thread, its default model) for
--steps steps twice in one run, alternating, --rounds times: once alone,
and once while checkpoints of 1 GiB (16 files of 64 MiB) are uploaded one
after another in the background with `kiln ckpt upload`, the same code the
server's sync threads run, at the same priority (SCHED_IDLE, nice 19, idle
I/O class: what kn_thread_background gives those threads) and one file at
a time, as they copy. Reports the median time per step of each and
the slowdown (goal: under 5 %). Writes JSON to --out.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def train(workdir, steps, out):
    env = dict(os.environ, OMP_NUM_THREADS="1", KILN_OUTPUT_DIR=str(out),
               KILN_CHECKPOINT_DIR=str(out / "ck"))
    for k in ("RANK", "WORLD_SIZE", "KILN_RESUME_FROM"):
        env.pop(k, None)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    subprocess.run(["/usr/bin/python3", str(ROOT / "examples/train/train.py"),
                    "--steps", str(steps), "--checkpoint-every", str(steps * 10)],
                   cwd=workdir, env=env, check=True, capture_output=True)
    m = json.loads((out / "metrics.json").read_text())
    return m["train_seconds"] / steps


def uploader(kiln, store, ckpt, stop, count):
    n = 0
    while not stop.is_set():
        # As the server's sync threads run (kn_thread_background): idle CPU
        # policy, lowest nice, idle I/O class.
        subprocess.run(["chrt", "--idle", "0", "nice", "-n", "19", "ionice",
                        "-c", "3", kiln, "ckpt", "upload", "--files", "1",
                        f"file://{store}", f"b{n}", str(ckpt)],
                       check=True, capture_output=True)
        shutil.rmtree(store / f"b{n}", ignore_errors=True)
        n += 1
    count.append(n)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kiln", required=True)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default="bench-ckpt-step.json")
    a = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kiln-bench-step-"))
    try:
        ckpt = work / "step-000100"
        ckpt.mkdir()
        for i in range(16):
            with open(ckpt / f"part-{i:02d}", "wb") as f:
                f.write(os.urandom(64 << 20))
        store = work / "store"
        store.mkdir()
        alone, busy, uploads = [], [], []
        for _ in range(a.rounds):
            alone.append(train(work, a.steps, work / "run"))
            stop, count = threading.Event(), []
            t = threading.Thread(target=uploader,
                                 args=(a.kiln, store, ckpt, stop, count))
            t.start()
            time.sleep(0.5)  # the upload is under way before training starts
            busy.append(train(work, a.steps, work / "run"))
            stop.set()
            t.join()
            uploads.append(count[0])
        res = {
            "steps": a.steps, "rounds": a.rounds,
            "step_ms_alone": round(statistics.median(alone) * 1000, 2),
            "step_ms_while_uploading": round(statistics.median(busy) * 1000, 2),
            "uploads_of_1GiB_during_runs": uploads,
        }
        res["slowdown_percent"] = round(
            100 * (res["step_ms_while_uploading"] / res["step_ms_alone"] - 1), 1)
        Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
        print(f"step time alone           {res['step_ms_alone']} ms")
        print(f"step time while uploading {res['step_ms_while_uploading']} ms "
              f"({res['uploads_of_1GiB_during_runs']} uploads of 1 GiB)")
        print(f"slowdown {res['slowdown_percent']} % (goal: under 5 %)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
