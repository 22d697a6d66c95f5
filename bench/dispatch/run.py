#!/usr/bin/python3
"""bench/dispatch: kiln against single-node Slurm, in one run, as a ratio.

Both sides run the same trivial job, timed the same way: each job appends
"ID START_NS" to a file when it starts, runs `true`, and appends "ID END_NS"
when done; the submit time is taken just before the submission call, on the
same clock. So

  jobs/s        = N / (last end - first submit)
  submit->start = start - submit, per job (p50, p99)

kiln: a fresh `kiln server --gpus 8xH100-80GB` in a temporary KILN_HOME;
jobs ask for 1 GPU each (so at most 8 run at once, as Slurm's 8 GPUs) and
are submitted over HTTP/1.1 keep-alive. Slurm: scripts/slurm-up.sh (slurm-wlm,
munge, 64 advertised CPUs, 8 fake GPUs, batch_sched_delay=0) and
bench/slurm/dispatch.py. Pass --no-slurm to measure kiln alone.

--array submits the N jobs as one job array on both sides: one POST with
`array: 0-(N-1)` to kiln, one `sbatch --array=0-(N-1)` to Slurm; every
element's submit time is that one call's.

--clients C submits from C concurrent clients on both sides (kiln: C
threads, each its own keep-alive connection; Slurm: C concurrent sbatch
callers). Besides jobs/s to the last end, each side reports

  accepted/s    = N / (last submit answered - first submit)
  started/s     = N / (last start - first submit)

--rounds R (without --isolation) runs kiln then Slurm R times, bringing
Slurm up once, and prints each round's kiln/Slurm ratios with the mean
and sample standard deviation of the ratios. --before OLD-KILN adds an
earlier kiln binary to each round, run just before kiln, so a change is
measured against its baseline and Slurm in the same run (the paired
kiln/before ratios with their spread).

With --no-slurm, --before OLD-KILN compares the two kiln binaries alone
in --rounds rounds, alternating which goes first, each server in a
cpuacct cgroup of the run's own: per round and side the CPU the whole
side spent per job of the batch (server, shims and tasks), the server's
own, the kernel threads', jobs/s and the lone start (--lone), then each
side's mean and spread and the paired kiln/before ratios.

Each kiln side also reports what the server itself spent: its CPU time
(user + system, from /proc, the shims and tasks not included) per job,
and its store commits per job (from /metrics: each commit is one fsync).

--spawn-limit build/bench/dispatch/spawn-limit adds the machine's
ceiling, measured in the same run after each kiln and Slurm side: one
process forking, exec-ing and reaping /bin/true as fast as it can
(bench/dispatch/spawn_limit.c), and kiln's jobs/s as a fraction of it.

--task-alone P runs the same task --jobs times more, P at once, started
by xargs with nothing else: no server, no shim, no sandbox. Its rate is
the ceiling any dispatcher has for this task on this machine (the task
is three processes: sh and two dates), and its CPU per task what the
task itself costs; kiln's jobs/s is reported as a fraction of it.

--kiln-executor slurm runs kiln's side as `kiln server --executor slurm`
on the same Slurm cluster (scripts/slurm-up.sh): kiln then dispatches
through Slurm, and with --array its array is one `sbatch --array`, so the
ratio is what kiln's own bookkeeping adds on top of Slurm.

Prints a table and writes the JSON of both sides to --out.

--isolation compares kiln with itself instead: the same binary with tasks
sandboxed and under cgroup limits (the default) and with both off
(`--unisolated --no-limits`), in alternating rounds of one run, and
reports each round's ratio with the mean and spread of the paired
ratios and the load average around each round. With a client that
submits faster than either side dispatches, the batch's start latency
is mostly queue wait; after each batch, --lone jobs are sent one at a
time (each after the last ended) for the start path's own latency. `--no-limits` alone
still enforces limits where cgroups can be written, so the unisolated
server runs in its own mount namespace with an empty tmpfs over
/sys/fs/cgroup: it finds no hierarchy and runs its tasks unlimited.
And since a task's cgroup makes all tasks one scheduling group, which
on a machine busy with other work gets the CPU of one process where
unlimited tasks get one share each, both servers run in a cpu cgroup of
their own (cgroup v1), as on a node that runs nothing else: each side's
server, shims and tasks then share the same weight against the rest.
Each side is also put in a cpuacct cgroup of its own, so every round
reports the CPU the whole side spent per job of the batch (server,
shims and tasks together; kiln never moves a task out of cpuacct), and
the CPU all kernel threads spent per job meanwhile (machine-wide, so it
counts other work too): the work the kernel defers when a task's
cgroup and namespaces go lands there. CPU per job depends far less on
what else the machine runs than jobs/s does.
Needs root (the sandbox drops to the kiln-task user) and unshare(1).
"""
import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
WAIT_LIMIT_S = 900
# How long Slurm's side waits for its queue to drain. Under load its
# launches can fail and requeue held, never to run: those jobs are
# cancelled then, and the round counts what completed.
SLURM_WAIT_S = 300


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


