"""TLS end to end: the real server and exporter behind certificates made
with the openssl tool, reached by openssl s_client, curl, Python's ssl and
requests, and the kiln CLI. Handshakes on TLS 1.2 and 1.3, a wrong host
name and an expired certificate refused, a reload on SIGHUP and on a file
change while a connection stays open, client certificates mapped to roles
(and one from another CA refused), and plain HTTP off loopback refused."""
import os
import re
import signal
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
import requests

from conftest import KILN, Server, job_yaml, kill_processes_under, wait_for

SPEC = job_yaml("t", ["true"])


def run(*args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=60,
                          **kw)


def openssl(*args, cwd):
    res = run("openssl", *args, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return res


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.pem", "-days", "30", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def make_leaf(d, name, ca, cn, ext, key="ec"):
    """A key and a certificate ca signs; ext is the extensions' text."""
    newkey = (["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
              if key == "ec" else ["-newkey", "rsa:2048"])
    openssl("req", "-new", *newkey, "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
    (d / f"{name}.ext").write_text(ext)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem",
            "-CAkey", f"{ca}.key", "-CAcreateserial", "-days", "30",
            "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)


SERVER_EXT = ("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
              "extendedKeyUsage=serverAuth\n"
              "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
CLIENT_EXT = ("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
              "extendedKeyUsage=clientAuth\n")


def make_expired(d):
    """A server certificate whose validity ended in 2020 (openssl ca is
    the tool's way to set the dates)."""
    (d / "index.txt").write_text("")
    (d / "serial").write_text("1000\n")
    (d / "ca.cnf").write_text(
        f"[ca]\ndefault_ca = d\n[d]\ndatabase = {d}/index.txt\n"
        f"new_certs_dir = {d}\nserial = {d}/serial\ndefault_md = sha256\n"
        "policy = p\ncopy_extensions = copy\nunique_subject = no\n"
        "[p]\ncommonName = supplied\n")
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:P-256", "-nodes", "-keyout", "expired.key",
            "-out", "expired.csr", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", cwd=d)
    openssl("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem",
            "-keyfile", "ca.key", "-in", "expired.csr", "-out",
            "expired.pem", "-startdate", "20200101000000Z", "-enddate",
            "20200201000000Z", "-notext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    make_ca(d, "ca")
    make_ca(d, "other-ca")
    make_ca(d, "client-ca")
    make_leaf(d, "server", "ca", "localhost", SERVER_EXT)
    make_leaf(d, "server2", "ca", "localhost", SERVER_EXT, key="rsa")
    make_leaf(d, "gw", "client-ca", "gw-1", CLIENT_EXT)
    make_leaf(d, "rogue", "client-ca", "rogue-1", CLIENT_EXT)
    make_leaf(d, "forged", "other-ca", "gw-1", CLIENT_EXT)
    make_expired(d)
    return d


def tls_server(tmp_path, pki, *extra, cert="server", name="home"):
    """A server on copies of the certificate files (tests replace them)."""
    home = tmp_path / name
    home.mkdir()
    for ext in ("pem", "key"):
        (home / f"tls.{ext}").write_bytes((pki / f"{cert}.{ext}").read_bytes())
    return Server(home, extra=["--tls-cert", str(home / "tls.pem"),
                               "--tls-key", str(home / "tls.key"), *extra])


@pytest.fixture
def tserver(tmp_path, pki):
    s = tls_server(tmp_path, pki).start()
    yield s
    s.stop()
    kill_processes_under(s.home)


def port_of(url):
    return int(url.rsplit(":", 1)[1])


def context(pki, ca="ca", cert=None):
    ctx = ssl.create_default_context(cafile=str(pki / f"{ca}.pem"))
    if cert:
        ctx.load_cert_chain(str(pki / f"{cert}.pem"), str(pki / f"{cert}.key"))
    return ctx


def peer_serial(sock):
    der = sock.getpeercert(binary_form=True)
    res = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout",
                          "-serial"], input=der, capture_output=True)
    return res.stdout.decode().strip()


def http_get(sock, path, token):
    """One keep-alive request on an open TLS socket: (status, body)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n"
                 f"Authorization: Bearer {token}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split()[1]), body


def test_handshakes_tls12_and_tls13_with_alpn(tserver, pki):
    assert tserver.url.startswith("https://127.0.0.1:")
    port = port_of(tserver.url)
    for version, name in (("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")):
        res = run("openssl", "s_client", "-connect", f"127.0.0.1:{port}",
                  version, "-CAfile", str(pki / "ca.pem"), "-verify_hostname",
                  "localhost", "-verify_return_error", "-alpn", "http/1.1",
                  input="")
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"Protocol  : {name}" in res.stdout or \
            f"New, {name}" in res.stdout, res.stdout
        assert "Verify return code: 0 (ok)" in res.stdout
        assert "ALPN protocol: http/1.1" in res.stdout
    # Older protocols are refused.
    res = run("openssl", "s_client", "-connect", f"127.0.0.1:{port}",
              "-tls1_1", input="")
    assert res.returncode != 0 and "Cipher is (NONE)" in res.stdout, \
        res.stdout
    res = run("curl", "-sS", "--cacert", str(pki / "ca.pem"), "-H",
              f"Authorization: Bearer {tserver.admin_token}",
              f"https://localhost:{port}/v1/jobs")
    assert res.returncode == 0 and res.stdout.startswith('{"jobs"'), res.stderr
    # Plain HTTP on the TLS port gets no answer it could take for one.
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/v1/jobs", timeout=5)


def test_wrong_host_name_and_unknown_ca_refused(tserver, pki):
    port = port_of(tserver.url)
    res = run("curl", "-sS", "--cacert", str(pki / "ca.pem"), "--resolve",
              f"kiln.example:{port}:127.0.0.1",
              f"https://kiln.example:{port}/v1/jobs")
    assert res.returncode == 60, res.stderr  # peer verification failed
    with pytest.raises(ssl.SSLCertVerificationError):
        with socket.create_connection(("127.0.0.1", port)) as raw:
            context(pki, ca="other-ca").wrap_socket(
                raw, server_hostname="localhost")
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"https://127.0.0.1:{port}/v1/jobs", timeout=5)


def test_expired_certificate_refused(tmp_path, pki):
    s = tls_server(tmp_path, pki, cert="expired").start()
    try:
        port = port_of(s.url)
        res = run("curl", "-sS", "--cacert", str(pki / "ca.pem"),
                  f"https://localhost:{port}/v1/jobs")
        assert res.returncode == 60 and "expired" in res.stderr, res.stderr
        with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
            with socket.create_connection(("127.0.0.1", port)) as raw:
                context(pki).wrap_socket(raw, server_hostname="localhost")
    finally:
        s.stop()


def replace_files(home, pki, cert):
    """Swap the certificate and key in as a deploy tool would: new files
    renamed over the old."""
    for ext in ("pem", "key"):
        tmp = home / f"tls.{ext}.new"
        tmp.write_bytes((pki / f"{cert}.{ext}").read_bytes())
        os.rename(tmp, home / f"tls.{ext}")


def new_serial(tserver, pki):
    with socket.create_connection(("127.0.0.1", port_of(tserver.url))) as raw:
        with context(pki).wrap_socket(raw, server_hostname="localhost") as s:
            return peer_serial(s)


def test_reload_on_sighup_keeps_open_connections(tserver, pki):
    port = port_of(tserver.url)
    token = tserver.admin_token
    first = new_serial(tserver, pki)
    raw = socket.create_connection(("127.0.0.1", port))
    old = context(pki).wrap_socket(raw, server_hostname="localhost")
    try:
        assert http_get(old, "/v1/jobs", token)[0] == 200
        # A stream open across the reload: the events feed.
        stream = requests.get(tserver.url + "/v1/events?follow=1", stream=True,
                              verify=str(pki / "ca.pem"), timeout=10,
                              headers={"Authorization": f"Bearer {token}"})
        assert stream.status_code == 200, stream.text
        replace_files(tserver.home, pki, "server2")
        tserver.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: new_serial(tserver, pki) != first,
                 what="the new certificate")
        assert "TLS certificate reloaded" in tserver.log.read_text()
        # The connection from before goes on, on the old certificate.
        assert peer_serial(old) == first
        assert http_get(old, "/v1/jobs", token)[0] == 200
        assert tserver.proc.poll() is None
        r = tserver.request("POST", "/v1/jobs", verify=str(pki / "ca.pem"),
                            data=SPEC)
        assert r.status_code == 201, r.text
        job = str(r.json()["job"]["id"]).encode()
        # The stream opened before the reload carries the new job.
        assert any(job in line for line in stream.iter_lines(chunk_size=1)
                   if line), "the stream ended at the reload"
        stream.close()
    finally:
        old.close()


def test_reload_when_files_change_and_bad_files_keep_the_old(tserver, pki):
    first = new_serial(tserver, pki)
    # A key that is not a key: the reload fails and the old one serves.
    (tserver.home / "tls.key").write_text("not a key\n")
    wait_for(lambda: "TLS certificate not reloaded" in
             tserver.log.read_text(), what="the failed reload")
    assert new_serial(tserver, pki) == first
    # Without a signal: the watch sees the files change.
    replace_files(tserver.home, pki, "server2")
    wait_for(lambda: new_serial(tserver, pki) != first, timeout=15,
             what="the changed files to be loaded")
    assert "the files changed" in tserver.log.read_text()


def test_bad_files_refuse_the_start_naming_the_setting(tmp_path, pki):
    home = tmp_path / "h"
    home.mkdir()
    res = run(KILN, "server", "--home", str(home), "--listen",
              "127.0.0.1:0", "--tls-cert", str(pki / "server.pem"),
              "--tls-key", str(pki / "gw.key"))
    assert res.returncode == 1 and "tls-key" in res.stderr and \
        "does not match" in res.stderr, res.stderr
    res = run(KILN, "server", "--home", str(home), "--listen",
              "127.0.0.1:0", "--tls-cert", str(pki / "server.pem"))
    assert res.returncode == 2 and "tls-key" in res.stderr, res.stderr
    res = run(KILN, "server", "--home", str(home), "--listen",
              "127.0.0.1:0", "--tls-cert", str(tmp_path / "none.pem"),
              "--tls-key", str(pki / "server.key"))
    assert res.returncode == 1 and "tls-cert" in res.stderr, res.stderr


def non_loopback_address():
    """An address of this machine that is not loopback, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def test_plain_listener_off_loopback_is_refused(tmp_path):
    home = tmp_path / "h"
    home.mkdir()
    for host in ("0.0.0.0", "[::]"):
        res = run(KILN, "server", "--home", str(home), "--listen",
                  f"{host}:0", "--gpus", "1xH100-80GB")
        assert res.returncode == 2, res.stderr
        assert "listen" in res.stderr and "insecure" in res.stderr
        assert not (home / "server.url").exists()
    res = run(KILN, "exporter", "--listen", "0.0.0.0:0")
    assert res.returncode == 2 and "--listen" in res.stderr and \
        "insecure" in res.stderr, res.stderr
    addr = non_loopback_address()
    if addr:
        res = run(KILN, "server", "--home", str(home), "--listen",
                  f"{addr}:0")
        assert res.returncode == 2 and addr in res.stderr, res.stderr
    # Said on purpose, it starts.
    s = Server(home, extra=["--insecure"])
    s.start()
    try:
        assert s.url.startswith("http://")
    finally:
        s.stop()


def test_client_certificates_map_to_roles(tmp_path, pki):
    s = tls_server(tmp_path, pki, "--tls-client-ca",
                   str(pki / "client-ca.pem"), "--tls-client-role",
                   "gw-1=viewer").start()
    ca = str(pki / "ca.pem")
    cert = lambda n: (str(pki / f"{n}.pem"), str(pki / f"{n}.key"))  # noqa
    try:
        r = requests.get(s.url + "/v1/jobs", verify=ca, cert=cert("gw"))
        assert r.status_code == 200, r.text
        r = requests.post(s.url + "/v1/jobs", verify=ca, cert=cert("gw"),
                          data=SPEC)
        assert r.status_code == 403 and "viewer" in r.text, r.text
        audit = s.request("GET", "/v1/audit", verify=ca).json()
        assert any(e["actor"] == "gw-1" and e["outcome"] == "denied"
                   for e in audit["audit"]), audit
        # Chains to the client CA but has no role line.
        r = requests.get(s.url + "/v1/jobs", verify=ca, cert=cert("rogue"))
        assert r.status_code == 401 and "rogue-1" in r.text, r.text
        # The right name from another CA: the handshake is refused.
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(s.url + "/v1/jobs", verify=ca, cert=cert("forged"))
        # No certificate, no token: 401; a token still works alone.
        r = requests.get(s.url + "/v1/jobs", verify=ca)
        assert r.status_code == 401
        r = requests.post(s.url + "/v1/jobs", verify=ca, cert=cert("gw"),
                          headers={"Authorization":
                                   f"Bearer {s.admin_token}"},
                          data=SPEC)
        assert r.status_code == 201, r.text
        # The CLI shows the certificate from the environment.
        env = dict(os.environ, KILN_HOME=str(tmp_path / "nohome"),
                   KILN_SERVER=s.url, KILN_CA=ca,
                   KILN_CLIENT_CERT=cert("gw")[0],
                   KILN_CLIENT_KEY=cert("gw")[1])
        env.pop("KILN_TOKEN", None)
        res = run(KILN, "ls", env=env)
        assert res.returncode == 0, res.stderr
        res = run(KILN, "ls", env=dict(env, KILN_CLIENT_CERT=cert("forged")[0],
                                       KILN_CLIENT_KEY=cert("forged")[1]))
        # Refused in the handshake; how curl words it depends on when the
        # server's alert and close reach it.
        assert res.returncode == 3 and "cannot reach" in res.stderr, \
            res.stderr
    finally:
        s.stop()
        kill_processes_under(s.home)


def test_client_role_settings_are_checked(tmp_path, pki):
    home = tmp_path / "h"
    home.mkdir()
    base = [KILN, "server", "--home", str(home), "--listen", "127.0.0.1:0",
            "--tls-cert", str(pki / "server.pem"), "--tls-key",
            str(pki / "server.key")]
    res = run(*base, "--tls-client-role", "gw-1=viewer")
    assert res.returncode == 2 and "tls-client-ca" in res.stderr, res.stderr
    res = run(*base, "--tls-client-ca", str(pki / "client-ca.pem"),
              "--tls-client-role", "gw-1=root")
    assert res.returncode == 2 and "tls-client-role" in res.stderr, res.stderr


def test_cli_and_python_against_a_self_signed_server(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, extra=["--tls-self-signed"]).start()
    try:
        ca = home / "tls" / "ca.pem"
        assert s.url.startswith("https://") and ca.exists()
        assert f"KILN_CA={ca}" in s.log.read_text()
        assert (home / "tls" / "ca.key").stat().st_mode & 0o077 == 0
        assert (home / "tls" / "server.key").stat().st_mode & 0o077 == 0
        res = s.cli("ls")
        assert res.returncode == 3 and "KILN_CA" in res.stderr, res.stderr
        env = dict(os.environ, KILN_HOME=str(home), KILN_CA=str(ca))
        res = run(KILN, "submit", "-", input=SPEC, env=env)
        assert res.returncode == 0, res.stderr
        res = run(KILN, "ls", env=env)
        assert res.returncode == 0 and "t" in res.stdout, res.stderr
        r = requests.get(s.url + "/v1/jobs", verify=str(ca), headers={
            "Authorization": f"Bearer {s.admin_token}"})
        assert r.status_code == 200 and r.json()["jobs"]
        # The Python client: verified, with the CA from the environment
        # or given, and refused without it.
        import sys
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] /
                               "python"))
        import kiln
        assert kiln.Client(server=s.url, token=s.admin_token,
                           ca=str(ca)).jobs.list()
        with pytest.raises(kiln.Unavailable, match="KILN_CA"):
            kiln.Client(server=s.url, token=s.admin_token).jobs.list()
        # The CA is kept across starts: clients trust it once.
        first = ca.read_bytes()
        s.stop()
        s.start()
        assert ca.read_bytes() == first
        assert run(KILN, "ls", env=env).returncode == 0
    finally:
        s.stop()
        kill_processes_under(home)


