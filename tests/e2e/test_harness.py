"""The test harness itself: which processes count as a test's own, so
that cleaning up after one test never ends another's."""
import subprocess
import sys

from conftest import processes_under


def test_processes_under_matches_the_whole_path(tmp_path):
    root = tmp_path / "test_x1"
    (root / "task").mkdir(parents=True)
    (tmp_path / "test_x10").mkdir()
    # A process that waits, with one argument it does not look at.
    argv = [sys.executable, "-c", "import time; time.sleep(600)"]
    mine = subprocess.Popen(argv + [f"{root}/task"])
    by_env = subprocess.Popen(argv, env={"KILN_HOME": str(root)})
    other = subprocess.Popen(argv + [f"{tmp_path}/test_x10/task"],
                             env={"KILN_HOME": f"{tmp_path}/test_x10"})
    sibling = subprocess.Popen(argv + [f"{root}.log"])
    try:
        found = {pid for pid, _ in processes_under(root)}
        assert mine.pid in found and by_env.pid in found
        assert other.pid not in found and sibling.pid not in found
    finally:
        for p in (mine, by_env, other, sibling):
            p.kill()
            p.wait()
