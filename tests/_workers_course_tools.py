"""Rank functions for tests/test_course_tools.py."""

from minipar.course.bench import all_reduce_sweep


def sweep():
    return all_reduce_sweep((4, 256), repeats=2, slowest=True)


def fails():
    print("about to fail")
    raise ValueError("on purpose")
