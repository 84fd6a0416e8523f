"""Warm-up on the wrong end (rank r warms up r forwards): rank 0 waits for a backward that rank p−1 runs late."""

from exercises.solutions.ex06_1f1b import *  # noqa: F401,F403
from minipar.pp.schedules import Action


def one_f_one_b(p, m):
    out = []
    for r in range(p):
        w = min(r, m)
        acts = [Action(r, "F", i) for i in range(w)]
        for i in range(m - w):
            acts += [Action(r, "F", w + i), Action(r, "B", i)]
        acts += [Action(r, "B", i) for i in range(m - w, m)]
        out.append(acts)
    return out