def exporter_wants_client_certificates(tmp_path, pki, args):
    """An exporter started with args serves HTTPS with the pki's server
    certificate and answers only a scraper with a client certificate."""
    log = tmp_path / "exporter.log"
    env = dict(os.environ, KILN_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
    with open(log, "wb") as f:
        proc = subprocess.Popen([KILN, "exporter", *map(str, args)],
                                env=env, stdout=f, stderr=f)
    try:
        m = wait_for(lambda: re.search(r"https://127\.0\.0\.1:(\d+)/metrics",
                                       log.read_text()) or
                     proc.poll() is not None, what="exporter to listen")
        assert proc.poll() is None, log.read_text()
        url = f"https://127.0.0.1:{m.group(1)}/metrics"
        ca = str(pki / "ca.pem")
        r = requests.get(url, verify=ca, cert=(str(pki / "gw.pem"),
                                               str(pki / "gw.key")))
        assert r.status_code == 200 and "node_" in r.text
        r = requests.get(url, verify=ca)
        assert r.status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, log.read_text()


def test_exporter_over_https_with_client_certificates(tmp_path, pki):
    exporter_wants_client_certificates(tmp_path, pki, [
        "--listen", "127.0.0.1:0", "--tls-cert", pki / "server.pem",
        "--tls-key", pki / "server.key", "--tls-client-ca",
        pki / "client-ca.pem"])


def test_gateway_front_over_https_and_reload(tmp_path, pki):
    from test_gateway import (Gateway, Upstream, deployment, key,
                              routes)
    home = tmp_path / "gw"
    home.mkdir()
    up = Upstream("chat").start()
    (home / "routes.json").write_text(__import__("json").dumps(routes(
        [deployment("chat", [up])], [key("app", "sk-app", ["chat"])])))
    for ext in ("pem", "key"):
        (home / f"tls.{ext}").write_bytes((pki / f"server.{ext}").read_bytes())
    g = Gateway(home, ["--routes", str(home / "routes.json"), "--workers",
                       "2", "--tls-cert", str(home / "tls.pem"),
                       "--tls-key", str(home / "tls.key")]).start()
    try:
        assert g.url.startswith("https://127.0.0.1:")
        r = g.call("sk-app", "chat", verify=str(pki / "ca.pem"))
        assert r.status_code == 200 and r.json()["served_by"] == "chat"
        with pytest.raises(requests.exceptions.SSLError):
            g.call("sk-app", "chat")
        port = port_of(g.url)
        first = new_serial(g, pki)
        replace_files(home, pki, "server2")
        g.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: new_serial(g, pki) != first,
                 what="the gateway's new certificate")
        assert "gateway: TLS certificate reloaded" in g.log.read_text()
        res = run("curl", "-sS", "--cacert", str(pki / "ca.pem"), "-H",
                  "Authorization: Bearer sk-app", "-d",
                  '{"model":"chat","messages":[]}',
                  f"https://localhost:{port}/v1/chat/completions")
        assert res.returncode == 0 and "chat" in res.stdout, res.stderr
    finally:
        g.stop()
        up.kill()


