#!/usr/bin/python3
"""bench/portforward: `kiln port-forward` against `ssh -L` over loopback,
in one run.

One backend, a kiln task (a job of the server this run starts) listening
on loopback: a bulk port that sends as many bytes as the client asks for,
and an echo port. Three sides reach it:

  direct  the backend's ports themselves: the ceiling;
  ssh     `ssh -N -L` to a private sshd (Debian's openssh-server) that
          this run starts as the unprivileged user nobody on a free port,
          with a host key and an authorized key made for the run and
          removed after (UsePAM yes, so PAM admits the user; nothing of
          the system's ssh configuration is read or changed); the
          cipher is OpenSSH's default;
  kiln    `kiln port-forward JOB 0:PORT` against the run's server on
          loopback (plain HTTP unless --tls, which gives the server
          --tls-self-signed and the client its CA: encrypted like
          ssh).

Per round, sides in alternating order: bytes/s of one download of
--bytes (default 256 MiB) over one connection; the mean and median round
trip of --requests (default 2000) 64-byte echoes over one established
connection; and the mean and median of --connects (default 100) new
connections each carrying one echo (what opening a forwarded connection
costs). On a loaded machine the median is the steadier figure: a mean
takes in every time the scheduler put a process aside.
Summary: each side's mean and standard deviation over --rounds (default
5), and per round kiln/ssh ratios with their mean and sd. Goal: kiln >=
1.0x ssh's bytes/s and <= 1.2x its established round trip. The load
average at start and end is recorded: on a shared machine every figure
moves with it. Writes JSON to --out.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BACKEND = r"""
import os, socket, threading
bulk_port, echo_port = int(os.environ['BULK']), int(os.environ['ECHO'])
block = memoryview(b'\0' * (1 << 20))
def serve(port, fn):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', port))
    s.listen(64)
    while True:
        c, _ = s.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=fn, args=(c,), daemon=True).start()
def bulk(c):
    want = b''
    while len(want) < 8:
        got = c.recv(8 - len(want))
        if not got:
            return
        want += got
    left = int.from_bytes(want, 'big')
    while left > 0:
        n = c.send(block[:min(left, len(block))])
        left -= n
    c.close()
def echo(c):
    buf = bytearray(1 << 16)
    while True:
        n = c.recv_into(buf)
        if not n:
            return
        c.sendall(buf[:n])
threading.Thread(target=serve, args=(bulk_port, bulk), daemon=True).start()
serve(echo_port, echo)
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port}")


def download(port, size):
    s = socket.create_connection(("127.0.0.1", port))
    buf = bytearray(1 << 20)
    t0 = time.perf_counter()
    s.sendall(size.to_bytes(8, "big"))
    got = 0
    while got < size:
        n = s.recv_into(buf)
        if not n:
            break
        got += n
    dt = time.perf_counter() - t0
    s.close()
    if got != size:
        raise SystemExit(f"download on port {port}: {got} of {size} bytes")
    return size / dt


def echo_once(s, msg, buf):
    s.sendall(msg)
    got = 0
    while got < len(msg):
        n = s.recv_into(memoryview(buf)[got:])
        if not n:
            raise SystemExit("echo: connection closed")
        got += n


def round_trip(port, requests):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg, buf = b"p" * 64, bytearray(64)
    echo_once(s, msg, buf)  # the connection is open before the clock
    times = []
    for _ in range(requests):
        t0 = time.perf_counter()
        echo_once(s, msg, buf)
        times.append(time.perf_counter() - t0)
    s.close()
    return statistics.mean(times), statistics.median(times)


def connect_trip(port, connects):
    msg, buf = b"c" * 64, bytearray(64)
    times = []
    for _ in range(connects):
        t0 = time.perf_counter()
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        echo_once(s, msg, buf)
        times.append(time.perf_counter() - t0)
        s.close()
    return statistics.mean(times), statistics.median(times)


