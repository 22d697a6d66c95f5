"""Prepare step of examples/pipeline: split the training text into the part
the model learns from (train.txt) and a held-out part it never sees
(heldout.txt), both in KILN_OUTPUT_DIR, so later steps get them by store URL
and sha256. The split is on a line boundary near 90 %, so a rerun gives the
same bytes."""
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "train" / "data" / "gpl-3.txt"


def main():
    out = Path(os.environ.get("KILN_OUTPUT_DIR", "outputs"))
    out.mkdir(parents=True, exist_ok=True)
    text = SOURCE.read_text(encoding="utf-8")
    cut = text.rfind("\n", 0, int(len(text) * 0.9)) + 1
    if cut <= 0:
        sys.exit(f"prepare.py: {SOURCE} has no line break to split at")
    (out / "train.txt").write_text(text[:cut], encoding="utf-8")
    (out / "heldout.txt").write_text(text[cut:], encoding="utf-8")
    print(f"train.txt: {cut} characters, heldout.txt: {len(text) - cut}",
          flush=True)


if __name__ == "__main__":
    main()
