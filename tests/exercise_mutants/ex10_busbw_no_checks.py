"""bus_bandwidth that divides by whatever time it is given: inf or nan for a zero or bad time."""

from exercises.solutions.ex10_nccl import *  # noqa: F401,F403


def bus_bandwidth(size_bytes, seconds, world_size):
    algbw = size_bytes / seconds / 1e9 if seconds else float("inf")
    return algbw, algbw * 2 * (world_size - 1) / world_size if world_size else 0.0
