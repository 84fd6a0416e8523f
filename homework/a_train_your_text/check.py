"""Check homework (a)'s report:  python -m homework.a_train_your_text.check [runs/homework_a/report.json]

Checks what holds on any machine: the layout is a real 2D/3D layout of the world size, the text
is yours, the loss fell, memory was measured on every rank and set against the planner's
prediction, and the notes explain the gap. One line per item: ✓, or ✗ with what to fix.
Exit status 0 when all pass.
"""

from __future__ import annotations

import json
import math
import os
import sys


def check_report(rep: dict) -> list[tuple[bool, str]]:
    out = []
    lay = rep.get("layout") or {}
    pp, dp, tp, m = (lay.get(k) for k in ("pp", "dp", "tp", "microbatches"))
    world = rep.get("world_size")
    ints = all(isinstance(v, int) and v >= 1 for v in (pp, dp, tp, m, world))
    out.append((ints and pp * dp * tp == world, f"layout pp·dp·tp = world size ({lay}, world {world})"))
    out.append((ints and sum(v > 1 for v in (pp, dp, tp)) >= 2, "at least two of pp, dp, tp are > 1"))
    data = rep.get("data")
    out.append((bool(data) and os.path.isfile(data), f"your text file exists ({data})"))
    lf, ll, vl = rep.get("loss_first"), rep.get("loss_last"), rep.get("val_loss_last")
    nums = all(isinstance(v, (int, float)) and math.isfinite(v) for v in (lf, ll, vl))
    out.append((nums and ll < lf, f"the training loss fell (first {lf}, last {ll}; validation {vl})"))
    mem = rep.get("mem_measured_bytes")
    out.append(
        (
            isinstance(mem, list) and len(mem) == world and all(isinstance(v, (int, float)) and v > 0 for v in mem),
            "memory measured on every rank (mem_measured_bytes: one positive number per rank)",
        )
    )
    pred = rep.get("mem_predicted_bytes")
    out.append((isinstance(pred, (int, float)) and pred > 0, "the planner's memory per rank (mem_predicted_bytes)"))
    out.append(
        (
            isinstance(rep.get("step_s_predicted"), (int, float)) and bool(rep.get("hardware")),
            "the planner's step time and the hardware it assumed (step_s_predicted, hardware)",
        )
    )
    out.append(
        (len(str(rep.get("notes", ""))) >= 40, "notes: why measurement and prediction differ (a sentence or two)")
    )
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else "runs/homework_a/report.json"
    if not os.path.exists(path):
        print(f"✗ no report at {path}: run python -m homework.a_train_your_text.job --data YOUR_TEXT.txt first")
        return 1
    with open(path) as f:
        results = check_report(json.load(f))
    for ok, what in results:
        print(f"{'✓' if ok else '✗'} {what}")
    print(f"{sum(ok for ok, _ in results)}/{len(results)} checks pass")
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
