"""The result of simulating a pipeline schedule (:func:`minipar.pp.schedules.simulate`): per-rank
timelines, the messages between ranks, makespan, bubble and peak in-flight micro-batches, and
a text grid of the timeline like ``torch.distributed.pipelining``'s schedule printout."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Simulation:
    """Result of :func:`simulate` (a SIMULATION). Times are in the units of the durations given.

    Attributes:
        timeline: per rank, ``[(action, start, end), ...]`` in execution order.
        messages: ``[(what, src_rank, dst_rank, t_send, t_recv), ...]``; ``what`` is the action
            whose input is sent, e.g. ``"1F3"`` (activation) or ``"0B3"`` (gradient).
        makespan: end of the last action (the step time without the optimizer).
        bubble: idle fraction of the total time, ``1 − busy / (p · makespan)``.
        peak_inflight: per rank, the most micro-batches whose forward ran and backward (W) has not,
            counted in whole stages: each of the v chunks of a rank counts 1/v.
    """

    p: int
    timeline: list[list[tuple]]
    messages: list[tuple] = field(default_factory=list)
    makespan: float = 0.0
    bubble: float = 0.0
    peak_inflight: list[float] = field(default_factory=list)

    def grid(self, tick: float = 1.0) -> list[list[str | None]]:
        """Per rank, one entry per ``tick`` of time: the running action's text, or None (idle)."""
        n = round(self.makespan / tick)
        rows = []
        for tl in self.timeline:
            row: list[str | None] = [None] * n
            for a, t0, t1 in tl:
                for k in range(round(t0 / tick), round(t1 / tick)):
                    row[k] = str(a)
            rows.append(row)
        return rows

    def table(self, tick: float = 1.0) -> str:
        """The grid as text, like ``torch.distributed.pipelining``'s schedule printout."""
        g = self.grid(tick)
        w = max(4, *(len(c) for row in g for c in row if c)) if any(c for row in g for c in row) else 4
        return "\n".join(f"rank {r}: " + " ".join((c or "·").rjust(w) for c in row) for r, row in enumerate(g))
