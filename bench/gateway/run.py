#!/usr/bin/python3
"""bench/gateway: `kiln gateway` against nginx doing the same work, in one run.

One fixed-response backend (gateway-backend, built from backend.c: an
OpenAI chat completion with usage, one thread, epoll, keep-alive). wrk
sends POST /v1/chat/completions with a small JSON body and a bearer key,
with the same threads, connections and duration, to

  backend  the backend directly: the ceiling for the two proxies;
  nginx    nginx, worker_processes 1 (nginx.conf.in): the key checked by
           `map $http_authorization`, a per-key `limit_req` zone with a
           rate no run reaches, `proxy_pass` with upstream keepalive,
           access_log off;
  kiln     `kiln gateway --routes FILE --listen 127.0.0.1:0 --workers 1`
           (and with --kiln-before, an older build the same way, to see
           what a change did in the same rounds):
           one deployment with one replica (the backend) and one key with
           no limits set, so its counters run but never reject.

Each proxy is checked first: the key gets 200, no key gets 401, so both
really do the key check. Rounds alternate the order; per side the median
round is reported (requests/s, p50 and p99 latency from wrk's own
histogram), and any round with a socket error or a non-2xx answer makes
the run fail. When the kiln binary has no `gateway` command, the run says
so and reports the backend and nginx alone: there are no kiln figures to
report then. Prints a table and writes JSON to --out.

With --tls the two proxies are reached over HTTPS (the backend stays
plain behind both, as a model server on the machine is): one ECDSA P-256
certificate made with the openssl tool for the run, given to nginx
(`listen ... ssl`, TLS 1.2 and 1.3, its OpenSSL's default ciphers) and
to kiln (--tls-cert, --tls-key); wrk keeps its connections alive, so the
handshakes are a few and the record encryption is what is compared. The
cipher each side negotiates is checked to be the same and reported.
"""
import argparse
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BODY = ('{"model":"bench","messages":[{"role":"user","content":'
        '"Say hello in one short sentence."}],"max_tokens":16}')

# wrk's summary as one JSON line, latencies in microseconds.
WRK_LUA = """
wrk.method = "POST"
wrk.body = '%(body)s'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %(key)s"

done = function(summary, latency, requests)
  io.write(string.format(
    'WRK_JSON {"requests":%%d,"duration_us":%%d,"connect":%%d,"read":%%d,' ..
    '"write":%%d,"status":%%d,"timeout":%%d,"p50_us":%%d,"p99_us":%%d,' ..
    '"mean_us":%%.1f}\\n',
    summary.requests, summary.duration, summary.errors.connect,
    summary.errors.read, summary.errors.write, summary.errors.status,
    summary.errors.timeout, latency:percentile(50), latency:percentile(99),
    latency.mean))
end
"""


