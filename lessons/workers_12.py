"""Experiment drivers for lesson 12 (mixture of experts, expert parallelism): they only call minipar and torch.
Child processes import them by name, so they live here and not in the notebook; routes are decided in float64."""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist

from minipar.comm.all_to_all import all_to_all
from minipar.comm.comm_log import CommLog
from minipar.course.loop import corpus_batches
from minipar.course.presets import train_float64  # noqa: F401  (lesson 12 runs w.train_float64: the main job in float64)
from minipar.data import builtin_corpus
from minipar.ep.parallel import ExpertParallelMoE
from minipar.model.gpt import GPT, adamw_groups
from minipar.model.moe.capacity import expert_capacity
from minipar.model.moe.layer import MoE
from minipar.model.presets import SMALL, seeded_gpt

F64 = torch.float64


# ---- the idea: a small MoE GPT trained on real text, its routes -----------------------------------
def train_moe(model: GPT, steps: int, lr=3e-3, batch=8, seed=0) -> list[float]:
    """AdamW on the course corpus, float64; returns the cross-entropy per step (aux loss trained, not logged)."""
    opt = torch.optim.AdamW(adamw_groups(model, 0.1), lr=lr, betas=(0.9, 0.95))
    ce = []
    for x, y in corpus_batches(model.cfg.block_size, batch, steps, seed=seed):
        logits, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ce.append(GPT.loss(logits.detach(), y).item())
    return ce


def val_batch(block_size=32, n=16):
    """The first ``n`` validation windows (fixed): (n, T) inputs and (n, T) targets."""
    val = builtin_corpus().split("val", block_size)
    return torch.stack([val[i][0] for i in range(n)]), torch.stack([val[i][1] for i in range(n)])


def balance_runs(x: torch.Tensor, alphas, seeds, steps=100) -> dict:
    """Per α: for each seed, the busiest-expert load per block on ``x`` at initialisation and after ``steps``
    AdamW steps (model and data seeded), and the trained model: ``{α: [(before, after, model), ...]}``."""
    out = {a: [] for a in alphas}
    for a in alphas:
        for s in seeds:
            m = seeded_gpt(SMALL, F64, seed=s, moe_experts=4, moe_top_k=1, moe_aux_loss_coef=a)
            before = imbalance(m, x)
            train_moe(m, steps, seed=s)
            out[a].append((before, imbalance(m, x), m))
    return out


@torch.no_grad()
def routes(model: GPT, x: torch.Tensor) -> list[dict]:
    """Per block: the top-1 expert of every token (B, T) and the stats of its MoE for batch ``x``."""
    model.eval()
    out, h = [], model.embed(x)
    for b in model.blocks:
        a = h + b.attn(b.ln_1(h))
        probs, expert, _ = b.mlp.router(b.ln_2(a).reshape(-1, a.shape[-1]))
        h = b(h)
        out.append(dict(expert=expert[:, 0].view(x.shape), probs=probs, **b.mlp.stats))
    model.train()
    return out


def draw_routes(model: GPT, x: torch.Tensor, text: str, title: str):
    """One row of characters per block, each cell coloured by its top-1 expert; tokens per expert beside."""
    r = routes(model, x[:1])
    E = model.cfg.moe_experts
    fig, axes = plt.subplots(1, 2, figsize=(12, 1.2 + 0.7 * len(r)), gridspec_kw={"width_ratios": [4, 1]})
    grid = torch.stack([layer["expert"][0] for layer in r]).numpy()
    axes[0].imshow(grid, cmap=plt.get_cmap("tab10", 10), vmin=0, vmax=9, aspect="auto")
    for i in range(grid.shape[0]):
        for j, ch in enumerate(text):
            axes[0].text(j, i, ch if ch.strip() else "␣", ha="center", va="center", fontsize=8)
    axes[0].set(yticks=range(len(r)), yticklabels=[f"block {i}" for i in range(len(r))], xticks=[], title=title)
    for i, layer in enumerate(routes(model, x)):
        axes[1].bar([e + 0.4 * i for e in range(E)], layer["routed"].tolist(), 0.4, label=f"block {i}")
    axes[1].axhline(x.numel() * model.cfg.moe_top_k / E, color="k", lw=0.8, ls="--", label="balanced")
    axes[1].set(xlabel="expert", title=f"tokens per expert ({x.numel()} tokens)")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def imbalance(model: GPT, x: torch.Tensor) -> list[float]:
    """max over experts of (tokens routed) / (balanced share T·k/E), per block."""
    E, k = model.cfg.moe_experts, model.cfg.moe_top_k
    return [layer["routed"].max().item() / (x.numel() * k / E) for layer in routes(model, x)]


@torch.no_grad()
def drops_vs_capacity(model: GPT, x: torch.Tensor, y: torch.Tensor, factors) -> list[dict]:
    """For each capacity factor, per block: the choices the forward dropped, and the formula
    Σ_e max(0, routed_e − C) on that forward's routes (block 0's routes never change with C; a later
    block's do, since the blocks before it dropped tokens), the busiest expert's load; and the cross-entropy."""
    rows = []
    before = [b.mlp.capacity_factor for b in model.blocks]
    try:
        for cf in factors:
            for b in model.blocks:
                b.mlp.capacity_factor = cf
            ce = GPT.loss(model(x)[0], y).item()
            C = expert_capacity(x.numel(), model.cfg.moe_experts, model.cfg.moe_top_k, cf)
            st = [b.mlp.stats for b in model.blocks]
            formula = [int((s["routed"] - s["routed"].clamp(max=C)).sum()) for s in st]
            busiest = [int(s["routed"].max()) for s in st]
            dropped = [s["dropped"] for s in st]
            rows.append(dict(cf=cf, capacity=C, dropped=dropped, formula=formula, busiest=busiest, loss=ce))
    finally:
        for b, cf in zip(model.blocks, before):
            b.mlp.capacity_factor = cf
    return rows


