"""A single-node Slurm cluster of the inventory and health tests' own,
beside the one test_slurm.py uses: its own state directory, cluster name
and ports (scripts/slurm-up.sh's variables), so both can run at once. Its
node has features and a second, limited partition, and slurmd runs a
health-check program the tests rewrite (HEALTH_CHECK: exit 0 until a test
writes another)."""
import os
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import stop_at_end

REPO = Path(__file__).resolve().parents[2]
NODE = socket.gethostname().split(".")[0]
# KILN_SLURM_INV_DIR and KILN_SLURM_INV_CTLD_PORT (slurmd on the next
# port) move it: another test run's cluster beside this one's.
DIR = Path(os.environ.get("KILN_SLURM_INV_DIR", "/var/lib/kiln-slurm-inv"))
CTLD_PORT = int(os.environ.get("KILN_SLURM_INV_CTLD_PORT", "6917"))
HEALTH_CHECK = DIR / "healthcheck.sh"
# Seconds between slurmd's runs of HEALTH_CHECK.
HEALTH_INTERVAL = 2
SCRIPT_ENV = {
    "KILN_SLURM_DIR": str(DIR),
    "KILN_SLURM_CLUSTER": "kilninv",
    # Apart from the other clusters' (6817-6848 are taken by test_slurm.py,
    # the two-node cluster and benchmarks' clusters).
    "KILN_SLURM_CTLD_PORT": str(CTLD_PORT),
    "KILN_SLURM_SLURMD_PORT": str(CTLD_PORT + 1),
    "KILN_SLURM_NODE_EXTRA": "Feature=fast,ib",
    "KILN_SLURM_EXTRA_CONF":
        "PartitionName=small Nodes=ALL MaxTime=30 MaxNodes=1 "
        "MaxCPUsPerNode=4 State=UP\n"
        f"HealthCheckProgram={HEALTH_CHECK}\n"
        f"HealthCheckInterval={HEALTH_INTERVAL}\n"
        "HealthCheckNodeState=ANY",
}


def write_health_check(body):
    """What slurmd runs as HealthCheckProgram from now on (sh)."""
    tmp = HEALTH_CHECK.with_suffix(".tmp")
    tmp.write_text("#!/bin/sh\n" + body + "\n")
    tmp.chmod(0o755)
    tmp.rename(HEALTH_CHECK)


def slurm(env, *args):
    out = subprocess.run(list(args), env=env, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def node_state(env):
    """sinfo's "STATE|REASON" of the node (one line per partition)."""
    return slurm(env, "sinfo", "-h", "-N", "-n", NODE, "-o",
                 "%T|%E").splitlines()[0]


def other_slurm_daemons():
    """Whether a slurmctld or slurmd not of this cluster is running."""
    ours = set()
    for name in ("slurmctld", "slurmd"):
        try:
            ours.add(int((DIR / "run" / f"{name}.pid").read_text()))
        except (OSError, ValueError):
            pass
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in ours:
            continue
        try:
            comm = (proc / "comm").read_text().strip()
        except OSError:
            continue
        if comm in ("slurmctld", "slurmd"):
            return True
    return False


@pytest.fixture(scope="session")
def own_slurm():
    if os.geteuid() != 0:
        pytest.skip("slurmctld and slurmd need root to run here")
    DIR.mkdir(parents=True, exist_ok=True)
    write_health_check("exit 0")
    env = dict(os.environ, **SCRIPT_ENV)
    up = subprocess.run(["bash", str(REPO / "scripts/slurm-up.sh")], env=env,
                        capture_output=True, text=True, timeout=600)
    if up.returncode != 0:
        # Whatever of it started goes again.
        subprocess.run(["bash", str(REPO / "scripts/slurm-down.sh"),
                        "--keep-munge"], env=env, capture_output=True,
                       timeout=120)
    assert up.returncode == 0, up.stderr
    env["SLURM_CONF"] = up.stdout.strip().splitlines()[-1]
    yield env
    write_health_check("exit 0")
    subprocess.run(["scontrol", "update", f"NodeName={NODE}", "State=RESUME"],
                   env=env, capture_output=True, timeout=30)
    # munged serves every cluster on the machine: it stays while another
    # one (test_slurm.py's, another test run's) still runs.
    down = ["bash", str(REPO / "scripts/slurm-down.sh")]
    stop_at_end("the inventory tests' Slurm cluster", down + ["--keep-munge"],
                env=env, then=None if other_slurm_daemons() else down)