def fail(msg):
    sys.exit(f"bench/gateway: {msg}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    fail(f"timed out after {timeout}s waiting for {what}")


# The run's own certificate: the checks trust nothing else.
TLS_CONTEXT = ssl.create_default_context()


def make_cert(work):
    """A self-signed ECDSA P-256 certificate for 127.0.0.1 and localhost;
    (cert, key) paths. The checks trust it."""
    cert, key = work / "tls.pem", work / "tls.key"
    r = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out",
         str(cert), "-days", "2", "-subj", "/CN=localhost", "-addext",
         "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"openssl req: {r.stderr}")
    TLS_CONTEXT.load_verify_locations(str(cert))
    return cert, key


def negotiated(url):
    """(protocol, cipher) a TLS client gets from url's server."""
    host, port = url.split("://")[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with TLS_CONTEXT.wrap_socket(raw, server_hostname=host) as s:
            return s.version(), s.cipher()[0]


def status_of(url, key):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url + "/v1/chat/completions",
                                 data=BODY.encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5,
                                    context=TLS_CONTEXT) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


class Proc:
    """A child process with its output in a file; stopped with SIGTERM."""

    def __init__(self, args, log, env=None):
        self.name = Path(args[0]).name
        self.log = log
        self.f = open(log, "wb")
        self.p = subprocess.Popen(args, stdout=self.f, stderr=subprocess.STDOUT,
                                  env=env)

    def text(self):
        return self.log.read_text(errors="replace")

    def alive(self):
        return self.p.poll() is None

    def stop(self):
        if self.alive():
            self.p.terminate()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.f.close()


def start_backend(exe, work):
    proc = Proc([str(exe)], work / "backend.log")
    match = wait_until(lambda: re.search(r"listening on (\S+)", proc.text())
                       or (not proc.alive() and fail(f"backend exited: {proc.text()}")),
                       10, "the backend")
    return proc, match.group(1)


def start_nginx(work, backend_addr, key, tls):
    ndir = work / "nginx"
    ndir.mkdir()
    port = free_port()
    conf = (HERE / "nginx.conf.in").read_text()
    tls_lines = (f"ssl_certificate {tls[0]};\n        "
                 f"ssl_certificate_key {tls[1]};\n        "
                 "ssl_protocols TLSv1.2 TLSv1.3;" if tls else "")
    for name, value in (("DIR", str(ndir)), ("KEY", key), ("PORT", str(port)),
                        ("SSL", " ssl" if tls else ""), ("TLS", tls_lines),
                        ("BACKEND_PORT", backend_addr.rsplit(":", 1)[1])):
        conf = conf.replace(f"@{name}@", value)
    (ndir / "nginx.conf").write_text(conf)
    proc = Proc([shutil.which("nginx"), "-p", str(ndir), "-c",
                 str(ndir / "nginx.conf"), "-e", str(ndir / "error.log")],
                work / "nginx.log")
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    wait_until(lambda: status_of(url, key) or
               (not proc.alive() and fail(f"nginx exited: {proc.text()}")),
               10, "nginx")
    return proc, url


def kiln_gateway_missing(kiln):
    r = subprocess.run([kiln, "gateway", "--help"], capture_output=True, text=True)
    if r.returncode != 0:
        first = (r.stderr or r.stdout).strip().splitlines() or [""]
        return f"`{kiln} gateway --help` exited {r.returncode}: {first[0]}"
    return None


def start_kiln(kiln, work, backend_addr, key, tls):
    home = work / "kiln-home"
    home.mkdir(mode=0o700)
    routes = {
        "generation": 1,
        "deployments": [{"name": "bench", "model": "bench", "fallback": None,
                         "limits": {"rpm": 0, "tpm": 0},
                         "replicas": [{"replica": 0, "address": backend_addr,
                                       "zone": "", "ready": True}]}],
        "keys": [{"name": "bench", "hash": hashlib.sha256(key.encode()).hexdigest(),
                  "deployments": ["bench"], "rpm": 0, "tpm": 0,
                  "quota_day": 0, "quota_month": 0}],
    }
    routes_file = work / "routes.json"
    routes_file.write_text(json.dumps(routes))
    routes_file.chmod(0o600)
    env = dict(os.environ, KILN_HOME=str(home))
    tls_args = ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])] \
        if tls else []
    proc = Proc([kiln, "gateway", "--routes", str(routes_file), "--listen",
                 "127.0.0.1:0", "--workers", "1", *tls_args],
                work / "kiln-gateway.log", env)
    url_file = home / "gateway" / "gateway.url"
    wait_until(lambda: (url_file.is_file() and url_file.read_text().strip())
               or (not proc.alive() and fail(f"kiln gateway exited: {proc.text()}")),
               20, str(url_file))
    url = url_file.read_text().strip().rstrip("/")
    wait_until(lambda: status_of(url, key), 10, "kiln gateway")
    return proc, url


def check_auth(name, url, key):
    got = (status_of(url, key), status_of(url, None))
    if got != (200, 401):
        fail(f"{name}: with the key {got[0]}, without {got[1]}; want 200 and 401")


