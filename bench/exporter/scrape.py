#!/usr/bin/python3
"""How long one `kiln exporter` scrape takes, from the client's side.

Starts the exporter on a port-0 loopback listener, scrapes /metrics over
one kept-alive connection N times, and prints the median, p90 and maximum
wall time per scrape (request to last byte) and the size of the answer.
The client is a plain socket speaking HTTP/1.1, once with a new
connection per scrape and once over one kept-alive connection (as
Prometheus scrapes). The second shows ~40 ms per scrape: the loop's only
non-JSON answer is a chunked stream whose last chunk waits for the
client's delayed ACK (Nagle); see docs/benchmarks.md.
Runs twice: against this machine's /proc and /sys, and against the fixture
tree with the stand-in NVML answering for 2 H100s (the GPU path's cost
apart from the driver's own). The goal is under 5 ms per scrape.

    bench/exporter/scrape.py --kiln build/src/cmd/kiln [--n 200]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import socket

REPO = Path(__file__).resolve().parents[2]


class Client:
    """One kept-alive HTTP/1.1 connection; GET returns the decoded body."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb")

    def get(self, path):
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        status = self.f.readline()
        headers = {}
        while (line := self.f.readline()) not in (b"\r\n", b""):
            k, v = line.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()
        assert b" 200 " in status, status
        if "content-length" in headers:
            return self.f.read(int(headers["content-length"]))
        body = b""
        while (size := int(self.f.readline().strip(), 16)):
            body += self.f.read(size)
            self.f.readline()
        self.f.readline()
        return body


def run(kiln, args, env, n, fresh):
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "exporter.log"
        with open(log, "wb") as f:
            proc = subprocess.Popen([kiln, "exporter", "--listen", "127.0.0.1:0", *args],
                                    env=env, stdout=f, stderr=f)
        try:
            deadline = time.monotonic() + 20
            while not (m := re.search(r"http://127\.0\.0\.1:(\d+)/metrics", log.read_text())):
                if proc.poll() is not None or time.monotonic() > deadline:
                    sys.exit("exporter did not start:\n" + log.read_text())
                time.sleep(0.02)
            port = int(m.group(1))
            size = len(Client(port).get("/metrics"))  # warm-up
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                c = Client(port) if fresh else c if times else Client(port)
                c.get("/metrics")
                times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            return {"median_ms": statistics.median(times),
                    "p90_ms": times[int(len(times) * 0.9) - 1],
                    "max_ms": times[-1], "bytes": size}
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--n", type=int, default=200)
    a = ap.parse_args()
    fake = Path(a.kiln).resolve().parents[2] / "src" / "telemetry" / "libfake-nvml.so"
    cases = [
        ("this machine (/proc, /sys), no GPU", [],
         dict(os.environ, KILN_NVML_LIBRARY="/nonexistent")),
        ("fixture tree + stand-in NVML, 2 GPUs",
         ["--root", str(REPO / "tests/fixtures/node-basic")],
         dict(os.environ, KILN_NVML_LIBRARY=str(fake),
              KILN_FAKE_NVML=str(REPO / "tests/fixtures/nvml/h100x2.json"))),
    ]
    for (name, args, env), fresh in [(c, f) for c in cases for f in (True, False)]:
        r = run(a.kiln, args, env, a.n, fresh)
        conn = "new connection per scrape" if fresh else "one kept-alive connection"
        print(f"{name}, {conn}: median {r['median_ms']:.2f} ms, p90 {r['p90_ms']:.2f} ms, "
              f"max {r['max_ms']:.2f} ms, {r['bytes']} bytes, {a.n} scrapes")


if __name__ == "__main__":
    main()
