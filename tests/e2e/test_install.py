"""kiln installed like infrastructure: `meson install` into a staging
root, the prefix then moved elsewhere, and everything run from the moved
copy in another directory with KILN_DATA_DIR unset, so no path into the
source or build tree can be what makes it work; the config file's errors;
the systemd units verified; the Debian package's contents, dependencies
and maintainer scripts, and a smoke test from the unpacked package."""
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (KILN, build_deb, can_build_deb, kill_processes_under,
                      wait_for)

SOURCE = Path(__file__).resolve().parents[2]
BUILD = Path(KILN).resolve().parents[2]
UNITS = ("kiln-server.service", "kiln-gateway.service", "kiln-exporter.service")


def open_to_tasks(path, upto):
    """The task user must reach the installed binary (it runs `kiln shim`)
    and the job's workdir, as with a kiln installed in /usr/bin."""
    path = Path(path)
    for p in [path, *path.parents]:
        p.chmod(p.stat().st_mode | 0o755)
        if p == upto:
            break


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("KILN_DATA_DIR", "KILN_SERVER", "KILN_TOKEN",
                        "KILN_HOME")}
    env.update(extra)
    return env


def run(kiln, *args, cwd, env=None, timeout=60):
    return subprocess.run([str(kiln), *map(str, args)], cwd=cwd,
                          env=env or clean_env(), capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    """meson install of the tested build into a staging root."""
    root = tmp_path_factory.mktemp("stage")
    res = subprocess.run(["meson", "install", "-C", str(BUILD), "--destdir",
                          str(root), "--no-rebuild", "--quiet"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return root


@pytest.fixture(scope="module")
def prefix(stage, tmp_path_factory):
    """The installed prefix, moved: not where the build put it."""
    [kiln] = stage.glob("**/bin/kiln")
    moved = tmp_path_factory.mktemp("relocated") / "opt-kiln"
    shutil.copytree(kiln.parents[1], moved, symlinks=True)
    open_to_tasks(moved / "bin", tmp_path_factory.getbasetemp().parent)
    return moved


@pytest.fixture
def elsewhere(tmp_path):
    """A working directory holding the user's files, outside the tree."""
    work = tmp_path / "work"
    shutil.copytree(SOURCE / "examples", work / "examples")
    return work


def test_install_lays_out_binary_data_docs_units_and_config(prefix):
    assert os.access(prefix / "bin" / "kiln", os.X_OK)
    assert os.access(prefix / "libexec" / "kiln" / "kiln-shim", os.X_OK)
    data = {p.name for p in (prefix / "share" / "kiln").iterdir()}
    assert {"azure-gpu-skus.csv", "azure-cpu-skus.csv", "gpu-perf.csv",
            "gpu-products.csv", "mig-profiles.csv", "model-presets.csv",
            "alert-rules.yaml", "dashboards"} <= data
    dashboards = prefix / "share" / "kiln" / "dashboards"
    assert (dashboards / "kiln-control-plane.json").is_file()
    assert (dashboards / "rules" / "kiln.yml").is_file()
    pages = {p.name for p in (prefix / "share" / "man" / "man1").iterdir()}
    assert {"kiln.1", "kiln-server.1", "kiln-submit.1", "kiln-gateway.1",
            "kiln-exporter.1"} <= pages
    assert (prefix / "share" / "bash-completion" / "completions" /
            "kiln").is_file()
    assert list(prefix.glob("share/zsh/*/_kiln"))
    for unit in UNITS:
        assert (prefix / "lib" / "systemd" / "system" / unit).is_file()
    assert (prefix / "etc" / "kiln" / "server.yaml").is_file()


def test_moved_install_finds_its_data(prefix, elsewhere):
    kiln = prefix / "bin" / "kiln"
    res = run(kiln, "advise", "--phase", "infer", "--preset", "llama-3-8b",
              cwd=elsewhere)
    assert res.returncode == 0, res.stderr
    assert "Standard_" in res.stdout
    chat = elsewhere / "examples" / "serve" / "chat.yaml"
    res = run(kiln, "validate", chat, cwd=elsewhere)
    assert res.returncode == 0, res.stderr
    res = run(kiln, "render", chat, "--executor", "kubernetes", "--image",
              "registry.example/serve:1", cwd=elsewhere)
    assert res.returncode == 0, res.stderr
    assert 'kind: "Deployment"' in res.stdout
    res = run(kiln, "sim", "--help", cwd=elsewhere)
    assert res.returncode == 0 and "usage: kiln sim" in res.stdout


def test_data_is_never_read_from_the_source_tree(prefix, tmp_path):
    """Without its share/kiln the moved binary says where it looked: the
    prefix it was built for, never the checkout it was built from."""
    bare = tmp_path / "bare"
    (bare / "bin").mkdir(parents=True)
    shutil.copy2(prefix / "bin" / "kiln", bare / "bin" / "kiln")
    res = run(bare / "bin" / "kiln", "advise", "--phase", "infer",
              "--params", "7e9", cwd=tmp_path)
    assert res.returncode != 0
    assert "share/kiln/azure-gpu-skus.csv" in res.stderr, res.stderr
    assert str(SOURCE) not in res.stderr
    # KILN_DATA_DIR overrides, and is the only place then looked at.
    (tmp_path / "data").mkdir()
    res = run(bare / "bin" / "kiln", "advise", "--phase", "infer",
              "--params", "7e9", cwd=tmp_path,
              env=clean_env(KILN_DATA_DIR=str(tmp_path / "data")))
    assert res.returncode != 0
    assert str(tmp_path / "data" / "azure-gpu-skus.csv") in res.stderr
    for name in ("azure-gpu-skus.csv", "azure-cpu-skus.csv"):
        shutil.copy2(prefix / "share" / "kiln" / name, tmp_path / "data")
    res = run(bare / "bin" / "kiln", "advise", "--phase", "infer",
              "--params", "7e9", cwd=tmp_path,
              env=clean_env(KILN_DATA_DIR=str(tmp_path / "data")))
    assert res.returncode == 0, res.stderr


def installed_config(prefix, path, extra):
    """The shipped example config with what a test machine needs."""
    text = (prefix / "etc" / "kiln" / "server.yaml").read_text()
    text = text.replace("listen: 127.0.0.1:7070", "listen: 127.0.0.1:0")
    path.write_text(text + extra)
    path.chmod(0o600)
    return path


def test_server_from_config_file_runs_a_job(prefix, elsewhere, tmp_path):
    kiln = prefix / "bin" / "kiln"
    home = tmp_path / "home"
    cfg = installed_config(prefix, tmp_path / "server.yaml",
                           "gpus: 2xH100-80GB\nhealth-interval: 0\n"
                           f"file-root: [{tmp_path}]\n")
    env = clean_env(KILN_HOME=str(home))
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([str(kiln), "server", "--config", str(cfg),
                             "--home", str(home)], cwd=elsewhere, env=env,
                            stdout=log, stderr=log)
    try:
        wait_for(lambda: (home / "server.url").exists() or
                 proc.poll() is not None, what="server.url")
        assert proc.poll() is None, (tmp_path / "server.log").read_text()
        job = elsewhere / "job.yaml"
        # Its namespace's init is its shim's child: the lean shim from
        # the moved prefix, not the build tree's.
        job.write_text("kind: Job\nname: installed\n"
                       "command: [/bin/sh, -c, 'echo from-the-package; "
                       "tr \"\\\\0\" \" \" </proc/1/cmdline']\n")
        res = run(kiln, "submit", job, "--wait", cwd=elsewhere, env=env)
        assert res.returncode == 0, res.stderr
        res = run(kiln, "logs", res.stdout.strip(), cwd=elsewhere, env=env)
        assert "from-the-package" in res.stdout
        assert "kiln-shim --dir " in res.stdout, res.stdout
        res = run(kiln, "nodes", cwd=elsewhere, env=env)
        assert "H100" in res.stdout
    finally:
        proc.terminate()
        assert proc.wait(timeout=15) == 0, (tmp_path / "server.log").read_text()
        log.close()
        kill_processes_under(home)


def shim_of_a_job(kiln, elsewhere, env):
    """The command line of the shim a job ran under: its namespace's init
    is the shim's child."""
    job = elsewhere / "init.yaml"
    job.write_text("kind: Job\nname: init\ncommand: [/bin/sh, -c, "
                   "'tr \"\\\\0\" \" \" </proc/1/cmdline']\n")
    res = run(kiln, "submit", job, "--wait", cwd=elsewhere, env=env)
    assert res.returncode == 0, res.stderr
    return run(kiln, "logs", res.stdout.strip(), cwd=elsewhere,
               env=env).stdout


def test_a_replaced_or_writable_lean_shim_is_not_run(prefix, elsewhere,
                                                     tmp_path):
    """The root server runs kiln-shim only while it is the file found at
    start (an upgrade replacing it leaves the server on its own binary's
    `kiln shim`) and only when no one but root may write it."""
    kiln = prefix / "bin" / "kiln"
    lean = prefix / "libexec" / "kiln" / "kiln-shim"
    home = tmp_path / "home"
    cfg = installed_config(prefix, tmp_path / "server.yaml",
                           "gpus: 1xH100-80GB\nhealth-interval: 0\n")
    env = clean_env(KILN_HOME=str(home))

    def server():
        log = open(tmp_path / "server.log", "ab")
        proc = subprocess.Popen([str(kiln), "server", "--config", str(cfg),
                                 "--home", str(home)], cwd=elsewhere,
                                env=env, stdout=log, stderr=log)
        wait_for(lambda: (home / "server.url").exists() or
                 proc.poll() is not None, what="server.url")
        assert proc.poll() is None, (tmp_path / "server.log").read_text()
        return proc

    def stop(proc):
        proc.terminate()
        assert proc.wait(timeout=15) == 0
        (home / "server.url").unlink(missing_ok=True)

    proc = server()
    try:
        assert shim_of_a_job(kiln, elsewhere, env).startswith("kiln-shim ")
        # Replaced while the server runs, as a package upgrade does.
        shutil.copy2(lean, tmp_path / "kiln-shim")
        os.replace(tmp_path / "kiln-shim", lean)
        assert shim_of_a_job(kiln, elsewhere, env).startswith("kiln shim ")
        stop(proc)
        lean.chmod(0o775)
        proc = server()
        assert shim_of_a_job(kiln, elsewhere, env).startswith("kiln shim ")
        stop(proc)
        lean.chmod(0o755)
        proc = server()
        assert shim_of_a_job(kiln, elsewhere, env).startswith("kiln-shim ")
    finally:
        lean.chmod(0o755)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=15)
        kill_processes_under(home)


def test_config_file_errors_name_file_line_and_column(prefix, tmp_path):
    kiln = prefix / "bin" / "kiln"
    cfg = installed_config(prefix, tmp_path / "server.yaml",
                           "health-intervall: 5m\n")
    lines = cfg.read_text().splitlines()
    res = run(kiln, "server", "--config", cfg, "--home", tmp_path / "h",
              cwd=tmp_path)
    assert res.returncode == 2
    assert f"{cfg}:{len(lines)}:1:" in res.stderr, res.stderr
    assert 'did you mean "health-interval"' in res.stderr
    cfg.write_text("listen: nowhere\n")
    res = run(kiln, "server", "--config", cfg, "--home", tmp_path / "h",
              cwd=tmp_path)
    assert res.returncode == 2
    assert f"{cfg}:1:9:" in res.stderr and "HOST:PORT" in res.stderr, \
        res.stderr


def test_print_config_says_where_each_value_came_from(prefix, tmp_path):
    """Flags over the file over the defaults, each value with its source;
    the installed defaults name the installed data, not the checkout."""
    kiln = prefix / "bin" / "kiln"
    cfg = installed_config(prefix, tmp_path / "server.yaml",
                           "health-interval: 90s\npids-max: 64\n")
    lines = cfg.read_text().splitlines()
    res = run(kiln, "server", "--config", cfg, "--pids-max", "100",
              "--home", tmp_path / "h", "--print-config", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = dict(line.split(": ", 1) for line in res.stdout.splitlines()
               if not line.startswith("#"))
    assert out["pids-max"] == "100  # --pids-max"
    assert out["health-interval"] == \
        f"90s  # {cfg}:{lines.index('health-interval: 90s') + 1}:1"
    listen_line = lines.index("listen: 127.0.0.1:0") + 1
    assert out["listen"] == f'"127.0.0.1:0"  # {cfg}:{listen_line}:1'
    assert out["max-connections"] == "4096  # default"
    assert out["mig-profiles"] == \
        f'"{prefix}/share/kiln/mig-profiles.csv"  # default'
    assert not (tmp_path / "h").exists(), "--print-config started a server"


def test_gateway_and_exporter_config_files(prefix, tmp_path):
    """The shipped gateway.yaml and exporter.yaml are read as they are;
    their keys are the commands' flags, the command line wins, and a
    wrong key or value is FILE:LINE:COLUMN with exit status 2."""
    kiln = prefix / "bin" / "kiln"
    for cmd in ("gateway", "exporter"):
        assert (prefix / "etc" / "kiln" / f"{cmd}.yaml").is_file()
    cfg = tmp_path / "exporter.yaml"
    cfg.write_text((prefix / "etc" / "kiln" / "exporter.yaml").read_text() +
                   "listen: 127.0.0.1:1\nhostname: from-file\n")
    proc = subprocess.Popen([str(kiln), "exporter", "--config", str(cfg),
                             "--listen", "127.0.0.1:0"], cwd=tmp_path,
                            env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "serving" not in line:
            line = proc.stderr.readline()
            assert line, "the exporter exited"
        assert "127.0.0.1:1/" not in line, line  # the flag won
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        proc.stderr.close()
        proc.stdout.close()
    cfg.write_text("listen: 127.0.0.1:0\nhostnam: x\n")
    res = run(kiln, "exporter", "--config", cfg, cwd=tmp_path)
    assert res.returncode == 2
    assert f'{cfg}:2:1: unknown key "hostnam"; did you mean "hostname"?' \
        in res.stderr, res.stderr
    gw = tmp_path / "gateway.yaml"
    gw.write_text("zone: a\nworkers: many\n")
    res = run(kiln, "gateway", "--config", gw, cwd=tmp_path)
    assert res.returncode == 2
    assert f'{gw}:2:10: workers: "many" is not a whole number' in res.stderr
    # It says which server and token to trust: refused when another user
    # could have written it, before anything in it is used.
    gw.write_text(f"server: http://127.0.0.1:1\nroutes: {gw}\n")
    gw.chmod(0o666)
    res = run(kiln, "gateway", "--config", gw, cwd=tmp_path)
    assert res.returncode == 2
    assert f"{gw}: mode 0666 lets others write it" in res.stderr, res.stderr


def verify_units(root, unit_dir):
    """systemd-analyze verify with root as the file system: the host's own
    units (targets, slices) copied in, man pages checked separately."""
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    host = Path("/lib/systemd/system")
    shutil.copytree(host, root / "lib" / "systemd" / "system",
                    dirs_exist_ok=True, symlinks=False,
                    ignore_dangling_symlinks=True,
                    ignore=lambda d, names: [n for n in names
                                             if n.startswith("kiln-")])
    res = subprocess.run(["systemd-analyze", "verify", "--man=no",
                          f"--root={root}", *UNITS], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr
    for unit in UNITS:
        text = (unit_dir / unit).read_text()
        assert "Type=notify" in text and "Restart=on-failure" in text
        assert "ProtectSystem=strict" in text and "LimitNOFILE=" in text
        for line in text.splitlines():
            if line.startswith("Documentation=man:"):
                page = line.split(":", 1)[1].replace("(1)", ".1")
                assert list(root.glob(f"**/man1/{page}*")), page


def test_installed_units_verify(stage):
    [unit_dir] = {p.parent for p in stage.glob("**/kiln-server.service")}
    verify_units(stage, unit_dir)


def test_server_tells_systemd_it_is_ready(prefix, tmp_path):
    """Type=notify: READY=1 on $NOTIFY_SOCKET once the API answers."""
    import socket

    sock_path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(20)
    home = tmp_path / "home"
    proc = subprocess.Popen([str(prefix / "bin" / "kiln"), "server",
                             "--listen", "127.0.0.1:0", "--gpus",
                             "1xT4-16GB", "--health-interval", "0",
                             "--home", str(home)], cwd=tmp_path,
                            env=clean_env(NOTIFY_SOCKET=str(sock_path)),
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        assert sock.recv(64) == b"READY=1"
        assert (home / "server.url").exists()
        proc.terminate()
        assert sock.recv(64) == b"STOPPING=1"
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()


@pytest.fixture(scope="module")
def deb():
    """The package: KILN_DEB when CI built it, else `make deb`'s in
    build-deb, which the run began building in the background
    (conftest.build_deb)."""
    if os.environ.get("KILN_DEB"):
        return Path(os.environ["KILN_DEB"])
    if not can_build_deb():
        pytest.skip("dpkg-buildpackage or debhelper is not installed "
                    "(scripts/install-deps.sh deb)")
    started = time.monotonic()
    pkg = build_deb()
    print(f"deb built or found in {time.monotonic() - started:.0f}s")
    return pkg


def dpkg_field(deb, field):
    return subprocess.run(["dpkg-deb", "-f", str(deb), field], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_deb_depends_only_on_what_the_binary_links(deb):
    depends = {d.split()[0] for d in dpkg_field(deb, "Depends").split(", ")}
    assert {"libevent-2.1-7", "libevent-pthreads-2.1-7", "libjansson4",
            "libfyaml0", "libsqlite3-0", "libssl3", "libcurl4"} <= depends
    # libevent's OpenSSL layer serves the TLS listeners.
    assert depends <= {"libc6", "libevent-2.1-7", "libevent-pthreads-2.1-7",
                       "libevent-openssl-2.1-7", "libjansson4", "libfyaml0",
                       "libsqlite3-0", "libssl3", "libcurl4",
                       "passwd"}, depends


def test_deb_contents_and_maintainer_scripts(deb, tmp_path):
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], check=True,
                             capture_output=True, text=True).stdout
    for path in ("./usr/bin/kiln", "./usr/libexec/kiln/kiln-shim",
                 "./usr/share/kiln/gpu-products.csv",
                 "./usr/share/man/man1/kiln.1.gz",
                 "./usr/share/man/man1/kiln-server.1.gz",
                 "./usr/share/bash-completion/completions/kiln",
                 "./usr/share/zsh/vendor-completions/_kiln",
                 "./lib/systemd/system/kiln-server.service",
                 "./etc/kiln/server.yaml", "./etc/kiln/gateway.yaml",
                 "./etc/kiln/exporter.yaml", "./usr/share/doc/kiln/copyright"):
        assert path in listing, path
    control = tmp_path / "control"
    subprocess.run(["dpkg-deb", "-e", str(deb), str(control)], check=True)
    conffiles = (control / "conffiles").read_text().split()
    assert {"/etc/kiln/server.yaml", "/etc/kiln/gateway.yaml",
            "/etc/kiln/exporter.yaml"} <= set(conffiles)
    postinst = (control / "postinst").read_text()
    assert "useradd --system" in postinst and "kiln-task" in postinst
    assert "install -d -m 0700" in postinst and "/var/lib/kiln" in postinst


def test_unpacked_deb_runs_and_its_units_verify(deb, tmp_path):
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    kiln = root / "usr" / "bin" / "kiln"
    shutil.copytree(SOURCE / "examples" / "serve", tmp_path / "serve")
    res = run(kiln, "advise", "--phase", "train", "--params", "7e9",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    res = run(kiln, "validate", tmp_path / "serve" / "chat.yaml",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    unit = (root / "lib" / "systemd" / "system" /
            "kiln-server.service").read_text()
    assert ("ExecStart=/usr/bin/kiln server --config "
            "/etc/kiln/server.yaml") in unit
    verify_units(root, root / "lib" / "systemd" / "system")


def dockerfile_instructions(path):
    """[(INSTRUCTION, arguments)] of a Dockerfile: comments dropped,
    continued lines joined."""
    out, line = [], ""
    for raw in path.read_text().splitlines():
        if not line and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.endswith("\\"):
            line += raw[:-1] + " "
            continue
        word, _, rest = (line + raw).strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        line = ""
    assert not line, "a continued line at the end"
    return out


def test_dockerfile_builds_on_what_the_package_installs(deb, tmp_path):
    """No container engine runs here, so the image is checked against the
    package: the base is the Debian release its Depends name, the .deb
    copied is the one built, the entry point is a file it installs, and
    the default command is one the packaged kiln accepts as it stands."""
    import json
    steps = dockerfile_instructions(SOURCE / "dist" / "Dockerfile")
    args = dict(a.split("=", 1) for w, a in steps if w == "ARG")
    one = {w: a for w, a in steps}
    assert [w for w, _ in steps].count("FROM") == 1
    assert one["FROM"].startswith("debian:12"), one["FROM"]
    assert args["KILN_DEB"] == deb.name
    assert one["COPY"] == "${KILN_DEB} /tmp/kiln.deb"
    assert "apt-get install" in one["RUN"] and "/tmp/kiln.deb" in one["RUN"]
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], check=True,
                             capture_output=True, text=True).stdout
    entry = json.loads(one["ENTRYPOINT"])
    assert f" .{entry[0]}\n" in listing, entry
    # The user owns the home it runs in, and it is KILN_HOME.
    user = one["USER"].split(":")[0]
    home = one["ENV"].split("=", 1)[1]
    assert one["ENV"].startswith("KILN_HOME=") and one["WORKDIR"] == home
    assert f"install -d -m 0700 -o {user} -g {user} {home}" in one["RUN"]
    # The default command, run by the packaged binary: accepted as is.
    cmd = json.loads(one["CMD"])
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    res = run(root / entry[0].lstrip("/"), *entry[1:], *cmd,
              "--print-config", cwd=tmp_path,
              env=clean_env(KILN_HOME=str(tmp_path / "home")))
    assert res.returncode == 0, res.stderr
    listen = dict(l.split(": ", 1) for l in res.stdout.splitlines()
                  if not l.startswith("#"))["listen"]
    assert listen.split("  #")[0].strip('"').rsplit(":", 1)[1] == \
        one["EXPOSE"]
    # The shim image's initContainer copies kiln out with --install.
    res = run(root / "usr" / "bin" / "kiln", "shim", "--help", cwd=tmp_path)
    assert "--install DIR" in res.stdout + res.stderr
