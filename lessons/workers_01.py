"""Lesson 01's experiment drivers (run on every rank by ``minipar.launch``) and its pictures.

Workers only call ``torch.distributed`` and ``minipar``; what the lesson teaches lives in
``minipar.comm.collectives``. The pictures are drawn from the tensors the workers return.

Cell values encode who contributed: rank r starts with (c+1)·10^r in chunk c, so a sum shows
every contributor as a non-zero digit (chunk 1 summed over 4 ranks = 2222). Colours follow the
same digits: one colour per contributing rank, grey for "everyone".
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar.comm.collectives import naive_all_reduce, ring_all_reduce
from minipar.comm.comm_log import CommLog
from minipar.comm.cost import all_reduce_time

NAN = float("nan")


def _start(n: int, me: int) -> torch.Tensor:
    """Rank ``me``'s starting row: chunk c holds (c+1)·10^me."""
    return torch.tensor([(c + 1) * 10.0**me for c in range(n)])


def primitives() -> dict:
    """Run each primitive once on this rank; return ``{name: (before, after)}`` as lists (NaN = holds nothing)."""
    n, me = md.world_size(), md.rank()
    out = {}
    full = _start(n, me)
    empty = torch.full((n,), NAN)

    def only(c, value):
        row = empty.clone()
        row[c] = value
        return row

    t = full.clone()
    dist.broadcast(t, src=0)
    out["broadcast(t, src=0)"] = (full, t)

    parts = list(full.chunk(n)) if me == 0 else None
    mine = torch.empty(1)
    dist.scatter(mine, parts, src=0)
    out["scatter(out, chunks, src=0)"] = (full if me == 0 else empty, only(me, mine))

    gathered = [torch.empty(1) for _ in range(n)] if me == 0 else None
    dist.gather(full[me : me + 1].clone(), gathered, dst=0)
    out["gather(chunk, chunks, dst=0)"] = (only(me, full[me]), torch.cat(gathered) if me == 0 else empty)

    t = full.clone()
    dist.reduce(t, dst=0)
    out["reduce(t, dst=0)"] = (full, t)

    t = torch.empty(n)
    dist.all_gather_single(t, full[me : me + 1].clone())
    out["all_gather_single(out, chunk)"] = (only(me, full[me]), t)

    mine = torch.empty(1)
    dist.reduce_scatter_single(mine, full.clone())
    out["reduce_scatter_single(out, t)"] = (full, only(me, mine))

    t = full.clone()
    dist.all_reduce(t)
    out["all_reduce(t)"] = (full, t)

    t = full.clone() if me == 0 else empty.clone()
    if me == 0:
        dist.send(t, dst=1)
    elif me == 1:
        dist.recv(t, src=0)
    out["send(t, dst=1) / recv(t, src=0)"] = (full if me == 0 else empty, t)
    return {k: (a.tolist(), b.tolist()) for k, (a, b) in out.items()}


def ring_steps() -> dict:
    """One ring all-reduce of a 4-chunk tensor, with the state after each of its 2(N−1) steps."""
    n, me = md.world_size(), md.rank()
    t = _start(n, me)
    start = t.tolist()
    trace = []
    ring_all_reduce(t, trace=trace)
    return dict(start=start, steps=[dict(s, after=s["after"].tolist()) for s in trace])


def comm_bytes(numel: int) -> dict:
    """Bytes this rank sends/receives in one ring, one naive and one gloo all-reduce of ``numel`` float32."""
    x = torch.ones(numel)
    with CommLog() as log:
        ring_all_reduce(x.clone())
        naive_all_reduce(x.clone())
        dist.all_reduce(x.clone())
    return {op: (d["sent"], d["recv"], d["calls"]) for op, d in log.by_op().items()}


def compare_ring_with_gloo(numel: int) -> dict:
    """minipar's ring and naive all-reduce against ``dist.all_reduce`` on the same random tensors."""
    g = torch.Generator().manual_seed(md.rank())
    x = torch.randn(numel, generator=g)
    ref = x.clone()
    dist.all_reduce(ref)
    ring = ring_all_reduce(x.clone())
    naive = naive_all_reduce(x.clone())
    exact = torch.randint(-50, 51, (numel,), generator=g).float()
    ref_exact = exact.clone()
    dist.all_reduce(ref_exact)
    return dict(
        ring=(ring - ref).abs().max().item(),
        naive=(naive - ref).abs().max().item(),
        ring_int_equal=torch.equal(ring_all_reduce(exact), ref_exact),
        scale=ref.abs().max().item(),
        max_abs=x.abs().max().item(),
    )


# ---- what goes wrong -------------------------------------------------------------------------


def swapped_order() -> dict:
    """Two ranks all-reduce a gradient (1 per rank) and a loss (10 per rank), rank 1 in the other order."""
    grad, loss = torch.tensor([1.0]), torch.tensor([10.0])
    order = [grad, loss] if md.rank() == 0 else [loss, grad]
    for t in order:
        dist.all_reduce(t)
    return dict(grad=grad.item(), loss=loss.item())


