"""DeepSeek-V3's DualPipe as data: a bidirectional pipeline schedule, SIMULATED (not run on ranks).

DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", arXiv:2412.19437, §3.2.1 "DualPipe and
Computation-Communication Overlap", Figure 5 (8 PP ranks, 20 micro-batches in two directions) and
Table 2; the schedule order follows ``DualPipe.step`` in github.com/deepseek-ai/DualPipe
(``dualpipe/dualpipe.py``, its eight steps), re-derived here as per-rank action lists.

The idea. Micro-batches enter the pipeline from BOTH ends: half of them (``m/2``) go rank 0 → p−1,
the other half rank p−1 → 0. Every rank therefore holds two model chunks, stage r of the forward
direction and stage p−1−r of the reverse one: 2× the parameters (and their gradients and optimizer
state) of 1F1B. In the steady state each rank runs a forward of one direction and a backward of the
other as one overlapped pair (:class:`~minipar.pp.simulation.Overlap`, the paper's F&B), so one
micro-batch's all-to-all and pipeline messages hide under the other's compute. The warm-up and
cool-down use zero bubble's split backward (I now, W later, FIFO) to fill the gaps.

Notation (minipar's, shared with :mod:`minipar.pp.schedules`): forward direction = stages
``0..p−1`` (stage s on rank s), micro-batches ``0..m/2−1``; reverse direction = stages ``p..2p−1``
(stage p+k is the reverse pipeline's k-th stage, on rank p−1−k: stage s on rank 2p−1−s, PyTorch's
V placement :func:`~minipar.pp.native.v_shape`), micro-batches ``m/2..m−1``. A micro-batch's
route is its direction's p stages (:func:`route`), so ``simulate(dualpipe(p, m), ...,
place=v_shape(p), route=route(p, m))`` checks and times it. Each chunk is a whole stage (1/p of
the model): ``peak_inflight`` counts it as 1.

Table 2 (repeated in the repo's README), per rank, ``PP`` = p stages, F / B / W the times of a
forward, a FULL backward and its weight part of one stage-chunk, F&B an overlapped pair:
bubble 1F1B ``(PP−1)(F+B)``, ZB1P ``(PP−1)(F+B−2W)``, DualPipe ``(PP/2−1)(F&B+B−3W)``;
parameters 1×, 1×, 2×; activations ``PP``, ``PP``, ``PP+1`` micro-batches. :func:`table2_bubble`
is the DualPipe row. The paper states no assumptions; the simulator reaches it exactly when the
backward's input part lasts a forward (``I = B − W = F``), ``W ≤ F`` and ``max(F, B) ≤ F&B ≤ F + B``
(every rank idles exactly the formula at ``F&B = F + B``, the rank idling most below that); with
``I > F`` it idles less, with ``I < F`` more (tests/test_dualpipe.py). Activations: every rank's peak
is ``p + 1`` micro-batches of one stage, as the table says. It reproduces Figure 5 cell for cell.
"""

from __future__ import annotations

from minipar.errors import ConfigError
from minipar.pp.simulation import Action, Overlap, idle_per_rank  # noqa: F401 (idle_per_rank re-exported)


def check_dualpipe(p: int, m: int) -> None:
    """DualPipe needs p even and ≥ 2 and m even and ≥ 2p (``DualPipe.step``'s assert: m/2 per
    direction, and at least one steady-state round on the middle ranks). Raises ConfigError."""
    if not isinstance(p, int) or p < 2 or p % 2:
        raise ConfigError(f"DualPipe needs an even number of ranks p >= 2, got p={p!r}; use p={max(2, p + p % 2)}")
    if not isinstance(m, int) or m < 2 * p or m % 2:
        fix = max(2 * p, m + m % 2) if isinstance(m, int) else 2 * p
        raise ConfigError(f"DualPipe needs m (micro-batches) even and >= 2p = {2 * p}, got m={m!r}; use m={fix}")


def route(p: int, m: int):
    """``route(mb)``: the stages micro-batch ``mb`` visits: ``0..p−1`` (forward direction,
    ``mb < m/2``) or ``p..2p−1`` (reverse direction)."""
    return lambda mb: range(p) if mb < m // 2 else range(p, 2 * p)


