"""The packing bound of bench/sim/bound.py (docs/scheduling.md, "How low
can it go") on instances small enough to solve by hand: glpsol must give
exactly the packing a person finds, tell the any-policy bound from the
every-share-placed one, and say when the shares alone cannot fit."""
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "sim"))
import bound  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("glpsol") is None,
                                reason="glpsol (glpk-utils) not installed")


def test_two_halves_and_two_larger_shares():
    """Two GPUs, shares of 500, 500, 600 and 600 milli: the best packing
    puts the two halves on one GPU and a 600 on the other (1,600 of
    2,000 placed). A 600 fits beside nothing, so placing every share
    needs three GPUs: infeasible."""
    shares = {500: 2, 600: 2}
    assert bound.solve(shares, 0, 2, False) == pytest.approx(20.0)
    assert bound.solve(shares, 0, 2, True) is None


def test_turning_a_share_away_can_place_more():
    """Two GPUs, two 810-milli shares and one whole-GPU pod. Any policy:
    the whole pod and one share (1,810 placed, 9.5 % idle). Every share
    placed: both GPUs hold an 810 and the whole pod is left out (1,620
    placed, 19 % idle)."""
    shares = {810: 2}
    assert bound.solve(shares, 1, 2, False) == pytest.approx(9.5)
    assert bound.solve(shares, 1, 2, True) == pytest.approx(19.0)


def test_fractional_pods_never_place_more_than_a_gpu_holds():
    """One GPU and three 400-milli shares: two fit (800), and the LP's
    fractional counts cannot fill the last 200 with a piece of a third."""
    assert bound.solve({400: 3}, 0, 1, False) == pytest.approx(20.0)


def test_composition_scales_the_pod_list_to_the_capacity(tmp_path):
    """A pod list of one half-GPU share, one whole GPU and a CPU-only pod
    asks for 1.5 GPUs; on 2 GPUs the pods arrived by 100 % are that mix
    scaled by 4/3."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                     "n0,8000,32768,1,T4\nn1,8000,32768,1,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                    "a,1000,1024,1,500\nb,1000,1024,1,1000\n"
                    "c,1000,1024,0,0\n")
    shares, whole, gpus = bound.composition(pods, nodes)
    assert gpus == 2
    assert shares == {500: pytest.approx(4 / 3)}
    assert whole == pytest.approx(4 / 3)
    # 4/3 whole GPUs and 4/3 halves (2/3 GPU) fill both GPUs exactly, up
    # to the six decimals the LP file holds.
    assert bound.solve(shares, whole, gpus, True) == pytest.approx(0.0,
                                                                   abs=1e-4)