class Kiln:
    def __init__(self, kiln, work, tls):
        self.kiln, self.home = kiln, work / "kiln-home"
        self.home.mkdir()
        self.env = dict(os.environ, KILN_HOME=str(self.home))
        for k in ("KILN_SERVER", "KILN_TOKEN", "KILN_CA"):
            self.env.pop(k, None)
        args = [kiln, "server", "--listen", "127.0.0.1:0"]
        if tls:
            args += ["--tls-self-signed"]
        self.log = open(work / "server.log", "ab")
        self.proc = subprocess.Popen(args, env=self.env, stdout=self.log,
                                     stderr=self.log)
        url = self.home / "server.url"
        deadline = time.monotonic() + 30
        while not (url.exists() and url.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("kiln server did not start: " +
                                 (work / "server.log").read_text()[-2000:])
            time.sleep(0.05)
        if tls:
            self.env["KILN_CA"] = str(self.home / "tls" / "ca.pem")
        self.forwards = []

    def cli(self, *args):
        return subprocess.run([self.kiln, *args], env=self.env, check=True,
                              capture_output=True, text=True).stdout

    def start_backend(self, bulk, echo):
        spec = json.dumps({"kind": "Job", "name": "pf-backend",
                           "command": ["/usr/bin/python3", "-c", BACKEND],
                           "env": {"BULK": str(bulk), "ECHO": str(echo)}})
        res = subprocess.run([self.kiln, "submit", "-"], env=self.env,
                             input=spec, capture_output=True, text=True)
        if res.returncode:
            raise SystemExit("submit: " + res.stderr)
        self.job = res.stdout.strip().split()[-1]

    def forward(self, remote):
        p = subprocess.Popen([self.kiln, "port-forward", self.job,
                              f"0:{remote}"], env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        line = p.stdout.readline()
        if not line.startswith("forwarding"):
            raise SystemExit("kiln port-forward: " + line + p.stderr.read())
        self.forwards.append(p)
        return int(line.split()[1].split(":")[1])

    def stop(self):
        for p in self.forwards:
            p.terminate()
            p.wait(timeout=10)
        if self.proc.poll() is None:
            # The backend is a task: it would outlive its server.
            subprocess.run([self.kiln, "cancel", "--all", "--yes"],
                           env=self.env, capture_output=True)
            time.sleep(1)
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()


class Ssh:
    """A private sshd run as nobody, and one `ssh -N -L` through it."""

    def __init__(self, work, forwards):
        self.dir = Path(tempfile.mkdtemp(prefix="kiln-bench-ssh-"))
        self.dir.chmod(0o755)
        d = self.dir
        for name in ("host", "client"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "",
                            "-f", str(d / name)], check=True)
        shutil.copy(d / "client.pub", d / "authorized_keys")
        shutil.chown(d / "host", user="nobody")
        (d / "sshd.log").touch()
        shutil.chown(d / "sshd.log", user="nobody")
        self.port = free_port()
        (d / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\n"
            f"HostKey {d / 'host'}\n"
            f"AuthorizedKeysFile {d / 'authorized_keys'}\n"
            f"PidFile {d / 'sshd.pid'}\nStrictModes no\nUsePAM yes\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "AllowTcpForwarding yes\nLogLevel ERROR\n")
        for f in ("authorized_keys", "sshd_config", "host.pub"):
            (d / f).chmod(0o644)
        d.chmod(0o777)  # sshd writes its pid file here as nobody
        subprocess.run(["runuser", "-u", "nobody", "--", "/usr/sbin/sshd",
                        "-f", str(d / "sshd_config"), "-E",
                        str(d / "sshd.log")], check=True)
        wait_port(self.port)
        self.local = {remote: free_port() for remote in forwards}
        args = ["ssh", "-N", "-i", str(d / "client"), "-p", str(self.port),
                "-o", "StrictHostKeyChecking=no", "-o",
                "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o",
                "ExitOnForwardFailure=yes", "-o", "LogLevel=ERROR"]
        for remote, local in self.local.items():
            args += ["-L", f"127.0.0.1:{local}:127.0.0.1:{remote}"]
        self.proc = subprocess.Popen(args + ["nobody@127.0.0.1"])
        for local in self.local.values():
            wait_port(local)
        self.cipher = subprocess.run(
            ["ssh", "-G", "-p", str(self.port), "nobody@127.0.0.1"],
            capture_output=True, text=True).stdout
        self.cipher = next((line.split(None, 1)[1].split(",")[0]
                            for line in self.cipher.splitlines()
                            if line.startswith("ciphers ")), "default")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        pid = self.dir / "sshd.pid"
        if pid.exists():
            os.kill(int(pid.read_text()), 15)
        shutil.rmtree(self.dir, ignore_errors=True)


def summary(values):
    return {"mean": statistics.mean(values),
            "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "rounds": values}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bytes", type=int, default=256 << 20)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--connects", type=int, default=100)
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--out", default="bench-portforward.json")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the private sshd runs as nobody")
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-pf-"))
    work.chmod(0o755)
    load_start = os.getloadavg()
    bulk, echo = free_port(), free_port()
    kiln = ssh = None
    try:
        kiln = Kiln(a.kiln, work, a.tls)
        kiln.start_backend(bulk, echo)
        wait_port(bulk)
        wait_port(echo)
        ports = {"direct": (bulk, echo)}
        ssh = Ssh(work, (bulk, echo))
        ports["ssh"] = (ssh.local[bulk], ssh.local[echo])
        ports["kiln"] = (kiln.forward(bulk), kiln.forward(echo))
        sides = list(ports)
        res = {s: {k: [] for k in ("bytes_s", "rtt_s", "rtt_p50_s",
                                   "connect_s", "connect_p50_s")}
               for s in sides}
        for r in range(a.rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            for side in order:
                b, e = ports[side]
                res[side]["bytes_s"].append(download(b, a.bytes))
                mean, p50 = round_trip(e, a.requests)
                res[side]["rtt_s"].append(mean)
                res[side]["rtt_p50_s"].append(p50)
                mean, p50 = connect_trip(e, a.connects)
                res[side]["connect_s"].append(mean)
                res[side]["connect_p50_s"].append(p50)
            print(f"round {r + 1}: " + ", ".join(
                f"{s} {res[s]['bytes_s'][-1] / 1e6:.0f} MB/s "
                f"rtt {res[s]['rtt_s'][-1] * 1e6:.0f} us "
                f"(p50 {res[s]['rtt_p50_s'][-1] * 1e6:.0f}) "
                f"connect {res[s]['connect_s'][-1] * 1e3:.2f} ms"
                for s in sides), flush=True)
        ratios = {key: [k / s for k, s in zip(res["kiln"][key],
                                              res["ssh"][key])]
                  for key in res["kiln"]}
        out = {
            "bytes": a.bytes, "requests": a.requests,
            "connects": a.connects, "rounds": a.rounds, "tls": a.tls,
            "ssh_cipher": ssh.cipher,
            "load_start": load_start, "load_end": os.getloadavg(),
            "sides": {s: {k: summary(v) for k, v in res[s].items()}
                      for s in sides},
            "kiln_over_ssh": {k: summary(v) for k, v in ratios.items()},
        }
        print(f"{'side':8} {'MB/s':>16} {'rtt us':>14} {'rtt p50 us':>14} "
              f"{'connect ms':>14}")
        for s in sides:
            f = out["sides"][s]
            print(f"{s:8} {f['bytes_s']['mean'] / 1e6:9.0f} "
                  f"+- {f['bytes_s']['sd'] / 1e6:4.0f} "
                  f"{f['rtt_s']['mean'] * 1e6:7.0f} "
                  f"+- {f['rtt_s']['sd'] * 1e6:4.0f} "
                  f"{f['rtt_p50_s']['mean'] * 1e6:7.0f} "
                  f"+- {f['rtt_p50_s']['sd'] * 1e6:4.0f} "
                  f"{f['connect_s']['mean'] * 1e3:7.2f} "
                  f"+- {f['connect_s']['sd'] * 1e3:4.2f}")
        q = out["kiln_over_ssh"]
        print("kiln/ssh per round, mean +- sd: " + ", ".join(
            f"{k} {v['mean']:.2f} +- {v['sd']:.2f}" for k, v in q.items()) +
            f" (goals: bytes_s >= 1.0, rtt <= 1.2); ssh cipher "
            f"{ssh.cipher}; load {load_start[0]:.1f} -> "
            f"{out['load_end'][0]:.1f}")
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    finally:
        if ssh:
            ssh.stop()
        if kiln:
            kiln.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
