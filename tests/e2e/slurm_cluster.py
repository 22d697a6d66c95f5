"""The two-node Slurm cluster of scripts/slurm-2node.sh that the multi-node,
GRES, accounting and preemption tests share: a cluster of its own (name,
namespaces, bridge, subnet, port and state directory differ from the one
tests/e2e/test_slurm.py starts), so both sets can run at once, with
accounting (slurmdbd on a MariaDB of its own). Brought up once per session
and torn down at its end: daemons, namespaces, bridge."""
import os
import subprocess
from pathlib import Path

import pytest

from conftest import Server, stop_at_end, wait_for

REPO = Path(__file__).resolve().parents[2]
# KILN_SLURMB_* move it (another test run's cluster beside this one's).
PREFIX = os.environ.get("KILN_SLURMB_NODES", "kb")
NET = os.environ.get("KILN_SLURMB_NET", "10.78.0")
CTLD_PORT = int(os.environ.get("KILN_SLURMB_CTLD_PORT", "6837"))
CLUSTER = {
    "KILN_SLURM2_NAME": os.environ.get("KILN_SLURMB_NAME", "kilnb"),
    "KILN_SLURM2_NODES": PREFIX,
    "KILN_SLURM2_NET": NET,
    "KILN_SLURM2_CTLD_PORT": str(CTLD_PORT),
    # Accounting: slurmdbd on the next port, its MariaDB on the one after.
    "KILN_SLURM2_ACCT_PORT": str(CTLD_PORT + 1),
    "KILN_SLURM2_DIR": os.environ.get("KILN_SLURMB_DIR",
                                      "/var/lib/kiln-slurm-b"),
}
NODES = (f"{PREFIX}1", f"{PREFIX}2")
PARTITION = PREFIX
HIGH_PARTITION = f"{PREFIX}-high"

def munge_alive():
    r = subprocess.run("munge -n | unmunge", shell=True,
                       capture_output=True, timeout=30)
    return r.returncode == 0


@pytest.fixture(scope="session")
def slurmb_env():
    if os.geteuid() != 0:
        pytest.skip("slurmctld and slurmd need root to run here")
    env = dict(os.environ, **CLUSTER)
    started_single = False
    if not munge_alive():
        # munged comes with the single-node cluster's script.
        up = subprocess.run(["bash", str(REPO / "scripts/slurm-up.sh")],
                            capture_output=True, text=True, timeout=600)
        assert up.returncode == 0, up.stderr
        started_single = True
    script = str(REPO / "scripts/slurm-2node.sh")
    up = subprocess.run(["bash", script, "up"], env=env, capture_output=True,
                        text=True, timeout=120)
    if up.returncode != 0:
        # Whatever of it started (MariaDB, slurmdbd, the bridge) goes again.
        subprocess.run(["bash", script, "down"], env=env, capture_output=True,
                       timeout=120)
    assert up.returncode == 0, up.stderr
    env["SLURM_CONF"] = up.stdout.strip().splitlines()[-1]
    yield env
    stop_at_end("the two-node Slurm cluster with accounting",
                ["bash", script, "down"], env=env)
    if started_single:
        down = ["bash", str(REPO / "scripts/slurm-down.sh")]
        stop_at_end("the Slurm cluster", down + ["--keep-munge"], then=down)


def squeue_ids(env, name):
    out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def scontrol_job(env, slurm_id):
    """`scontrol show job -d -o ID` as {KEY: VALUE}."""
    out = subprocess.run(["scontrol", "show", "job", "-d", "-o",
                          str(slurm_id)], env=env, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    fields = {}
    for word in out.stdout.split():
        key, _, value = word.partition("=")
        fields.setdefault(key, value)
    return fields


def slurm_job_id(server, jid, attempt=1):
    path = (server.home / "tasks" / str(jid) / f"{attempt}.slurm" /
            "sbatch.out")
    return wait_for(lambda: path.exists() and path.read_text().strip(),
                    what=f"job {jid}'s sbatch answer").split(";")[0]


class SlurmServer(Server):
    """A kiln server on the Slurm executor that cancels, when stopped,
    whatever Slurm jobs its tests submitted."""

    def __init__(self, home, env, **kw):
        super().__init__(home, env=env, **kw)
        self.names = []

    def submit_named(self, text, name):
        self.names.append(name)
        return self.submit(text)

    def stop(self):
        super().stop()
        for name in self.names:
            subprocess.run(["scancel", "-n", name], env=self.env, timeout=30)
        for name in self.names:
            wait_for(lambda: not squeue_ids(self.env, name), timeout=60,
                     what=f"Slurm job {name} to leave the queue")


def slurm_server(tmp_path, env, extra=(), gpus=None, slurm_nodes=False):
    """A started SlurmServer in tmp_path/home; tmp_path is opened to the
    unprivileged user a root server runs Slurm tasks as. slurm_nodes: no
    --gpus at all, so kiln's nodes are Slurm's."""
    tmp_path.mkdir(exist_ok=True)
    tmp_path.chmod(0o1777)
    kw = {"gpus": gpus} if gpus or slurm_nodes else {}
    s = SlurmServer(tmp_path / "home", env,
                    extra=["--executor", "slurm", *extra], **kw)
    s.home.mkdir()
    s.start()
    return s
