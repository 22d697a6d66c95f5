"""A small character-level GPT, trained on CPU, that can be stopped and
resumed at any step boundary with bit-identical results.

It is kiln's example of a preemptible workload. It runs as one process, or
as N processes with DistributedDataParallel over gloo, reading the launcher's
RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (kiln sets them; so can a
shell). It follows kiln's checkpoint contract:

  * every --checkpoint-every steps it writes $KILN_CHECKPOINT_DIR/step-NNNNNN.tmp,
    fsyncs every file and directory, and renames it to step-NNNNNN: the
    rename is the commit, so a directory without ".tmp" is always complete;
  * rank 0 writes what all ranks share (model.pt, optimizer.pt, meta.json);
    every rank writes its own RNG and data-position state to rank-<r>/state.pt.
    After a barrier, the lowest rank whose files landed in a given .tmp
    directory renames it. With one directory shared by all ranks that is
    rank 0, once, after every rank has written; with one directory per task
    (kiln's local scratch) each task commits its own part, and the
    checkpoint counts as complete once every task has committed step-NNNNNN;
  * with $KILN_RESUME_FROM set it loads that checkpoint and continues;
  * on SIGTERM (kiln's default checkpoint.signal), SIGINT or SIGUSR1 all ranks
    agree to stop at the next step boundary, write a checkpoint there and
    exit with 128 + the signal number (143 for SIGTERM).

Determinism: every source of randomness is seeded and checkpointed (the torch
generator used by dropout, a separate generator that picks the data windows,
Python's random), the learning rate is a pure function of the step,
torch.use_deterministic_algorithms is on and the thread count is fixed, so an
interrupted and resumed run ends with the same bytes as an uninterrupted one.

When kiln's variables are absent it falls back to $KILN_TASK_DIR/checkpoints
and $KILN_TASK_DIR/outputs, or ./checkpoints and ./outputs, and starts fresh.
"""
import argparse
import datetime
import hashlib
import json
import math
import os
import pickle
import random
import re
import shutil
import signal
import sys
import time
from pathlib import Path

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
except ImportError as exc:
    sys.exit(f"train.py: PyTorch is not importable ({exc}); install Debian's "
             "python3-torch (scripts/install-deps.sh) and run /usr/bin/python3")

HERE = Path(__file__).resolve().parent
CHECKPOINT_NAME = re.compile(r"^step-(\d{6})$")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
EXIT_BAD_INPUT = 2

# Settings that change the arithmetic: a checkpoint only resumes a run whose
# settings are all equal, or the result would silently differ.
MATH_SETTINGS = ("steps", "batch", "context", "layers", "dim", "heads",
                 "dropout", "lr", "warmup", "seed", "threads")