def read_records(path):
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = int(parts[1])
    return out


# Run a command with no cgroup hierarchy in sight (see --isolation).
WITHOUT_CGROUPS = ["unshare", "--mount", "--propagation", "private", "sh",
                   "-c", 'mount -t tmpfs none /sys/fs/cgroup && exec "$@"',
                   "sh"]


CPU_V1 = Path("/sys/fs/cgroup/cpu")
CPUACCT_V1 = Path("/sys/fs/cgroup/cpuacct")


def into_cgroups(cgs):
    """A wrapper that starts a command in each of the cgroups cgs
    (directories, one per hierarchy)."""
    return ["sh", "-c", 'for cg in $0; do echo $$ >"$cg/cgroup.procs" '
            '|| exit; done; exec "$@"', " ".join(str(cg) for cg in cgs)]


def tree_cpu_ns(cpuacct):
    """CPU nanoseconds used so far by everything in cgroup cpuacct: the
    server, its shims and their tasks (kiln moves tasks into cgroups of
    memory, cpu, pids and devices, never cpuacct)."""
    return int((cpuacct / "cpuacct.usage").read_text())


def kthreads_cpu_ns():
    """{pid: CPU nanoseconds so far} of every kernel thread, machine-wide:
    the work the kernel defers (RCU callbacks, cgroup and namespace
    teardown, writeback) lands there, not in the tasks that caused it."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat.parent.name == "2" or fields[1] == "2":
            out[stat.parent.name] = ((int(fields[11]) + int(fields[12])) *
                                     1_000_000_000 //
                                     os.sysconf("SC_CLK_TCK"))
    return out


def kthreads_spent_ns(before):
    """What kernel threads spent since the snapshot before: a worker that
    exited since took its time with it and is not counted."""
    return sum(max(0, ns - before.get(pid, 0))
               for pid, ns in kthreads_cpu_ns().items())


def load1():
    return float(Path("/proc/loadavg").read_text().split()[0])


def lone_starts(session, url, spec, records, count):
    """submit -> start of jobs sent one at a time, each after the last
    ended: the start path itself, with no queue in front of it."""
    out = []
    for _ in range(count):
        t = time.time_ns()
        r = session.post(url + "/v1/jobs", data=spec)
        r.raise_for_status()
        job = str(r.json()["job"]["id"])
        deadline = time.monotonic() + 30
        while (job not in read_records(records / "ends")
               and time.monotonic() < deadline):
            time.sleep(0.005)
        start = read_records(records / "starts").get(job)
        if start:
            out.append((start - t) / 1e6)
    return out


def server_cpu_s(pid):
    """User + system CPU seconds of process pid so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def store_commits(session, url):
    """How many store transactions the server has committed (/metrics)."""
    for line in session.get(url + "/metrics").text.splitlines():
        if line.startswith("kiln_store_commit_duration_seconds_count"):
            return int(float(line.split()[-1]))
    return None


def submit_all(url, token, spec, jobs, clients):
    """POST spec jobs times from clients threads; {job id: submit ns}."""
    submitted, lock = {}, threading.Lock()
    left = iter(range(jobs))

    def client():
        with requests.Session() as session:
            session.headers["Authorization"] = f"Bearer {token}"
            while True:
                with lock:
                    if next(left, None) is None:
                        return
                t = time.time_ns()
                r = session.post(url + "/v1/jobs", data=spec)
                r.raise_for_status()
                with lock:
                    submitted[str(r.json()["job"]["id"])] = t

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return submitted