def write_config(path, text):
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_gateway_and_exporter_take_the_servers_tls_section(tmp_path, pki):
    """gateway.yaml and exporter.yaml group the TLS settings under tls:
    as server.yaml does, and serve HTTPS from them."""
    from test_gateway import Gateway, Upstream, deployment, key, routes
    home = tmp_path / "gw"
    home.mkdir()
    up = Upstream("chat").start()
    (home / "routes.json").write_text(__import__("json").dumps(routes(
        [deployment("chat", [up])], [key("app", "sk-app", ["chat"])])))
    cfg = write_config(home / "gateway.yaml",
                       f"routes: {home / 'routes.json'}\n"
                       "tls:\n"
                       f"  cert: {pki / 'server.pem'}\n"
                       f"  key: {pki / 'server.key'}\n")
    g = Gateway(home, ["--config", str(cfg)]).start()
    try:
        assert g.url.startswith("https://127.0.0.1:")
        r = g.call("sk-app", "chat", verify=str(pki / "ca.pem"))
        assert r.status_code == 200 and r.json()["served_by"] == "chat"
    finally:
        g.stop()
        up.kill()
    xcfg = write_config(tmp_path / "exporter.yaml",
                        "listen: 127.0.0.1:0\n"
                        "tls:\n"
                        f"  cert: {pki / 'server.pem'}\n"
                        f"  key: {pki / 'server.key'}\n"
                        f"  client_ca: {pki / 'client-ca.pem'}\n")
    exporter_wants_client_certificates(tmp_path, pki, ["--config", xcfg])


