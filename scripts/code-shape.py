#!/usr/bin/python3
"""
The numbers the code's shape is held to, for src/ (tests and fuzz
harnesses aside): C files over 1,500 lines, functions over 120 lines,
and how many functions take the server itself (struct server *) and
which files of src/server see its layout (include internal.h, directly
or through a header of theirs).

Functions are found by the project's style: a definition's opening
brace and closing brace stand alone at column 0.

Usage: scripts/code-shape.py [--list] [SRC_DIR]
"""
import os
import re
import sys

FILE_MAX = 1500
FUNC_MAX = 120

NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def c_files(top):
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in ("tests", "fuzz"))
        for f in sorted(files):
            if f.endswith(".c"):
                yield os.path.join(root, f)


INCLUDE = re.compile(r'#include "(?:server/)?([a-z_]+\.h)"')


def sees_layout(path, lines, seen=None):
    """Whether a file of src/server includes internal.h, itself or through
    a header of the folder."""
    seen = seen if seen is not None else set()
    folder = os.path.dirname(path)
    for line in lines:
        m = INCLUDE.match(line)
        if not m or m.group(1) in seen:
            continue
        seen.add(m.group(1))
        if m.group(1) == "internal.h":
            return True
        header = os.path.join(folder, m.group(1))
        if os.path.exists(header):
            with open(header, encoding="utf-8") as f:
                if sees_layout(header, f.read().split("\n"), seen):
                    return True
    return False


def functions(lines):
    """(name, first line, length, header text) of each definition."""
    start = None
    for i, line in enumerate(lines):
        if line.startswith("{") and start is None:
            j = i - 1
            while j > 0 and lines[j - 1].strip() and \
                    not lines[j - 1].rstrip().endswith((";", "}", "*/")) and \
                    not lines[j - 1].startswith(("#", " *", "/*")):
                j -= 1
            header = " ".join(l.strip() for l in lines[j:i])
            m = NAME.search(header)
            start = (m.group(1) if m else "?", j + 1, header)
        elif line.startswith("}") and start is not None:
            name, first, header = start
            yield name, first, i + 1 - first + 1, header
            start = None


def main():
    args = [a for a in sys.argv[1:] if a != "--list"]
    listing = "--list" in sys.argv
    top = args[0] if args else "src"
    big_files, long_funcs, server_funcs, internal = [], [], [], []
    for path in c_files(top):
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        if len(lines) - 1 > FILE_MAX:
            big_files.append((path, len(lines) - 1))
        if "/server/" in path and sees_layout(path, lines):
            internal.append(path)
        for name, first, length, header in functions(lines):
            if length > FUNC_MAX:
                long_funcs.append((path, first, name, length))
            if re.search(r"\bstruct server\s*\*", header):
                server_funcs.append((path, first, name))
    print(f"files over {FILE_MAX} lines: {len(big_files)}")
    print(f"functions over {FUNC_MAX} lines: {len(long_funcs)}")
    print(f"functions taking struct server *: {len(server_funcs)}")
    print(f"src/server files that see struct server (internal.h): {len(internal)}")
    if listing:
        for path, n in big_files:
            print(f"  file {path}: {n}")
        for path, first, name, length in long_funcs:
            print(f"  long {path}:{first} {name}: {length}")
        for path in internal:
            print(f"  internal.h {path}")
        by_file = {}
        for path, _, _ in server_funcs:
            by_file[path] = by_file.get(path, 0) + 1
        for path, n in sorted(by_file.items()):
            print(f"  struct server * {path}: {n}")


if __name__ == "__main__":
    main()
