"""Job arrays under the Slurm executor, against a real single-node Slurm
(scripts/slurm-up.sh): the array goes to Slurm whole, as one
`sbatch --array=...%P` whose throttle Slurm keeps; each element finds its
own attempt by SLURM_ARRAY_TASK_ID and writes its own logs; a failed
element is retried alone as a new one-element Slurm array with the same
index; one element (ID[K]) or the whole array is cancelled. The cluster is
left as found: no kiln jobs."""
import subprocess

from conftest import job_yaml, wait_for
from test_slurm import COMMIT, slurm_env, sserver  # noqa: F401 (fixtures)

PRINT_INDEX = ('echo index=$KILN_ARRAY_INDEX slurm=$SLURM_ARRAY_TASK_ID '
               'attempt=$KILN_ATTEMPT; ')


def batch_dirs(s, array_id):
    """The Slurm arrays kiln submitted for array_id, each named for the
    element and attempt that opened it."""
    return sorted((s.home / "tasks" / str(array_id)).glob("slurm-array-*"))


def slurm_job_id(batch):
    return int((batch / "sbatch.out").read_text().split(";")[0])


def submitted_job_id(s, array_id):
    """The Slurm array job id of array_id's one batch, once sbatch has
    answered."""
    wait_for(lambda: len(batch_dirs(s, array_id)) == 1 and
             (batch_dirs(s, array_id)[0] / "sbatch.out").exists() and
             (batch_dirs(s, array_id)[0] / "sbatch.out").read_text().strip(),
             timeout=60, what="the array's sbatch to answer")
    return slurm_job_id(batch_dirs(s, array_id)[0])


def squeue_rows(s, job, *flags):
    """squeue's "INDEX|STATE" lines for Slurm array job job."""
    return subprocess.run(["squeue", "-h", *flags, "-j", str(job), "-o",
                           "%K|%T"], env=s.env, capture_output=True,
                          text=True, timeout=30).stdout.split()


def elements(s, array_id):
    r = s.request("GET", "/v1/jobs", params={"array": array_id})
    assert r.status_code == 200, r.text
    return {e["array"]["index"]: e for e in r.json()["jobs"]}


def submit_array(s, name, command, array, **fields):
    s.names.append(name)
    return s.submit(job_yaml(name, ["/bin/sh", "-c", command], array=array,
                             **fields))


def submit_gated(s, name, gate, array, **fields):
    """An array whose elements print their index, then wait for gate: its
    id and its Slurm array job id."""
    array_id = submit_array(
        s, name, PRINT_INDEX + f'while [ ! -e {gate} ]; do sleep 0.2; done',
        array, **fields)
    return array_id, submitted_job_id(s, array_id)


def test_array_is_one_slurm_array_with_its_throttle(sserver, tmp_path):
    s = sserver
    gate = tmp_path / "go"
    array_id, job = submit_gated(s, "kiln-arr-one", gate,
                                 {"count": 5, "parallel": 2})
    # Slurm keeps the array's limit: two elements run, the rest wait in
    # one folded record "2-4%2".
    def folded():
        out = squeue_rows(s, job)
        return out if sum(l.endswith("RUNNING") for l in out) == 2 else None
    rows = wait_for(folded, timeout=60, what="two elements running")
    assert "2-4%2|PENDING" in rows
    gate.write_text("")
    for i in range(array_id, array_id + 5):
        s.wait_state(i, "succeeded", timeout=120)
    # One submission for the whole array; each element's log is its own.
    assert len(batch_dirs(s, array_id)) == 1
    for k, e in elements(s, array_id).items():
        assert s.logs(e["id"]).strip() == f"index={k} slurm={k} attempt=1"
        assert (batch_dirs(s, array_id)[0] / "out" /
                f"slurm-{job}_{k}.out").exists()


def test_retry_one_element_and_cancel_one_or_all(sserver, tmp_path):
    s = sserver
    gate = tmp_path / "go"
    # Element 1 fails its first attempt; 2 and 3 wait for a gate that
    # never opens; 0 ends at once.
    cmd = (PRINT_INDEX +
           '[ "$KILN_ARRAY_INDEX" = 1 ] && [ "$KILN_ATTEMPT" = 1 ] && exit 3; '
           f'[ "$KILN_ARRAY_INDEX" -ge 2 ] && '
           f'while [ ! -e {gate} ]; do sleep 0.2; done; exit 0')
    array_id = submit_array(s, "kiln-arr-retry", cmd, "0-3", retries=1)
    ids = {k: array_id + k for k in range(4)}
    s.wait_state(ids[0], "succeeded", timeout=120)
    one = s.wait_state(ids[1], "succeeded", timeout=120)
    assert one["attempts"] == 2
    # The retry went alone, as a Slurm array of one with the same index.
    dirs = {p.name: p for p in batch_dirs(s, array_id)}
    retry = dirs.pop(f"slurm-array-{ids[1]}-2")
    assert sorted(p.name for p in (retry / "e").iterdir()) == ["1"]
    (first,) = dirs.values()
    assert sorted(p.name for p in (first / "e").iterdir()) == [
        "0", "1", "2", "3"]
    assert s.logs(ids[1], attempt=2).strip() == "index=1 slurm=1 attempt=2"

    # One element by ID[K]: the other stays.
    s.wait_state(ids[2], "running")
    r = s.cli("cancel", f"{array_id}[2]")
    assert r.returncode == 0, r.stderr
    s.wait_state(ids[2], "cancelled", timeout=60)
    assert s.job(ids[3])["state"] == "running"
    # The whole array: what is left of it.
    r = s.cli("cancel", str(array_id))
    assert r.returncode == 0, r.stderr
    s.wait_state(ids[3], "cancelled", timeout=60)
    job = slurm_job_id(first)
    wait_for(lambda: not subprocess.run(
        ["squeue", "-h", "-j", str(job), "-t", "PD,R,CG"], env=s.env,
        capture_output=True, text=True, timeout=30).stdout.strip(),
        timeout=60, what="Slurm to end the array")


