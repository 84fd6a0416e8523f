"""busbw with the factor of reduce-scatter, (N − 1)/N: half of an all-reduce's traffic."""

from exercises.solutions.ex10_nccl import *  # noqa: F401,F403


def bus_bandwidth(size_bytes, seconds, world_size):
    if size_bytes < 0 or not 0 < seconds < float("inf") or world_size < 1:
        raise ValueError("bad arguments")
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * (world_size - 1) / world_size
