"""minipar.course.bench.median_time: the one timing loop of the lessons and benchmarks, alone and on ranks."""

import time

from minipar import launch
from minipar.course.bench import median_time


def test_median_of_the_timed_runs_only():
    calls = []
    t = median_time(lambda: calls.append(time.sleep(0.001)), repeats=3, warmup=2)
    assert len(calls) == 5 and 0.001 <= t < 1.0


def slow_rank_one():
    """Rank 1's runs take 50 ms, rank 0's none: with slowest=True both report rank 1's median."""
    from minipar.runtime import dist as md

    me = md.rank()
    return median_time(lambda: time.sleep(0.05 * me), repeats=3, barrier=True, slowest=True)


def test_barrier_and_slowest_rank_on_two_ranks():
    a, b = launch(slow_rank_one, world_size=2)
    assert a == b >= 0.05