def cpu_seconds(pid):
    """utime + stime of pid (all its threads) and of its children, in s."""
    total = 0
    pids = [pid] + [int(d) for d in os.listdir("/proc") if d.isdigit()
                    and _ppid(d) == pid]
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def _ppid(pid):
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def wrk(url, lua, args, seconds, procs, watched=None):
    """One measurement; with watched (a Proc), also the CPU time it spent
    per request (its own utime + stime over the measurement, children
    included: nginx's worker is the master's child)."""
    cpu0 = cpu_seconds(watched.p.pid) if watched else None
    cmd = ["wrk", "-t", str(args.threads), "-c", str(args.connections),
           "-d", f"{seconds}s", "-s", str(lua), url + "/v1/chat/completions"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    cpu = cpu_seconds(watched.p.pid) - cpu0 if watched else None
    m = re.search(r"^WRK_JSON (.*)$", r.stdout, re.M)
    if r.returncode != 0 or not m:
        fail(f"wrk against {url} failed: {r.stdout}{r.stderr}")
    out = json.loads(m.group(1))
    errors = sum(out[k] for k in ("connect", "read", "write", "status", "timeout"))
    if errors:
        died = "".join(f"\n{p.name} exited {p.p.returncode}; its last output:\n"
                       + "\n".join(p.text().splitlines()[-5:])
                       for p in procs if not p.alive())
        fail(f"wrk against {url}: {errors} errors or non-2xx answers: {out}{died}")
    return {"req_s": out["requests"] / (out["duration_us"] / 1e6),
            "p50_ms": out["p50_us"] / 1000, "p99_ms": out["p99_us"] / 1000,
            "mean_ms": out["mean_us"] / 1000, "requests": out["requests"],
            "cpu_us_per_req": cpu * 1e6 / out["requests"] if watched else None}


def median_round(rounds):
    """The round with the median requests/s, whole (its latencies with it)."""
    ordered = sorted(rounds, key=lambda r: r["req_s"])
    return dict(ordered[(len(ordered) - 1) // 2],
                req_s_all=[round(r["req_s"]) for r in rounds],
                cpu_us_per_req_all=[r["cpu_us_per_req"] and round(r["cpu_us_per_req"], 2)
                                    for r in rounds],
                p99_ms_all=[round(r["p99_ms"], 3) for r in rounds],
                req_s_mean=statistics.mean(r["req_s"] for r in rounds),
                req_s_stdev=spread([r["req_s"] for r in rounds]),
                p99_ms_mean=statistics.mean(r["p99_ms"] for r in rounds),
                p99_ms_stdev=spread([r["p99_ms"] for r in rounds]))


def spread(values):
    """The sample standard deviation (0 for a single round)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def tool_version(args):
    r = subprocess.run(args, capture_output=True, text=True)
    return (r.stdout + r.stderr).strip().splitlines()[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kiln", default=str(ROOT / "build" / "src" / "cmd" / "kiln"))
    p.add_argument("--backend", help="the gateway-backend executable "
                   "(default: bench/gateway/gateway-backend in --kiln's build)")
    p.add_argument("--out", default="bench-gateway.json")
    p.add_argument("--threads", type=int, default=1, help="wrk threads")
    p.add_argument("--connections", type=int, default=32, help="wrk connections")
    p.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    p.add_argument("--warmup", type=int, default=2, help="seconds of untimed load first")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tls", action="store_true",
                   help="reach nginx and kiln over HTTPS (same certificate)")
    p.add_argument("--kiln-before", metavar="KILN",
                   help="another kiln binary (an older build) measured in the "
                   "same rounds as side kiln-before, to compare a change")
    args = p.parse_args()

    for tool in ("wrk", "nginx"):
        if not shutil.which(tool):
            fail(f"{tool} is not installed: run scripts/install-deps.sh")
    kiln = str(Path(args.kiln).resolve())
    backend_exe = Path(args.backend) if args.backend else \
        Path(kiln).parents[2] / "bench" / "gateway" / "gateway-backend"
    if not backend_exe.is_file():
        fail(f"{backend_exe} is missing: build it with ninja -C build")
    kiln_missing = kiln_gateway_missing(kiln) if Path(kiln).is_file() \
        else f"{kiln} does not exist"
    if kiln_missing:
        print(f"bench/gateway: kiln gateway is not available ({kiln_missing}); "
              "measuring the backend and nginx only", file=sys.stderr)

    key = "kn-bench-" + secrets.token_hex(16)
    procs = []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-gw-") as tmp:
        work = Path(tmp)
        lua = work / "post.lua"
        lua.write_text(WRK_LUA % {"body": BODY, "key": key})
        tls = make_cert(work) if args.tls else None
        try:
            backend, backend_addr = start_backend(backend_exe, work)
            procs.append(backend)
            nginx, nginx_url = start_nginx(work, backend_addr, key, tls)
            procs.append(nginx)
            check_auth("nginx", nginx_url, key)
            targets = {"backend": f"http://{backend_addr}", "nginx": nginx_url}
            watched = {"backend": backend, "nginx": nginx}
            if not kiln_missing:
                gateway, kiln_url = start_kiln(kiln, work, backend_addr, key,
                                               tls)
                procs.append(gateway)
                check_auth("kiln gateway", kiln_url, key)
                targets["kiln"] = kiln_url
                watched["kiln"] = gateway
                if args.kiln_before:
                    (work / "before").mkdir()
                    before, before_url = start_kiln(
                        str(Path(args.kiln_before).resolve()), work / "before",
                        backend_addr, key, tls)
                    procs.append(before)
                    check_auth("kiln-before", before_url, key)
                    targets["kiln-before"] = before_url
                    watched["kiln-before"] = before
            ciphers = {name: negotiated(url) for name, url in targets.items()
                       if url.startswith("https://")}
            if len(set(ciphers.values())) > 1:
                fail(f"the proxies negotiate different TLS: {ciphers}")
            for name, url in targets.items():
                wrk(url, lua, args, args.warmup, procs)
            rounds = {name: [] for name in targets}
            order = list(targets)
            for i in range(args.rounds):
                for name in order if i % 2 == 0 else reversed(order):
                    r = wrk(targets[name], lua, args, args.duration, procs,
                            watched[name])
                    rounds[name].append(r)
                    print(f"round {i + 1} {name:11s} {r['req_s']:10.0f} req/s  "
                          f"p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms  "
                          f"cpu {r['cpu_us_per_req']:.2f} us/req", flush=True)
        finally:
            for proc in reversed(procs):
                proc.stop()

    results = {name: median_round(rs) for name, rs in rounds.items()}
    ratios = None
    if "kiln" in results:
        cpu = {name: statistics.median(r["cpu_us_per_req"] for r in rounds[name])
               for name in ("kiln", "nginx")}
        # Each round measures the two back to back: its own ratio is the
        # least disturbed by load that comes and goes on a shared machine.
        per_round = [round(k["req_s"] / n["req_s"], 3)
                     for k, n in zip(rounds["kiln"], rounds["nginx"])]
        ratios = {"req_s_kiln_over_nginx": results["kiln"]["req_s"] / results["nginx"]["req_s"],
                  "req_s_kiln_over_nginx_per_round": per_round,
                  "p99_kiln_over_nginx_per_round": [
                      round(k["p99_ms"] / n["p99_ms"], 3)
                      for k, n in zip(rounds["kiln"], rounds["nginx"])],
                  "cpu_per_req_kiln_over_nginx": cpu["kiln"] / cpu["nginx"],
                  "p99_kiln_over_nginx": results["kiln"]["p99_ms"] / results["nginx"]["p99_ms"]}
        if "kiln-before" in rounds:
            ratios["per_round_kiln_before_over_nginx"] = {
                what: [round(k[what] / n[what], 3)
                       for k, n in zip(rounds["kiln-before"], rounds["nginx"])]
                for what in ("req_s", "p99_ms", "cpu_us_per_req")}
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "versions": {"nginx": tool_version(["nginx", "-v"]),
                     "wrk": tool_version(["wrk", "-v"])},
        "settings": {"wrk_threads": args.threads, "connections": args.connections,
                     "duration_s": args.duration, "rounds": args.rounds,
                     "body_bytes": len(BODY),
                     "tls": {n: list(c) for n, c in ciphers.items()} or None},
        "results": results,
        "kiln_unavailable": kiln_missing,
        "ratios": ratios,
    }
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")

    print(f"\n{'side':11s} {'req/s':>10s} {'p50 ms':>8s} {'p99 ms':>8s} {'cpu us/req':>10s}")
    for name, r in results.items():
        print(f"{name:11s} {r['req_s']:10.0f} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} "
              f"{r['cpu_us_per_req']:10.2f}")
    print("means over rounds, +- one standard deviation:")
    for name, r in results.items():
        print(f"{name:11s} {r['req_s_mean']:10.0f} +- {r['req_s_stdev']:.0f} req/s  "
              f"p99 {r['p99_ms_mean']:.3f} +- {r['p99_ms_stdev']:.3f} ms")
    if ratios:
        print(f"kiln/nginx: {ratios['req_s_kiln_over_nginx']:.2f}x req/s, "
              f"{ratios['p99_kiln_over_nginx']:.2f}x p99, "
              f"{ratios['cpu_per_req_kiln_over_nginx']:.2f}x CPU per request "
              "(median rounds)")
        for side in [n for n in ("kiln", "kiln-before") if n in rounds]:
            pairs = list(zip(rounds[side], rounds["nginx"]))
            print(f"{side}/nginx per round: req/s "
                  + ", ".join(f"{k['req_s'] / n['req_s']:.2f}x" for k, n in pairs)
                  + "; p99 "
                  + ", ".join(f"{k['p99_ms'] / n['p99_ms']:.2f}x" for k, n in pairs)
                  + "; cpu per request "
                  + ", ".join(f"{k['cpu_us_per_req'] / n['cpu_us_per_req']:.2f}x"
                              for k, n in pairs))
    else:
        print(f"kiln: not measured ({kiln_missing})")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
