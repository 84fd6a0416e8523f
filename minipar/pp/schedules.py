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

:func:`simulate` (in :mod:`minipar.pp.simulation`, re-exported here with the vocabulary
:class:`Action`, :func:`parse`) replays a schedule with given durations, checks it (every action
once, on its rank, no deadlock) and predicts makespan, bubble and peak in-flight micro-batches.
DeepSeek-V3's bidirectional DualPipe is in :mod:`minipar.pp.dualpipe`.
"""

from __future__ import annotations

from typing import Callable

from minipar.errors import ConfigError
from minipar.pp.simulation import (  # noqa: F401 (re-exported: the vocabulary and the simulator)
    Action,
    DeadlockError,
    Overlap,
    Simulation,
    num_microbatches,
    num_stages,
    parse,
    simulate,
    unpack,
)


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


def bubble_formula(p: int, m: int, v: int = 1) -> float:
    """Idle fraction of the total time: ``(p−1)/(v·m + p−1)`` (arXiv:2104.04473 §2.2).

    The paper states the bubble relative to the ideal compute time: β = ``(p−1)/m`` (GPipe, 1F1B) and
    ``(p−1)/(v·m)`` (interleaved); as a fraction of the whole step that is ``β/(1+β)``.
    """
    beta = (p - 1) / (v * m)
    return beta / (1 + beta)
