"""--print-config of kiln gateway, kiln exporter and kiln server: every
key's value in effect (flag over file over default) with where it came
from, keys of the tls: section placed where the file gives them, a token
never printed, nothing started, and the output read back as a config file
to the same values."""
import os
import re
import subprocess

from conftest import KILN

SECRET = "sk-not-for-printing-7c1e"


def write_config(path, text):
    path.write_text(text)
    path.chmod(0o600)
    return path


def run(*args, cwd, env=None):
    return subprocess.run([KILN, *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=30)


def shown(out):
    """{key: (value, origin)} of a --print-config output; commented-out
    lines under '#key'."""
    keys = {}
    for line in out.splitlines()[1:]:
        m = re.fullmatch(r"(# )?([a-z-]+): (.*?)  # (.*)", line)
        assert m, line
        keys[("#" if m.group(1) else "") + m.group(2)] = (m.group(3),
                                                          m.group(4))
    return keys


def values_of(out):
    return {k: v for k, (v, _) in shown(out).items()}


def read_back(out, path):
    """The output as a config file: the origins dropped."""
    return write_config(path, "".join(
        line.split("  # ")[0] + "\n" for line in out.splitlines()[1:]))


def test_gateway_prints_what_is_in_effect_and_where_it_came_from(tmp_path):
    home = tmp_path / "h"
    cfg = write_config(tmp_path / "gateway.yaml",
                       "workers: 2\n"
                       "zone: a\n"
                       "server: https://10.0.0.5:7070\n"
                       f"token: {SECRET}\n"
                       "tls:\n"
                       "  cert: /etc/kiln/tls/gw.pem\n"
                       "  key: /etc/kiln/tls/gw.key\n")
    res = run("gateway", "--config", cfg, "--workers", "3", "--home", home,
              "--print-config", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert SECRET not in res.stdout + res.stderr
    assert res.stdout.startswith(
        f"# kiln gateway's effective configuration ({cfg})\n")
    keys = shown(res.stdout)
    assert keys["workers"] == ("3", "--workers")
    assert keys["zone"] == ('"a"', f"{cfg}:2:1")
    assert keys["server"] == ('"https://10.0.0.5:7070"', f"{cfg}:3:1")
    assert keys["#token"] == ("(a secret, not shown)", f"{cfg}:4:1")
    assert keys["tls-cert"] == ('"/etc/kiln/tls/gw.pem"', f"{cfg}:6:3")
    assert keys["tls-key"] == ('"/etc/kiln/tls/gw.key"', f"{cfg}:7:3")
    assert keys["listen"] == ('"127.0.0.1:7080"', "default")
    assert keys["max-body"] == ('"1Mi"', "default")
    assert keys["insecure"] == ("false", "default")
    assert not {"config", "print-config", "token"} & set(keys)
    # Nothing was started: no state written, no port taken.
    assert not home.exists()
    # Read back as a config file, it gives the same values.
    again = run("gateway", "--config", read_back(res.stdout,
                                                 tmp_path / "back.yaml"),
                "--print-config", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    first, back = values_of(res.stdout), values_of(again.stdout)
    # All but the token, which was not printed and so is not read back.
    assert first.pop("#token") and back.pop("token") == "~"
    assert back == first


def test_gateway_token_from_the_command_line_is_not_printed(tmp_path):
    res = run("gateway", "--token", SECRET, "--routes", "/dev/null",
              "--print-config", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert SECRET not in res.stdout
    keys = shown(res.stdout)
    assert keys["#token"] == ("(a secret, not shown)", "--token")
    assert keys["routes"] == ('"/dev/null"', "--routes")
    assert res.stdout.startswith(
        "# kiln gateway's effective configuration (no config file)\n")


def test_print_config_checks_first(tmp_path):
    """What the command would refuse at start it refuses here too."""
    res = run("gateway", "--listen", "0.0.0.0:7080", "--print-config",
              cwd=tmp_path)
    assert res.returncode == 2 and "insecure" in res.stderr, res.stderr
    assert res.stdout == ""
    cfg = write_config(tmp_path / "exporter.yaml",
                       "tls:\n  client_ca: /etc/kiln/ca.pem\n")
    res = run("exporter", "--config", cfg, "--print-config", cwd=tmp_path)
    assert res.returncode == 2 and "--tls-key" in res.stderr, res.stderr
    assert res.stdout == ""


def test_exporter_prints_what_is_in_effect(tmp_path):
    cfg = write_config(tmp_path / "exporter.yaml",
                       "listen: 0.0.0.0:9470\n"
                       "mount: /,/data\n"
                       "tls:\n"
                       "  cert: /etc/kiln/tls/x.pem\n"
                       "  key: /etc/kiln/tls/x.key\n"
                       "  client_ca: /etc/kiln/tls/ca.pem\n")
    res = run("exporter", "--config", cfg, "--hostname", "n1",
              "--print-config", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    keys = shown(res.stdout)
    assert keys["listen"] == ('"0.0.0.0:9470"', f"{cfg}:1:1")
    assert keys["mount"] == ('"/,/data"', f"{cfg}:2:1")
    assert keys["hostname"] == ('"n1"', "--hostname")
    assert keys["tls-client-ca"] == ('"/etc/kiln/tls/ca.pem"', f"{cfg}:6:3")
    assert keys["token-file"] == ("~", "default")
    assert keys["root"] == ('"/"', "default")
    again = run("exporter", "--config", read_back(res.stdout,
                                                  tmp_path / "back.yaml"),
                "--print-config", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert values_of(again.stdout) == values_of(res.stdout)


def test_server_places_tls_section_keys_in_the_file(tmp_path):
    cfg = write_config(tmp_path / "server.yaml",
                       "listen: 127.0.0.1:7070\n"
                       "tls:\n"
                       "  cert: /etc/kiln/tls/s.pem\n"
                       "  key: /etc/kiln/tls/s.key\n")
    res = run("server", "--config", cfg, "--home", tmp_path / "h",
              "--print-config", cwd=tmp_path,
              env={k: v for k, v in os.environ.items()
                   if k not in ("KILN_HOME",)})
    assert res.returncode == 0, res.stderr
    keys = shown(res.stdout)
    assert keys["tls-cert"] == ('"/etc/kiln/tls/s.pem"', f"{cfg}:3:3")
    assert keys["tls-key"] == ('"/etc/kiln/tls/s.key"', f"{cfg}:4:3")
    assert keys["tls-self-signed"] == ("false", "default")
    # The webhook's URL holds its key: named, not shown.
    hook = f"https://hooks.example/services/T0/B0/{SECRET}"
    res = run("server", "--config", cfg, "--home", tmp_path / "h",
              "--alert-webhook", hook, "--print-config", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert SECRET not in res.stdout
    assert shown(res.stdout)["#alert-webhook"] == ("(a secret, not shown)",
                                                   "--alert-webhook")


def test_gateway_polls_the_server_its_file_names(tmp_path):
    """server: and token: in gateway.yaml are the server it polls for
    routes, as --server and --token would be."""
    from conftest import Server, kill_processes_under, wait_for
    from test_gateway import Gateway
    shome = tmp_path / "srv"
    shome.mkdir()
    s = Server(shome).start()
    ghome = tmp_path / "gw"
    ghome.mkdir()
    cfg = write_config(ghome / "gateway.yaml",
                       f"server: {s.url}\ntoken: {s.admin_token}\n")
    try:
        g = Gateway(ghome, ["--config", str(cfg)]).start()
        try:
            wait_for(lambda: (ghome / "gateway" / "routes.json").exists(),
                     what="the routes from the server")
        finally:
            g.stop()
        assert s.admin_token not in g.log.read_text()
    finally:
        s.stop()
        kill_processes_under(shome)
