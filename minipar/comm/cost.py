"""The α–β cost of the collectives: ONE family of formulas, read by the planner, the cluster clock and lesson 01.

    from minipar.comm.cost import all_reduce_time, collective_time
    all_reduce_time(8, 2**30, NVLINK4)            # seconds: ring all-reduce of 1 GiB on 8 ranks
    all_reduce_time(8, 2**30, (5e-6, 230e9))      # the same with an (α, β) pair (the planner's Device links)

A link costs α seconds per message (per ring step) and n/β for n bytes (Hockney's model; a
:class:`minipar.comm.links.Link` or an ``(α seconds, β bytes/s)`` pair): one message of n bytes
takes α + n/β (:func:`p2p_time`, which ``Link.time`` is). For a collective of
``nbytes`` (the FULL buffer: the all-reduced tensor, the all-gather's output, the reduce-scatter's
input) on ``n`` ranks:

- ring **all-reduce** (:func:`all_reduce_time`): reduce-scatter then all-gather,
  2(n−1)·α + 2(n−1)/n · S/β (Patarasuk & Yuan 2009): 2(n−1) steps, each rank sending
  2(n−1)/n · S bytes (:func:`all_reduce_bytes`, the "bus bytes" of nccl-tests' PERFORMANCE.md,
  what ``CommLog`` records). The 2(n−1)α term grows with the group: the per-GPU-count effect;
- ring **reduce-scatter / all-gather / all-to-all** (and gather/scatter as a ring)
  (:func:`ring_time`): (n−1)·α + (n−1)/n · S/β (:func:`ring_bytes`), half an all-reduce;
- **all-to-all** of S bytes per rank (:func:`all_to_all_time`): the same (n−1)·α + (n−1)/n · S/β;
- **broadcast / reduce** as a pipelined chain (NCCL's ring broadcast) (:func:`chain_time`):
  (n−1)·α + S/β.

One rank: 0 seconds. Works element-wise on numpy arrays of ``nbytes`` (lesson 01 draws it).
Lesson 01 fits α and β to measured all-reduces of this machine (:func:`fit_all_reduce`, :func:`misfit`).
Units: seconds, bytes, bytes/s.
"""

from __future__ import annotations

from minipar.errors import ConfigError

ALGORITHMS = ("allreduce", "ring", "chain")


def alpha_beta(link) -> tuple[float, float]:
    """``(α seconds, β bytes/s)`` of a :class:`~minipar.comm.links.Link` (its ``alpha_s``,
    ``beta_bytes_per_s``) or of an (α, β) pair."""
    if hasattr(link, "beta_bytes_per_s"):
        return link.alpha_s, link.beta_bytes_per_s
    a, b = link
    return a, b


def p2p_time(nbytes, link):
    """Seconds of one message of ``nbytes`` (a send, one ring step): α + n/β."""
    a, b = alpha_beta(link)
    return a + nbytes / b


def all_reduce_bytes(n: int, nbytes):
    """Bytes each rank sends (and receives) in a ring all-reduce of ``nbytes`` on ``n`` ranks: 2(n−1)/n·S."""
    return 2 * (n - 1) / n * nbytes


def ring_bytes(n: int, nbytes):
    """Bytes each rank sends (and receives) in a ring reduce-scatter / all-gather / all-to-all of
    ``nbytes`` (the full buffer) on ``n`` ranks: (n−1)/n·S."""
    return (n - 1) / n * nbytes


def all_reduce_time(n: int, nbytes, link):
    """Seconds of a ring all-reduce of ``nbytes`` on ``n`` ranks: 2(n−1)α + 2(n−1)/n·S/β (module doc)."""
    a, b = alpha_beta(link)
    return 0.0 if n <= 1 else 2 * (n - 1) * a + all_reduce_bytes(n, nbytes) / b


def ring_time(n: int, nbytes, link):
    """Seconds of a ring reduce-scatter / all-gather / all-to-all of ``nbytes`` (the full buffer) on
    ``n`` ranks: (n−1)α + (n−1)/n·S/β, half of :func:`all_reduce_time`."""
    a, b = alpha_beta(link)
    return 0.0 if n <= 1 else (n - 1) * a + ring_bytes(n, nbytes) / b


def all_to_all_time(n: int, nbytes, link):
    """Seconds of an all-to-all on ``n`` ranks of ``nbytes`` per rank (its whole send buffer, 1/n of it for
    itself): (n−1)α + (n−1)/n·S/β, :func:`ring_time`'s cost: n−1 messages of S/n (NCCL's all-to-all is n−1
    send/recv pairs, nccl-tests' PERFORMANCE.md: bus bytes (n−1)/n·S). Expert parallelism's dispatch and combine
    (:mod:`minipar.perf.moe`)."""
    return ring_time(n, nbytes, link)


def chain_time(n: int, nbytes, link):
    """Seconds of a broadcast / reduce of ``nbytes`` on ``n`` ranks as a pipelined chain: (n−1)α + S/β."""
    a, b = alpha_beta(link)
    return 0.0 if n <= 1 else (n - 1) * a + nbytes / b


def collective_time(algo: str, n_ranks: int, nbytes, link):
    """Seconds of one collective by its algorithm's name: ``"allreduce"`` (:func:`all_reduce_time`),
    ``"ring"`` (:func:`ring_time`) or ``"chain"`` (:func:`chain_time`).

    Raises ConfigError for another ``algo``.
    """
    if algo not in ALGORITHMS:
        raise ConfigError(f"collective_time(algo={algo!r}): use 'allreduce', 'ring' or 'chain'")
    return {"allreduce": all_reduce_time, "ring": ring_time, "chain": chain_time}[algo](n_ranks, nbytes, link)


def fit_all_reduce(sizes, times, n: int) -> tuple[float, float]:
    """Fit T(S) = 2(n−1)α + 2(n−1)/n · S/β to measured (bytes, seconds) of ring all-reduces on ``n`` ranks.

    Returns ``(α seconds, β bytes/s)``. Least squares on the *relative* error (each point weighted by 1/T),
    so a 1 KiB point, a thousand times faster than a 64 MiB one, counts as much.
    """
    import numpy as np

    S, T = np.asarray(sizes, float), np.asarray(times, float)
    A = np.stack([np.full_like(S, 2 * (n - 1)), all_reduce_bytes(n, S)], axis=1) / T[:, None]
    (alpha, inv_b), *_ = np.linalg.lstsq(A, np.ones_like(T), rcond=None)
    return float(alpha), float(1 / inv_b)


def misfit(sizes, times, n: int, link) -> str:
    """Where the α–β line misses: measured / model time at every size, the worst ratio and its size, and how
    many sizes are within ×1.5, as one line (a measurement: print it after ⏱)."""
    ratios = [t / all_reduce_time(n, s, link) for s, t in zip(sizes, times)]
    worst = max(range(len(ratios)), key=lambda i: max(ratios[i], 1 / ratios[i]))
    near = sum(1 for r in ratios if 1 / 1.5 <= r <= 1.5)
    return (
        f"measured/model from {sizes[0] // 1024} KiB up: "
        + " ".join(f"{r:.2f}" for r in ratios)
        + f"; worst ×{ratios[worst]:.2f} at {sizes[worst] // 1024} KiB; {near} of {len(ratios)} within ×1.5"
    )
