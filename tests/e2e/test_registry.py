"""The model registry end to end: `kiln model` against a real server with
the default file:// store, and one push/sign/verify against Azurite.
Blob digests, signatures and alias history are checked against what the
test computes itself (hashlib), not against kiln's own figures."""
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import KILN, Server, azurite_env


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def make_model(root, big=2_500_000):
    """Three files: one over the 1 MiB part size, one empty, one nested."""
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"layers": 2}\n')
    (root / "empty").write_bytes(b"")
    (root / "weights").mkdir()
    (root / "weights" / "w.bin").write_bytes(os.urandom(big))
    return root


def push(server, model_dir, name, *extra):
    res = server.cli("model", "push", str(model_dir), "--name", name, "-o",
                     "json", *extra, check=True)
    return json.loads(res.stdout)


def audit_count(server, action):
    r = server.request("GET", "/v1/audit",
                       params={"action": action, "limit": 10000})
    assert r.status_code == 200, r.text
    return len(r.json()["audit"])


def keygen(server, path, trusted):
    res = server.cli("model", "keygen", "--out", str(path), check=True)
    key_id = res.stdout.strip()
    assert (path.stat().st_mode & 0o777) == 0o600
    if trusted:
        d = server.home / "keys" / "trusted"
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(f"{path}.pub", d / f"{path.name}.pub")
    return key_id


def test_push_uploads_only_missing_blobs(server, tmp_path):
    model = make_model(tmp_path / "m")
    first = push(server, model, "gpt")
    assert (first["version"], first["files"], first["uploaded"]) == (1, 3, 3)
    assert audit_count(server, "model.blob.put") == 3

    # Unchanged files: nothing is sent, the server records no upload.
    second = push(server, model, "gpt")
    assert (second["version"], second["uploaded"]) == (2, 0)
    assert audit_count(server, "model.blob.put") == 3

    (model / "config.json").write_text('{"layers": 3}\n')
    (model / "extra.txt").write_text("new\n")
    (model / "empty").unlink()
    third = push(server, model, "gpt")
    assert (third["version"], third["uploaded"]) == (3, 2)

    diff = json.loads(server.cli("model", "diff", "gpt@1", "gpt@3", "-o",
                                 "json", check=True).stdout)
    assert diff == {"added": ["extra.txt"], "removed": ["empty"],
                    "changed": ["config.json"]}

    shown = json.loads(server.cli("model", "show", "gpt@2", "-o", "json",
                                  check=True).stdout)
    files = shown["manifest"]["files"]
    assert [f["path"] for f in files] == ["config.json", "empty",
                                          "weights/w.bin"]
    w = model / "weights" / "w.bin"
    assert files[2] == {"path": "weights/w.bin", "sha256": sha256(w),
                        "size": w.stat().st_size}
    # Blobs by digest, and the manifest's canonical copy, in the store.
    blobs = server.home / "blobs"
    assert sha256(blobs / "sha256" / sha256(w)) == sha256(w)
    stored = (blobs / "models" / "gpt" / "2.json").read_text()
    assert stored == json.dumps(shown["manifest"], sort_keys=True,
                                separators=(",", ":"))

    listed = json.loads(server.cli("model", "ls", "-o", "json",
                                   check=True).stdout)["models"]
    assert [(m["name"], m["versions"], m["latest"]) for m in listed] == \
        [("gpt", 3, 3)]
    table = server.cli("model", "show", "gpt", check=True).stdout
    assert "VERSION" in table and "\n3 " in table


def test_uploads_and_versions_are_checked(server, tmp_path):
    other = hashlib.sha256(b"something else").hexdigest()
    r = server.request("POST", f"/v1/model-blobs/{other}",
                       params={"upload": "t1", "offset": 0, "final": 1},
                       data=b"abc")
    assert r.status_code == 400, r.text
    assert "hash to " + hashlib.sha256(b"abc").hexdigest() in r.text
    assert not (server.home / "blobs" / "sha256" / other).exists()
    r = server.request("POST", f"/v1/model-blobs/{other}",
                       params={"offset": 0, "final": 1}, data=b"abc")
    assert r.status_code == 400 and r.json()["error"]["field"] == "upload"

    # Two uploads of one blob at once stage apart; the later finds it
    # stored. A part out of order is refused.
    data = b"x" * 1000
    digest = hashlib.sha256(data).hexdigest()

    def part(upload, offset, body, final=0):
        return server.request("POST", f"/v1/model-blobs/{digest}",
                              params={"upload": upload, "offset": offset,
                                      "final": final}, data=body)
    assert part("a", 0, data[:600]).status_code == 200
    assert part("b", 0, data[:300]).status_code == 200
    assert part("a", 700, data[600:]).status_code == 409
    assert part("b", 300, data[300:], final=1).json()["existed"] is False
    assert part("a", 0, data).status_code == 200
    assert part("a", 1000, b"", final=1).json()["existed"] is True
    assert (server.home / "blobs" / "sha256" / digest).read_bytes() == data

    files = [{"path": "a", "sha256": other, "size": 14}]
    r = server.request("POST", "/v1/models/gpt/versions", json={"files": files})
    assert r.status_code == 409, r.text
    assert "file a: blob sha256/" + other + " is not in the store" in r.text
    r = server.request("POST", "/v1/models/gpt/versions",
                       json={"files": [{"path": "../a", "sha256": other,
                                        "size": 1}]})
    assert r.status_code == 400 and "files[0]" in r.text

    # Every call needs a token; reads are audited like writes.
    assert server.request("GET", "/v1/models", token=None).status_code == 401
    viewer = server.create_token("viewer1", "viewer")
    r = server.request("POST", f"/v1/model-blobs/{other}", token=viewer,
                       params={"offset": 0, "final": 1}, data=b"abc")
    assert r.status_code == 403
    before = audit_count(server, "model.list")
    assert server.request("GET", "/v1/models", token=viewer).status_code == 200
    assert audit_count(server, "model.list") == before + 1


