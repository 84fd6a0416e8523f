"""1F1B with warm-up p − r − 1 and no min with m: forwards of micro-batches that do not exist when m < p."""

from exercises.solutions.ex06_1f1b import *  # noqa: F401,F403
from minipar.pp.schedules import Action


def one_f_one_b(p, m):
    out = []
    for r in range(p):
        w = p - r - 1
        acts = [Action(r, "F", i) for i in range(w)]
        for i in range(m - w):
            acts += [Action(r, "F", w + i), Action(r, "B", i)]
        acts += [Action(r, "B", i) for i in range(m - w, m)]
        out.append(acts)
    return out
