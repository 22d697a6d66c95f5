#!/usr/bin/python3
"""bench/soak: the control plane under load and faults for a while.

One `kiln server` (4 simulated GPUs) whose home is a tmpfs, and one
`kiln gateway` in front of bench/gateway's fixed-response backend, on
loopback. For --minutes (default 30):

  API clients      --api-clients threads (default 4), each submitting jobs
                   (a shell line that writes an output, trying again
                   while the disk is full, as a careful program does) with an
                   Idempotency-Key, sending the same request again on a
                   lost answer, a 5xx or a 507 until it gets 201, and
                   reading between submits (job lists, one job, events).
  gateway clients  --gateway-clients threads (default 2) posting chat
                   completions through the gateway with a key.
  kill -9          the server, every --kill-every seconds (default 180),
                   restarted at once on the same home and port.
  full disk        every --fill-every seconds (default 240) the home's
                   tmpfs is filled to the last byte, held --fill-hold
                   seconds (default 20), then freed. A restart that
                   meets the full disk exits; it is started again each
                   second, as a supervisor would, and counted.

Then the load stops, the jobs are given time to end, and the run checks:
`kiln audit verify` ok, `PRAGMA integrity_check` ok, every acknowledged
job stored once (and no name stored twice), no acknowledged job failed,
and for the gateway (never killed) and the server's last life: resident
memory back within 10 % of where it stood once warm, and no descriptor
growth. Filling a tmpfs needs root; without it the run says so and goes
on without the full-disk phase. Prints a summary, writes JSON to --out,
exits 1 when a check fails.
"""
import argparse
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "gateway"))
import run as gw  # noqa: E402  (bench/gateway/run.py)

