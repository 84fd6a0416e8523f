"""Checks for lesson 10: busbw from algbw (in this process), and your own all_reduce_perf on 1, 2 and 3 ranks
and on a sub-group.

Real times depend on the machine, so ``time.perf_counter`` is the checker's clock while the exercise runs
(:class:`_Clock`: it moves only when an all-reduce runs, by (i + 1) ms on group rank i, or a barrier), and
the check grades the method: the time is the timed loop's alone (one clock around it, none read between its calls),
per call, averaged over the ranks (every rank returns the same row); the bandwidths follow from it; the result check
counts what is wrong (the clock zeroes a few elements of the check all-reduce's result on one rank, and #wrong must
be their number, summed over the ranks); and the collectives are nccl-tests' (warm-up all-reduces, a barrier, the
timed all-reduces of S/4 float32 elements: S bytes, one check all-reduce, at most two small all-reduces).
"""

from __future__ import annotations

import importlib
import math
import time

from torch.utils._python_dispatch import TorchDispatchMode

from exercises.checks.common import CheckFailed, Lesson, run_ranks
from exercises.checks.watch import (
    Refuse,
    Watch,
    expect_no_state,
    finally_own,
    judge,
    kept_state_message,
    state_changed,
    state_snapshot,
    watched,
)

PERF = "this exercise is nccl-tests' method: write it yourself"
RULES = Refuse(
    {
        "minipar.course": PERF + ", not with minipar's benchmarks (time_all_reduce)",
        "minipar.comm": PERF + " with torch.distributed's all_reduce and barrier, not minipar's collectives",
    }
)
KEYS = ("size", "count", "time_us", "algbw", "busbw", "wrong")
REL = 1e-9  # the bandwidths are one division and one product of the time: equal to rounding
TICK = 1e-3  # seconds the checker's clock advances per all-reduce on group rank 0 (rank i: (i + 1) ticks)
LATE = 7  # ticks a barrier advances it: a clock started before the barrier counts the wait for the last rank
SMALL = 2  # elements at most of the bookkeeping all-reduces (the time to average, the wrong count); larger: a buffer
TIME_REL = 1e-6  # the averaged time: a float32 tensor carries it to ~1e-7 (fine); a wrong method is off by >= 1/iters


def _bandwidths(size: int, seconds: float, n: int) -> tuple[float, float]:
    """nccl-tests' all-reduce columns: algbw = S/t and busbw = algbw · 2(N − 1)/N, GB/s."""
    alg = size / seconds / 1e9
    return alg, alg * 2 * (n - 1) / n


def check_bus_bandwidth(mod) -> str:
    seen = []
    before = state_snapshot(mod)
    for size, sec, n in [(1 << 30, 5.2396e-3, 8), (4096, 1e-5, 2), (12, 3e-6, 3), (0, 1.0, 4), (1 << 20, 2e-4, 1)]:
        what = f"bus_bandwidth({size}, {sec}, {n})"
        (alg, bus), summary = watched(what, RULES, mod, mod.bus_bandwidth, size, sec, n)
        seen.append((what, summary))
        want_alg, want_bus = _bandwidths(size, sec, n)
        if not math.isclose(alg, want_alg, rel_tol=REL, abs_tol=1e-300):
            raise CheckFailed(f"{what}: algbw {alg!r}, expected S/t = {want_alg!r} GB/s (1 GB = 1e9 bytes)")
        if not math.isclose(bus, want_bus, rel_tol=REL, abs_tol=1e-300):
            raise CheckFailed(
                f"{what}: busbw {bus!r}, expected algbw · 2(N − 1)/N = {want_bus!r} GB/s"
                + (" (one rank moves nothing: 0)" if n == 1 else " (a ring sends and receives 2(N − 1)/N · S per rank)")
            )
        expect_no_state(what, mod, before, "the function is pure: its answer comes from its arguments")
    for args in [(4096, 0.0, 2), (4096, -1e-3, 2), (4096, math.inf, 2), (4096, math.nan, 2), (-4, 1e-3, 2),
                 (4096, 1e-3, 0)]:  # fmt: skip
        what = f"bus_bandwidth{args}"
        with Watch(RULES, own=mod) as w:
            try:
                got = mod.bus_bandwidth(*args)
            except ValueError:
                got = None
            except NotImplementedError:
                raise
            except Exception as exc:  # noqa: BLE001 - the learner's bug, reported as a failure
                raise CheckFailed(f"{what} raised {type(exc).__name__}: {exc}; expected ValueError") from None
        judge(what, w.summary())
        seen.append((what, w.summary()))
        if got is not None:
            raise CheckFailed(f"{what} returned {got!r}: raise ValueError (a time must be finite and > 0, a size >= 0,"
                              " a world >= 1)")  # fmt: skip
    finally_own(mod, ["bus_bandwidth"], seen)
    return "N = 1, 2, 3, 8 and S = 0: algbw = S/t, busbw = algbw · 2(N − 1)/N; bad times, sizes, worlds refused"


