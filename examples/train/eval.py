"""Evaluate a trained tiny GPT: its loss on held-out text, written to
$KILN_OUTPUT_DIR/metrics.json as {"loss": ..., "tokens": ...}.

It is kiln's example of a re-validation job (docs/registry.md): `kiln model
revalidate NAME --alias prod --job eval.yaml --every 6h --max loss=1.8`
runs it with KILN_MODEL_DIR set to a verified copy of the version under
test (model.json and final_weights.bin, as train.py writes them) and
KILN_MODEL to NAME@VERSION.

By default the text is the last 10 % of the training text, the part
train.py holds out, scored on the same evenly spaced windows as train.py's
held_out_loss, so for the model a run wrote the two figures agree. With
--data FILE (fresh text) all of FILE is held out; characters the model's
vocabulary lacks are dropped.
"""
import argparse
import functools
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
SERVE_PY = HERE.parent / "serve" / "serve.py"
EXIT_BAD_INPUT = 2


def load_module(name, path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", default=os.environ.get("KILN_MODEL_DIR"),
                   help="model.json and final_weights.bin (default "
                        "$KILN_MODEL_DIR)")
    p.add_argument("--data", help="fresh UTF-8 text, all of it held out "
                                  "(default: the training text's held-out "
                                  "10 %%)")
    p.add_argument("--batch", type=int, default=16,
                   help="windows per batch (train.py's --batch, for the "
                        "same windows)")
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--out", default=os.environ.get("KILN_OUTPUT_DIR",
                                                   "outputs"),
                   help="where metrics.json goes (default $KILN_OUTPUT_DIR)")
    args = p.parse_args(argv)
    if not args.model_dir:
        p.error("--model-dir or $KILN_MODEL_DIR is needed")
    if args.batch < 1 or args.batches < 1:
        p.error("--batch and --batches must be at least 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
    except ImportError as exc:
        sys.exit(f"eval.py: PyTorch is not importable ({exc}); install "
                 "Debian's python3-torch (scripts/install-deps.sh)")
    serve = load_module("tiny_gpt_serve", SERVE_PY)
    train = serve.load_train_module()
    torch.set_num_threads(1)
    try:
        model = serve.Model(args.model_dir, os.environ.get("KILN_MODEL", ""))
        path = Path(args.data) if args.data else HERE / "data" / "gpl-3.txt"
        ids = model.encode(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, RuntimeError) as exc:
        print(f"eval.py: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not args.data:
        ids = ids[int(len(ids) * 0.9):]
    if len(ids) <= model.context + 1:
        print(f"eval.py: {path}: too short for context {model.context}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    held_out = torch.tensor(ids, dtype=torch.long)
    corpus = SimpleNamespace(held_out=held_out,
                             windows=functools.partial(train.Corpus.windows,
                                                       None))
    loss = train.held_out_loss(
        model.net, corpus,
        SimpleNamespace(batch=args.batch, context=model.context),
        batches=args.batches)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    metrics = {"loss": loss, "tokens": len(ids)}
    (out / "metrics.json.tmp").write_text(json.dumps(metrics) + "\n")
    os.rename(out / "metrics.json.tmp", out / "metrics.json")
    print(f"{model.name or args.model_dir}: held-out loss {loss:.4f} on "
          f"{len(ids)} characters", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
