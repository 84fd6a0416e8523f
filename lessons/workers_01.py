"""Lesson 01's drivers (run on every rank by ``minipar.launch``) and its pictures.

Cell values encode who contributed: rank r starts with (c+1)·10^r in chunk c, so a sum shows every
contributor as a non-zero digit (chunk 1 summed over 4 ranks = 2222); one colour per rank, grey for all.
"""

from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar.comm.collectives import naive_all_reduce, ring_all_reduce
from minipar.comm.comm_log import CommLog
from minipar.comm.cost import all_reduce_time
from minipar.course.capture import raised
from minipar.course.schematic import Arrow, Box, Span, draw_boxes, draw_timeline


def _start(n: int, me: int) -> torch.Tensor:
    """Rank ``me``'s starting row: chunk c holds (c+1)·10^me."""
    return torch.tensor([(c + 1) * 10.0**me for c in range(n)])


def primitives() -> dict:
    """Run each primitive once on this rank; return ``{name: (before, after)}`` as lists (NaN = holds nothing)."""
    n, me = md.world_size(), md.rank()
    out = {}
    full = _start(n, me)
    empty = torch.full((n,), float("nan"))

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
    t, trace = _start(md.world_size(), md.rank()), []
    start = t.tolist()  # before the ring overwrites t
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
    errors = {"ring": (ring - ref).abs().max().item(), "naive": (naive - ref).abs().max().item()}
    return dict(errors, ring_int_equal=torch.equal(ring_all_reduce(exact), ref_exact), max_abs=x.abs().max().item())


# ---- what goes wrong -------------------------------------------------------------------------
def swapped_order(detail: bool = False) -> dict:
    """Two ranks all-reduce a gradient (1 per rank) and a loss (10 per rank), rank 1 in the other order;
    ``detail``: on a group made under ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` checks."""
    group = None
    if detail:
        dist.set_debug_level(dist.DebugLevel.DETAIL)  # groups made from now on check every collective
        group = md.new_group()
    grad, loss = torch.tensor([1.0]), torch.tensor([10.0])
    for t in [grad, loss] if md.rank() == 0 else [loss, grad]:
        dist.all_reduce(t, group=group)
    return dict(grad=grad.item(), loss=loss.item())


def exchange_toy() -> str:
    """Every rank sends 3 numbers to the next rank and receives 3 from the previous one, both posted at once."""
    n, me = md.world_size(), md.rank()
    send, recv = torch.full((3,), float(me)), torch.empty(3)
    works = [dist.irecv(recv, src=(me - 1) % n), dist.isend(send, dst=(me + 1) % n)]  # return at once
    for work in works:
        work.wait()  # blocks until this message has arrived (irecv) or left (isend)
    return f"sent {send.tolist()} to rank {(me + 1) % n}, received {recv.tolist()} from rank {(me - 1) % n}"


def different_shapes(how: str) -> str:
    """Rank 1 passes 5 elements where rank 0 passes 4; ``how``: ``"gloo"`` (plain ``dist.all_reduce``),
    ``"detail"`` (on a group made under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``) or ``"minipar"`` (``ring_all_reduce``)."""
    group = None
    if how == "detail":
        dist.set_debug_level(dist.DebugLevel.DETAIL)
        group = md.new_group()
    t = torch.ones(4 if md.rank() == 0 else 5)
    return raised(lambda: ring_all_reduce(t) if how == "minipar" else dist.all_reduce(t, group=group))