def test_signatures_gate_verify_and_pull(server, tmp_path):
    model = make_model(tmp_path / "m")
    push(server, model, "gpt")
    trusted = tmp_path / "ops"
    untrusted = tmp_path / "stranger"
    trusted_id = keygen(server, trusted, True)
    keygen(server, untrusted, False)

    res = server.cli("model", "verify", "gpt@1")
    assert res.returncode == 1 and "gpt@1 is unsigned" in res.stderr
    res = server.cli("model", "pull", "gpt@1", str(tmp_path / "out"))
    assert res.returncode == 1 and "unsigned" in res.stderr
    assert not (tmp_path / "out").exists()

    server.cli("model", "sign", "gpt@1", "--key", str(untrusted), check=True)
    res = server.cli("model", "verify", "gpt@1")
    assert res.returncode == 1
    assert "signed only by keys the server does not trust" in res.stderr
    res = server.cli("model", "pull", "gpt@1", str(tmp_path / "out"))
    assert res.returncode == 1 and not (tmp_path / "out").exists()

    # A signature that is not the key's over this manifest is not stored.
    pub = json.loads(server.cli("model", "show", "gpt@1", "-o", "json",
                                check=True).stdout)["signatures"][0]
    r = server.request("POST", "/v1/models/gpt@1/signatures",
                       json={"public_key": pub["public_key"],
                             "signature": "A" * 86 + "=="})
    assert r.status_code == 400 and "does not verify" in r.text

    server.cli("model", "sign", "gpt@1", "--key", str(trusted), check=True)
    res = server.cli("model", "sign", "gpt@1", "--key", str(trusted))
    assert res.returncode == 1 and "has already signed gpt@1" in res.stderr
    shown = json.loads(server.cli("model", "show", "gpt@1", "-o", "json",
                                  check=True).stdout)
    assert shown["trusted"] is True
    assert {s["key_id"]: s["trusted"] for s in shown["signatures"]}[trusted_id]
    res = server.cli("model", "verify", "gpt@1", check=True)
    assert "gpt@1 verified: 3 files" in res.stdout
    server.cli("model", "pull", "gpt@1", str(tmp_path / "out"), check=True)
    for f in ("config.json", "empty", "weights/w.bin"):
        assert sha256(tmp_path / "out" / f) == sha256(model / f)

    # One flipped byte in one blob: named by verify, and pull refuses.
    blob = server.home / "blobs" / "sha256" / sha256(model / "weights/w.bin")
    data = bytearray(blob.read_bytes())
    data[1000] ^= 0x01
    blob.write_bytes(bytes(data))
    res = server.cli("model", "verify", "gpt@1")
    assert res.returncode == 1
    assert "file weights/w.bin does not match its digest" in res.stderr
    assert "config.json" not in res.stderr
    res = server.cli("model", "pull", "gpt@1", str(tmp_path / "again"))
    assert res.returncode == 1 and "file weights/w.bin" in res.stderr
    assert not (tmp_path / "again").exists()
    assert audit_count(server, "model.verify") == 4
    assert audit_count(server, "model.pull") == 4