def test_tls_section_errors_name_file_line_column_and_key(tmp_path):
    """A key the command does not have is refused with the ones it has;
    one given both ways is given twice; a value of the wrong shape names
    the section."""
    cases = [
        ("gateway", "tls:\n  cert: /a.pem\n  client_ca: /ca.pem\n",
         ':3:3: unknown key "client_ca" (cert, key, insecure)'),
        ("exporter", "tls:\n  cert: /a.pem\n  self_signed: true\n",
         ':3:3: unknown key "self_signed" (cert, key, client_ca, insecure)'),
        ("gateway", "tls-cert: /a.pem\ntls:\n  cert: /b.pem\n",
         ":3:3: cert: given twice (first at 1:1)"),
        ("exporter", "tls: /a.pem\n",
         ":1:6: tls: a mapping of cert, key, client_ca, insecure"),
        ("gateway", "tls:\n  insecure: maybe\n",
         ":2:13: tls.insecure: must be true or false"),
    ]
    for cmd, text, want in cases:
        cfg = write_config(tmp_path / f"{cmd}.yaml", text)
        res = run(KILN, cmd, "--config", str(cfg), "--print-config")
        assert res.returncode == 2, (text, res.stdout)
        assert f"{cfg}{want}" in res.stderr, (text, res.stderr)


