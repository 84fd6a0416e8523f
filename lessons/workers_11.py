"""Experiment drivers for lesson 11 (context parallelism). They only call minipar (and, for the
PyTorch section, torch's own context-parallel code); child processes import them by name."""

from __future__ import annotations

from unittest import mock

import matplotlib.colors as mcolors
import matplotlib.patches as mpatches
import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

import minipar.runtime.dist as md
from minipar.comm.comm_log import CommLog
from minipar.cp.all_gather import all_gather_attention
from minipar.cp.ring import ring_attention
from minipar.cp.split import contiguous_ranges, load_balanced_ranges, shard

B, H, D = 2, 2, 8  # batch, heads, head dim of every experiment here
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red"]


def split_of(name: str, T: int, n: int):
    return (load_balanced_ranges if name == "balanced" else contiguous_ranges)(T, n)


def inputs(T: int, seed: int = 0):
    """The same full q, k, v and output gradient on every rank, float64, (B, H, T, D)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, dtype=torch.float64, generator=g) for _ in range(4)]


def trace_blocks(T: int, split: str) -> list:
    """Run ring attention's forward and record every block this rank attends: (step, q range, k range)
    (``ring_attention``'s ``trace``)."""
    ranges, seen = split_of(split, T, md.world_size()), []
    ring_attention(*(shard(t, ranges[md.rank()], dim=2) for t in inputs(T)[:3]), ranges, trace=seen)
    return seen


def draw_blocks(traces: list, T: int, n: int, ax, title: str) -> None:
    """The T × T (query, key) plane: each kept pair coloured by the rank that computes it, each
    block labelled with the ring step at which that rank holds the key block."""
    img = np.full((T, T), -1.0)
    for r, blocks in enumerate(traces):
        for step, (qs, qe), (ks, ke) in blocks:
            for p in range(qs, qe):
                img[p, ks : min(ke, p + 1)] = r
            ax.text((ks + ke - 1) / 2, (qs + qe - 1) / 2, f"s{step}", ha="center", va="center", fontsize=7)
            ax.add_patch(mpatches.Rectangle((ks - 0.5, qs - 0.5), ke - ks, qe - qs, fill=False, lw=0.6, ec="k"))
    cmap = mcolors.ListedColormap(["white"] + COLORS[:n])
    ax.imshow(img, cmap=cmap, vmin=-1.5, vmax=n - 0.5)
    ax.set(xlabel="key position", ylabel="query position", title=title)


def attend(T: int, split: str = "balanced", variant: str = "ring") -> dict:
    """This rank's output and q/k/v gradients, the bytes it sent forward and backward, and the
    bytes autograd saved in the forward (``minipar.model.memory.saved_activation_bytes``)."""
    from minipar.model.memory import saved_activation_bytes

    n, r = md.world_size(), md.rank()
    ranges = split_of(split, T, n)
    q, k, v, g = (shard(t, ranges[r], dim=2) for t in inputs(T))
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    fn = ring_attention if variant == "ring" else all_gather_attention
    box = {}
    with CommLog() as fwd:
        saved = saved_activation_bytes(lambda: box.setdefault("out", fn(q, k, v, ranges, None)))
    with CommLog() as bwd:
        box["out"].backward(g)
    sent = (fwd.total("sent"), bwd.total("sent"))
    return dict(ranges=ranges, out=box["out"].detach(), dq=q.grad, dk=k.grad, dv=v.grad, sent=sent, saved=saved)


def reference(T: int) -> dict:
    """Full causal attention on one process (``minipar.model.gpt.attention_core``), float64."""
    from minipar.model.gpt import attention_core

    q, k, v, g = inputs(T)
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out = attention_core(q, k, v)
    out.backward(g)
    return dict(out=out.detach(), dq=q.grad, dk=k.grad, dv=v.grad)


def torch_context_parallel(T: int) -> dict:
    """PyTorch's ``context_parallel`` + SDPA on this CPU (gloo): its error text if it raises; torch's ring attention
    (``_templated_ring_attention``, what it dispatches to on GPUs) with the CPU SDPA kernel on the load-balanced
    shards, next to minipar's; and torch's head-tail load balancer's token order."""
    import torch.distributed.tensor.experimental._context_parallel._attention as tcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._context_parallel._load_balancer import _HeadTailLoadBalancer

    n, r = md.world_size(), md.rank()
    mesh = init_device_mesh("cpu", (n,), mesh_dim_names=("cp",))
    q, k, v, _ = inputs(T)
    bufs = [t.clone() for t in (q, k, v)]
    try:
        with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2]):
            F.scaled_dot_product_attention(*bufs, is_causal=True)
        error = None
    except Exception as exc:  # noqa: BLE001 - reported in the lesson, verbatim
        error = f"{type(exc).__name__}: {exc}"
    ranges = load_balanced_ranges(T, n)
    ql, kl, vl = (shard(t, ranges[r], dim=2) for t in (q, k, v))
    # keep float64 (torch upcasts bf16/fp16 blocks to fp32 by default), the option restored after
    with mock.patch.object(tcp._cp_options, "convert_to_f32", False):
        out_torch = tcp._templated_ring_attention(
            dist.group.WORLD, 2, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu, ql, kl, vl, is_causal=True
        )[0]
    order = _HeadTailLoadBalancer(T, n, "cpu")._generate_indices()[0].tolist()
    return dict(error=error, torch=out_torch, minipar=ring_attention(ql, kl, vl, ranges), order=order)


