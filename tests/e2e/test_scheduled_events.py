"""Azure Scheduled Events, replayed from a recorded document by a stub of
the metadata service on loopback (the real one exists only inside Azure)."""
import email.utils
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from conftest import Server, job_yaml, kill_processes_under, wait_for

RECORDED = json.loads((Path(__file__).parent / "fixtures" /
                       "scheduledevents-preempt.json").read_text())


class Imds:
    """Serves the recorded events (NotBefore moved to the future) and
    records acknowledgements with their arrival time."""

    def __init__(self, not_before_s):
        self.doc = json.loads(json.dumps(RECORDED))
        self.not_before = time.time() + not_before_s
        stamp = email.utils.formatdate(self.not_before, usegmt=True)
        for e in self.doc["Events"]:
            e["NotBefore"] = stamp
        self.acks = []
        self.gets = 0
        self.bad_requests = 0
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _ok(self):
                if self.headers.get("Metadata") != "true" or \
                        "api-version=2020-07-01" not in self.path:
                    imds.bad_requests += 1
                    self.send_response(400)
                    self.end_headers()
                    return False
                return True

            def do_GET(self):
                if not self._ok():
                    return
                imds.gets += 1
                body = json.dumps(imds.doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                if not self._ok():
                    return
                n = int(self.headers.get("Content-Length", 0))
                imds.acks.append((time.time(), json.loads(self.rfile.read(n))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = (f"http://127.0.0.1:{self.httpd.server_address[1]}"
                    "/metadata/scheduledevents?api-version=2020-07-01")
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def test_preempt_event_evicts_and_acks_before_not_before(tmp_path):
    imds = Imds(not_before_s=3600)
    imds.doc["Events"] = []  # nothing scheduled yet
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, extra=["--azure-events-url", imds.url,
                            "--azure-vm-name", "kiln-spot-vm"]).start()
    try:
        # On the eviction signal the task commits a last checkpoint.
        ck = ('d="$KILN_CHECKPOINT_DIR/step-000042"; mkdir -p "$d.tmp"; '
              'head -c 4194304 /dev/urandom > "$d.tmp/weights"; mv "$d.tmp" "$d"')
        spot = s.submit(job_yaml("spot", ["/bin/sh", "-c",
                                          f"trap '{ck}; echo checkpointed; exit 0' TERM; "
                                          "sleep 300 & wait"],
                                 preemptible=True, resources={"gpus": 1}))
        steady = s.submit(job_yaml("steady", ["/bin/sleep", "300"],
                                   resources={"gpus": 1}))
        s.wait_state(spot, "running")
        s.wait_state(steady, "running")
        wait_for(lambda: imds.gets >= 1, what="the first poll")
        # The platform schedules a spot eviction 20 s from now.
        fresh = Imds(not_before_s=20)
        imds.not_before = fresh.not_before
        imds.doc = fresh.doc
        fresh.close()
        job = wait_for(lambda: (lambda j: j if j["attempts_detail"] and
                                j["attempts_detail"][0]["state"] == "preempted"
                                else None)(s.job(spot)), what="the eviction")
        assert "Azure scheduled event Preempt" in job["attempts_detail"][0]["reason"]
        assert "checkpointed" in s.logs(spot, attempt=1)
        wait_for(lambda: imds.acks, what="the acknowledgement")
        when, body = imds.acks[0]
        # Acknowledged only once the last checkpoint was in the store.
        manifest = (home / "blobs" / str(spot) / "checkpoints" /
                    "step-000042" / "MANIFEST.json")
        assert manifest.exists() and manifest.stat().st_mtime <= when
        assert job["attempts_detail"][0]["checkpoint"] == "step-000042"
        assert body == {"StartRequests": [
            {"EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123"}]}
        assert when < imds.not_before
        # Only the Preempt for this VM is acknowledged, once.
        wait_for(lambda: imds.gets >= 3, what="more polls")
        assert len(imds.acks) == 1
        assert imds.bad_requests == 0
        node = s.request("GET", "/v1/nodes").json()["nodes"][0]
        assert node["state"] == "cordoned"
        assert s.job(spot)["state"] == "queued"
        assert s.job(steady)["state"] == "running"
    finally:
        s.stop()
        kill_processes_under(home)
        imds.close()


def test_event_for_another_vm_is_ignored(tmp_path):
    imds = Imds(not_before_s=60)
    for e in imds.doc["Events"]:
        e["Resources"] = ["some-other-vm"]
    home = tmp_path / "home"
    home.mkdir()
    s = Server(home, extra=["--azure-events-url", imds.url,
                            "--azure-vm-name", "kiln-spot-vm"]).start()
    try:
        jid = s.submit(job_yaml("spot", ["/bin/sleep", "300"], preemptible=True))
        s.wait_state(jid, "running")
        wait_for(lambda: imds.gets >= 3, what="three polls")
        assert s.job(jid)["state"] == "running"
        assert imds.acks == []
        assert s.request("GET", "/v1/nodes").json()["nodes"][0]["state"] == "ready"
        s.request("POST", f"/v1/jobs/{jid}/cancel")
    finally:
        s.stop()
        kill_processes_under(home)
        imds.close()
