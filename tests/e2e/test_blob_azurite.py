"""The blob stores and checkpoint sync against a real Azurite (the Azure
Storage emulator), started by this module on a free loopback port through
scripts/azurite.sh, which installs it from npm on first use. Everything
goes through `kiln blob` / `kiln ckpt`, the same code the server runs.

Every message kiln prints in these tests is collected, and the last test
checks that none contains the account key or a SAS signature."""
import base64
import hashlib
import hmac
import os
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import KILN

REPO = Path(__file__).resolve().parents[2]
ACCOUNT = "devstoreaccount1"
KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
       "K1SZFPTOtr/KBHBeksoGMGw==")
SECRETS = [KEY, KEY[:20]]
OUTPUTS = []


def clean_env():
    env = dict(os.environ)
    for k in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY",
              "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_ACCOUNT"):
        env.pop(k, None)
    return env


def key_env(endpoint):
    env = clean_env()
    env["AZURE_STORAGE_CONNECTION_STRING"] = (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};"
        f"AccountKey={KEY};BlobEndpoint={endpoint};")
    return env


def sas_env(token):
    env = clean_env()
    env["AZURE_STORAGE_SAS_TOKEN"] = token
    return env


def kiln(env, *args, ok=True):
    proc = subprocess.run([KILN, *args], env=env, capture_output=True,
                          text=True, timeout=300)
    OUTPUTS.append(proc.stdout + proc.stderr)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def service_sas(container, permissions):
    """A container SAS (sv 2023-11-03), signed here independently of kiln."""
    fields = [permissions, "", "2099-01-01T00:00:00Z",
              f"/blob/{ACCOUNT}/{container}", "", "", "", "2023-11-03", "c",
              "", "", "", "", "", "", ""]
    sig = base64.b64encode(hmac.new(base64.b64decode(KEY),
                                    "\n".join(fields).encode(),
                                    hashlib.sha256).digest()).decode()
    SECRETS.append(sig)
    SECRETS.append(urllib.parse.quote(sig, safe=""))
    return ("sv=2023-11-03&se=2099-01-01T00%3A00%3A00Z&sr=c&sp=" +
            permissions + "&sig=" + urllib.parse.quote(sig, safe=""))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def test_put_get_list_delete_range_conditional(azurite, tmp_path):
    env = key_env(azurite)
    url = f"azure://basic/pre"   # endpoint from the connection string
    src = tmp_path / "src"
    src.write_bytes(b"hello azurite\n")
    name = "dir/a b+c&d.txt"      # needs encoding, signed as sent
    out = kiln(env, "blob", "put", url, name, str(src)).stdout.split()
    assert out == [sha256(src), "14"]
    kiln(env, "blob", "put", url, "dir/zero", "/dev/null")
    listing = kiln(env, "blob", "ls", url, "dir/").stdout.splitlines()
    assert [line.split(None, 1) for line in listing] == [
        ["14", name], ["0", "dir/zero"]]
    assert kiln(env, "blob", "stat", url, name).stdout.strip() == "14"
    back = tmp_path / "back"
    assert kiln(env, "blob", "get", url, name, str(back)).stdout.strip() == sha256(src)
    assert back.read_bytes() == b"hello azurite\n"
    kiln(env, "blob", "get", url, name, str(back), "--offset", "6", "--length", "7")
    assert back.read_bytes() == b"azurite"
    kiln(env, "blob", "get", url, "dir/zero", str(back))
    assert back.read_bytes() == b""
    past = kiln(env, "blob", "get", url, name, str(back), "--offset", "100", ok=False)
    assert past.returncode == 1 and "past its end" in past.stderr
    # create-only: refused on an existing blob, accepted on a new one
    again = kiln(env, "blob", "put", url, name, str(src), "--create-only", ok=False)
    assert again.returncode == 1 and "already exists" in again.stderr
    kiln(env, "blob", "put", url, "dir/new", str(src), "--create-only")
    kiln(env, "blob", "rm", url, name)
    gone = kiln(env, "blob", "stat", url, name, ok=False)
    assert gone.returncode == 1 and "not found" in gone.stderr
    missing = kiln(env, "blob", "rm", url, name, ok=False)
    assert missing.returncode == 1
    # the path-style URL names the same blobs
    direct = kiln(env, "blob", "ls", f"{azurite}/basic/pre").stdout
    assert "dir/new" in direct and "dir/zero" in direct
    # the whole container, no prefix at all, signed with the key
    whole = kiln(env, "blob", "ls", f"{azurite}/basic").stdout
    assert "pre/dir/new" in whole