def swapped_order_detail() -> dict:
    """:func:`swapped_order` on a group made with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` checks."""
    dist.set_debug_level(dist.DebugLevel.DETAIL)  # groups made from now on check every collective
    group = md.new_group()
    grad, loss = torch.tensor([1.0]), torch.tensor([10.0])
    for t in [grad, loss] if md.rank() == 0 else [loss, grad]:
        dist.all_reduce(t, group=group)
    return dict(grad=grad.item(), loss=loss.item())


def different_shapes(how: str) -> str:
    """Rank 1 passes 5 elements where rank 0 passes 4; return what this rank saw.

    ``how``: ``"gloo"`` (plain ``dist.all_reduce``), ``"detail"`` (the same on a group made under
    ``TORCH_DISTRIBUTED_DEBUG=DETAIL``) or ``"minipar"`` (``ring_all_reduce``).
    """
    group = None
    if how == "detail":
        dist.set_debug_level(dist.DebugLevel.DETAIL)
        group = md.new_group()
    t = torch.ones(4 if md.rank() == 0 else 5)
    try:
        if how == "minipar":
            ring_all_reduce(t)
        else:
            dist.all_reduce(t, group=group)
        return f"no error; result {t.tolist()}"
    except Exception as exc:  # noqa: BLE001 - the point is to show what is raised
        return f"{type(exc).__name__}: {exc}"


def skipped_call(use_minipar: bool) -> str:
    """Rank 1 skips the all-reduce (and stays alive for a while): what does rank 0 see?"""
    import time

    if md.rank() == 1:
        time.sleep(3)
        return "skipped"
    t = torch.ones(4)
    try:
        (ring_all_reduce if use_minipar else dist.all_reduce)(t)
        return "no error"
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"


# ---- pictures --------------------------------------------------------------------------------


def _contributors(value: float, chunk: int) -> list[int]:
    """Ranks whose starting value is summed into ``value`` (read from the decimal digits)."""
    m = int(round(value / (chunk + 1)))
    return [r for r, digit in enumerate(reversed(str(m))) if digit != "0"]


def draw_rows(ax, rows, title="", sent=None, received=None):
    """Draw ranks as rows and chunks as cells, coloured by contributing ranks (grey: all ranks).

    ``sent``/``received``: per rank, the chunk to outline (black: sent, red: received).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    colours = plt.get_cmap("tab10").colors
    n_rank, n_chunk = len(rows), len(rows[0])
    for r, row in enumerate(rows):
        for c, v in enumerate(row):
            if v != v:  # NaN: this rank holds nothing here
                ax.add_patch(Rectangle((c, r), 1, 1, facecolor="white", edgecolor="0.85"))
                continue
            who = _contributors(v, c)
            full = len(who) == n_rank
            colour = "0.35" if full else tuple(sum(colours[k][i] for k in who) / len(who) for i in range(3))
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor=colour, edgecolor="white", alpha=1 if full else 0.75))
            ax.text(
                c + 0.5, r + 0.5, f"{v:.0f}", ha="center", va="center", fontsize=8, color="white" if full else "black"
            )
    for marks, colour, style in ((sent, "black", "-"), (received, "red", "--")):
        for r, c in enumerate(marks or []):
            ax.add_patch(
                Rectangle((c + 0.04, r + 0.04), 0.92, 0.92, fill=False, lw=2.2, edgecolor=colour, linestyle=style)
            )
    ax.set_xlim(0, n_chunk)
    ax.set_ylim(n_rank, 0)
    ax.set_xticks([c + 0.5 for c in range(n_chunk)], [f"chunk {c}" for c in range(n_chunk)], fontsize=7)
    ax.set_yticks([r + 0.5 for r in range(n_rank)], [f"rank {r}" for r in range(n_rank)], fontsize=7)
    ax.tick_params(length=0)
    ax.set_title(title, fontsize=9)


def draw_primitives(results):
    """One before → after pair per primitive, from ``launch(primitives, 4)``."""
    import matplotlib.pyplot as plt

    names = list(results[0])
    fig, axes = plt.subplots(len(names) // 2, 4, figsize=(13, 2.6 * len(names) // 2))
    for k, name in enumerate(names):
        before = [res[name][0] for res in results]
        after = [res[name][1] for res in results]
        row, col = divmod(k, 2)
        draw_rows(axes[row, 2 * col], before, f"{name}\nbefore")
        draw_rows(axes[row, 2 * col + 1], after, "after")
    fig.tight_layout()
    return fig


def draw_ring(results):
    """The ring all-reduce after each of its 2(N−1) steps, from ``launch(ring_steps, N)``."""
    import matplotlib.pyplot as plt

    n_steps = len(results[0]["steps"])
    half = n_steps // 2
    fig, axes = plt.subplots(2, half + 1, figsize=(3.1 * (half + 1), 5.6))
    draw_rows(axes[0, 0], [res["start"] for res in results], "start")
    draw_rows(axes[1, 0], [res["steps"][half - 1]["after"] for res in results], "after the reduce-scatter")
    for k in range(n_steps):
        step = [res["steps"][k] for res in results]
        s = step[0]
        ax = axes[k // half, 1 + k % half]
        draw_rows(
            ax,
            [x["after"] for x in step],
            f"{s['phase']} step {s['step'] + 1}",
            sent=[x["send"] for x in step],
            received=[x["recv"] for x in step],
        )
    fig.suptitle(
        "ring all-reduce: black = chunk sent to rank+1, red dashed = chunk received from rank−1 "
        "(added in the reduce-scatter, copied in the all-gather)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


# ---- the α–β cost model ----------------------------------------------------------------------


def fit_alpha_beta(sizes: list[int], times: list[float], n: int) -> tuple[float, float]:
    """Fit T(S) = 2(N−1)·α + 2(N−1)/N · S/B to measured (bytes, seconds); return (α seconds, B bytes/s).

    Least squares on the *relative* error (each point weighted by 1/T), so the 1 KB points, whose
    times are a thousand times smaller, count as much as the 64 MB ones.
    """
    import numpy as np

    S, T = np.asarray(sizes, float), np.asarray(times, float)
    A = np.stack([np.full_like(S, 2 * (n - 1)), 2 * (n - 1) / n * S], axis=1) / T[:, None]
    (alpha, inv_b), *_ = np.linalg.lstsq(A, np.ones_like(T), rcond=None)
    return float(alpha), float(1 / inv_b)


def draw_cost_model(sizes, sweep, fits):
    """Measured all_reduce times (points) against the fitted model (lines), per world size; ring vs torch."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.3))
    for k, (n, res) in enumerate(sweep.items()):
        S = np.asarray(sizes[: len(res["torch"])], float)
        colour = plt.get_cmap("tab10").colors[k]
        ax.loglog(S, np.asarray(res["torch"]) * 1e3, "o", color=colour, label=f"dist.all_reduce, N={n}")
        alpha, B = fits[n]
        grid = np.geomspace(S[0], S[-1], 50)
        ax.loglog(
            grid,
            all_reduce_time(n, grid, (alpha, B)) * 1e3,
            "-",
            color=colour,
            alpha=0.6,
            label=f"model: α={alpha * 1e6:.0f} µs, B={B / 1e9:.2f} GB/s",
        )
        if "ring" in res:
            ax.loglog(S, np.asarray(res["ring"]) * 1e3, "x", color=colour, ms=8, label=f"minipar ring, N={n}")
            bx.semilogx(S, np.asarray(res["ring"]) / np.asarray(res["torch"]), "x-", color=colour, label=f"N={n}")
    ax.set_xlabel("message size S (bytes)")
    ax.set_ylabel("time (ms)")
    ax.set_title("all-reduce time: measured (points) vs T = 2(N−1)α + 2(N−1)/N·S/B")
    ax.legend(fontsize=7)
    bx.axhline(1.0, color="0.5", lw=1)
    bx.axhline(1.2, color="red", lw=1, ls="--", label="target ≤ 1.2× at 16 MB")
    bx.set_xlabel("message size S (bytes)")
    bx.set_ylabel("minipar ring / gloo (time ratio)")
    bx.set_title("minipar's Python ring vs gloo's C++ all_reduce, same run")
    bx.legend(fontsize=8)
    fig.tight_layout()
    return fig


