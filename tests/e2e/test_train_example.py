"""The example training workload (examples/train/train.py) on its own, without
a kiln server: it is deterministic, it resumes from a checkpoint with the
same final bytes as an uninterrupted run (1 task, and 2 tasks over gloo with
a shared or a per-task checkpoint directory), and a checkpoint directory
without ".tmp" is always complete, even after kill -9.

The runs use a tiny configuration so that the file takes well under a
minute; --step-sleep stretches the runs that get signalled so that they are
still going when the signal comes (it does not change the arithmetic)."""
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import KILN, wait_for

PYTHON = "/usr/bin/python3"
TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train" / "train.py"
SPEC = TRAIN.parent / "tiny-gpt.yaml"
STEPS = 40
EVERY = 10
FAST = ["--steps", str(STEPS), "--checkpoint-every", str(EVERY),
        "--log-every", "100", "--batch", "4", "--context", "32",
        "--dim", "32", "--layers", "1", "--heads", "2"]
SLOW = ["--step-sleep", "0.1"]
NAME = re.compile(r"^step-(\d{6})(\.tmp)?$")

try:
    import torch
except ImportError as exc:  # the test fails below, never skips
    torch = None
    TORCH_ERROR = str(exc)


@pytest.fixture(autouse=True)
def need_torch():
    if torch is None:
        pytest.fail(f"PyTorch is missing ({TORCH_ERROR}): run "
                    "scripts/install-deps.sh, which installs python3-torch")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run:
    """One training run: world_size processes, each with its own log."""

    def __init__(self, workdir, world=1, args=(), ckpt_dirs=None, resume=None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.out = self.workdir / "outputs"
        self.ckpt_dirs = ckpt_dirs or [self.workdir / "checkpoints"] * world
        self.procs, self.logs = [], []
        port = free_port()
        base = {k: v for k, v in os.environ.items()
                if not k.startswith("KILN_") and k not in
                ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
        for rank in range(world):
            env = dict(base, RANK=str(rank), WORLD_SIZE=str(world),
                       LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(port),
                       KILN_CHECKPOINT_DIR=str(self.ckpt_dirs[rank]),
                       KILN_OUTPUT_DIR=str(self.out))
            if resume:
                env["KILN_RESUME_FROM"] = str(resume[rank])
            log = self.workdir / f"rank-{rank}.log"
            self.logs.append(log)
            with open(log, "ab") as f:
                self.procs.append(subprocess.Popen(
                    [PYTHON, str(TRAIN), *FAST, *args], env=env,
                    cwd=self.workdir, stdout=f, stderr=subprocess.STDOUT))

    def log_text(self):
        return "\n".join(f"--- {p.name}\n{p.read_text()}" for p in self.logs)

    def wait(self, timeout=60):
        deadline = time.monotonic() + timeout
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"training did not finish in {timeout}s\n{self.log_text()}")
        return codes

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def signal(self, signum, ranks=None):
        for rank, p in enumerate(self.procs):
            if ranks is None or rank in ranks:
                p.send_signal(signum)

    def weights_sha256(self):
        data = (self.out / "final_weights.bin").read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        metrics = json.loads((self.out / "metrics.json").read_text())
        assert metrics["final_weights_sha256"] == digest
        assert metrics["steps"] == STEPS
        assert metrics["world_size"] == len(self.procs)
        return digest


@pytest.fixture
def runs():
    """Every run a test starts; none outlives it."""
    started = []

    def start(*args, **kw):
        run = Run(*args, **kw)
        started.append(run)
        return run

    yield start
    for run in started:
        run.kill()


def finish(run, expect=0):
    codes = run.wait()
    assert codes == [expect] * len(codes), run.log_text()
    return run


def complete_steps(ckpt_dir):
    return sorted(int(m.group(1)) for m in map(NAME.match, os.listdir(ckpt_dir))
                  if m and not m.group(2))


def check_complete(path, world, rank_dirs):
    """A committed checkpoint holds every file, and every file loads."""
    step = int(NAME.match(path.name).group(1))
    if 0 in rank_dirs:
        meta = json.loads((path / "meta.json").read_text())
        assert meta["step"] == step and meta["world_size"] == world
        model = torch.load(path / "model.pt")
        assert all(t.dtype == torch.float32 for t in model.values())
        assert torch.load(path / "optimizer.pt")["state"]
    for rank in rank_dirs:
        assert torch.load(path / f"rank-{rank}" / "state.pt")["step"] == step
    assert sorted(p.name for p in path.glob("rank-*")) == \
        [f"rank-{r}" for r in rank_dirs]


def wait_for_checkpoint(run, ckpt_dir, step):
    wait_for(lambda: (ckpt_dir / f"step-{step:06d}").is_dir()
             or any(p.poll() is not None for p in run.procs),
             timeout=40, what=f"{ckpt_dir}/step-{step:06d}")
    assert all(p.poll() is None for p in run.procs), run.log_text()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The final weights' sha256 of uninterrupted runs, by world size."""
    base = tmp_path_factory.mktemp("reference")
    shas = {}
    for world in (1, 2):
        run = Run(base / f"world-{world}", world)
        try:
            shas[world] = finish(run).weights_sha256()
        finally:
            run.kill()
    return shas


def test_same_run_twice_gives_the_same_weights(runs, tmp_path, reference):
    again = finish(runs(tmp_path / "again")).weights_sha256()
    assert again == reference[1]
    # The comparison can tell runs apart: another seed, other weights.
    other = finish(runs(tmp_path / "seed", args=["--seed", "99"])).weights_sha256()
    assert other != reference[1]
    # Two ranks see twice the data: their result differs from one rank's.
    assert reference[2] != reference[1]


def test_sigterm_then_resume_matches_uninterrupted(runs, tmp_path, reference):
    ckpt = tmp_path / "checkpoints"
    first = runs(tmp_path / "first", args=SLOW, ckpt_dirs=[ckpt])
    wait_for_checkpoint(first, ckpt, EVERY)
    first.signal(signal.SIGTERM)
    finish(first, expect=128 + signal.SIGTERM)
    stopped = complete_steps(ckpt)[-1]
    assert EVERY <= stopped < STEPS, first.log_text()
    assert f"stopping on SIGTERM at step {stopped}" in first.log_text()
    check_complete(ckpt / f"step-{stopped:06d}", 1, [0])

    second = finish(runs(tmp_path / "second", ckpt_dirs=[ckpt],
                         resume=[ckpt / f"step-{stopped:06d}"]))
    assert second.weights_sha256() == reference[1]
    metrics = json.loads((second.out / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == stopped


@pytest.mark.parametrize("layout", ["shared", "per-task"])
def test_two_ranks_sigterm_then_resume_matches_uninterrupted(
        runs, tmp_path, reference, layout):
    if layout == "shared":
        dirs = [tmp_path / "checkpoints"] * 2
        signalled = None  # both ranks, as kiln does
    else:
        dirs = [tmp_path / "task-0", tmp_path / "task-1"]
        signalled = [1]  # only one: the ranks still agree on where to stop
    first = runs(tmp_path / "first", 2, args=SLOW, ckpt_dirs=dirs)
    wait_for_checkpoint(first, dirs[1], EVERY)
    first.signal(signal.SIGTERM, signalled)
    finish(first, expect=128 + signal.SIGTERM)

    steps = [complete_steps(d) for d in dirs]
    assert steps[0] == steps[1], first.log_text()
    stopped = steps[0][-1]
    assert EVERY <= stopped < STEPS, first.log_text()
    if layout == "shared":
        check_complete(dirs[0] / f"step-{stopped:06d}", 2, [0, 1])
    else:
        check_complete(dirs[0] / f"step-{stopped:06d}", 2, [0])
        check_complete(dirs[1] / f"step-{stopped:06d}", 2, [1])

    second = finish(runs(tmp_path / "second", 2, ckpt_dirs=dirs,
                         resume=[d / f"step-{stopped:06d}" for d in dirs]))
    assert second.weights_sha256() == reference[2]


def test_no_partial_checkpoint_is_ever_visible(runs, tmp_path, reference):
    ckpt = tmp_path / "checkpoints"
    # A little sleep per step lets the listing catch .tmp directories too.
    run = runs(tmp_path / "watched", 2, args=["--step-sleep", "0.03"],
               ckpt_dirs=[ckpt] * 2)
    checked = set()
    deadline = time.monotonic() + 60
    while run.procs[0].poll() is None and time.monotonic() < deadline:
        for name in os.listdir(ckpt) if ckpt.is_dir() else []:
            m = NAME.match(name)
            assert m, f"unexpected entry {name} in {ckpt}"
            if not m.group(2) and name not in checked:
                check_complete(ckpt / name, 2, [0, 1])
                checked.add(name)
        time.sleep(0.005)
    finish(run)
    assert checked == {f"step-{s:06d}" for s in range(EVERY, STEPS + 1, EVERY)}

    # kill -9 in the middle: what is committed is whole, a leftover .tmp is
    # ignored and cleared, and resuming from the newest gives the same bytes.
    ckpt = tmp_path / "killed-checkpoints"
    killed = runs(tmp_path / "killed", 1, args=SLOW, ckpt_dirs=[ckpt])
    wait_for_checkpoint(killed, ckpt, EVERY)
    (ckpt / "step-000011.tmp" / "rank-0").mkdir(parents=True)  # as if cut short
    killed.signal(signal.SIGKILL)
    killed.wait()
    for step in complete_steps(ckpt):
        check_complete(ckpt / f"step-{step:06d}", 1, [0])
    resumed = finish(runs(tmp_path / "resumed", 1, ckpt_dirs=[ckpt],
                          args=["--resume", "latest"]))
    assert resumed.weights_sha256() == reference[1]
    assert not list(ckpt.glob("*.tmp"))


def test_bad_resumes_fail_with_a_clear_message(runs, tmp_path):
    ckpt = tmp_path / "checkpoints"
    finish(runs(tmp_path / "first", ckpt_dirs=[ckpt], args=["--steps", "10"]))

    fresh = finish(runs(tmp_path / "fresh", ckpt_dirs=[ckpt]), expect=2)
    assert f"{ckpt} already holds step-000010 from an earlier run" in fresh.log_text()

    changed = finish(runs(tmp_path / "changed", ckpt_dirs=[ckpt],
                          resume=[ckpt / "step-000010"]),
                     expect=2)
    assert "meta.json: --steps was 10, this run has 40" in changed.log_text()

    missing = finish(runs(tmp_path / "missing", ckpt_dirs=[ckpt],
                          resume=[ckpt / "step-000099"]), expect=2)
    assert f"cannot resume from {ckpt}/step-000099" in missing.log_text()


def test_spec_is_valid_and_preemptible():
    r = subprocess.run([KILN, "validate", "-o", "json", str(SPEC)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)
    assert spec["command"][:2] == [PYTHON, "train.py"]
    assert spec["tasks"] == 2 and spec["preemptible"] is True
    assert spec["checkpoint"]["signal"] == "SIGTERM"
    assert spec["checkpoint"]["keep"] == 3


def test_eval_scores_the_held_out_loss_train_reported(runs, tmp_path):
    """examples/train/eval.py on a run's outputs gives the held-out loss
    train.py wrote, on the same windows; and the eval job spec is valid."""
    run = finish(runs(tmp_path / "trained"))
    want = json.loads((run.out / "metrics.json").read_text())["held_out_loss"]
    out = tmp_path / "eval-out"
    r = subprocess.run([PYTHON, str(TRAIN.parent / "eval.py"), "--batch", "4"],
                       env=dict(os.environ, KILN_MODEL_DIR=str(run.out),
                                KILN_OUTPUT_DIR=str(out),
                                KILN_MODEL="tiny-gpt@1"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads((out / "metrics.json").read_text())
    assert got["loss"] == pytest.approx(want, rel=1e-5)
    assert "tiny-gpt@1: held-out loss" in r.stdout
    fresh = tmp_path / "fresh.txt"
    fresh.write_text("x" * 10)
    r = subprocess.run([PYTHON, str(TRAIN.parent / "eval.py"), "--data",
                        str(fresh), "--model-dir", str(run.out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "too short" in r.stderr
    r = subprocess.run([KILN, "validate", str(TRAIN.parent / "eval.yaml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