def test_insecure_in_a_config_file_allows_plain_off_loopback(tmp_path):
    """Plain HTTP off loopback is refused naming the setting, and allowed
    when the file says insecure: true (at the top or under tls:)."""
    for cmd, text in (("gateway", "insecure: true\n"),
                      ("exporter", "tls:\n  insecure: true\n")):
        cfg = write_config(tmp_path / f"{cmd}.yaml",
                           f"listen: 0.0.0.0:0\n{text}")
        res = run(KILN, cmd, "--config", str(cfg), "--print-config")
        assert res.returncode == 0, res.stderr
        assert re.search(rf"^insecure: true  # {re.escape(str(cfg))}:\d+:\d+$",
                         res.stdout, re.M), res.stdout
        cfg.write_text("listen: 0.0.0.0:0\n")
        res = run(KILN, cmd, "--config", str(cfg), "--print-config")
        assert res.returncode == 2, res.stdout
        assert "insecure" in res.stderr and "listen" in res.stderr


def test_gateway_polls_a_tls_server_it_trusts(tmp_path):
    from test_gateway import Gateway
    shome = tmp_path / "srv"
    shome.mkdir()
    s = Server(shome, extra=["--tls-self-signed"]).start()
    ca = shome / "tls" / "ca.pem"
    ghome = tmp_path / "gw"
    ghome.mkdir()
    args = ["--server", s.url, "--token", s.admin_token]
    old = os.environ.get("KILN_CA")
    try:
        g = Gateway(ghome, args).start()
        g.stop()
        assert "not trusted" in g.log.read_text(), g.log.read_text()
        assert not (ghome / "gateway" / "routes.json").exists()
        os.environ["KILN_CA"] = str(ca)
        g = Gateway(ghome, args).start()
        wait_for(lambda: (ghome / "gateway" / "routes.json").exists(),
                 what="the routes from the server")
        g.stop()
    finally:
        if old is None:
            os.environ.pop("KILN_CA", None)
        else:
            os.environ["KILN_CA"] = old
        s.stop()
        kill_processes_under(shome)