class TrainError(Exception):
    """A problem with the run's input (flags, data, checkpoint)."""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=str(HERE / "data" / "gpl-3.txt"),
                   help="UTF-8 text to train on")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16,
                   help="sequences per step per rank")
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=20,
                   help="steps of linear warm-up before the cosine decay")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads; part of the determinism contract")
    p.add_argument("--checkpoint-every", type=int, default=50, metavar="STEPS")
    p.add_argument("--log-every", type=int, default=50, metavar="STEPS")
    p.add_argument("--resume", metavar="PATH|latest",
                   help="checkpoint to resume from when $KILN_RESUME_FROM is "
                        "unset; 'latest' takes the newest complete one in the "
                        "checkpoint directory (the newest all ranks have)")
    p.add_argument("--step-sleep", type=float, default=0.0, metavar="SECONDS",
                   help="sleep after each step, to stretch a run for demos "
                        "and eviction tests; it does not change the results")
    p.add_argument("--collective-timeout", type=float, default=300.0,
                   metavar="SECONDS",
                   help="how long a rank waits for the others before failing")
    args = p.parse_args(argv)
    for name in ("steps", "batch", "context", "layers", "dim", "heads",
                 "threads", "checkpoint_every", "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.dim % args.heads:
        p.error("--dim must be a multiple of --heads")
    if not 0.0 <= args.dropout < 1.0:
        p.error("--dropout must be in [0, 1)")
    if args.warmup < 0 or args.step_sleep < 0:
        p.error("--warmup and --step-sleep must not be negative")
    return args


# ---------------------------------------------------------------- the model

class Block(nn.Module):
    def __init__(self, dim, heads, context, dropout):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(),
                                 nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(dropout)
        # A plain attribute, not a buffer: a constant that DDP need not
        # broadcast (gloo cannot send bool tensors) and that stays out of the
        # state dict, so final_weights.bin holds only trained parameters.
        self.causal = torch.tril(torch.ones(context, context, dtype=torch.bool))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(~self.causal[:t, :t], float("-inf")).softmax(-1)
        y = (self.drop(att) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.mlp(self.ln2(x)))


class TinyGPT(nn.Module):
    def __init__(self, vocab, args):
        super().__init__()
        self.tok = nn.Embedding(vocab, args.dim)
        self.pos = nn.Embedding(args.context, args.dim)
        self.drop = nn.Dropout(args.dropout)
        self.blocks = nn.Sequential(*(Block(args.dim, args.heads, args.context,
                                            args.dropout)
                                      for _ in range(args.layers)))
        self.ln = nn.LayerNorm(args.dim)
        self.head = nn.Linear(args.dim, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.drop(self.tok(idx) + self.pos(pos))
        return self.head(self.ln(self.blocks(x)))


# ---------------------------------------------------------- ranks and data

def env_int(name, default):
    text = os.environ.get(name, str(default))
    try:
        return int(text)
    except ValueError:
        raise TrainError(f"{name}={text!r} is not a whole number") from None


class Ranks:
    """The process group, or its absence when the run has one task."""

    def __init__(self):
        self.rank = env_int("RANK", 0)
        self.world = env_int("WORLD_SIZE", 1)
        if not 0 <= self.rank < self.world:
            raise TrainError(f"RANK={self.rank} is outside WORLD_SIZE={self.world}")
        if self.world > 1:
            for name in ("MASTER_ADDR", "MASTER_PORT"):
                if name not in os.environ:
                    raise TrainError(f"WORLD_SIZE={self.world} needs {name}")

    def connect(self, timeout_s):
        """Meet the other ranks; returns once all of them have called it."""
        if self.world > 1:
            dist.init_process_group(
                "gloo", rank=self.rank, world_size=self.world,
                timeout=datetime.timedelta(seconds=timeout_s))
            dist.barrier()

    def barrier(self):
        if self.world > 1:
            dist.barrier()

    def max_int(self, value):
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def mean(self, value):
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t)
        return t.item() / self.world

    def gather(self, obj):
        if self.world == 1:
            return [obj]
        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def from_rank0(self, obj):
        if self.world == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self):
        if self.world > 1:
            dist.destroy_process_group()


class Corpus:
    """Characters of one text as token ids; 90 % to train, 10 % held out."""

    def __init__(self, path):
        try:
            raw = Path(path).read_bytes()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TrainError(f"--data {path}: {exc}") from exc
        self.sha256 = hashlib.sha256(raw).hexdigest()
        self.chars = sorted(set(text))
        index = {ch: i for i, ch in enumerate(self.chars)}
        ids = torch.tensor([index[ch] for ch in text], dtype=torch.long)
        split = int(len(ids) * 0.9)
        self.train, self.held_out = ids[:split], ids[split:]

    def check(self, context):
        if len(self.held_out) <= context + 1:
            raise TrainError(f"--data is too short for --context {context}")

    def windows(self, ids, starts, context):
        x = torch.stack([ids[s:s + context] for s in starts])
        y = torch.stack([ids[s + 1:s + 1 + context] for s in starts])
        return x, y

    def sample(self, batch, context, generator):
        starts = torch.randint(len(self.train) - context - 1, (batch,),
                               generator=generator).tolist()
        return self.windows(self.train, starts, context)


def learning_rate(args, step):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    span = max(1, args.steps - args.warmup)
    return args.lr * 0.5 * (1.0 + math.cos(math.pi * (step - args.warmup) / span))


# -------------------------------------------------------------- checkpoints

