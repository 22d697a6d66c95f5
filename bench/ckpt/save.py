#!/usr/bin/python3
"""bench/ckpt/save.py CKPT_DIR NAME: save a checkpoint as a trainer would.

Writes a 1 GiB checkpoint (16 files shard-NN.bin of 64 MiB: a counter in
the first 8 bytes of each, the rest from one os.urandom block made at the
start) into CKPT_DIR/NAME.tmp/, file by file, each closed before the next
is opened, then commits it by renaming NAME.tmp to NAME: the protocol
kiln's checkpoint sync watches for (docs/checkpoints.md). run.py runs it
as the task under `kiln shim --kube` and before its plain copies, and
imports write_checkpoint for its own one-off save.
"""
import os
import sys
from pathlib import Path

FILES = 16
FILE_MIB = 64


def write_checkpoint(ckpt_dir, name):
    """Write ckpt_dir/name (through name.tmp) and return its path."""
    tmp = ckpt_dir / f"{name}.tmp"
    tmp.mkdir(parents=True)
    block = os.urandom(FILE_MIB << 20)
    for i in range(FILES):
        # each file distinct: a counter in its first bytes
        with open(tmp / f"shard-{i:02d}.bin", "wb") as f:
            f.write(i.to_bytes(8, "little"))
            f.write(memoryview(block)[8:])
    final = ckpt_dir / name
    os.rename(tmp, final)
    return final


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: save.py CKPT_DIR NAME")
    write_checkpoint(Path(sys.argv[1]), sys.argv[2])


if __name__ == "__main__":
    main()
