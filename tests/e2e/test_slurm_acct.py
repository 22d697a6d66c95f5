"""Slurm's accounting as kiln's: on the namespace cluster with slurmdbd on
MariaDB, a kiln job run through Slurm is costed from the allocation's
Start and End as sacct reports them, so `kiln cost` of the job is sacct's
elapsed time times the GPUs of its AllocTRES, priced from the shipped
catalog, and its goodput counts the same seconds."""
import json
import subprocess

from conftest import KILN, job_yaml
from slurm_cluster import (slurm_job_id, slurm_server,  # noqa: F401
                           slurmb_env)

SKU = "Standard_ND96isr_H100_v5"


def sacct(env, slurm_id):
    r = subprocess.run(["sacct", "-n", "-P", "-X", "-j", slurm_id, "-o",
                        "State,ExitCode,ElapsedRaw,AllocTRES,Start,End"],
                       env=dict(env, SLURM_TIME_FORMAT="%s"),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    state, exit_code, elapsed, tres, start, end = \
        r.stdout.strip().split("|")
    tres = dict(kv.split("=") for kv in tres.split(","))
    return {"state": state, "exit": exit_code, "elapsed": int(elapsed),
            "gpus": int(tres.get("gres/gpu", 0)), "start": int(start),
            "end": int(end)}


def test_kiln_cost_of_a_slurm_job_is_sacct_priced(tmp_path, slurmb_env):
    s = slurm_server(tmp_path, slurmb_env, gpus="8xH100-80GB",
                     extra=["--node-sku", SKU, "--health-interval", "0"])
    try:
        jid = s.submit_named(job_yaml("kiln-acct", ["/bin/sleep", "2"],
                                      resources={"gpus": 1}), "kiln-acct")
        bad = s.submit_named(job_yaml("kiln-acct-bad",
                                      ["/bin/sh", "-c", "exit 3"]),
                             "kiln-acct-bad")
        job = s.wait_state(jid, ("succeeded", "failed"), timeout=90)
        assert job["state"] == "succeeded", job
        acct = sacct(slurmb_env, slurm_job_id(s, jid))
        assert acct["state"] == "COMPLETED" and acct["gpus"] == 1, acct
        # The task's times are the allocation's, as Slurm accounted them.
        task = job["attempts_detail"][0]["tasks"][0]
        assert task["started_at_ms"] == acct["start"] * 1000, (task, acct)
        assert task["ended_at_ms"] == acct["end"] * 1000, (task, acct)
        # So is the attempt's, and the goodput counts those seconds.
        attempt = job["attempts_detail"][0]
        assert attempt["started_at_ms"] == acct["start"] * 1000
        assert attempt["ended_at_ms"] == acct["end"] * 1000
        assert job["goodput"]["useful_task_seconds"] == acct["elapsed"]

        r = subprocess.run([KILN, "cost", "--by", "job", "-o", "json"],
                           env=dict(slurmb_env, KILN_SERVER=s.url,
                                    KILN_TOKEN=s.admin_token),
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        cost = json.loads(r.stdout)
        node = cost["nodes"][0]
        assert node["sku"] == SKU and node["priced"], node
        # The catalog's on-demand price per GPU of the size.
        assert abs(node["gpu_usd_hr"] - 98.32 / 8) < 1e-9, node
        row = next(x for x in cost["rows"] if x["key"] == str(jid))
        want = acct["gpus"] * acct["elapsed"] / 3600 * node["gpu_usd_hr"]
        assert abs(row["cost_usd"] - want) < 1e-9, (row, acct)

        # The exit code is the one Slurm accounted too.
        job = s.wait_state(bad, ("succeeded", "failed"), timeout=90)
        acct = sacct(slurmb_env, slurm_job_id(s, bad))
        assert acct["state"] == "FAILED" and acct["exit"] == "3:0", acct
        assert job["exit_code"] == 3, job
    finally:
        s.stop()