def test_block_upload_of_a_large_file(azurite, tmp_path):
    env = key_env(azurite)
    url = f"{azurite}/large"
    big = tmp_path / "big"
    with open(big, "wb") as f:
        for _ in range(70):
            f.write(os.urandom(1 << 20))
        f.write(b"tail-bytes")
    size = big.stat().st_size
    out = kiln(env, "blob", "put", url, "big.bin", str(big), "--parallel", "4",
               "--block-size", "4Mi").stdout.split()
    assert out == [sha256(big), str(size)]
    assert kiln(env, "blob", "stat", url, "big.bin").stdout.strip() == str(size)
    back = tmp_path / "back"
    assert kiln(env, "blob", "get", url, "big.bin", str(back)).stdout.strip() == sha256(big)
    # a range across a block boundary
    kiln(env, "blob", "get", url, "big.bin", str(back), "--offset",
         str((4 << 20) - 5), "--length", "10")
    with open(big, "rb") as f:
        f.seek((4 << 20) - 5)
        assert back.read_bytes() == f.read(10)


def test_sas_tokens(azurite, tmp_path):
    # the container must exist before a container SAS can write to it
    src = tmp_path / "src"
    src.write_bytes(b"sas bytes")
    kiln(key_env(azurite), "blob", "put", f"{azurite}/sased", "seed", str(src))
    url = f"{azurite}/sased/p"
    env = sas_env(service_sas("sased", "racwdl"))
    kiln(env, "blob", "put", url, "x/one", str(src))
    assert kiln(env, "blob", "ls", url).stdout.split() == ["9", "x/one"]
    back = tmp_path / "back"
    kiln(env, "blob", "get", url, "x/one", str(back), "--offset", "4")
    assert back.read_bytes() == b"bytes"
    kiln(env, "blob", "rm", url, "x/one")
    # a read-only SAS cannot write: a 403 with the service's code
    ro = sas_env(service_sas("sased", "rl"))
    denied = kiln(ro, "blob", "put", url, "x/two", str(src), ok=False)
    assert denied.returncode == 1
    assert "HTTP 403" in denied.stderr
    # a SAS carried in the store URL itself works too
    token = service_sas("sased", "rl")
    listed = kiln(clean_env(), "blob", "ls", f"{azurite}/sased?{token}")
    assert "seed" in listed.stdout


def test_wrong_key_is_reported_without_secrets(azurite, tmp_path):
    env = clean_env()
    wrong = base64.b64encode(b"k" * 64).decode()
    SECRETS.append(wrong)
    env["AZURE_STORAGE_KEY"] = wrong
    src = tmp_path / "src"
    src.write_bytes(b"x")
    denied = kiln(env, "blob", "put", f"{azurite}/wrongkey", "a", str(src), ok=False)
    assert denied.returncode == 1
    assert "HTTP 403 AuthorizationFailure" in denied.stderr or \
        "HTTP 403 AuthenticationFailed" in denied.stderr


