"""Lesson 09's drivers on the cluster clock (``minipar.clock``): TP overlap and gradient compression
as a GPU cluster would time them. They only call minipar and torch; child processes import them by name.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar.clock import ClusterClock, compute_seconds
from minipar.course.clock_runs import fastest_on_clock, slowest_rank
from minipar.course.clock_view import exposed_seconds, span_seconds
from minipar.course.presets import h100_seconds
from minipar.course.verify import same_run
from minipar.data import builtin_corpus, random_tokens
from minipar.dp.compression import make_compressor
from minipar.model.presets import MEDIUM, seeded_gpt
from minipar.tp.overlap import allgather_matmul


def tp_overlap_on_clock(ratio: float, T_local: int = 256, d_in: int = 512, d_out: int = 512, steps: int = 4) -> dict:
    """``allgather_matmul`` on the cluster clock, gather-then-GEMM and overlapped, each ring step's message
    costing ``ratio`` × one chunk's GEMM as measured here (< 1: the GEMM covers its transfer; > 1: it cannot).
    Per mode: the fastest step's virtual seconds (slowest rank), this rank's ``timeline`` of it and its
    ``segments`` (compute between two waits: one chunk's GEMM each when overlapped); ``t_f``: a ring step's transfer."""
    from minipar.comm.links import Link

    g = torch.Generator().manual_seed(md.rank())
    x, w = torch.randn(2, T_local, d_in, generator=g), torch.randn(d_out, d_in, generator=g)
    link = Link(f"a ring step = {ratio:g} chunk GEMMs", ratio * compute_seconds(lambda i: x @ w.t(), 5), float("inf"))
    out = {"t_f": link.alpha_s}
    best = fastest_on_clock(lambda ov, clk: allgather_matmul(x, w, overlap=ov), (False, True), steps, (link, link))
    for ov, (seconds, clk) in best.items():
        segments, cur = [], 0.0
        for kind, label, t0, t1 in clk.timeline:
            if kind == "compute":
                cur += t1 - t0
            elif not label.startswith("send"):  # a ring step's wait ends with its receive
                segments.append(cur)
                cur = 0.0
        out[ov] = {"virtual_s": seconds, "segments": segments + ([cur] if cur else []), "timeline": clk.timeline}
    return out


def overlap_expected(runs: list[dict]) -> dict:
    """The clock's seconds that its own measured compute implies (``runs``: every rank's result; slowest rank):
    gather-then-GEMM (N−1)·t_f + compute; overlapped Σ_k<N−1 max(c_k, t_f) + c_last, c_k ring step k's GEMM."""
    n = len(runs)

    def one(run):
        seg, t_f = run[True]["segments"], run["t_f"]
        return (n - 1) * t_f + sum(run[False]["segments"]), sum(max(c, t_f) for c in seg[:-1]) + seg[-1]

    both = [one(r) for r in runs]
    return {False: max(b[0] for b in both), True: max(b[1] for b in both)}


def compression_on_clock(betas_gbps=(1, 5, 25, 100, 450), steps: int = 2, tokens_there: int = 32768) -> dict:
    """Data-parallel steps of the MEDIUM GPT (float32, 4 sequences of 64 per rank) on the cluster clock, with no
    compression, bf16 and rank-4 PowerSGD (from the first step), on links of ``betas_gbps`` GB/s (α = 10 µs) in
    slow motion: a rank's step stands for an H100's 6·Ψ·``tokens_there`` FLOPs at 50 % of its peak. The model's
    forward+backward, the same for every method, is timed once (fastest of all runs); each method's ``extra``
    (its communication and its own compute: the clock's step minus the model's, fastest of ``steps``, slowest
    rank) separately, so the model's CPU-time noise does not decide the comparison. Returns ``{"step": {β:
    {method: s}}, "extra": {β: {method: s}}, "slow": k}``, seconds the cluster's (virtual / k)."""
    from minipar.comm.links import Link

    model = seeded_gpt(MEDIUM, torch.float32)
    x = random_tokens(4, MEDIUM["block_size"], md.rank())
    params = list(model.parameters())

    def fwd_bwd(i):
        model(x, x)[1].backward()
        model.zero_grad(set_to_none=True)

    k = compute_seconds(fwd_bwd, 3) / h100_seconds(sum(p.numel() for p in params), tokens_there)
    extra: dict = {b: {} for b in betas_gbps}
    model_best = float("inf")
    for beta in betas_gbps:
        link = Link(f"{beta} GB/s", 10e-6 * k, beta * 1e9 / k)
        for method in ("none", "bf16", "powersgd"):
            comp = make_compressor(method, start_iter=0) if method == "powersgd" else make_compressor(method)
            for i in range(steps + 1):
                with ClusterClock(link, link) as clk:
                    with clk.label("model"):
                        model(x, x)[1].backward()
                    comp.all_reduce_([p.grad for p in params])
                model.zero_grad(set_to_none=True)
                now, work = slowest_rank(clk.now), slowest_rank(span_seconds(clk.timeline, "compute", "model"))
                if i:
                    model_best = min(model_best, work)
                    extra[beta][method] = min(extra[beta].get(method, float("inf")), now - work)
    step = {b: {m: (model_best + e) / k for m, e in row.items()} for b, row in extra.items()}
    return {"step": step, "extra": {b: {m: e / k for m, e in row.items()} for b, row in extra.items()}, "slow": k}


