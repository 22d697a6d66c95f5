#!/usr/bin/python3
"""bench/transfer: kiln model push and pull against plain copies, in one run.

Each set (--sets, N x MiB; default 1x1024 and 16x256) is a directory of N
files of random bytes, written once and left in the page cache (for every
side alike). A fresh `kiln server` with its default file store in a
temporary KILN_HOME on the same file system. Each round (--rounds), in
alternating order, each side once per set:

  push       `kiln model push DIR` on the server's machine: each file by
             its open descriptor, copied and hashed by the server.
  push_http  the same with --http: read once and hashed here, sent as
             16 MiB parts four at once over loopback TCP, hashed again by
             the server as they come.
  cp         `cp -r DIR NEW && sync -f NEW`: a copy and its flush (a push
             ends with a sync of the store too).
  pull       `kiln model pull NAME@V NEW` (reads the store, checks the
             signature and every digest) against
  cp_pull    `cp` of the same blobs from the store to NEW, and sync -f.

Before each push the set's blobs are deleted from the store and the
push gets an empty digest cache, so every push sends every byte. A
`sync` (untimed) comes before every side, so none waits on another's
dirty pages.

With --azurite, against the real Azure Blob emulator (scripts/azurite.sh,
a fresh in-memory Azurite for each measurement: it keeps blobs, deleted
ones too, in its heap and slows as that grows), also per set:

  push_az    `kiln model push --http DIR` to a server whose store is that
             Azurite: the parts go to the server, which puts each blob
             (Put Blob, or Put Block + Put Block List above 64 MiB).
  curl_put   `curl -T` of the same files as Put Blob with a SAS, one
             process, one after another.
  ckpt_up    `kiln ckpt upload URL JOB DIR`: the set's directory as a
             saved checkpoint, straight to the store.
  curl_par   `curl --parallel` (6 at once) of the same files.
  ckpt_down  `kiln ckpt restore URL JOB DEST` of the set uploaded as a
             checkpoint (untimed): parallel Range GETs, every digest
             checked, against
  curl_get   `curl -o` of the same blobs with a SAS, one process, one
             after another (no digest).
  pull_az    `kiln model pull NAME@V DEST` of the set pushed (untimed)
             to a server whose store is that Azurite, and signed: the
             client reads the store itself, every digest checked.

--no-file leaves the file-store sides out. Ratios for Azurite:
curl_put / push_az, curl_put / ckpt_up, curl_par / ckpt_up,
curl_get / ckpt_down and curl_get / pull_az. --kiln-before OLD adds push_az_before, the same
push with an older build (its server and its client), measured in the
same rounds, and the paired ratio push_az_before / push_az (above 1.0
the build under test is faster).

Reports mean +- sd of each over the rounds, and the ratios cp / push,
cp / push_http and cp_pull / pull (above 1.0 kiln is faster), with the
machine's load average before and after: other work on the machine shows
as spread. JSON to --out.
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]
# Azurite's account, SAS and curl Put Blob lines: bench/ckpt's.
sys.path.insert(0, str(ROOT / "bench" / "ckpt"))
import run as ckpt_bench  # noqa: E402


def timed(args, env=None):
    t0 = time.monotonic()
    proc = subprocess.run(args, env=env, capture_output=True, text=True)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"bench/transfer: {' '.join(map(str, args[:4]))}: "
                 f"{proc.stderr}")
    return took, proc.stdout


def write_set(root, files, mib):
    """files of mib MiB of random bytes under root; their digests."""
    root.mkdir(parents=True)
    digests = []
    for i in range(files):
        h = hashlib.sha256()
        with open(root / f"part-{i:03d}.bin", "wb") as f:
            for _ in range(mib):
                chunk = os.urandom(MiB)
                h.update(chunk)
                f.write(chunk)
        digests.append(h.hexdigest())
    return digests


def start_server(kiln, home, extra=(), env=None):
    env = dict(env or os.environ, KILN_HOME=str(home))
    server = subprocess.Popen([kiln, "server", "--listen", "127.0.0.1:0",
                               "--gpus", "1xH100-80GB",
                               "--upload-max-staged", "64Gi", *extra],
                              env=env,
                              stdout=subprocess.DEVNULL,
                              stderr=open(home / "server.log", "wb"))
    deadline = time.monotonic() + 60
    while not (home / "server.url").exists():
        if time.monotonic() > deadline or server.poll() is not None:
            sys.exit("kiln server did not start: " +
                     (home / "server.log").read_text())
        time.sleep(0.05)
    return server, env


def stats(xs):
    return {"mean_s": statistics.mean(xs),
            "sd_s": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            "times_s": xs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sets", default="1x1024,16x256",
                    help="comma-separated FILESxMIB")
    ap.add_argument("--azurite", action="store_true")
    ap.add_argument("--no-file", action="store_true")
    ap.add_argument("--kiln-before", help="an older kiln for push_az")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kiln-bench-transfer-",
                                 dir="/var/tmp"))
    home = work / "home"
    home.mkdir()
    results = {"rounds": a.rounds, "load_before": os.getloadavg(),
               "sets": {}}
    server = None
    try:
        server, env = start_server(a.kiln, home)
        # pull takes only signed versions: each push is signed, untimed.
        key = work / "key"
        timed([a.kiln, "model", "keygen", "--out", str(key)], env=env)
        (home / "keys" / "trusted").mkdir(parents=True, exist_ok=True)
        shutil.copy(f"{key}.pub", home / "keys" / "trusted" / "key.pub")
        sets = []
        for spec in a.sets.split(","):
            n, mib = (int(x) for x in spec.split("x"))
            src = work / f"src-{spec}"
            sets.append((spec, src, write_set(src, n, mib), n * mib))
        blobs = home / "blobs" / "sha256"
        version = {}
        warm = work / "warm"
        warm.write_bytes(os.urandom(MiB))

        def drop_blobs(digests):
            for d in digests:
                try:
                    os.unlink(blobs / d)
                except FileNotFoundError:
                    pass

        def push(spec, src, digests, extra):
            drop_blobs(digests)
            cache = Path(tempfile.mkdtemp(dir=work))
            e = dict(env, XDG_CACHE_HOME=str(cache))
            took, out = timed([a.kiln, "model", "push", str(src), "--name",
                               f"m{spec.replace('x', '-')}", "-o", "json",
                               *extra], env=e)
            shutil.rmtree(cache)
            version[spec] = json.loads(out)["version"]
            timed([a.kiln, "model", "sign",
                   f"m{spec.replace('x', '-')}@{version[spec]}", "--key",
                   str(key)], env=env)
            return took

        def cp(spec, src, digests, extra):
            dest = work / "cp"
            took, _ = timed(["sh", "-c", f'cp -r "{src}" "{dest}" && '
                             f'sync -f "{dest}"'])
            shutil.rmtree(dest)
            return took

        def pull(spec, src, digests, extra):
            dest = work / "pulled"
            took, _ = timed([a.kiln, "model", "pull",
                             f"m{spec.replace('x', '-')}@{version[spec]}",
                             str(dest)], env=env)
            shutil.rmtree(dest)
            return took

        def cp_pull(spec, src, digests, extra):
            dest = work / "cp-pull"
            dest.mkdir()
            paths = " ".join(f'"{blobs / d}"' for d in digests)
            took, _ = timed(["sh", "-c", f'cp {paths} "{dest}" && '
                             f'sync -f "{dest}"'])
            shutil.rmtree(dest)
            return took

        def with_azurite(measure):
            state = Path(tempfile.mkdtemp(dir=work))
            endpoint = subprocess.run(
                ["bash", str(ROOT / "scripts/azurite.sh"), "start",
                 str(state)], capture_output=True, text=True,
                check=True).stdout.strip().splitlines()[-1]
            e = dict(os.environ, AZURE_STORAGE_CONNECTION_STRING=(
                f"DefaultEndpointsProtocol=http;"
                f"AccountName={ckpt_bench.ACCOUNT};"
                f"AccountKey={ckpt_bench.KEY};BlobEndpoint={endpoint};"))
            for k in ("AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN",
                      "AZURE_STORAGE_ACCOUNT"):
                e.pop(k, None)
            url = f"{endpoint}/bench"
            try:
                # The container, and a warm Azurite, outside the timing.
                timed([a.kiln, "blob", "put", url, "warm", str(warm)], env=e)
                return measure(url, e)
            finally:
                subprocess.run(["bash", str(ROOT / "scripts/azurite.sh"),
                                "stop", str(state)], capture_output=True)
                shutil.rmtree(state, ignore_errors=True)

        def push_az(spec, src, digests, extra, pulled=False):
            kiln = extra[0] if extra else a.kiln

            def measure(url, e):
                az_home = Path(tempfile.mkdtemp(dir=work))
                trusted = az_home / "keys" / "trusted"
                trusted.mkdir(parents=True)
                shutil.copy(f"{key}.pub", trusted / "key.pub")
                srv, senv = start_server(kiln, az_home,
                                         ["--blob-store", url], e)
                try:
                    senv["XDG_CACHE_HOME"] = str(az_home / "cache")
                    took, _ = timed([kiln, "model", "push", str(src),
                                     "--name", "az", "--http"], env=senv)
                    if pulled:
                        timed([kiln, "model", "sign", "az@1", "--key",
                               str(key)], env=senv)
                        took, _ = timed([kiln, "model", "pull", "az@1",
                                         str(az_home / "pulled")],
                                        env=senv)
                finally:
                    srv.terminate()
                    srv.wait(timeout=30)
                    shutil.rmtree(az_home, ignore_errors=True)
                return took
            return with_azurite(measure)

        def curl_side(parallel):
            def side(spec, src, digests, extra):
                files = sorted(src.iterdir())
                return with_azurite(lambda url, e: timed(
                    ckpt_bench.curl_args(url, files, parallel))[0])
            return side

        def ckpt_up(spec, src, digests, extra):
            return with_azurite(lambda url, e: timed(
                [a.kiln, "ckpt", "upload", url, "1", str(src)], env=e)[0])

        def download_side(kiln_side):
            """ckpt_down: `kiln ckpt restore` of the set, uploaded as a
            checkpoint outside the timing; curl_get: `curl -o` of the same
            blobs with a SAS, one after another in one process."""
            def side(spec, src, digests, extra):
                def measure(url, e):
                    timed([a.kiln, "ckpt", "upload", url, "1", str(src)],
                          env=e)
                    dest = Path(tempfile.mkdtemp(dir=work))
                    try:
                        if kiln_side:
                            return timed([a.kiln, "ckpt", "restore", url,
                                          "1", str(dest / "r")], env=e)[0]
                        args = ["curl", "-sS", "--fail",
                                "-H", "x-ms-version: 2023-11-03"]
                        for f in sorted(src.iterdir()):
                            args += [f"{url}/1/checkpoints/{src.name}/"
                                     f"{f.name}?{ckpt_bench.sas('bench')}",
                                     "-o", str(dest / f.name)]
                        return timed(args)[0]
                    finally:
                        shutil.rmtree(dest, ignore_errors=True)
                return with_azurite(measure)
            return side

        sides = []
        if not a.no_file:
            sides += [("push", push, ()), ("push_http", push, ("--http",)),
                      ("cp", cp, ()), ("pull", pull, ()),
                      ("cp_pull", cp_pull, ())]
        if a.azurite:
            sides += [("push_az", push_az, ())]
            if a.kiln_before:
                sides += [("push_az_before", push_az, (a.kiln_before,))]
            sides += [("curl_put", curl_side(False), ()),
                      ("ckpt_up", ckpt_up, ()),
                      ("curl_par", curl_side(True), ()),
                      ("ckpt_down", download_side(True), ()),
                      ("curl_get", download_side(False), ()),
                      ("pull_az", lambda *args: push_az(*args, pulled=True),
                       ())]
        times = {spec: {name: [] for name, _, _ in sides}
                 for spec, _, _, _ in sets}
        for r in range(a.rounds):
            # pull needs a version: a push goes first; then alternate.
            if r % 2 == 0:
                order = sides
            elif a.no_file:
                order = list(reversed(sides))
            else:
                order = [sides[1], sides[0]] + list(reversed(sides[2:]))
            for spec, src, digests, _ in sets:
                for name, fn, extra in order:
                    # Nothing dirty left for the next side's flush to
                    # wait for (the sets written, the last side's files).
                    subprocess.run(["sync"], check=True)
                    times[spec][name].append(fn(spec, src, digests, extra))
                print(f"round {r + 1}/{a.rounds} {spec}: " + ", ".join(
                    f"{n} {times[spec][n][-1]:.2f}s" for n, _, _ in sides),
                    flush=True)
        for spec, _, _, mib in sets:
            t = {n: stats(xs) for n, xs in times[spec].items()}
            ratio = {}
            for peer, side in (("cp", "push"), ("cp", "push_http"),
                               ("cp_pull", "pull"), ("curl_put", "push_az"),
                               ("curl_put", "ckpt_up"),
                               ("curl_par", "ckpt_up"),
                               ("curl_get", "ckpt_down"),
                               ("curl_get", "pull_az"),
                               ("push_az_before", "push_az")):
                if times[spec].get(peer) and times[spec].get(side):
                    ratio[f"{peer}/{side}"] = statistics.mean(
                        c / p for c, p in zip(times[spec][peer],
                                              times[spec][side]))
            results["sets"][spec] = {"mib": mib, "times": t, "ratios": ratio}
        results["load_after"] = os.getloadavg()
    finally:
        if server:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average before {results['load_before'][0]:.1f}, after "
          f"{results['load_after'][0]:.1f}; {a.rounds} rounds")
    print(f"{'set':>8} {'side':>10} {'mean s':>8} {'sd':>6} {'GB/s':>6}")
    for spec, r in results["sets"].items():
        for name, t in r["times"].items():
            gbs = r["mib"] * MiB / t["mean_s"] / 1e9
            print(f"{spec:>8} {name:>10} {t['mean_s']:8.2f} "
                  f"{t['sd_s']:6.2f} {gbs:6.2f}")
        print("         " + ", ".join(f"{k} {v:.2f}x"
                                       for k, v in r["ratios"].items()))
    Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