def test_gateway_plain_off_loopback_is_refused(tmp_path):
    (tmp_path / "routes.json").write_text(
        '{"generation":1,"deployments":[],"keys":[]}')
    res = run(KILN, "gateway", "--home", str(tmp_path), "--routes",
              str(tmp_path / "routes.json"), "--listen", "0.0.0.0:0")
    assert res.returncode == 2 and "--listen" in res.stderr and \
        "insecure" in res.stderr, res.stderr


def tls_upstream(pki, name):
    """A test model server (test_gateway's) behind the pki's server
    certificate."""
    from test_gateway import Upstream
    up = Upstream(name).start()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(pki / "server.pem"), str(pki / "server.key"))
    up.server.socket = ctx.wrap_socket(up.server.socket, server_side=True)
    return up


def test_gateway_reaches_https_model_servers_it_trusts(tmp_path, pki):
    from test_gateway import Gateway, deployment, key, routes
    home = tmp_path / "gw"
    home.mkdir()
    good, bad = tls_upstream(pki, "good"), tls_upstream(pki, "bad")
    deps = [deployment("good", [good]), deployment("bad", [bad]),
            deployment("system", [bad])]
    for d in deps:
        for r in d["replicas"]:
            r["address"] = "https://" + r["address"]
    deps[0]["ca"] = str(pki / "ca.pem")
    deps[1]["ca"] = str(pki / "other-ca.pem")
    (home / "routes.json").write_text(__import__("json").dumps(routes(
        deps, [key("app", "sk-app", ["good", "bad", "system"])])))
    g = Gateway(home, ["--routes", str(home / "routes.json")]).start()
    try:
        for _ in range(3):  # kept alive across requests
            r = g.call("sk-app", "good")
            assert r.status_code == 200 and r.json()["served_by"] == "good"
        good.release.set()  # the stream is sent whole
        r = g.call("sk-app", "good", json={"model": "good", "stream": True,
                                           "messages": []})
        assert r.status_code == 200 and "data:" in r.text, r.text
        assert good.calls >= 4
        # A certificate from a CA the deployment does not name, or one the
        # system does not know: no answer is taken from it.
        for model in ("bad", "system"):
            r = g.call("sk-app", model)
            assert r.status_code == 502, r.text
        assert bad.calls == 0
        assert "is not trusted" in g.log.read_text()
    finally:
        g.stop()
        good.kill()
        bad.kill()