def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path, write):
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def complete_steps(ckpt_dir):
    if not ckpt_dir.is_dir():
        return []
    steps = []
    for entry in ckpt_dir.iterdir():
        m = CHECKPOINT_NAME.match(entry.name)
        if m and entry.is_dir():
            steps.append(int(m.group(1)))
    return sorted(steps)


class Checkpointer:
    def __init__(self, ckpt_dir, ranks, args, corpus):
        self.dir = ckpt_dir
        self.ranks = ranks
        self.meta = {
            "world_size": ranks.world,
            "settings": {k: getattr(args, k) for k in MATH_SETTINGS},
            "data_sha256": corpus.sha256,
            "vocab": "".join(corpus.chars),
            "torch": torch.__version__,
        }

    def save(self, step, model, optimizer, data_rng):
        name = f"step-{step:06d}"
        tmp, final = self.dir / (name + ".tmp"), self.dir / name
        rank_dir = tmp / f"rank-{self.ranks.rank}"
        rank_dir.mkdir(parents=True, exist_ok=True)
        state = {
            "step": step,
            "torch_rng": torch.get_rng_state(),
            "data_rng": data_rng.get_state(),
            # Nothing here draws from Python's random today; its state is
            # kept so that code added to the loop stays resumable.
            "python_rng": random.getstate(),
        }
        write_durably(rank_dir / "state.pt", lambda f: torch.save(state, f))
        fsync_dir(rank_dir)
        if self.ranks.rank == 0:
            write_durably(tmp / "model.pt",
                          lambda f: torch.save(model.state_dict(), f))
            write_durably(tmp / "optimizer.pt",
                          lambda f: torch.save(optimizer.state_dict(), f))
            meta = dict(self.meta, step=step)
            write_durably(tmp / "meta.json",
                          lambda f: f.write(json.dumps(meta, indent=1).encode()))
        fsync_dir(tmp)
        self.ranks.barrier()  # every rank has written its part
        writers = sorted(int(p.name[5:]) for p in tmp.glob("rank-*"))
        self.ranks.barrier()  # every rank has looked before anyone renames
        if writers[0] != self.ranks.rank:
            return
        if final.exists():
            # Left by an earlier run that went further than the checkpoint
            # this one resumed from: this run's state replaces it.
            shutil.rmtree(final)
        os.rename(tmp, final)
        fsync_dir(self.dir)
        print(f"rank {self.ranks.rank}: checkpoint {final} committed", flush=True)

    def resolve(self, requested):
        """The checkpoint directory to resume from, or None to start fresh."""
        if requested == "latest":
            common = set.intersection(
                *(set(s) for s in self.ranks.gather(complete_steps(self.dir))))
            return self.dir / f"step-{max(common):06d}" if common else None
        if requested:
            return Path(requested)
        stale = complete_steps(self.dir)
        if stale:
            raise TrainError(
                f"{self.dir} already holds step-{stale[-1]:06d} from an earlier "
                "run; resume with --resume latest (or $KILN_RESUME_FROM), or "
                "remove it")
        return None

    def load(self, path, model, optimizer, data_rng):
        """Load path into the live objects; return its step. Rank 0 reads the
        shared part and sends it to the others, so a task needs only its own
        rank-<r>/ besides what rank 0 has."""
        problem, state, shared = "", None, None
        try:
            state = torch.load(path / f"rank-{self.ranks.rank}" / "state.pt")
            if self.ranks.rank == 0:
                meta = json.loads((path / "meta.json").read_text())
                self.check_meta(path, meta)
                shared = (meta["step"], torch.load(path / "model.pt"),
                          torch.load(path / "optimizer.pt"))
        except (OSError, ValueError, KeyError, RuntimeError, EOFError,
                pickle.UnpicklingError, TrainError) as exc:
            problem = f"rank {self.ranks.rank}: cannot resume from {path}: {exc}"
        if self.ranks.max_int(1 if problem else 0):
            raise TrainError(problem or "another rank could not load the checkpoint")
        step, model_state, optimizer_state = self.ranks.from_rank0(shared)
        if state["step"] != step:
            raise TrainError(
                f"{path}/rank-{self.ranks.rank}/state.pt is at step "
                f"{state['step']} but meta.json says {step}")
        model.load_state_dict(model_state)
        optimizer.load_state_dict(optimizer_state)
        torch.set_rng_state(state["torch_rng"])
        data_rng.set_state(state["data_rng"])
        random.setstate(state["python_rng"])
        return step

    def check_meta(self, path, meta):
        if meta.get("torch") != self.meta["torch"]:
            print(f"train.py: warning: {path} was written by torch "
                  f"{meta.get('torch')}, this is {self.meta['torch']}: the "
                  "result may differ from an uninterrupted run's",
                  file=sys.stderr, flush=True)
        for key in ("world_size", "data_sha256", "vocab"):
            if meta.get(key) != self.meta[key]:
                raise TrainError(f"{path}/meta.json: {key} is {meta.get(key)!r}, "
                                 f"this run has {self.meta[key]!r}")
        for key, value in self.meta["settings"].items():
            theirs = meta.get("settings", {}).get(key)
            if theirs != value:
                raise TrainError(f"{path}/meta.json: --{key} was {theirs!r}, "
                                 f"this run has {value!r}")