def run_kiln(kiln, jobs, gpus_per_job, extra=(), wrap=(), lone=0,
             array=False, clients=1, cpuacct=None):
    home = Path(tempfile.mkdtemp(prefix="kiln-bench-"))
    # Outside the home and /tmp, which tasks do not see, and writable for
    # the task's user.
    records = Path(tempfile.mkdtemp(prefix="kiln-bench-records-",
                                    dir="/var/tmp"))
    records.chmod(0o777)
    env = dict(os.environ, KILN_HOME=str(home))
    load_before = load1()
    # The whole batch may wait queued at once (concurrent clients).
    server = subprocess.Popen([*wrap, kiln, "server", "--listen", "127.0.0.1:0",
                               "--gpus", "8xH100-80GB",
                               "--max-queued-jobs-per-user", str(jobs + 1),
                               *extra], env=env,
                              stdout=subprocess.DEVNULL,
                              stderr=open(home / "server.log", "wb"))
    try:
        deadline = time.monotonic() + 30
        while not (home / "server.url").exists():
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("kiln server did not start: " +
                                 (home / "server.log").read_text())
            time.sleep(0.02)
        url = (home / "server.url").read_text().strip()
        token = (home / "admin.token").read_text().strip()
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {token}"
        node = session.get(url + "/v1/nodes").json()["nodes"][0]
        script = task_script(records)
        spec = json.dumps({"kind": "Job", "name": "true",
                           "command": ["/bin/sh", "-c", script],
                           "resources": {"gpus": gpus_per_job}})
        submitted = {}
        cpu_before = server_cpu_s(server.pid)
        tree_before = tree_cpu_ns(cpuacct) if cpuacct else None
        kthreads_before = kthreads_cpu_ns()
        commits_before = store_commits(session, url)
        t0 = time.time()
        if clients > 1 and not array:
            submitted = submit_all(url, token, spec, jobs, clients)
        for _ in range(0 if clients > 1 and not array else
                       1 if array else jobs):
            t = time.time_ns()
            r = session.post(url + "/v1/jobs", data=spec if not array else
                             json.dumps(dict(json.loads(spec),
                                             array=f"0-{jobs - 1}")))
            r.raise_for_status()
            head = r.json()["job"]["id"]
            # An array's elements have consecutive ids from the first.
            for i in range(head, head + (jobs if array else 1)):
                submitted[str(i)] = t
        submit_phase = time.time() - t0
        deadline = time.monotonic() + WAIT_LIMIT_S
        next_ask = time.monotonic() + 1.0
        while True:
            # Done when nothing runs or waits: asked once every ended job
            # has its record, or once a second (failed jobs leave none).
            ends = read_records(records / "ends")
            if len(ends) >= jobs or time.monotonic() > next_ask:
                next_ask = time.monotonic() + 1.0
                active = session.get(url + "/v1/jobs", params={"state": "running"}).json()["jobs"]
                queued = session.get(url + "/v1/jobs", params={"state": "queued"}).json()["jobs"]
                if not active and not queued:
                    break
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        done_ns = time.time_ns()
        # Before the lone jobs: the batch's own cost to the server.
        cpu_s = server_cpu_s(server.pid) - cpu_before
        tree_ns = tree_cpu_ns(cpuacct) - tree_before if cpuacct else None
        kthreads_ns = kthreads_spent_ns(kthreads_before)
        commits = store_commits(session, url) - commits_before
        starts = read_records(records / "starts")
        ends = read_records(records / "ends")
        lone_ms = lone_starts(session, url, spec, records, lone)
        failed = session.get(url + "/v1/jobs", params={"state": "failed"}).json()["jobs"]
        lat = [(starts[i] - submitted[i]) / 1e6 for i in submitted if i in starts]
        first = min(submitted.values())
        last_end = max(ends.values()) if ends else done_ns
        wall = (last_end - first) / 1e9
        return {
            "peer": "kiln", "version": subprocess.run(
                [kiln, "version"], capture_output=True, text=True).stdout.strip(),
            "jobs": jobs, "completed": len(ends), "failed": len(failed),
            "gpus_per_job": gpus_per_job, "wall_s": round(wall, 3),
            "submit_phase_s": round(submit_phase, 3),
            "accepted_per_s": (round(jobs / submit_phase, 2)
                               if submit_phase > 0 else None),
            "started_per_s": (round(len(starts) /
                                    ((max(starts.values()) - first) / 1e9), 2)
                              if starts else None),
            "clients": clients,
            "jobs_per_s": round(len(ends) / wall, 2) if wall > 0 else None,
            "submit_to_start_p50_ms": round(percentile(lat, 50), 2),
            "submit_to_start_p99_ms": round(percentile(lat, 99), 2),
            "submit_to_start_mean_ms": round(statistics.mean(lat), 2),
            "lone_start_p50_ms": (round(statistics.median(lone_ms), 2)
                                  if lone_ms else None),
            "server_cpu_ms_per_job": round(cpu_s * 1000 / jobs, 3),
            "tree_cpu_ms_per_job": (round(tree_ns / 1e6 / jobs, 3)
                                    if tree_ns is not None else None),
            "kthreads_cpu_ms_per_job": round(kthreads_ns / 1e6 / jobs, 3),
            "store_commits_per_job": round(commits / jobs, 3),
            "isolation": node.get("isolation"),
            "limits_enforced": node.get("limits", {}).get("enforced"),
            "load1_before": load_before, "load1_after": load1(),
        }
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        subprocess.run(["pkill", "-KILL", "-f", f"shim --dir {home}"])
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(records, ignore_errors=True)


