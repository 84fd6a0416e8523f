"""The pipeline vocabulary and a pure-Python SIMULATOR that checks and times a schedule.

One unit of work is an :class:`Action`, written as PyTorch's ``torch.distributed.pipelining``
writes it: ``"1F3"`` = stage 1 runs the forward of micro-batch 3, ``"0B2"`` its backward (zero
bubble splits it: ``"0I2"`` input, ``"0W2"`` weight gradient). An :class:`Overlap` is two actions
one rank runs as one overlapped kernel (DualPipe's F&B, PyTorch's ``OVERLAP_F_B``). The generators
live in :mod:`minipar.pp.schedules` (GPipe, 1F1B, interleaved, ZB-H1) and
:mod:`minipar.pp.dualpipe` (DeepSeek-V3's DualPipe).

:func:`simulate` (a SIMULATION, not a measurement) replays a schedule with given action
durations: every rank runs its actions in order; an action starts when the rank is free and its
inputs exist (forward of stage s needs the previous stage's forward of the same micro-batch,
backward needs its own forward and the next stage's backward; "previous" and "next" along the
micro-batch's ``route``, by default stages 0, 1, ..., S−1). It checks the schedule (every action
exactly once, on the right rank, no backward before its forward, every receive after its send,
no deadlock) and predicts the makespan, the bubble fraction and the peak number of micro-batches
whose activations a rank holds. Sends are non-blocking in this model (as in minipar's executor).
The order of the point-to-point messages a schedule implies (what NCCL matches) is checked by
:mod:`minipar.pp.p2p_order`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from minipar.errors import ConfigError


class Action(NamedTuple):
    """One unit of pipeline work: ``stage`` runs ``kind`` on micro-batch ``mb``: "F" forward, "B"
    backward, or the backward split in two: "I" (input gradient) and "W" (weight gradient)."""

    stage: int
    kind: str
    mb: int

    def __str__(self) -> str:  # PyTorch's notation: "1F3"
        return f"{self.stage}{self.kind}{self.mb}"

    __repr__ = __str__


class DeadlockError(ConfigError):
    """The schedule can never finish: every unfinished rank waits for an input nobody produces."""


def parse(text: str) -> Action:
    """``"1F3"`` -> ``Action(1, "F", 3)``."""
    for kind in ("F", "B", "I", "W"):
        if kind in text:
            s, mb = text.split(kind)
            return Action(int(s), kind, int(mb))
    raise ConfigError(f"action {text!r} is not like '1F3' (stage, F/B/I/W, micro-batch)")


class Overlap(NamedTuple):
    """Two actions of one rank run as ONE overlapped unit (DeepSeek-V3's F&B, arXiv:2412.19437
    §3.2.1; PyTorch's ``OVERLAP_F_B``): forward ``f`` of one micro-batch and backward ``b`` of
    another, each hiding the other's communication. :func:`simulate` starts the pair when both
    inputs exist and ends both outputs together, after ``t_fb`` (default ``t_f + t_b``)."""

    f: Action
    b: Action

    def __str__(self) -> str:  # "0F3&7B2"
        return f"{self.f}&{self.b}"

    __repr__ = __str__


def unpack(e) -> tuple:
    """The actions of one schedule entry: ``(f, b)`` of an :class:`Overlap`, else ``(e,)``."""
    return (e.f, e.b) if isinstance(e, Overlap) else (e,)


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
            counted in stages of 1/p of the model: a chunk counts p/len(route) (1/v for the v chunks
            of interleaved or V schedules, 1 for DualPipe, whose chunks are whole stages).
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


def idle_per_rank(sim: Simulation) -> list[float]:
    """Per rank, the time it is not computing: ``makespan − Σ durations`` (a Simulation's units)."""
    return [sim.makespan - sum(t1 - t0 for _, t0, t1 in tl) for tl in sim.timeline]


def num_stages(schedule: list[list]) -> int:
    return 1 + max(a.stage for acts in schedule for e in acts for a in unpack(e))


def num_microbatches(schedule: list[list]) -> int:
    return 1 + max(a.mb for acts in schedule for e in acts for a in unpack(e))


def _dur(d, a) -> float:
    return float(d(a)) if callable(d) else float(d)


def simulate(
    schedule: list[list[Action]],
    t_f=1.0,
    t_b=2.0,
    t_comm=0.0,
    decoupled: bool = True,
    t_w=1.0,
    place=None,
    route=None,
    t_fb=None,
) -> Simulation:
    """SIMULATE ``schedule`` (per-rank action lists) and check it.

    Args:
        schedule: ``schedule[rank]`` = that rank's actions (or :class:`Overlap` pairs) in order;
            stage s must be on rank s % p, or ``place(s)`` (e.g. the V of ZBV/DualPipeV/DualPipe:
            stages r and 2p−1−r on rank r).
        t_f, t_b: forward / backward duration of one action: a number, or a function of the
            :class:`Action` (e.g. durations measured on real ranks). In a split schedule ``t_b``
            times I (the input gradient) and ``t_w`` W (the weight gradient, which needs only its I);
            each (stage, micro-batch) runs B, or I and W.
        t_comm: time a message takes between ranks (0: sends are instant).
        decoupled: True (minipar's executor; MegaScale, arXiv:2402.15627 §3.2): a message leaves
            when its action ends and travels while both ranks compute; the receiver waits only
            if it arrives late. False, COUPLED (Megatron-LM's blocking pairs, as the executor's
            ``coupled=True`` runs them): a send occupies its rank for ``t_comm``, and a receive is
            posted only with the rank's previous send, when its previous action ends, so its
            transfer starts at the later of that and the sender's end (NCCL's rendezvous).
        route: ``route(mb)`` = the stages micro-batch ``mb`` visits, in forward order (default: all
            S stages, 0..S−1). DualPipe's two directions: stages 0..p−1 or p..2p−1.
        t_fb: duration of an :class:`Overlap` pair: a number, a function of the pair, or None
            (``t_f(f) + t_b(b)``: no gain from the overlap).

    Returns:
        A :class:`Simulation`.

    Raises:
        ConfigError: an action missing, repeated, on the wrong rank or off its micro-batch's route;
            a backward listed before its forward on the same rank.
        DeadlockError: no rank can make progress (each waits on an input not yet produced).
    """
    p = len(schedule)
    if p < 1:
        raise ConfigError("the schedule has no ranks")
    S, m = num_stages(schedule), num_microbatches(schedule)
    if S % p:
        raise ConfigError(f"{S} stages over p={p} ranks: the number of stages must be a multiple of p")
    rank_of = place or (lambda s: s % p)
    routes = [tuple(route(i)) if route else tuple(range(S)) for i in range(m)]
    at = [{s: k for k, s in enumerate(rt)} for rt in routes]  # position of a stage on a route

    def step(a: Action, d: int) -> Action | None:  # the stage d = +1 after / −1 before a, same micro-batch
        k = at[a.mb][a.stage] + d
        return Action(routes[a.mb][k], "F", a.mb) if 0 <= k < len(routes[a.mb]) else None

    seen: dict[Action, int] = {}
    for r, acts in enumerate(schedule):
        for i, a in ((i, a) for i, e in enumerate(acts) for a in unpack(e)):
            if rank_of(a.stage) != r:
                raise ConfigError(
                    f"action {a} is listed on rank {r} but stage {a.stage} lives on rank "
                    f"{rank_of(a.stage)} ({'place(s)' if place else 'stage s on rank s % p'})"
                )
            if a.stage not in at[a.mb]:
                raise ConfigError(f"action {a}: stage {a.stage} is not on the route of micro-batch {a.mb}")
            if a in seen:
                raise ConfigError(f"action {a} appears twice on rank {r}")
            before = Action(a.stage, "I" if a.kind == "W" else "F", a.mb)
            if a.kind != "F" and before not in seen:
                what = (
                    "weight gradient {} is listed before its input gradient"
                    if a.kind == "W"
                    else "backward {} is listed before its forward"
                )
                raise ConfigError(f"rank {r}: {what.format(a)} {before}")
            seen[a] = i

    def bwd(s: int, mb: int) -> str:  # the backward kind of (stage, micro-batch): B, or I (then W)
        return "I" if Action(s, "I", mb) in seen or Action(s, "W", mb) in seen else "B"

    need = [(s, i, k) for i in range(m) for s in routes[i] for k in ("F", "B") if k == "F" or bwd(s, i) == "B"]
    need += [(s, i, k) for i in range(m) for s in routes[i] for k in "IW" if bwd(s, i) == "I"]
    missing = [Action(s, k, i) for s, i, k in need if Action(s, k, i) not in seen]
    if missing or any(Action(a.stage, "B", a.mb) in seen for a in seen if a.kind == "I"):
        raise ConfigError(
            f"the schedule misses {len(missing)} action(s), e.g. {missing[:4]} (or runs B and I/W of one micro-batch); "
            f"every stage of a micro-batch's route (default 0..{S - 1}) needs F and B (or I and W) of it"
        )

    done: dict[Action, float] = {}
    free = [0.0] * p
    posted = [0.0] * p
    pos = [0] * p
    timeline: list[list[tuple]] = [[] for _ in range(p)]
    messages = []
    inflight = [0] * p
    peak = [0] * p

    def deps(a: Action) -> list[Action]:
        if a.kind == "W":  # the weight gradient needs only its own I: it gates no other stage
            return [Action(a.stage, "I", a.mb)]
        prev, nxt = step(a, -1), step(a, +1)
        if a.kind == "F":
            return [prev] if prev else []
        return [Action(a.stage, "F", a.mb)] + ([Action(nxt.stage, bwd(nxt.stage, a.mb), a.mb)] if nxt else [])

    def dur(e) -> float:
        if isinstance(e, Overlap):
            return _dur(t_fb, e) if t_fb is not None else dur(e.f) + dur(e.b)
        return _dur({"F": t_f, "W": t_w}.get(e.kind, t_b), e)

    remaining = sum(len(x) for x in schedule)
    while remaining:
        progressed = False
        for r in range(p):
            while pos[r] < len(schedule[r]):
                e = schedule[r][pos[r]]
                ds = [(a, d) for a in unpack(e) for d in deps(a)]
                if any(d not in done for _, d in ds):
                    break
                ready = free[r]
                for a, d in ds:
                    src = rank_of(d.stage)
                    # decoupled: the message left when d ended; coupled: its transfer starts only
                    # once this rank has posted the receive, paired with its previous action's send
                    t_arr = (done[d] if decoupled or src == r else max(done[d], posted[r])) + (
                        t_comm if src != r else 0.0
                    )
                    if src != r:
                        messages.append((str(a), src, r, done[d], t_arr))
                    ready = max(ready, t_arr)
                end = ready + dur(e)
                timeline[r].append((e, ready, end))
                sends = False
                for a in unpack(e):
                    done[a] = end
                    nxt = step(a, +1 if a.kind == "F" else -1)
                    sends |= a.kind != "W" and nxt is not None and rank_of(nxt.stage) != r
                    inflight[r] += {"F": 1, "I": 0}.get(a.kind, -1)  # held from F until B (or W)
                    peak[r] = max(peak[r], inflight[r])
                free[r] = end + (t_comm if sends and not decoupled else 0.0)  # coupled: the send blocks
                posted[r] = end  # coupled: the next receive is posted with this action's send
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {r: str(schedule[r][pos[r]]) for r in range(p) if pos[r] < len(schedule[r])}
            raise DeadlockError(
                f"deadlock: every unfinished rank waits for an input that is never produced; "
                f"next actions {stuck}. Reorder the schedule so that each rank's next action "
                f"depends only on actions other ranks can reach"
            )
    makespan = max(free)
    busy = sum(t1 - t0 for tl in timeline for _, t0, t1 in tl)
    per = len(routes[0]) / p  # chunks per rank on one route: each counts 1/per of a stage (1/p of the model)
    return Simulation(
        p, timeline, messages, makespan, 1 - busy / (p * makespan) if makespan else 0.0, [x / per for x in peak]
    )