def test_checkpoint_corrupted_in_the_store_is_skipped(azurite, tmp_path):
    env = key_env(azurite)
    url = f"{azurite}/ckpts/runs"
    local = tmp_path / "ckpt"
    for step, size in (("step-000010", 3 << 20), ("step-000020", 9 << 20)):
        d = local / step
        (d / "shards").mkdir(parents=True)
        (d / "model.bin").write_bytes(os.urandom(size))
        (d / "shards" / "rng.pt").write_bytes(step.encode())
        kiln(env, "ckpt", "upload", url, "42", str(d))
    listing = kiln(env, "ckpt", "ls", url, "42").stdout.split()
    assert listing == ["step-000020", "step-000010"]

    # flip one byte of the newest checkpoint's model in the store
    blob = "42/checkpoints/step-000020/model.bin"
    copy = tmp_path / "copy"
    kiln(env, "blob", "get", url, blob, str(copy))
    data = bytearray(copy.read_bytes())
    data[12345] ^= 0x01
    copy.write_bytes(bytes(data))
    kiln(env, "blob", "put", url, blob, str(copy))

    dest = tmp_path / "restore"
    restored = kiln(env, "ckpt", "restore", url, "42", str(dest))
    assert restored.stdout.strip() == "step-000010"
    assert "checkpoint step-000020 skipped: model.bin: sha256" in restored.stderr
    assert sha256(dest / "step-000010" / "model.bin") == \
        sha256(local / "step-000010" / "model.bin")
    assert (dest / "step-000010" / "shards" / "rng.pt").read_bytes() == b"step-000010"

    # an upload cut short (files, no manifest) is not a checkpoint
    kiln(env, "blob", "put", url, "42/checkpoints/step-000030/model.bin",
         str(copy))
    assert "step-000030  (incomplete)" in kiln(env, "ckpt", "ls", url, "42").stdout
    # redoing the corrupt one's upload is a no-op: its manifest exists
    kiln(env, "ckpt", "upload", url, "42", str(local / "step-000020"))
    # retention keeps the newest complete one
    assert kiln(env, "ckpt", "prune", url, "42", "--keep", "1").stdout.strip() == "1 deleted"
    assert kiln(env, "ckpt", "ls", url, "42").stdout.split() == [
        "step-000030", "(incomplete)", "step-000020"]


def test_upload_killed_midway_never_looks_complete(azurite, tmp_path):
    env = key_env(azurite)
    url = f"{azurite}/killed"
    ckpt = tmp_path / "step-000050"
    ckpt.mkdir()
    for i in range(8):
        (ckpt / f"shard-{i}.bin").write_bytes(os.urandom(24 << 20))
    proc = subprocess.Popen([KILN, "ckpt", "upload", url, "9", str(ckpt)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # kill -9 as soon as the first file is in the store
        deadline = time.monotonic() + 60
        while "shard-" not in kiln(env, "blob", "ls", url, "9/").stdout:
            assert proc.poll() is None, "the upload ended before it was killed"
            assert time.monotonic() < deadline, "no file reached the store"
            time.sleep(0.02)
        proc.kill()
    finally:
        proc.wait()
    assert kiln(env, "ckpt", "ls", url, "9").stdout.split() == [
        "step-000050", "(incomplete)"]
    nothing = kiln(env, "ckpt", "restore", url, "9", str(tmp_path / "r1"), ok=False)
    assert nothing.returncode == 1
    assert "step-000050 skipped: no MANIFEST.json" in nothing.stderr
    # the re-run redoes it; then it is complete and verifies
    kiln(env, "ckpt", "upload", url, "9", str(ckpt))
    assert kiln(env, "ckpt", "ls", url, "9").stdout.split() == ["step-000050"]
    restored = kiln(env, "ckpt", "restore", url, "9", str(tmp_path / "r2"))
    assert restored.stdout.strip() == "step-000050"
    assert sha256(tmp_path / "r2" / "step-000050" / "shard-7.bin") == \
        sha256(ckpt / "shard-7.bin")


def test_no_secret_in_any_output():
    """Runs last in this module: every message above, scanned."""
    assert OUTPUTS
    for text in OUTPUTS:
        for secret in SECRETS:
            assert secret not in text
