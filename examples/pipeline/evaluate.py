"""Evaluate step of examples/pipeline: the trained model (model.json and
final_weights.bin from the train step) scored on the held-out text from the
prepare step, which training never saw. Writes metrics.json with
held_out_loss (mean cross-entropy per character, in nats) for the
workflow's `when:` on the register step.

The model is rebuilt as examples/serve/serve.py rebuilds it for serving."""
import importlib.util
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
WINDOWS = 64


def load_serve():
    spec = importlib.util.spec_from_file_location(
        "tiny_gpt_serve", HERE.parent / "serve" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    inputs = Path(os.environ["KILN_INPUT_DIR"])
    out = Path(os.environ.get("KILN_OUTPUT_DIR", "outputs"))
    model = load_serve().Model(inputs / "train", "eval")
    text = (inputs / "prepare" / "heldout.txt").read_text(encoding="utf-8")
    ids = torch.tensor(model.encode(text), dtype=torch.long)
    if len(ids) <= model.context + 1:
        sys.exit("evaluate.py: the held-out text is shorter than the context")
    # Evenly spaced windows: the same ones every run.
    last = len(ids) - model.context - 1
    starts = [last * i // (WINDOWS - 1) for i in range(WINDOWS)]
    x = torch.stack([ids[s:s + model.context] for s in starts])
    y = torch.stack([ids[s + 1:s + 1 + model.context] for s in starts])
    with torch.no_grad():
        logits = model.net(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]),
                               y.view(-1)).item()
    out.mkdir(parents=True, exist_ok=True)
    metrics = {"held_out_loss": loss, "windows": WINDOWS,
               "characters": len(ids)}
    (out / "metrics.json").write_text(json.dumps(metrics) + "\n")
    print(f"held-out loss {loss:.4f} over {WINDOWS} windows", flush=True)


if __name__ == "__main__":
    main()
