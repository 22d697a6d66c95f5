#!/usr/bin/python3
"""Slurm side of kiln's dispatch benchmark.

Submits N trivial batch jobs to the single-node Slurm that
scripts/slurm-up.sh runs, waits until Slurm's queue is empty, and prints one
JSON object: jobs per second from the first submit to the last job's end
(jobs_per_s; jobs_per_s_to_drained counts until squeue is empty instead), and
the submit-to-start latency of each job (p50, p90, p99).

Why a wrapper instead of Slurm's own times: Slurm records SubmitTime and
StartTime with one-second resolution (scontrol, jobcomp/filetxt), and sacct
needs slurmdbd, which this cluster does not run. Latencies of interest are
well under a second, so each job runs

    echo "$SLURM_JOB_ID ${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID} $(date +%s%N)" >>DIR/starts
    true
    echo "$SLURM_JOB_ID $(date +%s%N)" >>DIR/ends

Each line is one short O_APPEND write, so concurrent jobs do not interleave.
The submit time is taken just before sbatch is called, on the same clock
(CLOCK_REALTIME, same machine). The cost of the wrapper, two forks of date,
is about a millisecond per job and counts against Slurm.

Standard library only; run with /usr/bin/python3.
"""

import argparse
import concurrent.futures
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

DEFAULT_CONF = "/var/lib/kiln-slurm/slurm.conf"
# Bounds on anything that could hang: one Slurm command, the whole wait.
COMMAND_TIMEOUT_S = 60
# squeue costs slurmctld CPU on a machine the jobs already saturate, so it is
# asked rarely until every job has written its end record, then often.
POLL_INTERVAL_S = 0.1
SQUEUE_IDLE_INTERVAL_S = 2.0
CANCEL_WAIT_S = 30


class BenchError(Exception):
    pass


def run(argv, env, timeout=COMMAND_TIMEOUT_S):
    """Runs a Slurm command and returns its stdout; raises BenchError."""
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError("%s: no answer within %ds" % (argv[0], timeout))
    except OSError as e:
        raise BenchError("%s: %s" % (argv[0], e))
    if proc.returncode != 0:
        raise BenchError("%s failed (%d): %s" % (
            " ".join(argv[:2]), proc.returncode, proc.stderr.strip()[:500]))
    return proc.stdout


def percentile(sorted_values, p):
    """Nearest-rank percentile of an ascending list; None when empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def queue_ids(env):
    """Job ids Slurm still holds as pending, running or completing."""
    out = run(["squeue", "-h", "-r", "-o", "%i"], env)
    return [line.strip() for line in out.splitlines() if line.strip()]


def slurm_config(env):
    """The live controller configuration as a dict of strings."""
    config = {}
    for line in run(["scontrol", "show", "config"], env).splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key.strip()] = value.strip()
    return config


def node_fields(env):
    """Fields of the first node, from scontrol's one-line format."""
    out = run(["scontrol", "-o", "show", "node"], env).splitlines()
    fields = {}
    if out:
        for word in out[0].split():
            key, sep, value = word.partition("=")
            if sep:
                fields[key] = value
    return fields


def scheduler_parameter(params, name):
    for item in params.split(","):
        key, sep, value = item.partition("=")
        if key.strip() == name and sep:
            return value.strip()
    return None


def read_records(path):
    """Lines of a record file split into fields; missing file is empty."""
    try:
        with open(path) as f:
            return [line.split() for line in f if line.strip()]
    except FileNotFoundError:
        return []


def count_lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def jobcomp_states(path, offset, job_ids):
    """Counts JobState of our jobs among records appended after offset."""
    states = {}
    if not path or not os.path.isfile(path):
        return states
    with open(path, errors="replace") as f:
        f.seek(offset)
        for line in f:
            fields = dict(w.partition("=")[::2] for w in line.split())
            if fields.get("JobId") in job_ids:
                state = fields.get("JobState", "UNKNOWN")
                states[state] = states.get(state, 0) + 1
    return states


def submit_single(args, env, wrap, sbatch_base):
    """Submits args.jobs jobs one sbatch each, from args.submitters threads.

    Returns ({job_id: submit_ns}, [sbatch call ns], first error or None)."""
    submits = {}
    durations = []
    lock = threading.Lock()
    errors = []
    next_index = [0]

    def worker():
        while True:
            with lock:
                if errors or next_index[0] >= args.jobs:
                    return
                next_index[0] += 1
            t0 = time.time_ns()
            try:
                out = run(sbatch_base + ["--wrap=" + wrap], env)
            except BenchError as e:
                with lock:
                    errors.append(str(e))
                return
            t1 = time.time_ns()
            job_id = out.strip().split(";")[0]
            with lock:
                submits[job_id] = t0
                durations.append(t1 - t0)

    with concurrent.futures.ThreadPoolExecutor(args.submitters) as pool:
        for f in [pool.submit(worker) for _ in range(args.submitters)]:
            f.result()
    return submits, durations, (errors[0] if errors else None)


