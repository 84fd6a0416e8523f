"""``python -m minipar.course.bench``: minipar against the PyTorch-native equivalent, measured ratios.

Each lesson contributes one module ``minipar/course/benchmarks/bNN_<topic>.py`` with a function
``rows(quick: bool) -> list[Row]``; this file finds them (in name order), runs them, prints one
table and writes it to ``--out`` (Markdown and JSON). Speed targets live here, never in timed
tests: on a shared 2-core machine a timing is a measurement, not a pass/fail fact.

A ratio is ``minipar time / reference time`` (lower is better) unless the row says otherwise;
every time is the median of repeated runs in one process.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Callable


@dataclass
class Row:
    lesson: str  # e.g. "00"
    name: str  # what is compared
    measured: float  # the measured value (a ratio, or a fraction, see unit)
    unit: str = "×"  # "×" = minipar / reference time; or "pp", "%", ...
    target: str = ""  # e.g. "<= 1.10"
    ok: bool | None = None  # measured meets target (None: no target, reported only)
    note: str = ""  # the raw numbers behind the ratio


def median_time(
    fn: Callable[[], object],
    repeats: int = 5,
    warmup: int = 1,
    *,
    barrier: bool = False,
    slowest: bool = False,
    group=None,
) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` runs after ``warmup`` runs.

    On ranks (every rank of ``group`` calls it, with the same arguments):

    - ``barrier=True``: ``torch.distributed.barrier(group)`` before each timed run, not timed, so
      every rank starts the run together and no rank's time includes waiting for a late peer;
    - ``slowest=True``: return the largest median over the ranks (``all_reduce`` MAX): a step
      that ends with a collective ends when its slowest rank does (nccl-tests' ``-a 3``; its default,
      ``-a 1``, averages the ranks' times: lesson 10).
    """
    return median_times({"fn": fn}, repeats, warmup, barrier=barrier, slowest=slowest, group=group)["fn"]


def median_times(
    fns: dict[str, Callable[[], object]],
    repeats: int = 5,
    warmup: int = 1,
    *,
    barrier: bool = False,
    slowest: bool = False,
    group=None,
) -> dict[str, float]:
    """:func:`median_time` of several functions, their runs interleaved: round r runs them in order,
    round r + 1 in reverse, so a slow moment of a shared machine hits each of them alike (compare
    two implementations with one call). Returns ``{name: median seconds}``."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(repeats):
        for name in list(fns) if r % 2 == 0 else list(fns)[::-1]:
            if barrier:
                import torch.distributed as dist

                dist.barrier(group=group)
            t = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    if slowest:
        import torch
        import torch.distributed as dist

        from minipar.runtime import dist as mdist

        t = torch.tensor(list(medians.values()), dtype=torch.float64, device=mdist.device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        medians = dict(zip(medians, t.tolist()))
    return medians


# Lesson 01's sizes for the α–β fit: 4 B (latency) to 4 MiB (bandwidth).
ALL_REDUCE_SIZES = (4, 4 << 10, 64 << 10, 1 << 20, 4 << 20)


def all_reduce_sweep(
    sizes: tuple[int, ...] = ALL_REDUCE_SIZES, repeats: int = 5, warmup: int = 1, *, slowest: bool = False, group=None
) -> list[tuple[int, float]]:
    """The α–β sweep (lessons 01, 04, 07, 10): ``[(S bytes, median seconds of one all_reduce of S bytes)]``.

    Every rank of ``group`` calls it. Each size is an fp32 tensor of S/4 ones on this rank's device
    (:func:`minipar.runtime.dist.device`), timed by :func:`median_time` with a barrier before each run;
    ``slowest=True`` returns the slowest rank's median (nccl-tests' ``-a 3``; its default ``-a 1`` averages the
    ranks), else this rank's.
    Fit the result with ``t = α + S/β`` (lesson 01).
    """
    import torch
    import torch.distributed as dist

    from minipar.runtime import dist as mdist

    out = []
    for nbytes in sizes:
        t = torch.ones(nbytes // 4, device=mdist.device())
        fn = lambda: dist.all_reduce(t, group=group)  # noqa: E731
        out.append((nbytes, median_time(fn, repeats, warmup, barrier=True, slowest=slowest, group=group)))
    return out


def discover() -> list[str]:
    from minipar.course import benchmarks

    return sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("b"))


def run(quick: bool = False, only: str | None = None) -> list[Row]:
    rows: list[Row] = []
    for name in discover():
        if only and only not in name:
            continue
        try:
            mod = importlib.import_module(f"minipar.course.benchmarks.{name}")
            rows += mod.rows(quick)
        except Exception as exc:  # one broken benchmark must not hide the others
            traceback.print_exc()
            rows.append(Row(name[1:3], f"{name} FAILED: {exc}", float("nan"), ok=False))
    return rows


def format_table(rows: list[Row]) -> str:
    lines = ["| lesson | benchmark | measured | target | ok | numbers |", "|---|---|---|---|---|---|"]
    for r in rows:
        ok = "" if r.ok is None else ("yes" if r.ok else "NO")
        lines.append(f"| {r.lesson} | {r.name} | {r.measured:.3g} {r.unit} | {r.target} | {ok} | {r.note} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks, print the table, write ``--out``/results.md and results.json (both or neither).

    A bad ``--out`` (a file, under a file, not writable) or an ``--only`` that names no benchmark is one line on
    stderr and exit 2, before anything runs or any earlier results are touched."""
    from minipar.errors import ConfigError
    from minipar.job.outdir import check_folder, publish, write_atomically

    p = argparse.ArgumentParser(prog="python -m minipar.course.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/bench", help="folder for results.md and results.json")
    p.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    p.add_argument("--only", default=None, help="run only benchmark modules whose name contains this")
    a = p.parse_args(argv)
    try:
        check_folder(a.out, "--out")
        if a.only is not None and not any(a.only in name for name in discover()):
            raise ConfigError(f"--only {a.only!r} names no benchmark; use part of one of {', '.join(discover())}")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = run(a.quick, a.only)
    table = format_table(rows)
    print(table)
    os.makedirs(a.out, exist_ok=True)
    md = f"# minipar benchmarks\n\nPython {sys.version.split()[0]}, {os.cpu_count()} CPU cores.\n\n{table}\n"
    records = [asdict(r) for r in rows]
    publish([
        write_atomically(os.path.join(a.out, "results.md"), lambda f: f.write(md)),
        write_atomically(os.path.join(a.out, "results.json"), lambda f: json.dump(records, f, indent=1)),
    ])  # fmt: skip
    print(f"\nwritten to {a.out}/results.md and results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