def skipped_call(use_minipar: bool) -> str:
    """Rank 1 skips the all-reduce (and stays alive for a while): what does rank 0 see?"""
    if md.rank() == 1:
        time.sleep(3)
        return "skipped"
    return raised(lambda: (ring_all_reduce if use_minipar else dist.all_reduce)(torch.ones(4)))


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
            text_colour = "white" if full else "black"
            ax.text(c + 0.5, r + 0.5, f"{v:.0f}", ha="center", va="center", fontsize=8, color=text_colour)
    for marks, colour, style in ((sent, "black", "-"), (received, "red", "--")):
        for r, c in enumerate(marks or []):
            outline = Rectangle((c + 0.04, r + 0.04), 0.92, 0.92, fill=False, lw=2.2, edgecolor=colour, linestyle=style)
            ax.add_patch(outline)
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
        row, col = divmod(k, 2)
        draw_rows(axes[row, 2 * col], [res[name][0] for res in results], f"{name}\nbefore")
        draw_rows(axes[row, 2 * col + 1], [res[name][1] for res in results], "after")
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
        marks = dict(sent=[x["send"] for x in step], received=[x["recv"] for x in step])
        draw_rows(ax, [x["after"] for x in step], f"{s['phase']} step {s['step'] + 1}", **marks)
    title = "ring all-reduce: black = chunk sent to rank+1, red dashed = chunk received from rank−1 "
    fig.suptitle(title + "(added in the reduce-scatter, copied in the all-gather)", fontsize=10)
    fig.tight_layout()
    return fig


# ---- the α–β cost model ----------------------------------------------------------------------
def draw_cost_model(sizes, sweep, fits):
    """Measured all_reduce times (points) against the fitted model (lines), per world size; ring vs torch."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.3))
    for k, (n, res) in enumerate(sweep.items()):
        S = np.asarray(sizes[: len(res["torch"])], float)
        colour = plt.get_cmap("tab10").colors[k]
        ax.loglog(S, np.asarray(res["torch"]) * 1e3, "o", color=colour, label=f"dist.all_reduce, N={n}")
        grid, (alpha, beta) = np.geomspace(S[0], S[-1], 50), fits[n]
        label = f"model: α={alpha * 1e6:.0f} µs, β={beta / 1e9:.2f} GB/s"
        ax.loglog(grid, all_reduce_time(n, grid, fits[n]) * 1e3, "-", color=colour, alpha=0.6, label=label)
        if "ring" in res:
            ax.loglog(S, np.asarray(res["ring"]) * 1e3, "x", color=colour, ms=8, label=f"minipar ring, N={n}")
            bx.semilogx(S, np.asarray(res["ring"]) / np.asarray(res["torch"]), "x-", color=colour, label=f"N={n}")
    ax.set(xlabel="message size S (bytes)", ylabel="time (ms)")
    ax.set_title("all-reduce time: measured (points) vs T = 2(N−1)α + 2(N−1)/N·S/β")
    ax.legend(fontsize=7)
    bx.axhline(1.0, color="0.5", lw=1)
    bx.axhline(1.2, color="red", lw=1, ls="--", label="target ≤ 1.2× at 16 MB")
    bx.set(xlabel="message size S (bytes)", ylabel="minipar ring / gloo (time ratio)")
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
    ax.set(ylabel="bytes sent per rank / S", title=f"bytes sent per rank for one all-reduce of S = {S / 2**20:.0f} MiB")
    ax.legend(fontsize=8, markerscale=0.4)
    fig.tight_layout()
    return fig


def draw_ring_concept(n: int = 4):
    """Concept drawing: the ring (who sends to whom) and the 2(N−1) steps, with the chunk each rank sends."""
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 3.6), gridspec_kw=dict(width_ratios=[1, 2]))
    xy = [(2.2 * math.sin(2 * math.pi * r / n), 1.6 * math.cos(2 * math.pi * r / n)) for r in range(n)]
    boxes = [Box(f"r{r}", x, y, f"rank {r}\n{n} chunks", kind="param") for r, (x, y) in enumerate(xy)]
    arrows = [Arrow(f"r{r}", f"r{(r + 1) % n}", "S/N bytes", color="tab:red") for r in range(n)]
    draw_boxes(ax, boxes, arrows, title="the ring: one chunk per step to rank+1")
    rs, ag = "reduce-scatter: send chunk c, rank+1 adds it", "all-gather: send finished chunk c, rank+1 copies it"
    lanes = {
        f"rank {r}": [Span(s, s + 1, f"+c{(r - s - 1) % n}", rs, "tab:red") for s in range(n - 1)]
        + [Span(n - 1 + s, n + s, f"c{(r - s) % n}", ag, "tab:purple") for s in range(n - 1)]
        for r in range(n)
    }
    draw_timeline(bx, lanes, "the 2(N−1) steps: which chunk each rank sends", "time (ring steps of α + S/(Nβ) each)")
    fig.tight_layout()
    return fig