def submit_array(args, env, wrap, sbatch_base):
    """Submits one job array of args.jobs tasks; same return as above."""
    t0 = time.time_ns()
    try:
        out = run(sbatch_base + ["--array=0-%d" % (args.jobs - 1),
                                 "--wrap=" + wrap], env)
    except BenchError as e:
        return {}, [], str(e)
    t1 = time.time_ns()
    return {out.strip().split(";")[0]: t0}, [t1 - t0], None


def cancel(env, job_ids):
    """Cancels what is left of our jobs, bounded; errors are ignored."""
    ids = sorted(job_ids)
    for i in range(0, len(ids), 500):
        try:
            run(["scancel"] + ids[i:i + 500], env)
        except BenchError:
            pass
    deadline = time.monotonic() + CANCEL_WAIT_S
    while time.monotonic() < deadline:
        try:
            if not queue_ids(env):
                return
        except BenchError:
            pass
        time.sleep(POLL_INTERVAL_S)


def ms(ns):
    return None if ns is None else round(ns / 1e6, 3)


def bench(args):
    conf = args.conf or os.environ.get("SLURM_CONF") or DEFAULT_CONF
    if not os.path.isfile(conf):
        raise BenchError("no slurm.conf at %s (run scripts/slurm-up.sh)" % conf)
    env = dict(os.environ, SLURM_CONF=conf)

    version = run(["sinfo", "-V"], env).strip()
    config = slurm_config(env)
    node = node_fields(env)
    leftover = queue_ids(env)
    if leftover:
        raise BenchError("queue is not empty (%d jobs, e.g. %s): results would "
                         "be skewed" % (len(leftover), leftover[0]))

    records = tempfile.mkdtemp(prefix="kiln-slurm-dispatch-")
    os.chmod(records, 0o755)
    starts = os.path.join(records, "starts")
    ends = os.path.join(records, "ends")
    wrap = ('echo "$SLURM_JOB_ID ${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID} '
            '$(date +%%s%%N)" >>%s; true; '
            'echo "$SLURM_JOB_ID $(date +%%s%%N)" >>%s' % (starts, ends))
    sbatch_base = ["sbatch", "--parsable", "--output=/dev/null",
                   "--chdir=" + records, "--job-name=kiln-bench"]
    if args.gpus_per_job > 0:
        sbatch_base.append("--gres=gpu:%d" % args.gpus_per_job)

    jobcomp_path = config.get("JobCompLoc")
    jobcomp_offset = 0
    if jobcomp_path and os.path.isfile(jobcomp_path):
        jobcomp_offset = os.path.getsize(jobcomp_path)

    first_submit_ns = time.time_ns()
    if args.mode == "array":
        submits, durations, error = submit_array(args, env, wrap, sbatch_base)
    else:
        submits, durations, error = submit_single(args, env, wrap, sbatch_base)
    submitted_ns = time.time_ns()
    if submits:
        first_submit_ns = min(submits.values())

    # Wait until Slurm holds none of our jobs (the queue was empty before).
    deadline_ns = first_submit_ns + int(args.timeout * 1e9)
    drained_ns = None
    last_squeue = 0.0
    while time.time_ns() < deadline_ns:
        now = time.monotonic()
        if (count_lines(ends) >= args.jobs or
                now - last_squeue >= SQUEUE_IDLE_INTERVAL_S):
            last_squeue = now
            try:
                if not queue_ids(env):
                    drained_ns = time.time_ns()
                    break
            except BenchError as e:
                error = error or str(e)
        time.sleep(POLL_INTERVAL_S)
    if drained_ns is None:
        cancel(env, submits.keys())
    stop_ns = drained_ns if drained_ns is not None else time.time_ns()

    start_lines = read_records(starts)
    end_lines = read_records(ends)
    first_start = {}
    for fields in start_lines:
        if len(fields) != 3:
            continue
        job_id, submit_key, t = fields[0], fields[1], int(fields[2])
        if job_id not in first_start and submit_key in submits:
            first_start[job_id] = t - submits[submit_key]
    ended = {fields[0]: int(fields[1]) for fields in end_lines
             if len(fields) == 2}
    latencies = sorted(first_start.values())
    completed = len(ended)
    wall_ns = stop_ns - first_submit_ns
    last_end_ns = (max(ended.values()) - first_submit_ns) if ended else None
    our_ids = set(first_start) | set(ended) | set(submits)
    durations.sort()

    sched_params = config.get("SchedulerParameters", "")
    result = {
        "peer": "slurm",
        "version": version,
        "jobs": args.jobs,
        "mode": args.mode,
        "submitted": (len(submits) if args.mode == "single"
                      else (args.jobs if submits else 0)),
        "completed": completed,
        "complete": drained_ns is not None and completed == args.jobs,
        "jobs_per_s": (round(completed / (last_end_ns / 1e9), 3)
                       if last_end_ns else None),
        "last_end_s": round(last_end_ns / 1e9, 3) if last_end_ns else None,
        "last_start_s": (round((max(int(f[2]) for f in start_lines
                                    if len(f) == 3) - first_submit_ns) / 1e9,
                               3)
                         if any(len(f) == 3 for f in start_lines) else None),
        "wall_s": round(wall_ns / 1e9, 3),
        "jobs_per_s_to_drained": (round(completed / (wall_ns / 1e9), 3)
                                  if wall_ns > 0 else None),
        "submit_phase_s": round((submitted_ns - first_submit_ns) / 1e9, 3),
        "submit_to_start_p50_ms": ms(percentile(latencies, 50)),
        "submit_to_start_p90_ms": ms(percentile(latencies, 90)),
        "submit_to_start_p99_ms": ms(percentile(latencies, 99)),
        "submit_to_start_max_ms": ms(latencies[-1] if latencies else None),
        "sbatch_call_p50_ms": ms(percentile(durations, 50)),
        "jobcomp_states": jobcomp_states(jobcomp_path, jobcomp_offset, our_ids),
        "timing": "client clock before sbatch -> job wrapper date +%%s%%N; "
                  "end = squeue empty (polled every %gs once all jobs wrote "
                  "their end record, every %gs before)"
                  % (POLL_INTERVAL_S, SQUEUE_IDLE_INTERVAL_S),
        "config": {
            "slurm_conf": conf,
            "cpus_advertised": int(node.get("CPUTot", "0") or 0),
            "host_cpus": os.cpu_count(),
            "gres": node.get("Gres"),
            "gpus_per_job": args.gpus_per_job,
            "submitters": args.submitters if args.mode == "single" else 1,
            "batch_sched_delay": scheduler_parameter(sched_params,
                                                     "batch_sched_delay"),
            "scheduler_parameters": sched_params,
            "scheduler_type": config.get("SchedulerType"),
            "select_type": config.get("SelectType"),
            "select_type_parameters": config.get("SelectTypeParameters"),
            "proctrack_type": config.get("ProctrackType"),
            "task_plugin": config.get("TaskPlugin"),
            "job_comp_type": config.get("JobCompType"),
            "accounting_storage_type": config.get("AccountingStorageType"),
            "min_job_age": config.get("MinJobAge"),
            "max_job_count": config.get("MaxJobCount"),
            "slurmctld_debug": config.get("SlurmctldDebug"),
        },
    }
    if error:
        result["error"] = error
    if drained_ns is None:
        result["error"] = result.get("error") or (
            "timed out after %gs; remaining jobs cancelled" % args.timeout)
    if args.keep_records:
        result["records"] = records
    else:
        shutil.rmtree(records, ignore_errors=True)
    return result


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Submit N trivial jobs to Slurm and report jobs/s and "
                    "submit-to-start latency as one JSON object.")
    p.add_argument("--jobs", type=int, default=2000,
                   help="number of jobs (default 2000)")
    p.add_argument("--mode", choices=("single", "array"), default="single",
                   help="one sbatch per job, or one job array of N tasks")
    p.add_argument("--gpus-per-job", type=int, default=0,
                   help="request --gres=gpu:N per job (default 0: none)")
    p.add_argument("--submitters", type=int, default=1,
                   help="concurrent sbatch callers in single mode (default 1)")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds from first submit before giving up "
                        "(default 900); unfinished jobs are cancelled")
    p.add_argument("--conf", help="slurm.conf (default $SLURM_CONF, then %s)"
                   % DEFAULT_CONF)
    p.add_argument("--keep-records", action="store_true",
                   help="keep the per-job start/end record files")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    if args.gpus_per_job < 0:
        p.error("--gpus-per-job must be >= 0")
    if args.submitters < 1:
        p.error("--submitters must be at least 1")
    if args.timeout <= 0:
        p.error("--timeout must be positive")
    return args


def main(argv):
    args = parse_args(argv)
    try:
        result = bench(args)
    except BenchError as e:
        result = {"peer": "slurm", "error": str(e), "complete": False}
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    if "error" in result:
        # Also on stderr, for callers that keep only stderr on failure.
        sys.stderr.write("bench/slurm/dispatch.py: %s\n" % result["error"])
    return 0 if result["complete"] and "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