def draw_bytes(table, S):
    """Bars: bytes sent per rank by the ring and the naive all-reduce, against 2(N−1)/N·S."""
    import matplotlib.pyplot as plt
    import numpy as np

    ns = [row["N"] for row in table]
    x = np.arange(len(ns))
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    ax.bar(x - 0.27, [row["ring"] / S for row in table], 0.27, label="ring: every rank (measured)")
    ax.bar(x, [row["naive_root"] / S for row in table], 0.27, label="naive: rank 0 (measured)")
    ax.bar(x + 0.27, [row["naive_other"] / S for row in table], 0.27, label="naive: other ranks (measured)")
    ax.plot(x - 0.27, [2 * (n - 1) / n for n in ns], "k_", ms=30, mew=2, label="2(N−1)/N (formula)")
    ax.set_xticks(x, [f"N = {n}" for n in ns])
    ax.set_ylabel("bytes sent per rank / S")
    ax.set_title(f"bytes sent per rank for one all-reduce of S = {S / 2**20:.0f} MiB")
    ax.legend(fontsize=8, markerscale=0.4)
    fig.tight_layout()
    return fig


def misfit(sizes: list[int], times: list[float], n: int, fit: tuple[float, float]) -> str:
    """Where the α–β line misses: measured / model time at every size; returns a one-line summary
    (the worst ratio and its size, how many sizes are within ×1.5). Measured: print it after ⏱."""
    ratios = [t / all_reduce_time(n, s, fit) for s, t in zip(sizes, times)]
    worst = max(range(len(ratios)), key=lambda i: max(ratios[i], 1 / ratios[i]))
    near = sum(1 for r in ratios if 1 / 1.5 <= r <= 1.5)
    return (
        f"measured/model from {sizes[0] // 1024} KiB up: "
        + " ".join(f"{r:.2f}" for r in ratios)
        + f"; worst ×{ratios[worst]:.2f} at {sizes[worst] // 1024} KiB; {near} of {len(ratios)} within ×1.5"
    )