def task_script(records):
    """The trivial task every side runs: its start and end time appended
    to records/starts and records/ends."""
    return (f'echo "$KILN_JOB_ID $(date +%s%N)" >>{records}/starts; true; '
            f'echo "$KILN_JOB_ID $(date +%s%N)" >>{records}/ends')


def task_alone(jobs, parallel):
    """The task's own ceiling: the same task `jobs` times, `parallel` at
    once, started by xargs with no scheduler and no shim. Its rate (/s)
    and the CPU per task of everything it ran (ms)."""
    records = Path(tempfile.mkdtemp(prefix="kiln-task-alone-"))
    try:
        line = " ".join(str(i) for i in range(jobs)) + "\n"
        before = os.times()
        t0 = time.monotonic()
        subprocess.run(["xargs", "-P", str(parallel), "-n", "1", "/bin/sh",
                        "-c", "KILN_JOB_ID=$1; " + task_script(records), "_"],
                       input=line, text=True, check=True, timeout=1800)
        took = time.monotonic() - t0
        after = os.times()
        ended = len((records / "ends").read_text().splitlines())
        if ended != jobs:
            raise SystemExit(f"task alone: {ended} of {jobs} ended")
        cpu = (after.children_user - before.children_user +
               after.children_system - before.children_system)
        return {"per_s": round(jobs / took, 2), "parallel": parallel,
                "cpu_ms_per_task": round(1000 * cpu / jobs, 2)}
    finally:
        shutil.rmtree(records, ignore_errors=True)


