"""Pipeline schedules as data, and a pure-Python SIMULATOR that checks and times them.

A schedule says, for every pipeline rank, which work it does and in which order. One unit of
work is an :class:`Action`, written as PyTorch's ``torch.distributed.pipelining`` writes it:
``"1F3"`` = stage 1 runs the forward of micro-batch 3, ``"0B2"`` = stage 0 runs the backward of
micro-batch 2 (zero bubble splits it: ``"0I2"`` input, ``"0W2"`` weight gradient, see
:mod:`minipar.pp.zero_bubble`). A schedule is ``list[list[Action]]``: ``schedule[rank]`` is that
rank's program, in order. Idle time (the *bubble*) is not written down: it is what a rank does
while it waits for an input that another rank has not produced yet (``None``/gaps).

Stages and ranks: with ``p`` pipeline ranks and ``v`` virtual stages per rank there are
``S = p·v`` stages; stage ``s`` lives on rank ``s % p`` (Narayanan et al. 2021, "Efficient
Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", arXiv:2104.04473,
§2.2.2: rank r holds the model chunks r, r+p, r+2p, ...).

Generators (``p`` ranks, ``m`` micro-batches):

- :func:`gpipe` — all forwards, then all backwards (Huang et al. 2019, GPipe, arXiv:1811.06965).
- :func:`one_f_one_b` — PipeDream-Flush / 1F1B (Narayanan et al. 2019, PipeDream, SOSP;
  arXiv:2104.04473 §2.2.1): rank r runs ``min(p−r−1, m)`` warm-up forwards, then alternates one
  forward and one backward, then the cool-down backwards. At most ``p−r`` micro-batches are in
  flight on rank r instead of GPipe's m.
- :func:`interleaved_1f1b` — Megatron-LM's interleaved schedule (arXiv:2104.04473 §2.2.2), the
  order of Megatron-LM's ``forward_backward_pipelining_with_interleaving``.

:func:`simulate` (a SIMULATION, not a measurement) replays a schedule with given action
durations: every rank runs its actions in order; an action starts when the rank is free and its
inputs exist (forward of stage s needs stage s−1's forward of the same micro-batch, backward
needs its own forward and stage s+1's backward). It checks the schedule (every action exactly
once, on the right rank, no backward before its forward, every receive after its send, no
deadlock) and predicts the makespan, the bubble fraction and the peak number of micro-batches
whose activations a rank holds. Sends are non-blocking in this model (as in minipar's executor).
The order of the point-to-point messages a schedule implies (what NCCL matches) is checked by
:mod:`minipar.pp.p2p_order`.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from minipar.errors import ConfigError
from minipar.pp.simulation import Simulation


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


def _check_pm(p: int, m: int, v: int = 1) -> None:
    for name, val in (("p", p), ("m", m), ("v", v)):
        if not isinstance(val, int) or val < 1:
            raise ConfigError(f"{name}={val!r} must be an integer >= 1")


def gpipe(p: int, m: int) -> list[list[Action]]:
    """GPipe: rank r runs ``rF0 .. rF(m-1)`` then ``rB(m-1) .. rB0`` (backward in reverse, as
    autograd would over one big batch; any order is valid). Holds all m micro-batches at once."""
    _check_pm(p, m)
    return [[Action(r, "F", i) for i in range(m)] + [Action(r, "B", i) for i in reversed(range(m))] for r in range(p)]


def one_f_one_b(p: int, m: int) -> list[list[Action]]:
    """1F1B (PipeDream-Flush): warm-up ``w = min(p−r−1, m)`` forwards, steady ``F, B`` pairs, cool-down.

    With ``m < p`` the warm-up already covers every micro-batch, so the schedule degenerates to
    GPipe's order on the first ranks: it is still correct, but the bubble (p−1)/(m+p−1) is ≥ 50%
    and the memory saving is gone — use m ≥ p (in practice m ≫ p).
    """
    _check_pm(p, m)
    out = []
    for r in range(p):
        w = min(p - r - 1, m)
        acts = [Action(r, "F", i) for i in range(w)]
        for i in range(m - w):  # steady state: one forward, one backward
            acts += [Action(r, "F", w + i), Action(r, "B", i)]
        acts += [Action(r, "B", i) for i in range(m - w, m)]  # cool-down
        out.append(acts)
    return out


def interleaved_1f1b(p: int, m: int, v: int = 2) -> list[list[Action]]:
    """Interleaved 1F1B with ``v`` model chunks per rank (arXiv:2104.04473 §2.2.2).

    Rank r holds stages ``r, r+p, ..., r+(v−1)p``. Micro-batches go through the local chunks in
    groups of p: forward k (k = 0 .. m·v−1) is chunk ``(k mod p·v) // p`` on micro-batch
    ``(k // p·v)·p + k mod p``; backwards visit the chunks in reverse. Warm-up
    ``min((p−r−1)·2 + (v−1)·p, m·v)`` forwards, then 1F1B, then cool-down (Megatron-LM's
    ``forward_backward_pipelining_with_interleaving``). Bubble time shrinks by v:
    (p−1)/(v·m) of the compute time.

    Raises:
        ConfigError: ``m`` not a multiple of ``p`` (micro-batches travel in groups of p).
    """
    _check_pm(p, m, v)
    if m % p:
        lo = m // p * p
        raise ConfigError(
            f"interleaved 1F1B needs m (micro-batches) to be a multiple of p={p}, got m={m}; "
            f"use m={lo or p} or m={lo + p}"
        )
    total = m * v

    def act(r: int, k: int, kind: str) -> Action:
        chunk = (k % (p * v)) // p
        if kind == "B":
            chunk = v - 1 - chunk
        mb = (k // (p * v)) * p + k % p
        return Action(chunk * p + r, kind, mb)

    out = []
    for r in range(p):
        w = min((p - r - 1) * 2 + (v - 1) * p, total)
        acts = [act(r, k, "F") for k in range(w)]
        for i in range(total - w):
            acts += [act(r, w + i, "F"), act(r, i, "B")]
        acts += [act(r, k, "B") for k in range(total - w, total)]
        out.append(acts)
    return out


def zb_h1(p: int, m: int) -> list[list[Action]]:
    """ZB-H1 (arXiv:2401.10241 §2.1) for ``p`` ranks and ``m`` micro-batches, one stage per rank.

    Rank r: warm-up ``w = min(p−r−1, m)`` forwards; then ``F, I`` pairs as in 1F1B, each followed by
    a W once r pairs have run (W of micro-batch k runs r pairs after its I); the cool-down runs
    ``I, W``; the r delayed W's close the step. Rank r holds at most p micro-batches whose W has
    not run (every rank like 1F1B's rank 0) and ``p − r`` whose I has not (as 1F1B).
    """
    _check_pm(p, m)
    out = []
    for r in range(p):
        w = min(p - r - 1, m)
        acts = [Action(r, "F", k) for k in range(w)]
        nw = 0
        for k in range(m - w):
            acts += [Action(r, "F", w + k), Action(r, "I", k)]
            if k >= r:
                acts.append(Action(r, "W", nw))
                nw += 1
        for k in range(m - w, m):  # cool-down: every I is followed by a W that was waiting
            acts += [Action(r, "I", k), Action(r, "W", nw)]
            nw += 1
        acts += [Action(r, "W", k) for k in range(nw, m)]
        out.append(acts)
    return out


SCHEDULES: dict[str, Callable[..., list[list[Action]]]] = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved": interleaved_1f1b,
    "zb-h1": zb_h1,
}


def make_schedule(name: str, p: int, m: int, v: int = 1) -> list[list[Action]]:
    """``make_schedule("1f1b", p, m)``; ``v`` only for ``"interleaved"`` (default 2 there)."""
    if name not in SCHEDULES:
        raise ConfigError(f"schedule {name!r} is unknown; use one of {sorted(SCHEDULES)}")
    if name == "interleaved":
        return interleaved_1f1b(p, m, v if v > 1 else 2)
    if v != 1:
        raise ConfigError(f"schedule {name!r} has one stage per rank, got v={v}; use 'interleaved' for v > 1")
    return SCHEDULES[name](p, m)


def num_stages(schedule: list[list[Action]]) -> int:
    return 1 + max(a.stage for acts in schedule for a in acts)


def num_microbatches(schedule: list[list[Action]]) -> int:
    return 1 + max(a.mb for acts in schedule for a in acts)


def _dur(d, a: Action) -> float:
    return float(d(a)) if callable(d) else float(d)


def simulate(
    schedule: list[list[Action]], t_f=1.0, t_b=2.0, t_comm=0.0, decoupled: bool = True, t_w=1.0, place=None
) -> Simulation:
    """SIMULATE ``schedule`` (per-rank action lists) and check it.

    Args:
        schedule: ``schedule[rank]`` = that rank's actions in order; stage s must be on rank s % p,
            or ``place(s)`` (e.g. the V of ZBV/DualPipeV: stages r and 2p−1−r on rank r).
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

    Returns:
        A :class:`Simulation`.

    Raises:
        ConfigError: an action missing, repeated, or on the wrong rank; a backward listed before
            its forward on the same rank.
        DeadlockError: no rank can make progress (each waits on an input not yet produced).
    """
    p = len(schedule)
    if p < 1:
        raise ConfigError("the schedule has no ranks")
    S, m = num_stages(schedule), num_microbatches(schedule)
    if S % p:
        raise ConfigError(f"{S} stages over p={p} ranks: the number of stages must be a multiple of p")
    v, rank_of = S // p, place or (lambda s: s % p)
    seen: dict[Action, int] = {}
    for r, acts in enumerate(schedule):
        for i, a in enumerate(acts):
            if rank_of(a.stage) != r:
                raise ConfigError(
                    f"action {a} is listed on rank {r} but stage {a.stage} lives on rank "
                    f"{rank_of(a.stage)} ({'place(s)' if place else 'stage s on rank s % p'})"
                )
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

    need = [(s, i, k) for s in range(S) for i in range(m) for k in ("F", "B") if k == "F" or bwd(s, i) == "B"]
    need += [(s, i, k) for s in range(S) for i in range(m) for k in "IW" if bwd(s, i) == "I"]
    missing = [Action(s, k, i) for s, i, k in need if Action(s, k, i) not in seen]
    if missing or any(Action(a.stage, "B", a.mb) in seen for a in seen if a.kind == "I"):
        raise ConfigError(
            f"the schedule misses {len(missing)} action(s), e.g. {missing[:4]} (or runs B and I/W of one micro-batch); "
            f"every stage 0..{S - 1} needs F and B (or I and W) of every micro-batch 0..{m - 1}"
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
        if a.kind == "F":
            return [Action(a.stage - 1, "F", a.mb)] if a.stage > 0 else []
        up = [Action(a.stage + 1, bwd(a.stage + 1, a.mb), a.mb)] if a.stage < S - 1 else []
        return [Action(a.stage, "F", a.mb)] + up

    remaining = sum(len(x) for x in schedule)
    while remaining:
        progressed = False
        for r in range(p):
            while pos[r] < len(schedule[r]):
                a = schedule[r][pos[r]]
                ds = deps(a)
                if any(d not in done for d in ds):
                    break
                ready = free[r]
                for d in ds:
                    src = rank_of(d.stage)
                    # decoupled: the message left when d ended; coupled: its transfer starts only
                    # once this rank has posted the receive, paired with its previous action's send
                    t_arr = (done[d] if decoupled or src == r else max(done[d], posted[r])) + (
                        t_comm if src != r else 0.0
                    )
                    if src != r:
                        messages.append((str(a), src, r, done[d], t_arr))
                    ready = max(ready, t_arr)
                end = ready + _dur({"F": t_f, "W": t_w}.get(a.kind, t_b), a)
                timeline[r].append((a, ready, end))
                done[a] = end
                nxt = Action(a.stage + (1 if a.kind == "F" else -1), "F", a.mb)
                sends = a.kind != "W" and 0 <= nxt.stage < S and rank_of(nxt.stage) != r
                free[r] = end + (t_comm if sends and not decoupled else 0.0)  # coupled: the send blocks
                posted[r] = end  # coupled: the next receive is posted with this action's send
                pos[r] += 1
                remaining -= 1
                progressed = True
                inflight[r] += {"F": 1, "I": 0}.get(a.kind, -1)  # held from F until B (or W)
                peak[r] = max(peak[r], inflight[r])
        if not progressed:
            stuck = {r: str(schedule[r][pos[r]]) for r in range(p) if pos[r] < len(schedule[r])}
            raise DeadlockError(
                f"deadlock: every unfinished rank waits for an input that is never produced; "
                f"next actions {stuck}. Reorder the schedule so that each rank's next action "
                f"depends only on actions other ranks can reach"
            )
    makespan = max(free)
    busy = sum(t1 - t0 for tl in timeline for _, t0, t1 in tl)
    return Simulation(
        p, timeline, messages, makespan, 1 - busy / (p * makespan) if makespan else 0.0, [x / v for x in peak]
    )


def bubble_formula(p: int, m: int, v: int = 1) -> float:
    """Idle fraction of the total time: ``(p−1)/(v·m + p−1)`` (arXiv:2104.04473 §2.2).

    The paper states the bubble relative to the ideal compute time: ``(p−1)/m`` (GPipe, 1F1B) and
    ``(p−1)/(v·m)`` (interleaved); as a fraction of the whole step that is ``b/(1+b)``.
    """
    b = (p - 1) / (v * m)
    return b / (1 + b)