def test_config_file_tls_section(tmp_path, pki):
    home = tmp_path / "home"
    home.mkdir()
    conf = home / "server.yaml"
    conf.write_text(f"tls:\n  cert: {pki / 'server.pem'}\n"
                    f"  key: {pki / 'server.key'}\n"
                    f"  client_ca: {pki / 'client-ca.pem'}\n"
                    "  client_roles: [gw-1=viewer]\n")
    conf.chmod(0o600)
    s = Server(home).start()
    try:
        assert s.url.startswith("https://")
        r = requests.get(s.url + "/v1/jobs", verify=str(pki / "ca.pem"),
                         cert=(str(pki / "gw.pem"), str(pki / "gw.key")))
        assert r.status_code == 200, r.text
    finally:
        s.stop()
        kill_processes_under(home)
    conf.write_text(f"tls-cert: {pki / 'server.pem'}\n"
                    f"tls:\n  cert: {pki / 'server.pem'}\n  pem: x\n")
    res = run(KILN, "server", "--home", str(home), "--listen", "127.0.0.1:0")
    assert res.returncode != 0 and "given twice" in res.stderr, res.stderr
    conf.write_text("tls:\n  pem: x\n")
    res = run(KILN, "server", "--home", str(home), "--listen", "127.0.0.1:0")
    assert res.returncode != 0 and "server.yaml:2:3" in res.stderr and \
        'unknown key "pem"' in res.stderr, res.stderr


