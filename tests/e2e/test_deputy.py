"""The server never lends its own powers to a user's choice. Each section
below is one such power, tried as a hostile `user` would."""
import json
import os
import subprocess

import pytest

from conftest import KILN, Server
from test_pipeline import keygen, prepare_train
from test_workflows import run, steps, wait_run, write_workflow

# --- Signing: the server signs only with signers it holds by name --------
#
# A signing key is an identity in the server's config (signers:), granted
# to roles or token names; a spec names a signer, never a key file.


def register_workflow(tmp_path, signer, name="wf.yaml"):
    return write_workflow(tmp_path, prepare_train(
        "  - name: register\n    needs: [train]\n"
        "    register: {from: train, model: corp, alias: prod, "
        f"signer: {signer}}}\n"), name=name)


@pytest.fixture
def signing(tmp_path):
    """A server holding two signers: release (admins only) and team
    (granted to the token bob), both keys trusted."""
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home)
    s.start()
    for name in ("release", "team"):
        keygen(s, tmp_path / name)
    conf = tmp_path / "server.yaml"
    conf.write_text("signers:\n"
                    f"  - name: release\n    key-file: {tmp_path}/release\n"
                    "    roles: [admin]\n"
                    f"  - name: team\n    key-file: {tmp_path}/team\n"
                    "    tokens: [bob]\n")
    conf.chmod(0o600)
    s.stop()
    s.extra = ["--config", str(conf)]
    s.start()
    yield s
    s.stop()
    subprocess.run(["pkill", "-KILL", "-f", f"shim --dir {s.home}"],
                   check=False)


def audit(server, action):
    rows = server.request("GET", "/v1/audit",
                          params={"action": action}).json()["audit"]
    return [(r["actor"], r["action"], r["outcome"], r["detail"])
            for r in rows if r["action"] == action]


def test_a_user_cannot_sign_with_the_release_signer(signing, tmp_path):
    alice = signing.create_token("alice", "user")
    res = signing.cli("workflow", "run",
                      str(register_workflow(tmp_path, "release")),
                      token=alice)
    assert res.returncode == 1
    assert ("signer release is not granted to alice (role user)"
            in res.stderr), res.stderr
    refused = audit(signing, "model.sign_refused")
    assert len(refused) == 1
    assert refused[0][:3] == ("alice", "model.sign_refused", "denied")
    assert "signer release" in refused[0][3]
    # Nothing was run, registered or signed.
    assert signing.request("GET", "/v1/workflows").json()["workflows"] == []
    assert signing.request("GET", "/v1/models/corp").status_code == 404
    assert audit(signing, "model.sign") == []


def test_a_granted_user_signs_and_trusted_verification_passes(signing,
                                                              tmp_path):
    bob = signing.create_token("bob", "user")
    rid = int(signing.cli("workflow", "run",
                          str(register_workflow(tmp_path, "team")),
                          token=bob, check=True).stdout.strip())
    w = wait_run(signing, rid)
    assert w["state"] == "succeeded", json.dumps(w["steps"])
    reg = steps(w)["register"]
    assert "; signed by team, key " in reg["reason"]
    assert reg["reason"].endswith("(trusted)"), reg["reason"]
    signing.cli("model", "verify", "corp@prod", token=bob, check=True)
    signed = audit(signing, "model.sign")
    assert [(a, o) for a, _, o, _ in signed] == [("bob", "ok")]
    assert signed[0][3].startswith("signer team key ")
    # The same token may not borrow the release signer.
    res = signing.cli("workflow", "run",
                      str(register_workflow(tmp_path, "release", "r.yaml")),
                      token=bob)
    assert res.returncode == 1
    assert "signer release is not granted to bob" in res.stderr


def test_sign_key_with_a_path_is_a_spec_error(signing, tmp_path):
    path = write_workflow(tmp_path, prepare_train(
        "  - name: register\n    needs: [train]\n"
        "    register: {from: train, model: corp,\n"
        f"               sign_key: {tmp_path}/release}}\n"))
    res = signing.cli("workflow", "run", str(path))
    assert res.returncode != 0
    assert (f"{path}:13:26: steps[2].register.sign_key: the server no "
            "longer signs with a key file a spec names: use signer: NAME"
            in res.stderr), res.stderr


def test_a_signer_key_others_may_read_stops_the_server(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    key = tmp_path / "release"
    subprocess.run([KILN, "model", "keygen", "--out", str(key)], check=True,
                   capture_output=True)
    key.chmod(0o644)
    conf = tmp_path / "server.yaml"
    conf.write_text(f"signers:\n  - name: release\n    key-file: {key}\n"
                    "    roles: [admin]\n")
    conf.chmod(0o600)
    res = subprocess.run([KILN, "server", "--home", str(home), "--listen",
                          "127.0.0.1:0", "--config", str(conf)],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 1
    assert (f"signer release: {key} is a regular file owned by uid "
            f"{os.geteuid()} with "
            "mode 0644; a signer's key must be a file owned by the "
            "server's user" in res.stderr), res.stderr
    assert not (home / "server.url").exists()