class _Clock(TorchDispatchMode):
    """The checker's clock: ``time.perf_counter`` while the exercise runs. It stands still except that every
    all-reduce advances it by ``tick`` seconds and a barrier by ``LATE`` ticks (the wait for a late rank), so a
    rank that times exactly its ``iters`` timed all-reduces measures ``tick`` per call, whatever the machine;
    warm-ups, the barrier or the check inside the timed region show.

    It also notes each all-reduce's (elements, dtype) in ``log``, and where ``faults`` maps a buffer's element
    count to k, zeroes k elements of the result of the call's ``check``-th all-reduce (0-based) of that count — the
    check that follows the warm-ups and the timed loop — as a faulty link would. ``inside`` lists the reads of the
    clock between two timed all-reduces (the ``warmup``-th to the ``check - 1``-th): (elements, timed calls before)."""

    def __init__(self, tick: float, warmup: int = 0, check: int = 0, faults: dict | None = None):
        super().__init__()
        self.now, self.tick, self.warmup, self.check, self.faults = 1000.0, tick, warmup, check, faults or {}
        self.log: list = []
        self.inside: list = []

    def _index(self, numel: int) -> int:
        """0-based index, among this call's all-reduces of ``numel`` elements, of the last one logged."""
        return sum(n == numel for n, _ in self.log) - 1

    def __call__(self) -> float:
        if self.log and self.log[-1][0] > SMALL:  # after a big all-reduce: a timed one with another timed one to come?
            numel = self.log[-1][0]
            k = self._index(numel)
            if self.warmup <= k < self.check - 1:
                self.inside.append((numel, k - self.warmup + 1))
        return self.now

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.name() == "c10d::allreduce_":
            self.now += self.tick
            t = args[0][0]
            self.log.append((t.numel(), t.dtype))
            if self._index(t.numel()) == self.check and self.faults.get(t.numel()):
                out[1].wait()  # the result is in place once the work is done
                t.view(-1)[: self.faults[t.numel()]] = 0  # never N(N + 1)/2 >= 1: wrong elements
        elif func.name() == "c10d::barrier":  # the wait for the last rank to arrive: never part of a call's time
            self.now += LATE * self.tick
        return out


