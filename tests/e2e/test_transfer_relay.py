"""A server whose blob store is Azure sends each part of an upload on to
the store as it lands, as a block of a staging blob, and at the commit
makes the blocks the blob with one block list and a copy inside the
service: the store has the bytes soon after the last part, not a whole
copy later. A store that fails midway costs the relay, not the upload:
the commit copies the staging file instead. Against a real Azurite,
reached through a TCP relay that counts the bytes it passes and can
refuse connections."""
import hashlib
import os
import subprocess
import uuid

import pytest

from conftest import (AZURITE_KEY, KILN, GateRelay, azurite_env,
                      store_server)

MiB = 1 << 20
GAVE_UP = "the whole blob is copied at its commit"
NOT_TAKEN = "copying the blob instead"


@pytest.fixture
def relay(azurite):
    r = GateRelay(azurite)
    yield r
    r.close()


@pytest.fixture
def relayed(relay, tmp_path):
    """A server whose blob store is Azurite behind the relay: (the
    server, its store's URL, the environment that reaches the store)."""
    env = azurite_env(relay.endpoint)
    s, store = store_server(tmp_path, relay.endpoint, env)
    yield s, store, env
    s.stop()


def put_part(server, upload, at, size, body):
    r = server.request("POST", f"/v1/model-uploads/{upload}",
                       params={"offset": at, "size": size}, data=body)
    assert r.status_code == 200, r.text
    return r.json()


def commit(server, upload, digest):
    return server.request("POST", f"/v1/model-uploads/{upload}/commit",
                          json={"digest": digest})


def blob(env, store, *args):
    res = subprocess.run([KILN, "blob", *args[:1], store, *args[1:]],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def assert_relayed(server):
    """No part fell back to a copy of the whole blob."""
    log = server.log.read_text()
    assert GAVE_UP not in log and NOT_TAKEN not in log, log


def check_stored(env, store, data, tmp_path):
    """The store holds data under its digest, and no staging blob."""
    digest = hashlib.sha256(data).hexdigest()
    got = tmp_path / "got"
    out = blob(env, store, "get", f"sha256/{digest}", str(got))
    assert out.split()[0] == digest
    assert got.read_bytes() == data
    assert blob(env, store, "ls", "staging/") == ""


def test_parts_reach_the_store_before_the_commit(relay, relayed, tmp_path):
    s, store, env = relayed
    data = os.urandom(6 * MiB + 5)
    digest = hashlib.sha256(data).hexdigest()
    # Out of order, as parallel senders deliver them.
    for at in (MiB, 0, 3 * MiB, 2 * MiB, 5 * MiB, 4 * MiB, 6 * MiB):
        put_part(s, "up", at, len(data), data[at:at + MiB])
    # Every byte already went on to the store, before any commit.
    assert relay.sent >= len(data)
    before = relay.sent
    r = commit(s, "up", digest)
    assert r.status_code == 201, r.text
    assert r.json()["existed"] is False
    # The commit sent a block list and a copy, not the bytes again.
    assert relay.sent - before < MiB
    check_stored(env, store, data, tmp_path)
    assert_relayed(s)


def test_a_blob_the_store_holds_is_answered_as_existing(relayed, tmp_path):
    s, store, env = relayed
    data = os.urandom(2 * MiB + 11)
    digest = hashlib.sha256(data).hexdigest()
    for upload, existed in (("first", False), ("second", True)):
        for at in range(0, len(data), MiB):
            put_part(s, upload, at, len(data), data[at:at + MiB])
        r = commit(s, upload, digest)
        assert r.status_code == 201, r.text
        assert r.json()["existed"] is existed
    # The second's staging blob went too: the copy was refused
    # (create-only), the blob kept the first's bytes.
    check_stored(env, store, data, tmp_path)
    assert_relayed(s)


def test_an_empty_blob_is_stored_whole(relayed, tmp_path):
    s, store, env = relayed
    digest = hashlib.sha256(b"").hexdigest()
    put_part(s, "empty", 0, 0, b"")
    r = commit(s, "empty", digest)
    assert r.status_code == 201, r.text
    check_stored(env, store, b"", tmp_path)
    assert_relayed(s)


def test_a_store_that_fails_midway_gets_a_copy_at_the_commit(
        relay, relayed, tmp_path):
    s, store, env = relayed
    data = os.urandom(3 * MiB + 3)
    digest = hashlib.sha256(data).hexdigest()
    put_part(s, "flaky", 0, len(data), data[:MiB])
    # The store goes away for one part: its retries run out, the
    # relay ends, the part is still held.
    relay.cut()
    held = put_part(s, "flaky", MiB, len(data), data[MiB:2 * MiB])
    assert held["received"] == 2 * MiB
    relay.refuse = False
    put_part(s, "flaky", 2 * MiB, len(data), data[2 * MiB:])
    assert GAVE_UP in s.log.read_text()
    r = commit(s, "flaky", digest)
    assert r.status_code == 201, r.text
    assert r.json()["existed"] is False
    check_stored(env, store, data, tmp_path)


def test_a_store_reached_by_sas_relays_and_copies(azurite, tmp_path):
    """With a SAS, the copy names its source with the SAS (the service
    reads the staging blob by it); the SAS never reaches the log."""
    from test_blob_azurite import sas_env, service_sas

    container = "relaysas" + uuid.uuid4().hex[:10]
    # The container exists first: a SAS cannot create it.
    key_env = azurite_env(azurite)
    seed = tmp_path / "seed"
    seed.write_bytes(b"x")
    blob(key_env, f"{azurite}/{container}", "put", "seed", str(seed))
    sas = service_sas(container, "racwdl")
    env = sas_env(sas)
    s, store = store_server(tmp_path, azurite, env, container)
    try:
        data = os.urandom(2 * MiB + 1)
        digest = hashlib.sha256(data).hexdigest()
        for at in range(0, len(data), MiB):
            put_part(s, "sas", at, len(data), data[at:at + MiB])
        r = commit(s, "sas", digest)
        assert r.status_code == 201, r.text
        check_stored(env, store, data, tmp_path)
        assert_relayed(s)
        log = s.log.read_text()
        assert "sig=" not in log and AZURITE_KEY[:20] not in log
    finally:
        s.stop()