UP_RULE = """rules:
  - name: ExporterUp
    expr: up
    op: "=="
    value: 1
    severity: warning
    summary: "{{ $labels.instance }} answered"
"""


def test_server_scrapes_an_https_exporter(tmp_path, pki):
    log = tmp_path / "exporter.log"
    env = dict(os.environ, KILN_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
    rules = tmp_path / "rules.yaml"
    rules.write_text(UP_RULE)
    with open(log, "wb") as f:
        exporter = subprocess.Popen(
            [KILN, "exporter", "--listen", "127.0.0.1:0", "--tls-cert",
             str(pki / "server.pem"), "--tls-key", str(pki / "server.key")],
            env=env, stdout=f, stderr=f)
    servers = []
    try:
        m = wait_for(lambda: re.search(r"https://127\.0\.0\.1:(\d+)/metrics",
                                       log.read_text()), what="exporter")
        url = f"https://localhost:{m.group(1)}/metrics"
        for name, extra_env in (("untrusted", {}),
                                ("trusted", {"SSL_CERT_FILE":
                                             str(pki / "ca.pem")})):
            home = tmp_path / name
            home.mkdir()
            s = Server(home, extra=[
                "--scrape", url, "--scrape-interval", "200ms",
                "--no-local-metrics", "--alert-rules", str(rules),
                "--health-interval", "0", "--debug"],
                env=dict(os.environ, **extra_env)).start()
            servers.append(s)
        untrusted, trusted = servers
        # Verified against the system's CAs: refused, and said why.
        wait_for(lambda: f"scrape {url}: TLS: the server's certificate is "
                 "not trusted" in untrusted.log.read_text(),
                 what="the refused scrape")
        # SSL_CERT_FILE names the CA: the exporter is up.
        wait_for(lambda: any(a["rule"] == "ExporterUp" for a in
                             trusted.request("GET", "/v1/alerts").json()
                             ["alerts"]), what="the exporter to be up")
        assert f"scrape {url}:" not in trusted.log.read_text()
    finally:
        for s in servers:
            s.stop()
            kill_processes_under(s.home)
        exporter.send_signal(signal.SIGTERM)
        exporter.wait(timeout=10)


def test_tls_front_keeps_its_bounds(tmp_path, pki):
    """The HTTP front's limits hold under TLS: a client that never ends
    its handshake is dropped at the head timeout, an oversized head gets
    431 through the session and a clean close."""
    s = tls_server(tmp_path, pki, "--head-timeout", "1s").start()
    try:
        port = port_of(s.url)
        with socket.create_connection(("127.0.0.1", port)) as raw:
            raw.sendall(b"\x16\x03\x01")  # a handshake record begun
            raw.settimeout(15)
            assert raw.recv(1024) == b"", "a stalled handshake stays open"
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with context(pki).wrap_socket(raw,
                                          server_hostname="localhost") as t:
                t.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Big: " +
                          b"a" * 20000 + b"\r\n\r\n")
                data = b""
                while True:
                    chunk = t.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                assert data.startswith(b"HTTP/1.1 431 "), data[:200]
        assert s.proc.poll() is None
    finally:
        s.stop()
        kill_processes_under(s.home)