def zero1_gather_on_clock(ratio: float = 0.5, steps: int = 3) -> dict:
    """ZeRO-1 (``minipar.zero``, the MEDIUM GPT untied, float32, 4 sequences of 64 per rank) on the cluster clock:
    the optimizer step, the next batch and the next forward, the updated weights' all-gather blocking and
    overlapped (``overlap_param_gather=True``, MegaScale §3.2), on a link where one block's gather costs
    ``ratio`` × its forward as measured here. Returns ``same`` (losses and weights bit-identical); per mode
    the fastest window's ``exposed`` virtual seconds (gathers not covered by the work after ``step()``
    returns; slowest rank) and this rank's ``timeline``; ``gather`` (each unit's), ``names``, ``fwd``."""
    from minipar.comm.cost import collective_time
    from minipar.comm.links import Link
    from minipar.zero import zero
    from minipar.zero.flat import default_units

    V, n = builtin_corpus().vocab_size, dist.get_world_size()

    def batch(gen):  # "data loading"
        return torch.randint(0, V, (4, MEDIUM["block_size"]), generator=gen)

    probe = seeded_gpt(MEDIUM, torch.float32, tie_weights=False)
    h = torch.randn(4, MEDIUM["block_size"], MEDIUM["d_model"])
    with torch.no_grad():
        fwd = compute_seconds(lambda i: probe.blocks[0](h), 5)
    units = default_units(probe)
    unit_bytes = [4 * sum(p.numel() for p in m.parameters()) for _, m in units]
    beta = (n - 1) / n * unit_bytes[2] / (ratio * fwd)  # units: wte, wpe, blocks.0, ...
    link = Link(f"a block's gather = {ratio:g} of its forward", 0.0, beta)
    out, results = {}, {}
    for overlap in (False, True):
        model = seeded_gpt(MEDIUM, torch.float32, tie_weights=False)
        opt = zero(model, 2, lr=1e-3, overlap_param_gather=overlap)
        gen = torch.Generator().manual_seed(md.rank())
        x, best, losses = batch(gen), (float("inf"), []), []
        for i in range(steps + 1):
            _, loss = model(x, x)
            loss.backward()
            losses.append(loss.item())
            with ClusterClock(link, link) as clk:
                opt.step()
                with clk.label("after step"):  # the work that can hide the gathers
                    opt.zero_grad()
                    x = batch(gen)
                    model(x, x)
            exposed = slowest_rank(exposed_seconds(clk.timeline, hidden_by=("after step",)))
            if i and exposed < best[0]:
                best = (exposed, list(clk.timeline))
        opt.wait_params()
        out[overlap] = {"exposed": best[0], "timeline": best[1]}
        results[overlap] = (losses, {k: t.clone() for k, t in model.state_dict().items()})
    same = same_run(results[False], results[True])
    gather = [collective_time("ring", n, b, link) for b in unit_bytes]
    return out | {"same": same, "gather": gather, "names": [name for name, _ in units], "fwd": fwd}


def step_ratio(h: int, flops: float, tokens: int = 4096, t: int = 8) -> float:
    """One ring step's transfer over one chunk's GEMM, column-parallel MLP input (h → 4h) with sequence parallelism:
    (tokens/t)·h bf16 values over NVLink 4 vs 2·(tokens/t)·h·(4h/t) FLOPs at ``flops`` FLOP/s."""
    from minipar.comm.links import NVLINK4

    rows = tokens // t
    return NVLINK4.time(rows * h * 2) / (2 * rows * h * (4 * h // t) / flops)
