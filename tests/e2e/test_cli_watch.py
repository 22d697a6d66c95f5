"""kiln ls -w and nodes -w: redrawn from the event stream, not polled."""
import os
import queue
import subprocess
import threading
import time

from conftest import KILN, job_yaml, wait_for


class Watcher:
    """A `kiln ... -w` process whose output lines are collected."""

    def __init__(self, server, *args):
        env = dict(os.environ, KILN_HOME=str(server.home))
        self.proc = subprocess.Popen([KILN, *args], env=env,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def drawings(self):
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        # Drawings after the first are a blank line apart.
        return "\n".join(self.seen).split("\n\n")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def test_ls_watch_redraws_on_job_events(server):
    w = Watcher(server, "ls", "-w")
    try:
        # Whether the job lands before the watch starts or after, it is
        # drawn: the stream resumes from before the first drawing.
        jid = server.submit(job_yaml("watched", ["/bin/sleep", "30"]))
        wait_for(lambda: any("running" in d and "watched" in d
                             for d in w.drawings()), what="a running row")
        # Nothing happens: nothing is drawn (the CLI does not poll).
        n = len(w.drawings())
        time.sleep(1.0)
        assert len(w.drawings()) == n
        server.cli("cancel", str(jid), check=True)
        wait_for(lambda: "cancelled" in w.drawings()[-1],
                 what="the row cancelled")
    finally:
        w.stop()


def test_nodes_watch_redraws_on_cordon(server):
    w = Watcher(server, "nodes", "-w")
    try:
        wait_for(lambda: any("ready" in d for d in w.drawings()),
                 what="the first drawing")
        name = server.request("GET", "/v1/nodes").json()["nodes"][0]["name"]
        server.cli("cordon", name, check=True)
        wait_for(lambda: "cordoned" in w.drawings()[-1],
                 what="the node cordoned")
    finally:
        w.stop()


def test_deployments_watch_and_name(server, tmp_path):
    """Without deployments the watch still draws (nothing) and stays up;
    -o name on one that does not exist is the API's 404."""
    w = Watcher(server, "deployments", "-w")
    try:
        jid = server.submit(job_yaml("nudge", ["/bin/true"]))
        server.wait_state(jid, "succeeded")
        assert w.proc.poll() is None
    finally:
        w.stop()
    r = server.cli("deployments", "nope", "-o", "name")
    assert r.returncode == 1 and "no deployment named nope" in r.stderr