def perf_worker(module, runs, members):
    """Every rank (of ``members``, None: all): ``all_reduce_perf`` for each ``(sizes, warmup, iters, faults)`` of
    ``runs`` (faults: ``{group rank: {size: elements the clock zeroes in its check}}``), one after the other in this
    process, on :class:`_Clock` (group rank i: a tick of (i + 1) ms); per run: rows, watch summary, changed state,
    the all-reduces' (elements, dtype)."""
    import minipar.runtime.dist

    mod = importlib.import_module(module)
    group = minipar.runtime.dist.new_group(members) if members is not None else None
    if members is not None and minipar.runtime.dist.rank() not in members:
        return None
    i = members.index(minipar.runtime.dist.rank()) if members is not None else minipar.runtime.dist.rank()
    out = []
    for sizes, warmup, iters, faults in runs:
        before = state_snapshot(mod)
        zeroed = {size // 4: k for size, k in faults.get(i, {}).items()}  # by the buffer's elements
        clock, real = _Clock((i + 1) * TICK, warmup, warmup + iters, zeroed), time.perf_counter
        own = getattr(mod, "perf_counter", None) is real  # `from time import perf_counter` in the file
        time.perf_counter = clock
        if own:
            mod.perf_counter = clock
        try:
            with Watch(RULES, own=mod) as w, clock:
                rows = mod.all_reduce_perf(list(sizes), warmup, iters, group)
        finally:
            time.perf_counter = real
            if own:
                mod.perf_counter = real
        out.append((rows, w.summary(), state_changed(before, state_snapshot(mod)), clock.log, clock.inside))
    return out


def expect_bytes(what: str, log: list, sizes) -> None:
    """Each size's all-reduces move S bytes: S/4 float32 elements (nccl-tests' default ``-d float``)."""
    import torch

    by_numel = {s // 4: s for s in sizes if s // 4 > SMALL}
    for numel, dtype in log:
        size = by_numel.get(numel)
        if size is not None and dtype != torch.float32:
            raise CheckFailed(
                f"{what}: the buffer of S = {size} B was {numel} elements of {dtype}: "
                f"{numel * dtype.itemsize} bytes, not S; all_reduce_perf's row for S is S/4 float32 elements"
            )


def expect_pattern(what: str, comm: list, sizes, warmup: int, iters: int) -> None:
    """The collectives of one call: per size, warmup big all-reduces, a barrier, iters big ones, then one big
    (the check) and one or two small (<= 2 elements: the time, the count) in any order."""
    ops = [(op, a) for op, a, _, _ in comm]
    i = 0
    for size in sizes:
        c = size // 4
        want = [("allreduce", c)] * warmup + [("barrier", 1)] + [("allreduce", c)] * iters
        got = ops[i : i + len(want)]
        tail = []
        j = i + len(want)
        while j < len(ops) and (ops[j] == ("allreduce", c) or (ops[j][0] == "allreduce" and ops[j][1] <= SMALL)):
            tail.append(ops[j])
            j += 1
        small = [x for x in tail if x != ("allreduce", c)]
        if got != want or tail.count(("allreduce", c)) != 1 or not 1 <= len(small) <= 2:
            raise CheckFailed(
                f"{what}: for S = {size} B the collectives were {_runs(ops[i:j] or ops[i : i + len(want) + 3])} "
                f"(c10d op × calls, elements), expected {warmup} warm-up all-reduce(s) of S/4 = {c} elements, one "
                f"barrier, {iters} timed all-reduce(s), then one check all-reduce of {c} and one or two all-reduces "
                "of a few elements (the time to average, the wrong count): nccl-tests warms up, lines the ranks up, "
                "times the loop, then checks"
            )
        i = j
    if i != len(ops):
        raise CheckFailed(f"{what}: {len(ops) - i} collective(s) after the last size: {_runs(ops[i:])}")


def _runs(ops) -> str:
    out = []
    for op in ops:
        if out and out[-1][0] == op:
            out[-1][1] += 1
        else:
            out.append([op, 1])
    return ", ".join(f"{op}({a}) × {k}" for (op, a), k in out)


def check_all_reduce_perf(mod) -> str:
    seen = []
    cases = [  # (world, group members or None, runs: (sizes, warmup, iters, {group rank: {size: elements zeroed}}))
        (1, None, [((64, 4096), 1, 3, {})]),
        (2, None, [((64, 65536), 2, 5, {}), ((1024,), 0, 2, {0: {1024: 3}})]),
        (3, None, [((4096, 16), 3, 4, {2: {4096: 1, 16: 4}})]),
        (3, [0, 2], [((256, 8192), 1, 3, {1: {8192: 5}, 0: {8192: 2}})]),
    ]
    for world, members, runs in cases:
        where = f"{world} rank(s)" + (f", group {members}" if members else "")
        got = run_ranks(perf_worker, world, (mod.__name__, runs, members), f"all_reduce_perf on {where}")
        ranks = [(r, v) for r, v in enumerate(got) if v is not None]
        n = len(ranks)
        for k, (sizes, warmup, iters, faults) in enumerate(runs):
            what = f"all_reduce_perf({list(sizes)}, warmup={warmup}, iters={iters}) on {where}"
            for r, v in ranks:
                rows, summary, changed, log, inside = v[k]
                judge(f"{what}: rank {r}", summary)
                seen.append((f"{what}: rank {r}", summary))
                if changed:
                    raise CheckFailed(kept_state_message(f"{what}: rank {r}", changed, "each call measures anew"))
                expect_pattern(f"{what}: rank {r}", summary["comm"], sizes, warmup, iters)
                expect_bytes(f"{what}: rank {r}", log, sizes)
                if inside:
                    numel, done = inside[0]
                    raise CheckFailed(
                        f"{what}: rank {r} read time.perf_counter between timed all-reduces (after {done} of the "
                        f"{iters} of S = {numel * 4} B): put one clock around the whole loop and divide by iters, as "
                        "nccl-tests does; a clock per call on a GPU times the launch, not the transfer"
                    )
            rows0 = ranks[0][1][k][0]
            _expect_rows(what, rows0, sizes, n, iters, faults)
            for r, v in ranks[1:]:
                if v[k][0] != rows0:
                    raise CheckFailed(
                        f"{what}: rank {r} returned {_short(v[k][0])}, rank {ranks[0][0]} {_short(rows0)}: every rank "
                        "must print the same row: average the time over the ranks (all-reduce it, divide by N; "
                        "nccl-tests' -a 1) and sum the wrong counts"
                    )
    finally_own(mod, ["all_reduce_perf"], seen)
    return (
        "1, 2, 3 ranks and a sub-group: warm-up, barrier, timed loop of S/4 float32 elements, check; one row per size, "
        "the same on every rank, bandwidths from the averaged time, #wrong 0, and the elements the checker corrupted "
        "counted over the ranks"
    )


def _short(rows) -> str:
    return repr([{k: r.get(k) for k in ("size", "time_us", "wrong")} for r in rows] if isinstance(rows, list) else rows)


def _expect_rows(what, rows, sizes, n, iters, faults) -> None:
    if not isinstance(rows, list) or len(rows) != len(sizes) or not all(isinstance(r, dict) for r in rows):
        raise CheckFailed(f"{what}: returned {_short(rows)}, expected a list of {len(sizes)} dicts, one per size")
    for size, row in zip(sizes, rows):
        if set(row) != set(KEYS):
            raise CheckFailed(f"{what}: the row of S = {size} has keys {sorted(row)}, expected {list(KEYS)}")
        if row["size"] != size or row["count"] != size // 4:
            raise CheckFailed(f"{what}: size {row['size']}, count {row['count']}; expected {size} and {size // 4}")
        bad = {r: f[size] for r, f in faults.items() if f.get(size)}
        if row["wrong"] != sum(bad.values()):
            zeroed = ", ".join(f"{k} on group rank {r}" for r, k in sorted(bad.items()))
            raise CheckFailed(
                f"{what}: S = {size}: wrong = {row['wrong']!r}, expected {sum(bad.values())}"
                + (f" (the checker zeroed elements of the check all-reduce's result: {zeroed})" if bad else "")
                + f"; refill the buffer with rank + 1 (the rank in the group) before the check, count the elements "
                f"that are not N(N + 1)/2 = {n * (n + 1) // 2} after it, and sum the count over the ranks"
            )
        t, want = row["time_us"] * 1e-6, (n + 1) / 2 * TICK  # the ranks' ticks (i + 1)·TICK, averaged
        if not math.isclose(t, want, rel_tol=TIME_REL):
            raise CheckFailed(
                f"{what}: S = {size}: time {row['time_us']:.6g} µs per call; the checker's clock (time.perf_counter, "
                f"advanced {TICK * 1e6:.0f} µs per all-reduce on group rank 0, twice that on rank 1, ...) gives "
                f"{want * 1e6:.0f} µs: read time.perf_counter just before and after the {iters} timed all-reduces "
                "(after the barrier; not the warm-up, not the check), divide by iters, average over the ranks, "
                "× 1e6 for µs"
            )
        alg, bus = _bandwidths(size, t, n)
        if not (math.isclose(row["algbw"], alg, rel_tol=REL) and math.isclose(row["busbw"], bus, rel_tol=REL)):
            raise CheckFailed(
                f"{what}: S = {size}, t = {row['time_us']!r} µs: algbw {row['algbw']!r}, busbw {row['busbw']!r}; "
                f"expected S/t = {alg!r} and · 2(N − 1)/N = {bus!r} GB/s with N = {n} (the group's ranks)"
            )


LESSON = Lesson(
    number="10",
    title="NCCL in practice: all_reduce_perf",
    module="ex10_nccl",
    checks=(
        ("bus_bandwidth", check_bus_bandwidth),
        ("all_reduce_perf", check_all_reduce_perf),
    ),
    rules=(RULES,),
)