def spawn_limit(path, jobs):
    """The machine's ceiling: bench/dispatch/spawn-limit forking, exec-ing
    and reaping /bin/true `jobs` times (at most 10,000), in /s."""
    out = subprocess.run([path, str(min(jobs, 10000))], capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit("spawn-limit failed: " + out.stderr)
    words = out.stdout.split()
    return float(words[words.index("per_s") + 1])


def slurm_up():
    """scripts/slurm-up.sh (its KILN_SLURM_* settings from the
    environment): the slurm.conf, or None with why on stderr."""
    up = subprocess.run(["bash", str(ROOT / "scripts/slurm-up.sh")],
                        capture_output=True, text=True)
    if up.returncode != 0:
        print("slurm-up failed: " + up.stderr[-2000:], file=sys.stderr)
        return None
    return up.stdout.strip().splitlines()[-1].split("=", 1)[-1]


def slurm_down():
    subprocess.run(["bash", str(ROOT / "scripts/slurm-down.sh")],
                   capture_output=True)


def slurm_side(conf, jobs, mode, gpus_per_job, clients=1):
    res = subprocess.run(
        ["/usr/bin/python3", str(ROOT / "bench/slurm/dispatch.py"),
         "--jobs", str(jobs), "--mode", mode,
         "--gpus-per-job", str(gpus_per_job), "--conf", conf,
         "--submitters", str(clients), "--timeout", str(SLURM_WAIT_S)],
        capture_output=True, text=True, timeout=WAIT_LIMIT_S + 120)
    try:
        # Exit 1 with its figures when not every job ended in time.
        out = json.loads(res.stdout)
    except ValueError:
        return {"peer": "slurm", "error": res.stderr[-2000:] or
                f"exit {res.returncode}"}
    phase, last_start = out.get("submit_phase_s"), out.get("last_start_s")
    out["accepted_per_s"] = round(jobs / phase, 2) if phase else None
    out["started_per_s"] = (round(out["completed"] / last_start, 2)
                            if last_start else None)
    return out


def run_slurm(jobs, mode, gpus_per_job, clients=1):
    conf = slurm_up()
    if not conf:
        return {"peer": "slurm", "error": "slurm-up failed"}
    try:
        return slurm_side(conf, jobs, mode, gpus_per_job, clients)
    finally:
        slurm_down()


def compare_slurm(a):
    """kiln then Slurm, a.rounds times; each round's ratios and their
    mean and spread."""
    conf = slurm_up()
    if not conf:
        return 1
    rounds = []
    ratios = {"accepted": [], "started": [], "jobs": [], "of_spawn_limit": []}
    changed = {"accepted": [], "started": [], "jobs": [],
               "server_cpu_per_job": [], "lone_start_p50": []}
    try:
        for n in range(a.rounds):
            b = None
            if a.before:
                b = run_kiln(a.before, a.jobs, a.gpus_per_job,
                             array=a.array, clients=a.clients, lone=a.lone)
            k = run_kiln(a.kiln, a.jobs, a.gpus_per_job, array=a.array,
                         clients=a.clients, lone=a.lone)
            s = slurm_side(conf, a.jobs, "array" if a.array else
                           a.slurm_mode, a.slurm_gpus_per_job, a.clients)
            rounds.append({"kiln": k, "slurm": s, "before": b})
            if a.spawn_limit:
                limit = spawn_limit(a.spawn_limit, a.jobs)
                rounds[-1]["spawn_limit_per_s"] = limit
                if k.get("jobs_per_s"):
                    ratios["of_spawn_limit"].append(k["jobs_per_s"] / limit)
            if b:
                print(before_line(n, b, k, changed), flush=True)
            if "error" in s:
                print(f"round {n + 1}: kiln accepted/s {k['accepted_per_s']}"
                      f" started/s {k['started_per_s']} jobs/s "
                      f"{k['jobs_per_s']}; slurm: "
                      f"{s['error'].strip().splitlines()[-1][:200]}",
                      flush=True)
                continue
            line = [f"round {n + 1} (load {k['load1_before']:.1f})"]
            for key, field in (("accepted", "accepted_per_s"),
                               ("started", "started_per_s"),
                               ("jobs", "jobs_per_s")):
                if k.get(field) and s.get(field):
                    ratios[key].append(k[field] / s[field])
                    line.append(f"{key}/s kiln {k[field]} slurm {s[field]} "
                                f"({k[field] / s[field]:.2f}x)")
            print("; ".join(line), flush=True)
    finally:
        slurm_down()
    Path(a.out).write_text(json.dumps({"rounds": rounds}, indent=2) + "\n")
    for key, values in ratios.items():
        if key == "of_spawn_limit":
            if values:
                print(f"kiln jobs/s / spawn limit: {spread(values)}")
            continue
        print(f"kiln/slurm {key}/s: {spread(values)} "
              f"(rounds: {', '.join(f'{v:.2f}' for v in values)})")
    for key, values in changed.items() if a.before else ():
        print(f"kiln/before {key}: {spread(values)} "
              f"(rounds: {', '.join(f'{v:.2f}' for v in values)})")
    print(f"results: {a.out}")
    return 0


def before_line(n, b, k, changed):
    """One round's kiln/before ratios, kept in changed, as a line."""
    line = [f"round {n + 1} kiln/before (load {b['load1_before']:.1f})"]
    for key, field in (("accepted", "accepted_per_s"),
                       ("started", "started_per_s"),
                       ("jobs", "jobs_per_s"),
                       ("server_cpu_per_job", "server_cpu_ms_per_job"),
                       ("lone_start_p50", "lone_start_p50_ms")):
        if k.get(field) and b.get(field):
            changed[key].append(k[field] / b[field])
            line.append(f"{key} {k[field]} before {b[field]} "
                        f"({k[field] / b[field]:.2f}x)")
    line.append(f"commits/job {k['store_commits_per_job']} before "
                f"{b['store_commits_per_job']}")
    return "; ".join(line)


def spread(values):
    """Mean and sample standard deviation, as text."""
    if len(values) < 2:
        return f"{values[0]:.3f}" if values else "-"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


@contextlib.contextmanager
def own_cgroups():
    """A cpu and a cpuacct cgroup (v1) of the run's own, where those
    hierarchies exist: yields (the wrapper that starts a server in them,
    the cpuacct cgroup or None, whether the cpu cgroup was made)."""
    cg = CPU_V1 / f"kiln-bench-{os.getpid()}"
    acct = CPUACCT_V1 / f"kiln-bench-{os.getpid()}"
    made = [d for d in (cg, acct) if (d.parent / "cgroup.procs").exists()]
    for d in made:
        d.mkdir()
    try:
        yield (into_cgroups(made) if made else [],
               acct if acct in made else None, cg in made)
    finally:
        # An isolated server's tasks' parent, then the run's own.
        for d in (cg / "kiln", *made):
            if d.exists():
                d.rmdir()


def compare_isolation(kiln, jobs, gpus_per_job, rounds, lone, out):
    """Isolated vs unisolated kiln, alternating, one round at a time."""
    runs = {"isolated": [], "unisolated": []}
    with own_cgroups() as (wrap, acct, own_cpu):
        sides = {"isolated": ((), wrap),
                 "unisolated": (("--unisolated", "--no-limits"),
                                wrap + WITHOUT_CGROUPS)}
        for i in range(rounds):
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for name in order:
                extra, side_wrap = sides[name]
                runs[name].append(run_kiln(
                    kiln, jobs, gpus_per_job, extra, side_wrap, lone,
                    cpuacct=acct))
    iso, uni = runs["isolated"], runs["unisolated"]
    # A side that did not get what it is named after measures nothing.
    for r in iso:
        assert r["limits_enforced"] and r["isolation"].startswith("uid"), r
    for r in uni:
        assert not r["limits_enforced"] and r["isolation"].startswith("none"), r
    thr = [a["jobs_per_s"] / b["jobs_per_s"] for a, b in zip(iso, uni)]
    p50 = [a["submit_to_start_p50_ms"] / b["submit_to_start_p50_ms"]
           for a, b in zip(iso, uni)]
    mean_d = [a["submit_to_start_mean_ms"] - b["submit_to_start_mean_ms"]
              for a, b in zip(iso, uni)]
    lone_r = [a["lone_start_p50_ms"] / b["lone_start_p50_ms"]
              for a, b in zip(iso, uni)
              if a["lone_start_p50_ms"] and b["lone_start_p50_ms"]]
    cpu_r = [a["tree_cpu_ms_per_job"] / b["tree_cpu_ms_per_job"]
             for a, b in zip(iso, uni)
             if a["tree_cpu_ms_per_job"] and b["tree_cpu_ms_per_job"]]
    cpu_d = [a["tree_cpu_ms_per_job"] - b["tree_cpu_ms_per_job"]
             for a, b in zip(iso, uni)
             if a["tree_cpu_ms_per_job"] and b["tree_cpu_ms_per_job"]]
    summary = {"throughput_ratio": thr, "p50_ratio": p50,
               "lone_start_p50_ratio": lone_r,
               "mean_start_diff_ms": mean_d,
               "cpu_per_job_ratio": cpu_r, "cpu_per_job_diff_ms": cpu_d,
               "own_cpu_cgroup": own_cpu}
    Path(out).write_text(json.dumps({"rounds": runs, "summary": summary},
                                    indent=2) + "\n")
    print("round  side        jobs/s   p50 ms   mean ms  p99 ms  "
          "lone p50 ms  CPU ms/job  kthreads ms/job  completed  load")
    for i in range(rounds):
        for name in sides:
            r = runs[name][i]
            print(f"{i + 1:<6} {name:<11} {r['jobs_per_s']:<8} "
                  f"{r['submit_to_start_p50_ms']:<8} "
                  f"{r['submit_to_start_mean_ms']:<8} "
                  f"{r['submit_to_start_p99_ms']:<7} "
                  f"{r['lone_start_p50_ms']!s:<12} "
                  f"{r['tree_cpu_ms_per_job']!s:<11} "
                  f"{r['kthreads_cpu_ms_per_job']!s:<16} "
                  f"{r['completed']}/{r['jobs']:<6} "
                  f"{r['load1_before']:.1f}-{r['load1_after']:.1f}")
    print(f"throughput isolated/unisolated: {spread(thr)} "
          f"(per round: {', '.join(f'{x:.3f}' for x in thr)})")
    print(f"p50 start latency isolated/unisolated: {spread(p50)} "
          f"(per round: {', '.join(f'{x:.3f}' for x in p50)})")
    print(f"p50 start latency of lone jobs isolated/unisolated: "
          f"{spread(lone_r)} "
          f"(per round: {', '.join(f'{x:.3f}' for x in lone_r)})")
    print(f"mean start latency, isolated minus unisolated: "
          f"{spread(mean_d)} ms")
    print(f"CPU per job (server, shims and tasks) isolated/unisolated: "
          f"{spread(cpu_r)} (per round: "
          f"{', '.join(f'{x:.3f}' for x in cpu_r)}); isolated minus "
          f"unisolated: {spread(cpu_d)} ms")
    print(f"results: {out}")
    return 0 if all(r["completed"] == jobs for r in iso + uni) else 1


BEFORE_FIGURES = (("CPU ms/job", "tree_cpu_ms_per_job"),
                  ("server CPU ms/job", "server_cpu_ms_per_job"),
                  ("kthreads ms/job", "kthreads_cpu_ms_per_job"),
                  ("jobs/s", "jobs_per_s"),
                  ("lone p50 ms", "lone_start_p50_ms"),
                  ("commits/job", "store_commits_per_job"))


def compare_before(a):
    """kiln and --before OLD-KILN alone, alternating which goes first,
    a.rounds times, each side's server in the run's own cgroups: each
    round's figures, then each side's mean and spread and the paired
    kiln/before ratios."""
    runs = {"before": [], "kiln": []}
    with own_cgroups() as (wrap, acct, _):
        for i in range(a.rounds):
            order = [("before", a.before), ("kiln", a.kiln)]
            for name, binary in order if i % 2 == 0 else order[::-1]:
                r = run_kiln(binary, a.jobs, a.gpus_per_job, wrap=wrap,
                             lone=a.lone, array=a.array, clients=a.clients,
                             cpuacct=acct)
                runs[name].append(r)
                print(f"round {i + 1} {name}: " + ", ".join(
                    f"{label} {r[key]}" for label, key in BEFORE_FIGURES) +
                    f"; completed {r['completed']}/{r['jobs']}, load "
                    f"{r['load1_before']:.1f}-{r['load1_after']:.1f}",
                    flush=True)
    Path(a.out).write_text(json.dumps({"rounds": runs}, indent=2) + "\n")
    for label, key in BEFORE_FIGURES:
        b = [r[key] for r in runs["before"]]
        k = [r[key] for r in runs["kiln"]]
        if None in b or None in k:
            continue  # no cpuacct hierarchy, or no lone jobs
        print(f"{label}: before {spread(b)}, kiln {spread(k)}; kiln/before "
              f"{spread([x / y for x, y in zip(k, b)])}")
    print(f"results: {a.out}")
    return 0 if all(r["completed"] == a.jobs
                    for side in runs.values() for r in side) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kiln", required=True, help="path to the kiln binary")
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--gpus-per-job", type=int, default=1)
    p.add_argument("--slurm-mode", choices=("single", "array"), default="single")
    p.add_argument("--slurm-gpus-per-job", type=int, default=0)
    p.add_argument("--no-slurm", action="store_true")
    p.add_argument("--array", action="store_true",
                   help="the jobs as one job array on both sides")
    p.add_argument("--out", default="bench-dispatch.json")
    p.add_argument("--isolation", action="store_true",
                   help="compare sandboxed and limited tasks with neither")
    p.add_argument("--rounds", type=int, default=1,
                   help="rounds of each side, alternating (with "
                   "--isolation: default 3)")
    p.add_argument("--before", metavar="OLD-KILN",
                   help="an earlier kiln binary, run in each round beside "
                   "kiln (with --no-slurm: the two alone, with the CPU "
                   "per job of the whole side)")
    p.add_argument("--spawn-limit", metavar="SPAWN-LIMIT",
                   help="build/bench/dispatch/spawn-limit: also measure the "
                   "machine's fork/exec/wait rate and report kiln's jobs/s "
                   "as a fraction of it")
    p.add_argument("--task-alone", type=int, metavar="PARALLEL", default=0,
                   help="also run the same task --jobs times, PARALLEL at "
                   "once, by xargs with no scheduler: the ceiling any "
                   "dispatcher has for it on this machine")
    p.add_argument("--kiln-executor", choices=("local", "slurm"),
                   default="local",
                   help="kiln's executor (slurm: on the same cluster)")
    p.add_argument("--clients", type=int, default=1,
                   help="concurrent submitting clients on each side")
    p.add_argument("--lone", type=int, default=20,
                   help="jobs sent one at a time after each kiln batch "
                   "(with --isolation or --rounds/--before), for the start "
                   "latency without a queue")
    a = p.parse_args()
    if a.isolation:
        return compare_isolation(a.kiln, a.jobs, a.gpus_per_job,
                                 a.rounds if a.rounds > 1 else 3, a.lone,
                                 a.out)
    if a.before and a.no_slurm:
        return compare_before(a)
    if (a.rounds > 1 or a.before) and not a.no_slurm:
        return compare_slurm(a)

    extra = ()
    if a.kiln_executor == "slurm":
        conf = slurm_up()
        if not conf:
            return 1
        os.environ["SLURM_CONF"] = conf
        extra = ("--executor", "slurm")
    kiln = run_kiln(a.kiln, a.jobs, a.gpus_per_job, extra=extra,
                    array=a.array, clients=a.clients)
    results = {"kiln": kiln}
    if not a.no_slurm:
        results["slurm"] = run_slurm(a.jobs,
                                     "array" if a.array else a.slurm_mode,
                                     a.slurm_gpus_per_job, a.clients)
    Path(a.out).write_text(json.dumps(results, indent=2) + "\n")

    rows = [("", "jobs/s", "submit->start p50 ms", "p99 ms", "completed")]
    for name, r in results.items():
        if "error" in r:
            rows.append((name, "error", r["error"][:60], "", ""))
            continue
        rows.append((name, str(r.get("jobs_per_s")),
                     str(r.get("submit_to_start_p50_ms")),
                     str(r.get("submit_to_start_p99_ms")),
                     f'{r.get("completed")}/{r.get("jobs")}'))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if a.spawn_limit:
        limit = spawn_limit(a.spawn_limit, a.jobs)
        results["spawn_limit_per_s"] = limit
        Path(a.out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"spawn limit {limit:.0f}/s; kiln {kiln['jobs_per_s']} jobs/s "
              f"= {(kiln['jobs_per_s'] or 0) / limit:.4f} of it")
    if a.task_alone:
        alone = task_alone(a.jobs, a.task_alone)
        results["task_alone"] = alone
        Path(a.out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"task alone ({alone['parallel']} at once, no scheduler): "
              f"{alone['per_s']}/s, {alone['cpu_ms_per_task']} ms of CPU "
              f"each; kiln {kiln['jobs_per_s']} jobs/s = "
              f"{(kiln['jobs_per_s'] or 0) / alone['per_s']:.3f} of it")
    s = results.get("slurm", {})
    if "jobs_per_s" in s and s["jobs_per_s"] and kiln["jobs_per_s"]:
        print(f"ratio kiln/slurm: throughput {kiln['jobs_per_s'] / s['jobs_per_s']:.1f}x, "
              f"p50 latency {s['submit_to_start_p50_ms'] / kiln['submit_to_start_p50_ms']:.1f}x lower")
    print(f"results: {a.out}")
    return 0 if kiln["completed"] == a.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
