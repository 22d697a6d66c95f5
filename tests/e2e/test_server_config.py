"""kiln server --config FILE: the file's keys are the long flags' names,
the command line wins over the file, server.yaml in the home is read
without --config, and what is wrong in the file is named as
FILE:LINE:COLUMN with its key."""
import os
import subprocess

from conftest import KILN, Server


def write_config(path, text, mode=0o600):
    path.write_text(text)
    path.chmod(mode)
    return path


def nodes(server):
    r = server.request("GET", "/v1/nodes")
    assert r.status_code == 200, r.text
    return {n["name"]: n for n in r.json()["nodes"]}


def run_server(home, *args):
    env = dict(os.environ, KILN_HOME=str(home))
    return subprocess.run([KILN, "server", *args], env=env,
                          capture_output=True, text=True, timeout=30)


def test_flags_override_the_file_and_lists_are_replaced(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    cfg = write_config(tmp_path / "server.yaml",
                       "# a port nothing listens on: the flag must win\n"
                       "listen: 127.0.0.1:1\n"
                       "sim-node:\n"
                       "  - fa 1xH100-80GB zone=a\n"
                       "  - fb 1xH100-80GB zone=b\n"
                       "health-interval: 0\n")
    s = Server(home, gpus=None, extra=["--config", str(cfg)])
    s.start()
    try:
        assert set(nodes(s)) == {"fa", "fb"}
    finally:
        s.stop()
    # A repeated flag on the command line replaces the file's whole list.
    s = Server(home, gpus=None, extra=["--config", str(cfg), "--sim-node",
                                       "cli 2xH100-80GB zone=c"])
    s.start()
    try:
        listed = nodes(s)
        assert set(listed) == {"cli"}
        assert listed["cli"]["labels"]["zone"] == "c"
    finally:
        s.stop()


def test_server_yaml_in_the_home_is_read_without_config(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    write_config(home / "server.yaml", "node-name: from-file\n"
                 "node-labels: zone=z1\n")
    s = Server(home, extra=["--node-name", "from-flag"])
    s.start()
    try:
        listed = nodes(s)
        assert set(listed) == {"from-flag"}
        assert listed["from-flag"]["labels"] == {"zone": "z1"}
    finally:
        s.stop()


def test_errors_name_file_line_column_and_key(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    cfg = write_config(tmp_path / "bad.yaml", "listen: 127.0.0.1:0\n"
                       "health-intervall: 5m\n")
    r = run_server(home, "--config", str(cfg))
    assert r.returncode == 2
    assert (f'{cfg}:2:1: unknown key "health-intervall"; did you mean '
            f'"health-interval"?') in r.stderr

    write_config(cfg, "listen: 127.0.0.1:0\nbackup-keep: many\n")
    r = run_server(home, "--config", str(cfg))
    assert r.returncode == 2
    assert (f'{cfg}:2:14: backup-keep: "many" is not a whole number in '
            f'1..10000') in r.stderr

    write_config(cfg, "no-limits: yes please\n")
    r = run_server(home, "--config", str(cfg))
    assert r.returncode == 2
    assert f"{cfg}:1:12: no-limits: must be true or false" in r.stderr

    # A bad value is an error even where the command line overrides it.
    write_config(cfg, "listen: nowhere\n")
    r = run_server(home, "--config", str(cfg), "--listen", "127.0.0.1:0")
    assert r.returncode == 2
    assert f'{cfg}:1:9: listen: "nowhere" is not HOST:PORT' in r.stderr

    # Checks across options see the file's values too.
    write_config(cfg, "image: x\n")
    r = run_server(home, "--config", str(cfg))
    assert r.returncode == 2 and "need --executor kubernetes" in r.stderr

    r = run_server(home, "--config", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2
    assert "missing.yaml: No such file or directory" in r.stderr


def test_a_file_others_may_write_is_refused(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    cfg = write_config(tmp_path / "server.yaml", "listen: 127.0.0.1:0\n",
                       mode=0o664)
    r = run_server(home, "--config", str(cfg))
    assert r.returncode == 2
    assert f"{cfg}: mode 0664 lets others write it" in r.stderr
    # The default file is held to the same rule.
    write_config(home / "server.yaml", "listen: 127.0.0.1:0\n", mode=0o646)
    r = run_server(home)
    assert r.returncode == 2
    assert "server.yaml: mode 0646 lets others write it" in r.stderr
    if os.geteuid() != 0:
        return  # only root can give the file to another user
    os.chown(cfg, 12345, 12345)
    cfg.chmod(0o600)
    r = run_server(home, "--config", str(cfg))
    assert r.returncode == 2
    assert "owned by uid 12345" in r.stderr
