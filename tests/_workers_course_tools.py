"""Rank functions for tests/test_course_tools.py."""

from minipar.course.bench import all_reduce_sweep


def sweep():
    return all_reduce_sweep((4, 256), repeats=2, slowest=True)


def fails():
    print("about to fail")
    raise ValueError("on purpose")


def on_clock():
    """Rank r's value is r: ``slowest`` gives every rank the largest; a clocked no-op run lasts 0 virtual seconds."""
    import torch.distributed as dist

    from minipar.comm.links import Link
    from minipar.course.on_clock import fastest_on_clock, slowest

    seconds, timeline = fastest_on_clock(lambda: None, Link("test", 1e-3, 1e9), runs=2)
    return slowest(float(dist.get_rank()), -1.0), seconds, timeline
