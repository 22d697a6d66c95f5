"""docs/python.md's examples run as written: its ```python blocks, in
order and in one namespace, from the repository's root, against a real
server and a real `kiln gateway`, with `kiln` on PATH. They train the
tiny GPT, register, sign and deploy it, and call it through the
gateway."""
import contextlib
import io
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from conftest import KILN, wait_for

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))


def python_blocks(text):
    return re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)


def test_python_md_examples_run(server, monkeypatch):
    blocks = python_blocks((REPO / "docs" / "python.md").read_text())
    assert len(blocks) >= 4
    monkeypatch.setenv("KILN_HOME", str(server.home))
    monkeypatch.delenv("KILN_SERVER", raising=False)
    monkeypatch.delenv("KILN_TOKEN", raising=False)
    monkeypatch.setenv("PATH", str(Path(KILN).parent) + os.pathsep +
                       os.environ["PATH"])
    monkeypatch.chdir(REPO)
    url_file = server.home / "gateway" / "gateway.url"
    with open(server.home / "gateway.log", "ab") as log:
        gateway = subprocess.Popen(
            [KILN, "gateway", "--listen", "127.0.0.1:0", "--refresh",
             "300ms"], stdout=log, stderr=log, env=dict(os.environ))
    try:
        wait_for(lambda: url_file.exists() and url_file.read_text().strip()
                 or gateway.poll() is not None, what="gateway.url")
        assert gateway.poll() is None
        namespace = {"__name__": "python_md"}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            for i, block in enumerate(blocks):
                exec(compile(block, f"docs/python.md block {i + 1}", "exec"),
                     namespace)
    finally:
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(timeout=10)
    printed = out.getvalue()
    assert "failed as expected: rank 0: exit code 3" in printed, printed
    assert namespace["job"].state == "succeeded"
    assert namespace["version"].version == 1
    reply = namespace["reply"]
    assert reply["object"] == "chat.completion"
    assert reply["usage"]["completion_tokens"] > 0