def dualpipe(p: int, m: int) -> list[list[Action | Overlap]]:
    """DualPipe's per-rank programs for ``p`` ranks and ``m`` micro-batches (m/2 per direction).

    Entries are :class:`Action` (F, B, I, W) or :class:`Overlap` (F of one direction with the full
    B of the other). Rank r and rank p−1−r run mirror images; with ``h = p/2`` and
    ``k = min(r, p−1−r)`` (a rank's distance from the nearer end), "own" = the direction that
    enters at this rank's end (forward for r < h), "other" = the other one, ``DualPipe.step``'s
    eight steps are:

    1. ``2(h−k−1)`` F own;  2. ``k+1`` × (F own, F other);
    3. ``h−k−1`` × (I other, W, F other)   (zero bubble: the W at once, FIFO);
    4. ``m/2 − p + k + 1`` × (F own & B other, F other & B own) — the steady state; a middle rank
       (k = h−1) runs its very first pair as F then B, not overlapped (fewer bubbles, says the code);
    5. ``h−k−1`` × (B other, F other & B own);
    6. ``k+1`` × (B other, B own), the second half split into I (W deferred);
    7. ``h−k−1`` × (W, I own);  8. ``k+1`` × W.

    Raises:
        ConfigError: p odd or < 2, m odd or < 2p (see :func:`check_dualpipe`).
    """
    check_dualpipe(p, m)
    h, half = p // 2, m // 2
    out = []
    for r in range(p):
        k, second = min(r, p - 1 - r), r >= h
        stage = (r, 2 * p - 1 - r)  # this rank's stage of direction 0 (forward) and 1 (reverse)
        nf, nb, wq, acts = [0, 0], [0, 0], [], []

        def d(phase: int) -> int:  # phase 0 = own direction (enters at this rank's end), 1 = other
            return phase ^ second

        def F(phase: int) -> Action:
            dd = d(phase)
            nf[dd] += 1
            return Action(stage[dd], "F", dd * half + nf[dd] - 1)

        def B(phase: int, split: bool = False) -> Action:
            dd = d(phase)
            nb[dd] += 1
            a = Action(stage[dd], "I" if split else "B", dd * half + nb[dd] - 1)
            if split:
                wq.append(Action(a.stage, "W", a.mb))
            return a

        def W() -> Action:
            return wq.pop(0)  # FIFO, as DualPipe's WeightGradStore

        acts += [F(0) for _ in range(2 * (h - k - 1))]  # 1
        for _ in range(k + 1):  # 2
            acts += [F(0), F(1)]
        for _ in range(h - k - 1):  # 3
            acts += [B(1, split=True), W(), F(1)]
        for i in range(half - p + k + 1):  # 4
            acts += [F(0), B(1)] if i == 0 and k == h - 1 else [Overlap(F(0), B(1))]
            acts.append(Overlap(F(1), B(0)))
        for _ in range(h - k - 1):  # 5
            acts += [B(1), Overlap(F(1), B(0))]
        for i in range(k + 1):  # 6: of its 2(k+1) backwards, the last k+1 are split
            acts += [B(1, split=_split6(i, k, 1)), B(0, split=_split6(i, k, 0))]
        for _ in range(h - k - 1):  # 7
            acts += [W(), B(0, split=True)]
        acts += [W() for _ in range(k + 1)]  # 8
        assert not wq, (r, wq)
        out.append(acts)
    return out


def _split6(i: int, k: int, which: int) -> bool:
    """Step 6's switch (``DualPipe.step``): zero bubble turns on at iteration ``(k+1)//2``, before
    that iteration's B other (``which=1``) when k is odd, after it (so from its B own) when k is even."""
    j = (k + 1) // 2
    return i > j or (i == j and (which == 0 or k % 2 == 1))


def table2_bubble(p: int, f: float, b: float, w: float, fb: float | None = None) -> float:
    """DeepSeek-V3 Table 2, DualPipe row: idle time per rank ``(PP/2 − 1)(F&B + B − 3W)`` (time
    units of f, b, w; ``fb`` = F&B, default f + b: no overlap gain). ``PP`` = p (even)."""
    return (p // 2 - 1) * ((f + b if fb is None else fb) + b - 3 * w)
