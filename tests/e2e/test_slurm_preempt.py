"""Preemption that Slurm, not kiln, decides: on the namespace cluster
(PreemptType=preempt/partition_prio, PreemptMode=REQUEUE, a GraceTime on the
low partition), a job on the high-priority partition takes the nodes of a
running kiln job. The kiln task gets its checkpoint signal, the attempt ends
preempted with Slurm's word for it, and the job resumes from its
checkpoint as a new attempt without using a retry; the job Slurm requeued
is cancelled, as kiln runs the next attempt itself. A job whose checkpoint
signal is another than SIGTERM gets that signal and not Slurm's SIGTERM."""
import subprocess

import pytest

from conftest import job_yaml, wait_for
from slurm_cluster import (HIGH_PARTITION, slurm_job_id,  # noqa: F401
                           slurm_server, slurmb_env, squeue_ids)

COMMIT = ('ck() { d="$KILN_CHECKPOINT_DIR/$1"; mkdir -p "$d.tmp"; '
          'echo "$2" > "$d.tmp/state"; mv "$d.tmp" "$d"; }; ')


@pytest.mark.parametrize("signal,got,code", [
    ("SIGTERM", "got-term", 143), ("SIGUSR1", "got-usr1", 138)])
def test_slurm_preemption_resumes_from_the_checkpoint(tmp_path, slurmb_env,
                                                       signal, got, code):
    s = slurm_server(tmp_path, slurmb_env)
    gate = tmp_path / "gate"
    script = COMMIT + (
        'if [ -z "$KILN_RESUME_FROM" ]; then '
        "  trap 'echo got-term; exit 143' TERM; "
        "  trap 'echo got-usr1; exit 138' USR1; "
        f'  ck step-000001 "state 1"; touch {gate}; '
        '  while :; do sleep 0.1; done; '
        'else echo "resumed with $(cat $KILN_RESUME_FROM/state)"; fi')
    high = None
    try:
        jid = s.submit_named(job_yaml(
            "kiln-low", ["/bin/sh", "-c", script], tasks=2,
            preemptible=True, retries=0,
            checkpoint={"signal": signal, "grace": "10s"}), "kiln-low")
        wait_for(lambda: gate.exists(), what="the first checkpoint")
        wait_for(lambda: (s.home / "blobs" / str(jid) / "checkpoints" /
                          "step-000001" / "MANIFEST.json").exists(),
                 what="step-000001 synced")
        first = slurm_job_id(s, jid)
        # Both nodes, on the partition of the higher priority tier.
        r = subprocess.run(["sbatch", "--parsable", "-J", "kiln-high",
                            "-p", HIGH_PARTITION, "-N2", "-n2",
                            f"--output={tmp_path}/high.out",
                            "--wrap", "sleep 2"], env=slurmb_env,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        high = r.stdout.strip()
        job = s.wait_state(jid, ("succeeded", "failed"), timeout=120)
        a = job["attempts_detail"]
        assert [x["state"] for x in a] == ["preempted", "succeeded"], \
            [(x["state"], x["reason"]) for x in a]
        assert "by Slurm at" in a[0]["reason"], a[0]
        assert a[0]["exit_code"] == code
        for rank in (0, 1):
            first_log = s.logs(jid, task=rank, attempt=1)
            assert got in first_log, first_log
            if got != "got-term":
                assert "got-term" not in first_log, first_log
            assert "resumed with state 1" in s.logs(jid, task=rank,
                                                    attempt=2)
        assert job["retries_used"] == 0, job
        # The job Slurm requeued is gone; attempt 2 was a job of its own.
        assert slurm_job_id(s, jid, attempt=2) != first
        wait_for(lambda: first not in squeue_ids(slurmb_env, "kiln-low"),
                 what="the requeued Slurm job to be cancelled")
    finally:
        s.stop()
        if high:
            subprocess.run(["scancel", high], env=slurmb_env, timeout=30)


def test_the_tasks_user_cannot_forge_a_preemption(tmp_path, slurmb_env):
    # The task's user owns the attempt directory. While the task runs, that
    # user (from outside the task's sandbox, which hides the directory)
    # puts Slurm's answer there as a preemption would read, dated an hour
    # ahead to look fresh; then the task fails. Only the server's own
    # scontrol output counts: the failure stays a failure.
    s = slurm_server(tmp_path, slurmb_env)
    gate = tmp_path / "gate"
    task = ["/bin/sh", "-c",
            f"echo up; while [ ! -e {gate} ]; do sleep 0.1; done; exit 143"]
    try:
        jid = s.submit_named(job_yaml("kiln-forge", task, preemptible=True,
                                      retries=0), "kiln-forge")
        wait_for(lambda: "up" in s.logs(jid), what="the task to start")
        attempt = s.home / "tasks" / str(jid) / "1"
        forge = ('echo "JobId=1 JobState=RUNNING Reason=None '
                 'PreemptTime=2026-01-01T00:00:00" > forged && '
                 'touch -d "+1 hour" forged && mv -f forged slurm.state && '
                 'rm -f slurm.state.tmp')
        r = subprocess.run(["runuser", "-u", "kiln-task", "--", "sh", "-c",
                            forge], cwd=attempt, capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        gate.touch()
        job = s.wait_state(jid, ("succeeded", "failed"), timeout=60)
        a = job["attempts_detail"]
        assert [x["state"] for x in a] == ["failed"], job
        assert a[0]["exit_code"] == 143 and "Slurm" not in a[0]["reason"]
    finally:
        gate.touch()
        s.stop()