ROOT = HERE.parents[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def snapshot(self):
        with self.lock:
            return dict(self.counts)


class Server:
    """kiln server on a fixed port, so a restart keeps its URL."""

    def __init__(self, kiln, home, log):
        self.kiln, self.home, self.log = kiln, home, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.lives = 0
        self.failed_starts = 0

    def start(self):
        """Start it, and again each second while it exits (a start on a
        full disk does, saying so), as a supervisor would; 300 s at
        most."""
        url_file = self.home / "server.url"
        env = dict(os.environ, KILN_HOME=str(self.home))
        deadline = time.monotonic() + 300
        while True:
            if url_file.exists():
                url_file.unlink()
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    [self.kiln, "server", "--listen",
                     f"127.0.0.1:{self.port}", "--gpus", "4xH100-80GB",
                     "--file-root", str(self.home),
                     "--max-queued-jobs-per-user", "1000000"],
                    env=env, stdout=log, stderr=log)
            while not (url_file.exists() and url_file.read_text().strip()):
                if self.proc.poll() is not None:
                    break
                if time.monotonic() > deadline:
                    sys.exit("bench/soak: the server did not start in 300 s")
                time.sleep(0.05)
            if self.proc.poll() is None:
                break
            self.failed_starts += 1
            if time.monotonic() > deadline:
                sys.exit(f"bench/soak: the server keeps exiting; see "
                         f"{self.log}")
            time.sleep(1)
        self.lives += 1
        self.token = (self.home / "admin.token").read_text().strip()

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def request(server, method, path, body=None, headers=None, timeout=10):
    req = urllib.request.Request(server.url + path, data=body,
                                 method=method)
    req.add_header("Authorization", f"Bearer {server.token}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def api_client(n, server, stop, acked, acked_lock, counts):
    rng = random.Random(n)
    i = 0
    reads = ("/v1/jobs?limit=20", "/v1/events", "/v1/nodes", "/v1/whoami")
    while not stop.is_set():
        name = f"soak-{n}-{i}"
        i += 1
        spec = ("kind: Job\nname: %s\ncommand: [\"/bin/sh\", \"-c\", "
                "\"until echo %s > $KILN_OUTPUT_DIR/out.txt; do sleep 1; "
                "done\"]\n" % (name, name))
        key = uuid.uuid4().hex
        tries = 0
        while True:
            tries += 1
            try:
                status, body = request(server, "POST",
                                       "/v1/jobs?file=job.yaml",
                                       spec.encode(),
                                       {"Idempotency-Key": key}, timeout=5)
            except OSError:
                status, body = None, b""
            counts.add(f"submit {status or 'no answer'}")
            if status == 201:
                with acked_lock:
                    acked[name] = json.loads(body)["job"]["id"]
                break
            if status is not None and status < 500 and status != 429:
                counts.add("submit refused for good")
                break
            if stop.is_set() and tries > 600:
                counts.add("submit given up at the end")
                break
            time.sleep(min(2.0, 0.05 * tries))
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(reads)
            if acked and rng.random() < 0.3:
                path = f"/v1/jobs/{acked.get(name, 1)}"
            try:
                status, _ = request(server, "GET", path)
            except OSError:
                status = None
            counts.add(f"read {status or 'no answer'}")
        time.sleep(rng.uniform(0, 0.2))


def gateway_client(url, key, stop, counts):
    while not stop.is_set():
        counts.add(f"gateway {gw.status_of(url, key)}")


def fill(path):
    """dd into path until the file system refuses another byte (dd exits
    1 on the full disk: expected)."""
    for bs in ("1M", "1"):
        subprocess.run(["dd", "if=/dev/zero", f"of={path}", f"bs={bs}",
                        "oflag=append", "conv=notrunc"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def filler(home, every, hold, stop, result):
    """Fill the home's disk every `every` seconds for `hold` seconds."""
    path = home / "filler"
    while not stop.wait(every):
        fill(path)
        result["fills"] += 1
        stop.wait(hold)
        path.unlink()


def processes_under(root):
    """Live processes whose command line, environment or directory
    names root: the server, shims and tasks this run started."""
    root = str(root)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cmdline and (root.encode() in cmdline or
                        root.encode() in environ or cwd.startswith(root)):
            found.append(int(entry.name))
    return found


def sample(pid):
    return {"rss_kib": rss_kib(pid), "fds": fds(pid)}


def checks(kiln, server, acked):
    res = subprocess.run([kiln, "audit", "verify", "--home", str(server.home)],
                         capture_output=True, text=True, timeout=300)
    out = {"audit_verify": (res.stdout + res.stderr).strip().splitlines()[:1],
           "audit_ok": res.returncode == 0}
    db = sqlite3.connect(f"file:{server.home / 'kiln.db'}?mode=ro", uri=True)
    out["integrity_check"] = db.execute("PRAGMA integrity_check").fetchone()[0]
    rows = db.execute("SELECT id, name, state, reason FROM jobs").fetchall()
    db.close()
    by_name = {}
    for jid, name, state, reason in rows:
        by_name.setdefault(name, []).append((jid, state, reason))
    out["jobs_stored"] = len(rows)
    out["acknowledged"] = len(acked)
    out["acknowledged_missing"] = sorted(n for n in acked if n not in by_name)
    out["names_stored_twice"] = sorted(n for n, v in by_name.items()
                                       if len(v) > 1)
    out["acknowledged_wrong_id"] = sorted(
        n for n, i in acked.items() if n in by_name and by_name[n][0][0] != i)
    states = {}
    failed = []
    for name in acked:
        for _, state, reason in by_name.get(name, []):
            states[state] = states.get(state, 0) + 1
            if state == "failed":
                failed.append(f"{name}: {reason}")
    out["acknowledged_states"] = states
    out["acknowledged_failed"] = failed[:20]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default=str(ROOT / "build/src/cmd/kiln"))
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--api-clients", type=int, default=4)
    ap.add_argument("--gateway-clients", type=int, default=2)
    ap.add_argument("--kill-every", type=float, default=180)
    ap.add_argument("--fill-every", type=float, default=240)
    ap.add_argument("--fill-hold", type=float, default=20)
    # Every job leaves its task directory (logs, pid and exit records, its
    # output): ~17 MiB a minute of this load on the shared 2-core machine,
    # so the disk is sized to the run with room for a quieter machine's
    # faster jobs; only the filler should fill it.
    ap.add_argument("--tmpfs-size", default=None,
                    help="the home's tmpfs (default 48 MiB a minute of "
                    "the run, at least 256 MiB)")
    ap.add_argument("--out", default=str(ROOT / "build/bench-soak.json"))
    args = ap.parse_args()
    kiln = str(Path(args.kiln).resolve())
    backend_exe = Path(kiln).parents[2] / "bench" / "gateway" / "gateway-backend"

    if args.tmpfs_size is None:
        args.tmpfs_size = f"{max(256, int(48 * args.minutes))}m"
    work = Path(tempfile.mkdtemp(prefix="kiln-soak-", dir="/var/tmp"))
    home = work / "home"
    home.mkdir(mode=0o700)
    mounted = False
    if os.geteuid() == 0:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={args.tmpfs_size},mode=0700",
             "tmpfs", str(home)], capture_output=True).returncode == 0
    if not mounted:
        print("bench/soak: no tmpfs (needs root): no full-disk phase")
    server = Server(kiln, home, work / "server.log")
    counts, acked, acked_lock = Counter(), {}, threading.Lock()
    stop, fills_stop = threading.Event(), threading.Event()
    procs, threads = [], []
    result = {"minutes": args.minutes, "api_clients": args.api_clients,
              "gateway_clients": args.gateway_clients, "kills": 0,
              "fills": 0, "tmpfs": args.tmpfs_size if mounted else None}
    try:
        backend, backend_addr = gw.start_backend(backend_exe, work)
        procs.append(backend)
        gw_key = "soak-" + uuid.uuid4().hex
        gw_work = work / "gw"
        gw_work.mkdir()
        gateway, gw_url = gw.start_kiln(kiln, gw_work, backend_addr, gw_key,
                                        None)
        procs.append(gateway)
        server.start()
        for n in range(args.api_clients):
            # Daemons: a run that ends early (a server that will not
            # start) must not wait for clients still sending again.
            threads.append(threading.Thread(
                target=api_client, daemon=True,
                args=(n, server, stop, acked, acked_lock, counts)))
        for _ in range(args.gateway_clients):
            threads.append(threading.Thread(
                target=gateway_client, daemon=True,
                args=(gw_url, gw_key, stop, counts)))
        for t in threads:
            t.start()
        time.sleep(min(30, args.minutes * 6))
        gw_start = sample(gateway.p.pid)
        srv_start = sample(server.proc.pid)
        began = time.monotonic()
        end = began + args.minutes * 60
        next_kill = began + args.kill_every
        if mounted:
            fills = threading.Thread(target=filler, args=(
                home, args.fill_every, args.fill_hold, fills_stop, result),
                daemon=True)
            fills.start()
        while time.monotonic() < end:
            now = time.monotonic()
            # The last life runs a whole period, for its memory figures.
            if now >= next_kill and end - now > args.kill_every / 2:
                server.kill9()
                result["kills"] += 1
                server.start()
                next_kill = now + args.kill_every
                time.sleep(10)
                srv_start = sample(server.proc.pid)
            time.sleep(0.2)
        fills_stop.set()
        if mounted:
            fills.join()
        stop.set()
        for t in threads:
            t.join(timeout=600)
        result["requests"] = counts.snapshot()
        # Let the jobs end, then the memory settle, before the figures.
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            status, body = request(server, "GET",
                                   "/v1/jobs?state=queued&limit=1")
            status2, body2 = request(server, "GET",
                                     "/v1/jobs?state=running&limit=1")
            if json.loads(body)["jobs"] == [] and \
                    json.loads(body2)["jobs"] == []:
                break
            time.sleep(2)
        time.sleep(5)
        result["gateway_memory"] = {"start": gw_start,
                                    "end": sample(gateway.p.pid)}
        result["server_memory"] = {"start": srv_start,
                                   "end": sample(server.proc.pid)}
        server.stop()
        result["server_failed_starts"] = server.failed_starts
        result.update(checks(kiln, server, acked))
    finally:
        stop.set()
        fills_stop.set()
        server.stop()
        for p in procs:
            p.stop()
        for pid in processes_under(work):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if mounted:
            subprocess.run(["umount", "-l", str(home)], check=False)

    failures = []
    if not result["audit_ok"]:
        failures.append(f"audit verify: {result['audit_verify']}")
    if result["integrity_check"] != "ok":
        failures.append(f"integrity_check: {result['integrity_check']}")
    for k in ("acknowledged_missing", "names_stored_twice",
              "acknowledged_wrong_id", "acknowledged_failed"):
        if result[k]:
            failures.append(f"{k}: {result[k][:5]}")
    for who in ("gateway_memory", "server_memory"):
        m = result[who]
        if m["end"]["rss_kib"] > m["start"]["rss_kib"] * 1.10:
            failures.append(f"{who}: RSS {m['start']['rss_kib']} KiB -> "
                            f"{m['end']['rss_kib']} KiB")
        if m["end"]["fds"] > m["start"]["fds"]:
            failures.append(f"{who}: fds {m['start']['fds']} -> "
                            f"{m['end']['fds']}")
    result["failures"] = failures
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items()
                      if k not in ("acknowledged_failed",)}, indent=2))
    print(f"bench/soak: {'FAILED: ' + '; '.join(failures) if failures else 'ok'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