# ------------------------------------------------------------------ outputs

def write_outputs(out_dir, model, metrics, model_card):
    """final_weights.bin: every float32 parameter, little-endian, in
    state-dict order; model.json: what it takes to rebuild the model around
    them (examples/serve/serve.py reads it). Each file is written under a
    temporary name and renamed, so a reader never sees a partial one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_durably(out_dir / "model.json.tmp",
                  lambda f: f.write(json.dumps(model_card, indent=1).encode() + b"\n"))
    os.rename(out_dir / "model.json.tmp", out_dir / "model.json")
    digest = hashlib.sha256()

    def weights(f):
        for tensor in model.state_dict().values():
            data = tensor.detach().contiguous().numpy().astype("<f4").tobytes()
            digest.update(data)
            f.write(data)

    write_durably(out_dir / "final_weights.bin.tmp", weights)
    os.rename(out_dir / "final_weights.bin.tmp", out_dir / "final_weights.bin")
    metrics["final_weights_sha256"] = digest.hexdigest()
    write_durably(out_dir / "metrics.json.tmp",
                  lambda f: f.write(json.dumps(metrics, indent=1).encode() + b"\n"))
    os.rename(out_dir / "metrics.json.tmp", out_dir / "metrics.json")
    fsync_dir(out_dir)


def held_out_loss(model, corpus, args, batches=8):
    """Loss on evenly spaced held-out windows: the same windows every run."""
    last = len(corpus.held_out) - args.context - 1
    n = batches * args.batch
    starts = [last * i // max(1, n - 1) for i in range(n)]
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, n, args.batch):
            x, y = corpus.windows(corpus.held_out, starts[i:i + args.batch],
                                  args.context)
            logits = model(x)
            total += F.cross_entropy(logits.view(-1, logits.shape[-1]),
                                     y.view(-1)).item()
    model.train()
    return total / batches


# --------------------------------------------------------------------- main

def default_dir(env_name, leaf):
    if os.environ.get(env_name):
        return Path(os.environ[env_name])
    if os.environ.get("KILN_TASK_DIR"):
        return Path(os.environ["KILN_TASK_DIR"]) / leaf
    return Path(leaf).resolve()


def train(args):
    stop = {"signum": 0}

    def on_signal(signum, _frame):
        stop["signum"] = signum

    for s in STOP_SIGNALS:
        signal.signal(s, on_signal)

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.threads)
    ranks = Ranks()
    ckpt_dir = default_dir("KILN_CHECKPOINT_DIR", "checkpoints")
    out_dir = default_dir("KILN_OUTPUT_DIR", "outputs")
    corpus = Corpus(args.data)
    corpus.check(args.context)

    # A .tmp directory is an interrupted write: never a checkpoint. Removed
    # before the rendezvous, so no rank is writing a new one yet.
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    for leftover in ckpt_dir.glob("step-*.tmp"):
        shutil.rmtree(leftover, ignore_errors=True)

    ranks.connect(args.collective_timeout)
    try:
        return run(args, ranks, corpus, ckpt_dir, out_dir, stop)
    finally:
        ranks.close()


def run(args, ranks, corpus, ckpt_dir, out_dir, stop):
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = TinyGPT(len(corpus.chars), args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr,
                                  weight_decay=0.01)
    torch.manual_seed(args.seed + 1 + ranks.rank)  # dropout differs per rank
    random.seed(args.seed + ranks.rank)
    data_rng = torch.Generator()
    data_rng.manual_seed(args.seed * 7919 + ranks.rank)

    ckpt = Checkpointer(ckpt_dir, ranks, args, corpus)
    problem, resume = "", None
    try:
        resume = ckpt.resolve(os.environ.get("KILN_RESUME_FROM") or args.resume)
    except TrainError as exc:
        problem = f"rank {ranks.rank}: {exc}"
    # All ranks must take the same path, or the collectives below would pair
    # up wrongly and hang.
    views = ranks.gather((problem, resume is not None))
    problems = [p for p, _ in views if p]
    if problems:
        raise TrainError(problems[0])
    if len({r for _, r in views}) > 1:
        raise TrainError("some ranks have a checkpoint to resume from and some "
                         "do not: " + ", ".join(f"rank {i}: {'yes' if r else 'no'}"
                                                for i, (_, r) in enumerate(views)))
    start = 0
    if resume is not None:
        start = ckpt.load(resume, model, optimizer, data_rng)
        if ranks.rank == 0:
            print(f"resumed from {resume} at step {start}", flush=True)
    net = DistributedDataParallel(model) if ranks.world > 1 else model
    if ranks.rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"tiny-gpt: {params} parameters, vocab {len(corpus.chars)}, "
              f"{ranks.world} rank(s), steps {start}..{args.steps}, "
              f"checkpoints in {ckpt_dir}", flush=True)

    began = time.monotonic()
    loss_value = float("nan")
    step = start
    while step < args.steps:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(args, step)
        x, y = corpus.sample(args.batch, args.context, data_rng)
        logits = net(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        loss_value = loss.item()
        if ranks.rank == 0 and (step % args.log_every == 0 or step == args.steps):
            print(f"step {step}/{args.steps} loss {loss_value:.4f} "
                  f"lr {learning_rate(args, step - 1):.5f}", flush=True)
        if step % args.checkpoint_every == 0:
            ckpt.save(step, model, optimizer, data_rng)
        if args.step_sleep:
            time.sleep(args.step_sleep)
        # Every rank stops at the same boundary, even when only one of them
        # was signalled or they were signalled a step apart.
        signum = ranks.max_int(stop["signum"])
        if signum and step < args.steps:
            if step % args.checkpoint_every:
                ckpt.save(step, model, optimizer, data_rng)
            if ranks.rank == 0:
                print(f"stopping on {signal.Signals(signum).name} at step {step}; "
                      f"exit {128 + signum}", flush=True)
            return 128 + signum
    seconds = time.monotonic() - began

    final_loss = ranks.mean(loss_value)
    if ranks.rank == 0:
        tokens = (step - start) * args.batch * args.context * ranks.world
        metrics = {
            "final_loss": final_loss,
            "held_out_loss": held_out_loss(model, corpus, args),
            "steps": step,
            "resumed_from_step": start,
            "world_size": ranks.world,
            "train_seconds": seconds,
            "tokens_per_s": tokens / seconds if seconds > 0 else None,
        }
        model_card = {
            "architecture": "tiny-gpt",
            "vocab": "".join(corpus.chars),
            **{k: getattr(args, k) for k in ("context", "dim", "layers", "heads")},
        }
        write_outputs(out_dir, model, metrics, model_card)
        print(f"done: loss {final_loss:.4f}, held-out {metrics['held_out_loss']:.4f}, "
              f"{metrics['tokens_per_s'] or 0:.0f} tokens/s, "
              f"weights sha256 {metrics['final_weights_sha256']} in {out_dir}",
              flush=True)
    return 0


def main(argv=None):
    args = parse_args(argv)
    try:
        return train(args)
    except TrainError as exc:
        print(f"train.py: {exc}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
