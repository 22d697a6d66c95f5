#!/usr/bin/python3
"""An interactive session's cost: `kiln exec` against `ssh` to the same
machine (Debian's openssh, a private sshd on a loopback port started
here), both running a command beside a sleeping job.

  echo round trip   one byte to `cat` and back, --rounds times in a row,
                    on one session (kiln: the session protocol spoken
                    here, as the CLI speaks it; ssh: `ssh HOST cat` on
                    pipes, no terminal either)
  bulk output       `head -c SIZE /dev/zero` read to /dev/null through
                    the CLI (`kiln exec JOB -- head ...`, `ssh HOST head
                    ...`), --runs times: bytes per second

kiln's server listens on plain HTTP on loopback (no TLS, as on one
machine); ssh encrypts (its default cipher), which its figures include.
Mean ± standard deviation, and the median and 90th percentile of the
round trips.

Usage: bench/interactive/run.py --kiln build/src/cmd/kiln
           [--rounds 300] [--runs 5] [--size 256M]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))


def frame(ftype, stream, payload=b""):
    return struct.pack(">BBHI", ftype, 0, len(payload), stream) + payload


def start_server(kiln, home):
    env = dict(os.environ, KILN_HOME=str(home))
    log = open(home / "server.log", "ab")
    proc = subprocess.Popen([kiln, "server", "--listen", "127.0.0.1:0",
                             "--gpus", "1xH100-80GB"], env=env, stdout=log,
                            stderr=log)
    url_file = home / "server.url"
    deadline = time.monotonic() + 30
    while not url_file.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the server did not start")
        time.sleep(0.05)
    return proc, url_file.read_text().strip(), env


def kiln_json(kiln, env, *args, data=None):
    r = subprocess.run([kiln, *args], env=env, input=data,
                       capture_output=True, text=True, check=True)
    return r.stdout


def kiln_round_trips(url, token, job, rounds):
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    path = f"/v1/jobs/{job}/exec?command={quote(json.dumps(['cat']))}"
    sock.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: "
                  f"Bearer {token}\r\nConnection: Upgrade\r\n"
                  "Upgrade: kiln-mux/1\r\n\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(4096)
    head, _, buf = buf.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        sock.sendall(frame(1, 1, b"x"))
        got = False
        while not got:
            while len(buf) < 8 or len(buf) < 8 + struct.unpack(
                    ">BBHI", buf[:8])[2]:
                buf += sock.recv(65536)
            ftype, _, length, stream = struct.unpack(">BBHI", buf[:8])
            buf = buf[8 + length:]
            got = ftype == 1 and stream == 2
        times.append(time.perf_counter() - t0)
    sock.close()
    return times


def start_sshd(work):
    key = work / "id"
    host_key = work / "host"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    str(key)], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    str(host_key)], check=True)
    # What Debian's ssh service would have made (sshd refuses without).
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    (work / "authorized").write_text((work / "id.pub").read_text())
    os.chmod(work / "authorized", 0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        ["/usr/sbin/sshd", "-D", "-e", "-f", "/dev/null", "-p", str(port),
         "-o", "ListenAddress=127.0.0.1", "-h", str(host_key),
         "-o", f"AuthorizedKeysFile={work / 'authorized'}",
         "-o", "StrictModes=no", "-o", "PidFile=none",
         "-o", "PermitRootLogin=prohibit-password", "-o", "UsePAM=no"],
        stderr=open(work / "sshd.log", "ab"))
    ssh = ["ssh", "-q", "-p", str(port), "-i", str(key),
           "-o", "StrictHostKeyChecking=no",
           "-o", f"UserKnownHostsFile={work / 'known'}",
           "-o", "BatchMode=yes", "127.0.0.1"]
    deadline = time.monotonic() + 20
    while subprocess.run([*ssh, "true"]).returncode != 0:
        if time.monotonic() > deadline:
            raise SystemExit("sshd did not start: " +
                             (work / "sshd.log").read_text())
        time.sleep(0.2)
    return proc, ssh


def ssh_round_trips(ssh, rounds):
    p = subprocess.Popen([*ssh, "cat"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, bufsize=0)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        p.stdin.write(b"x")
        assert p.stdout.read(1) == b"x"
        times.append(time.perf_counter() - t0)
    p.stdin.close()
    p.wait()
    return times


def bulk(cmd, env, runs, size):
    rates = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE)
        dt = time.perf_counter() - t0
        assert r.returncode == 0 and len(r.stdout) == size, len(r.stdout)
        rates.append(size / dt)
    return rates


def summary(name, times):
    ms = [t * 1000 for t in times]
    q = statistics.quantiles(ms, n=10)
    print(f"{name}: mean {statistics.mean(ms):.3f} ± "
          f"{statistics.stdev(ms):.3f} ms, median {statistics.median(ms):.3f}"
          f" ms, p90 {q[8]:.3f} ms (n={len(ms)})")


def rate(name, rates):
    mib = [r / 2**20 for r in rates]
    print(f"{name}: {statistics.mean(mib):.0f} ± {statistics.stdev(mib):.0f}"
          f" MiB/s (n={len(mib)})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=str(REPO / "build/src/cmd/kiln"))
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--size", default="256M")
    a = ap.parse_args()
    size = int(a.size[:-1]) * {"K": 2**10, "M": 2**20, "G": 2**30}[a.size[-1]]
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-interactive-",
                                 dir="/var/tmp"))
    home = work / "home"
    home.mkdir()
    server = sshd = None
    try:
        server, url, env = start_server(a.kiln, home)
        token = (home / "admin.token").read_text().strip()
        out = kiln_json(a.kiln, env, "submit", "-", data=json.dumps(
            {"kind": "Job", "name": "idle", "command": ["sleep", "3600"]}))
        job = out.strip()
        deadline = time.monotonic() + 30
        while json.loads(kiln_json(a.kiln, env, "show", job, "-o", "json")
                         )["job"]["state"] != "running":
            if time.monotonic() > deadline:
                raise SystemExit("the job did not start")
            time.sleep(0.1)
        sshd, ssh = start_sshd(work)
        head = ["head", "-c", str(size), "/dev/zero"]
        summary("kiln exec, echo round trip",
                kiln_round_trips(url, token, job, a.rounds))
        summary("ssh, echo round trip", ssh_round_trips(ssh, a.rounds))
        rate("kiln exec, bulk output",
             bulk([a.kiln, "exec", job, "--", *head], env, a.runs, size))
        rate("ssh, bulk output", bulk([*ssh, *head], env, a.runs, size))
    finally:
        if sshd:
            sshd.terminate()
            sshd.wait()
        if server:
            try:  # the job's task and shim end with it
                subprocess.run([a.kiln, "cancel", "--all", "--yes"], env=env,
                               capture_output=True, timeout=30)
            finally:
                server.terminate()
                server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