def draw_drops(rows, n_choices: int):
    fig, ax = plt.subplots(figsize=(6, 3))
    for i in range(len(rows[0]["dropped"])):
        ax.plot([r["cf"] for r in rows], [r["dropped"][i] / n_choices for r in rows], "o-", label=f"block {i}")
    ax.set(xlabel="capacity factor", ylabel="choices dropped")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.legend()
    fig.tight_layout()
    return fig


def draw_balance(models: dict, x: torch.Tensor):
    """Tokens per expert, per block, for each trained model (``{label: model}``), against the balanced share."""
    first = next(iter(models.values()))
    E, L = first.cfg.moe_experts, first.cfg.n_layer
    fig, axes = plt.subplots(1, L, figsize=(4 * L, 2.8), sharey=True)
    for j, (label, m) in enumerate(models.items()):
        for i, layer in enumerate(routes(m, x)):
            axes[i].bar([e + 0.4 * j for e in range(E)], layer["routed"].tolist(), 0.4, label=label)
    for i, ax in enumerate(axes):
        ax.axhline(x.numel() * first.cfg.moe_top_k / E, color="k", lw=0.8, ls="--")
        ax.set(title=f"block {i}: tokens per expert", xlabel="expert")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---- what you need: dist.all_to_all_single with uneven splits ---------------------------------------
def a2a_toy(rows, splits):
    """Rank worker: rank r cuts ``rows[r]`` into ``splits[r]``; the counts are exchanged first, then the rows."""
    r = dist.get_rank()
    sizes = torch.empty(dist.get_world_size(), dtype=torch.long)  # output_split_sizes: one count from each rank
    dist.all_to_all_single(sizes, torch.tensor(splits[r]))  # no split sizes: equal pieces of one integer
    out = torch.empty(int(sizes.sum()), dtype=torch.long)
    dist.all_to_all_single(out, torch.tensor(rows[r]), sizes.tolist(), splits[r])
    return sizes.tolist(), out.tolist()


# ---- prove it: expert parallelism equals one device ------------------------------------------------
D, T_RANK = 8, 24


def _build(E, k, world):
    torch.manual_seed(0)
    moe = MoE(D, E, k, d_ff=16, aux_loss_coef=0.1).to(F64)
    return moe, torch.randn(world * T_RANK, D, dtype=F64), torch.randn(world * T_RANK, D, dtype=F64)


def one_device(E, k, world):
    """L = (1/N) Σ (y · w) + aux on all N·T tokens, one MoE: output, loss, gradients."""
    moe, x, w = _build(E, k, world)
    y = moe(x)
    loss = (y * w).sum() / world + moe.aux_loss
    loss.backward()
    return dict(y=y.detach(), loss=loss.detach(), grads={n: p.grad for n, p in moe.named_parameters()})


def expert_parallel(E, k):
    """Rank worker: this rank's T tokens through ExpertParallelMoE over the world; what CommLog saw."""
    N, r = dist.get_world_size(), dist.get_rank()
    moe, x, w = _build(E, k, N)
    ep = ExpertParallelMoE(moe, balance_group=dist.group.WORLD)
    part = slice(r * T_RANK, (r + 1) * T_RANK)
    xs = x[part].clone().requires_grad_(True)  # inside a GPT the layer's input needs a gradient too
    with CommLog() as log:
        y = ep(xs)
        loss = ((y * w[part]).sum() + ep.aux_loss) / N
        loss.backward()
    router, total = ep.router.weight.grad.clone(), loss.detach().clone()
    for t in (router, total):
        dist.all_reduce(t)
    a2a = [(r.sent, r.recv) for r in log.records if r.op == "all_to_all_single" and r.dtype == "torch.float64"]
    out = dict(y=y.detach(), loss=total, router=router, first=ep.first_expert, rows=ep.stats["a2a_rows"], a2a=a2a)
    return out | dict(experts={n: p.grad for n, p in ep.experts.named_parameters()}, routed=ep.stats["routed"])


# ---- in PyTorch: the same exchange with _functional_collectives.all_to_all_single_autograd ---------
def torch_vs_minipar_a2a():
    """Rank worker: uneven splits, forward and backward through minipar's and PyTorch's autograd all-to-all
    (``torch.distributed._functional_collectives.all_to_all_single_autograd``)."""
    import torch.distributed._functional_collectives as fc

    N, r = dist.get_world_size(), dist.get_rank()
    send = [(r + j) % 3 + 1 for j in range(N)]  # rows to each rank: uneven, different on every rank
    recv = [(i + r) % 3 + 1 for i in range(N)]  # rank i sends (i + r) % 3 + 1 rows to this rank
    x = torch.randn(sum(send), 4, dtype=F64, generator=torch.Generator().manual_seed(r)).requires_grad_(True)
    outs, grads = [], []
    for fn in (
        lambda t: all_to_all(t, recv, send),
        lambda t: fc.wait_tensor(fc.all_to_all_single_autograd(t, recv, send, dist.group.WORLD)),
    ):
        y = fn(x)
        (g,) = torch.autograd.grad((y * torch.arange(y.numel(), dtype=F64).view_as(y)).sum(), x)
        outs.append(y.detach())
        grads.append(g)
    return outs, grads
