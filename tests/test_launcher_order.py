"""The launcher names the cause of a failed run, not its consequences: a rank whose peers' connection
errors reach the parent first is still reported first, and the others are marked as consequences."""

from __future__ import annotations

import time

import pytest

from planner.execute.dist import is_consequence
from planner.execute.procs import run_forked


class _Failed(Exception):
    pass


def _body(rank: int):
    if rank == 0:
        time.sleep(0.9)  # the real cause is stamped and reaches the parent last
        raise ValueError("cannot reshape array of size 100 into shape (2,64)")
    time.sleep(0.3 * rank)  # 0.3 s apart: far more than fork skew on a loaded machine (50 ms was not)
    raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]")


def test_the_rank_that_raised_is_reported_before_connection_errors():
    with pytest.raises(_Failed) as info:
        run_forked(3, _body, timeout_s=20, what="the run", error=_Failed, secondary=is_consequence)
    text = str(info.value)
    assert text.startswith("rank 0 failed: ValueError: cannot reshape"), text
    assert "rank 1 failed (a consequence): RuntimeError" in text
    assert "rank 2 failed (a consequence): RuntimeError" in text
    assert text.index("rank 1") < text.index("rank 2")  # consequences in the order they happened


def _two_causes(rank: int):
    time.sleep(0.3 * (1 - rank))  # rank 1 raises first
    raise KeyError(f"cause on rank {rank}")


def test_of_two_primary_errors_the_earlier_one_is_the_cause():
    with pytest.raises(_Failed) as info:
        run_forked(2, _two_causes, timeout_s=20, what="the run", error=_Failed, secondary=is_consequence)
    assert str(info.value).startswith("rank 1 failed: KeyError"), str(info.value)


@pytest.mark.parametrize("text,expected", [
    ("RuntimeError: Connection closed by peer [127.0.0.1]:1234", True),
    ("RuntimeError: receiving 'x' from rank 0 failed or timed out after 60s: ...", True),
    ("ValueError: cannot reshape array", False),
])
def test_consequence_wording(text, expected):
    assert is_consequence(text) is expected