CASES = [("balanced", "ring", 13), ("contiguous", "ring", 13), ("balanced", "all_gather", 13), ("balanced", "ring", 48)]


def suite() -> dict:
    """Every (split, variant, T) of :data:`CASES` on this world: :func:`attend`'s results, one launch."""
    return {case: attend(case[2], case[0], case[1]) for case in CASES}


def work_per_rank(traces: list) -> list[int]:
    """(query, key) pairs each rank computed, counted from the blocks it attended (causal mask applied)."""
    from minipar.cp.split import causal_pairs

    return [sum(causal_pairs([q], [k]) for _, q, k in blocks) for blocks in traces]


def _both_traces(T: int) -> dict:
    return {split: trace_blocks(T, split) for split in ("contiguous", "balanced")}


def traces(T: int, n: int) -> dict:
    """{split: [rank 0's blocks, ...]} for the contiguous and the load-balanced split (one launch)."""
    from minipar import launch

    res = launch(_both_traces, world_size=n, args=(T,))
    return {split: [r[split] for r in res] for split in ("contiguous", "balanced")}


def clock_ring(T: int, link_params: tuple | None, repeats: int = 3) -> dict:
    """Ring attention's forward (float32, B·H = 1·8, d = 64, load-balanced) on the cluster clock, overlapped and
    not, each K/V transfer α + bytes/β on the link (α s, β bytes/s); None: an instant link (compute alone).
    Returns {overlap: the fastest of ``repeats`` runs, virtual seconds of the slowest rank} and the block bytes."""
    from minipar.comm.links import Link
    from minipar.course.clock_runs import fastest_on_clock

    n, r = md.world_size(), md.rank()
    ranges = load_balanced_ranges(T, n)
    g = torch.Generator().manual_seed(0)
    q, k, v = (shard(torch.randn(1, 8, T, 64, generator=g), ranges[r], dim=2) for _ in range(3))
    link = Link("instant", 0.0, 1e30) if link_params is None else Link("slowed link", *link_params)
    out = {"block_bytes": 2 * 8 * (T // (2 * n)) * 2 * 64 * 4}
    with torch.no_grad():
        ring_attention(q, k, v, ranges)  # warm-up
        best = fastest_on_clock(
            lambda ov, clk: ring_attention(q, k, v, ranges, overlap=ov), (True, False), repeats, (link, link), warmup=0
        )
    out |= {overlap: seconds for overlap, (seconds, _) in best.items()}
    return out


def clock_story(T: int = 1024, n: int = 4) -> dict:
    """Two launches of n ranks on the cluster clock: compute alone (an instant link), then a link slowed
    so that one K/V block's transfer takes as long as one ring step's compute measured in the first
    (the ring's break-even point); returns each run's slowest rank, overlapped and not, and the wire time."""
    from minipar import launch

    alone = launch(clock_ring, world_size=n, args=(T, None))
    compute = max(r[True] for r in alone)
    blk = alone[0]["block_bytes"]
    beta = blk / (compute / n)  # bytes/s: one block per step's compute
    res = launch(clock_ring, world_size=n, args=(T, (0.0, beta)))
    overlapped, waited = max(r[True] for r in res), max(r[False] for r in res)
    return dict(compute=compute, overlapped=overlapped, waited=waited, wire=(n - 1) * blk / beta, block_bytes=blk)
