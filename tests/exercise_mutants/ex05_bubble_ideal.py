"""The bubble relative to the ideal time, (p − 1)/m, instead of the fraction of the step."""

from exercises.solutions.ex05_pipeline_microbatches import *  # noqa: F401,F403


def bubble_fraction(p, m):
    return (p - 1) / m