def test_promote_and_rollback_history_is_exact(server, tmp_path):
    for i in range(3):
        d = tmp_path / f"v{i}"
        d.mkdir()
        (d / "w").write_text(f"weights {i}\n")
        push(server, d, "gpt", *(("--alias", "staging") if i == 0 else ()))
    for v in (1, 2, 3):
        server.cli("model", "promote", f"gpt@{v}", "prod", check=True)
    for _ in range(2):
        server.cli("model", "rollback", "gpt", "prod", check=True)
    res = server.cli("model", "rollback", "gpt", "prod")
    assert res.returncode == 1 and "no earlier version" in res.stderr

    history = json.loads(server.cli("model", "aliases", "gpt", "-o", "json",
                                    check=True).stdout)
    assert [(h["alias"], h["action"], h["from"], h["version"], h["by"])
            for h in history] == [
        ("staging", "promote", None, 1, "admin"),
        ("prod", "promote", None, 1, "admin"),
        ("prod", "promote", 1, 2, "admin"),
        ("prod", "promote", 2, 3, "admin"),
        ("prod", "rollback", 3, 2, "admin"),
        ("prod", "rollback", 2, 1, "admin"),
    ]
    times = [h["time_ms"] for h in history]
    assert times == sorted(times)
    shown = json.loads(server.cli("model", "show", "gpt@prod", "-o", "json",
                                  check=True).stdout)
    assert shown["version"] == 1 and shown["aliases"] == ["prod", "staging"]
    assert server.cli("model", "show", "gpt@nope").returncode == 1

    user = server.create_token("user1", "user")
    res = server.cli("model", "promote", "gpt@3", "prod", token=user)
    assert res.returncode == 1 and "needs operator" in res.stderr
    # push --alias moves an alias as promote does: a user may set a new
    # one and move its own, never one another token set.
    d = tmp_path / "mine"
    d.mkdir()
    (d / "w").write_text("user's weights\n")
    res = server.cli("model", "push", str(d), "--name", "gpt", "--alias",
                     "prod", token=user)
    assert res.returncode == 1 and "needs operator" in res.stderr, res.stderr
    shown = json.loads(server.cli("model", "show", "gpt@prod", "-o", "json",
                                  check=True).stdout)
    assert shown["version"] == 1
    for _ in range(2):
        res = server.cli("model", "push", str(d), "--name", "gpt",
                         "--alias", "mine", token=user)
        assert res.returncode == 0, res.stderr


def test_push_sign_verify_on_azurite(azurite, tmp_path):
    env = azurite_env(azurite)
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, extra=["--blob-store", f"{azurite}/registry"], env=env)
    s.start()
    try:
        model = make_model(tmp_path / "m", big=1_500_000)
        assert push(s, model, "gpt")["uploaded"] == 3
        assert push(s, model, "gpt")["uploaded"] == 0
        keygen(s, tmp_path / "k", True)
        s.cli("model", "sign", "gpt@2", "--key", str(tmp_path / "k"),
              check=True)

        def cli(*args):
            e = dict(env, KILN_HOME=str(home))
            return subprocess.run([KILN, *args], env=e, capture_output=True,
                                  text=True, timeout=60)
        res = cli("model", "verify", "gpt@2")
        assert res.returncode == 0, res.stderr
        res = cli("model", "pull", "gpt@2", str(tmp_path / "out"))
        assert res.returncode == 0, res.stderr
        assert sha256(tmp_path / "out/weights/w.bin") == \
            sha256(model / "weights/w.bin")
        # The manifest's copy sits in the container, create-only.
        res = cli("blob", "get", f"{azurite}/registry", "models/gpt/2.json",
                  str(tmp_path / "2.json"))
        assert res.returncode == 0, res.stderr
        assert json.loads((tmp_path / "2.json").read_text())["version"] == 2
    finally:
        s.stop()


def test_deploy_takes_only_trusted_intact_versions(server, tmp_path):
    model = make_model(tmp_path / "m", big=300_000)
    push(server, model, "gpt")
    spec = ("kind: Deployment\nname: {name}\nmodel: {model}\n"
            "command: [x]\nreplicas: 0\n")

    def deploy(name, ref):
        return server.request("POST", "/v1/deployments",
                              data=spec.format(name=name, model=ref))

    r = deploy("chat", "gpt@1")
    assert r.status_code == 403 and "gpt@1 is unsigned" in r.text
    keygen(server, tmp_path / "stranger", False)
    server.cli("model", "sign", "gpt@1", "--key", str(tmp_path / "stranger"),
               check=True)
    r = deploy("chat", "gpt@1")
    assert r.status_code == 403 and "does not trust" in r.text
    keygen(server, tmp_path / "ops", True)
    server.cli("model", "sign", "gpt@1", "--key", str(tmp_path / "ops"),
               check=True)

    blob = server.home / "blobs" / "sha256" / sha256(model / "weights/w.bin")
    good = blob.read_bytes()
    blob.write_bytes(good[:10] + bytes([good[10] ^ 1]) + good[11:])
    r = deploy("chat", "gpt@1")
    assert r.status_code == 403, r.text
    assert "file weights/w.bin does not match its digest" in r.text
    blob.write_bytes(good)

    server.cli("model", "promote", "gpt@1", "prod", check=True)
    r = deploy("chat", "gpt@prod")
    assert r.status_code == 201, r.text
    model_dir = Path(r.json()["deployment"]["model_dir"])
    for f in ("config.json", "empty", "weights/w.bin"):
        assert sha256(model_dir / f) == sha256(model / f)
    # The copy replicas read is checked again on the next use.
    (model_dir / "config.json").write_text("tampered\n")
    r = deploy("chat2", "gpt@1")
    assert r.status_code == 403 and "file config.json of its copy" in r.text
