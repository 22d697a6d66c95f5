#!/usr/bin/python3
"""What one task start costs the shim, in counts rather than timings.

Runs `kiln shim --dir` of a `/bin/true` task directly, on launch files
like the ones the server writes (KILN_* variables, the home to hide, 1 GiB
memory and 4096 pids limits, the device cgroup, the task's user as the
server looked it up), and counts with `perf stat` the system calls, page
faults and CPU time of the shim and all its children. Counts do not depend
on how busy the machine is, so they can be compared where timings cannot.

Sides:
  unisolated           "isolation": "none", no limits
  isolated             sandbox and limits, launch.json names the user
  isolated, no "user"  the same, but the shim looks its user up itself

--before KILN runs another binary on the same launch files too (one that
ignores "user" looks its user up on every side). kiln-shim beside --kiln
(the lean shim the server starts for tasks without inputs) is counted as
a binary of its own when it is there. --strace adds, per side,
`strace -f -c` of one run: the calls by name, to see where they go.

Needs root: the sandbox drops to the kiln-task user.
"""
import argparse
import json
import os
import pwd
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EVENTS = "raw_syscalls:sys_enter,page-faults,task-clock"
TASK_USER = "kiln-task"


def launch(home, task, side):
    job = home / "tasks" / "1" / "1"
    env = ["CUDA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=0", "RANK=0",
           "LOCAL_RANK=0", "WORLD_SIZE=1", "KILN_JOB_ID=1",
           "KILN_JOB_NAME=true", "KILN_ATTEMPT=1", f"KILN_TASK_DIR={task}",
           f"KILN_CHECKPOINT_DIR={job}/checkpoints",
           f"KILN_OUTPUT_DIR={job}/outputs", f"KILN_INPUT_DIR={job}/inputs"]
    doc = {"argv": ["/bin/true"], "env": env, "timeout_ms": 0,
           "grace_ms": 10000, "log_max_bytes": 67108864, "log_keep": 3,
           "home": str(home)}
    if side == "unisolated":
        doc["isolation"] = "none"
        return doc
    doc["devices"] = []
    doc["limits"] = {"cgroup_root": "/sys/fs/cgroup",
                     "cgroup_parent": "kiln", "memory_bytes": 1 << 30,
                     "cpu_milli": 0, "pids_max": 4096}
    doc["run_as"] = TASK_USER
    if side == "isolated":
        u = pwd.getpwnam(TASK_USER)
        doc["user"] = {"name": TASK_USER, "uid": u.pw_uid, "gid": u.pw_gid,
                       "groups": os.getgrouplist(TASK_USER, u.pw_gid)}
    return doc


def fresh_task(home, side):
    task = home / "tasks" / "1" / "1" / "0"
    shutil.rmtree(home / "tasks", ignore_errors=True)
    task.mkdir(parents=True, mode=0o700)
    (task / "launch.json").write_text(json.dumps(launch(home, task, side)))
    return task


def shim_command(kiln, task):
    """kiln-shim takes --dir itself; kiln takes it as `kiln shim`."""
    if Path(kiln).name == "kiln-shim":
        return [kiln, "--dir", str(task)]
    return [kiln, "shim", "--dir", str(task)]


def perf_counts(kiln, home, side):
    task = fresh_task(home, side)
    out = subprocess.run(["perf", "stat", "-x", ",", "-e", EVENTS, "--",
                          *shim_command(kiln, task)],
                         capture_output=True, text=True, check=True)
    status = json.loads((task / "status.json").read_text())
    assert status["exit_code"] == 0, (status, out.stderr)
    counts = {}
    for line in out.stderr.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2] in EVENTS.split(","):
            counts[fields[2]] = float(fields[0])
    return counts


def strace_table(kiln, home, side):
    task = fresh_task(home, side)
    with tempfile.NamedTemporaryFile("r") as f:
        subprocess.run(["strace", "-f", "-c", "-o", f.name,
                        *shim_command(kiln, task)], check=True)
        return f.read()


def spread(values):
    med = statistics.median(values)
    return f"{med:,.0f} [{min(values):,.0f}–{max(values):,.0f}]"


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--kiln", default=str(ROOT / "build/src/cmd/kiln"))
    p.add_argument("--before", help="another kiln binary to count too")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--strace", action="store_true")
    a = p.parse_args()
    lean = Path(a.kiln).parent / "kiln-shim"
    binaries = ([("now", a.kiln)] +
                ([("now, kiln-shim", str(lean))] if lean.exists() else []) +
                ([("before", a.before)] if a.before else []))
    sides = ["unisolated", "isolated", 'isolated, no "user"']
    home = Path(tempfile.mkdtemp(prefix="kiln-shim-count-", dir="/var/tmp"))
    home.chmod(0o700)
    try:
        print("| binary | side | system calls | page faults | CPU ms |")
        print("|---|---|---|---|---|")
        for name, kiln in binaries:
            for side in sides:
                runs = [perf_counts(kiln, home, side) for _ in range(a.runs)]
                print(f"| {name} | {side} | "
                      f"{spread([r['raw_syscalls:sys_enter'] for r in runs])} | "
                      f"{spread([r['page-faults'] for r in runs])} | "
                      f"{spread([r['task-clock'] for r in runs])} |")
        if a.strace:
            for name, kiln in binaries:
                for side in sides:
                    print(f"\n{name}, {side}:\n")
                    print(strace_table(kiln, home, side))
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