def test_an_element_cannot_touch_what_tells_the_server(sserver):
    s = sserver
    tasks = s.home / "tasks"
    # Each element tries to forge the array job id scancel gets, remap a
    # sibling's index, forge its own pointer, and read the map.
    cmd = (f'a={tasks}/$KILN_ARRAY_JOB_ID; '
           'for f in $a/slurm-array-*/sbatch.out $a/slurm-array-*/e/1 '
           '$a/$KILN_ATTEMPT.slurm-array; do '
           '(echo 1 > "$f") 2>/dev/null && echo "wrote $f"; done; '
           'cat $a/slurm-array-*/e/1 2>/dev/null && echo read; '
           'echo tried')
    array_id = submit_array(s, "kiln-arr-wall", cmd, "0-1")
    for i in (array_id, array_id + 1):
        s.wait_state(i, "succeeded", timeout=120)
        # kiln's home is hidden from the task: what it "wrote" went to
        # its own view of it, and there is no map to read.
        log = s.logs(i)
        assert log.endswith("tried\n") and "read" not in log
    (batch,) = batch_dirs(s, array_id)
    assert (batch / "sbatch.out").read_text().strip().isdigit()
    assert slurm_job_id(batch) > 1
    assert (batch / "e" / "1").read_text() == str(
        tasks / str(array_id + 1) / "1")
    for k in (0, 1):
        assert (tasks / str(array_id + k) / "1.slurm-array").read_text() == (
            f"{batch}\n{k}\n")


def test_evict_one_element_resumes_from_its_own_checkpoint(sserver,
                                                           tmp_path):
    s = sserver
    gates = tmp_path
    # Each element checkpoints its own index, then waits; resumed, it
    # prints what it had written.
    cmd = COMMIT + (
        'if [ -z "$KILN_RESUME_FROM" ]; then '
        '  trap "exit 143" USR1; '
        '  ck step-000001 "index $KILN_ARRAY_INDEX"; '
        f'  touch {gates}/ck-$KILN_ARRAY_INDEX; '
        f'  while [ ! -e {gates}/go ]; do sleep 0.1; done; '
        'else echo "resumed with $(cat $KILN_RESUME_FROM/state)"; fi')
    array_id = submit_array(s, "kiln-arr-evict", cmd, "0-1",
                            preemptible=True,
                            checkpoint={"signal": "SIGUSR1", "grace": "5s"})
    for k in (0, 1):
        wait_for(lambda: (gates / f"ck-{k}").exists(), timeout=60,
                 what=f"element {k}'s checkpoint")
        wait_for(lambda: (s.home / "blobs" / str(array_id + k) /
                          "checkpoints" / "step-000001" /
                          "MANIFEST.json").exists(),
                 timeout=60, what=f"element {k}'s checkpoint synced")
    r = s.cli("evict", f"{array_id}[1]")
    assert r.returncode == 0, r.stderr
    one = s.wait_state(array_id + 1, "succeeded", timeout=120)
    assert [x["state"] for x in one["attempts_detail"]] == [
        "preempted", "succeeded"]
    assert "resumed with index 1" in s.logs(array_id + 1, attempt=2)
    # The other element was not touched, and ends on its own.
    assert s.job(array_id)["state"] == "running"
    (gates / "go").write_text("")
    zero = s.wait_state(array_id, "succeeded", timeout=120)
    assert zero["attempts"] == 1
    assert (s.home / "tasks" / str(array_id) /
            f"slurm-array-{array_id + 1}-2").is_dir()


def test_an_element_slurm_forgot_ends_lost_while_the_others_run(sserver,
                                                               tmp_path):
    s = sserver
    gate = tmp_path / "go"
    array_id, job = submit_gated(s, "kiln-arr-forgot", gate,
                                 {"count": 3, "parallel": 1}, retries=1)

    def states():
        return dict(l.split("|") for l in squeue_rows(s, job, "-r"))
    wait_for(lambda: states() == {"0": "RUNNING", "1": "PENDING",
                                  "2": "PENDING"},
             timeout=60, what="element 0 running, 1 and 2 pending")
    # Behind kiln's back: Slurm takes a pending element out of its array
    # at once, and squeue no longer lists it.
    subprocess.run(["scancel", f"{job}_2"], env=s.env, check=True,
                   timeout=30)
    assert "2" not in states()
    first = wait_for(lambda: (lambda d: d[0] if d and d[0]["state"] not in
                              ("queued", "running") else None)(
        s.job(array_id + 2)["attempts_detail"]),
        timeout=60, what="element 2's first attempt to end")
    assert first["state"] == "failed"
    assert first["reason"] == (
        f"rank 0: lost: Slurm no longer knows job {job}_2, and no exit "
        "was recorded"), first["reason"]
    # The others were not touched, and element 2 is retried as any failed
    # element is; all finish on their own.
    assert s.job(array_id)["state"] == "running"
    assert s.job(array_id + 1)["state"] == "running"
    gate.write_text("")
    for k in (0, 1, 2):
        e = s.wait_state(array_id + k, "succeeded", timeout=120)
        attempt = 2 if k == 2 else 1
        assert e["attempts"] == attempt
        assert s.logs(array_id + k, attempt=attempt).strip() == (
            f"index={k} slurm={k} attempt={attempt}")
