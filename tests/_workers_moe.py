"""Rank workers for tests/test_experts.py (expert parallelism vs one device)."""

import torch
import torch.distributed as dist

from minipar.comm.comm_log import CommLog
from minipar.ep.parallel import ExpertParallelMoE
from minipar.model.moe.layer import MoE

D, T_RANK = 8, 24  # model width; tokens per rank


def build(E, k, world, seed=0, cf=None):
    """The same float64 MoE and the same (world·T_RANK, D) tokens and loss weights on every rank."""
    torch.manual_seed(seed)
    moe = MoE(D, E, k, d_ff=16, capacity_factor=cf, aux_loss_coef=0.1).double()
    x = torch.randn(world * T_RANK, D, dtype=torch.float64)
    w = torch.randn(world * T_RANK, D, dtype=torch.float64)
    return moe, x, w


def one_device(E, k, world):
    """L = (1/N) Σ (y · w) + aux over all N·T_RANK tokens: output, loss, and every gradient (x's too)."""
    moe, x, w = build(E, k, world)
    x.requires_grad_(True)
    y = moe(x)
    loss = (y * w).sum() / world + moe.aux_loss
    loss.backward()
    grads = {n: p.grad for n, p in moe.named_parameters()}
    return dict(y=y.detach(), loss=loss.detach(), x_grad=x.grad, grads=grads, routed=moe.stats["routed"])


def ep_rank(E, k):
    """This rank's T_RANK tokens through ExpertParallelMoE over the world, loss (y_r · w_r).sum()/N + aux_r/N.

    Returns this rank's output, the all-reduced loss, router gradient summed over ranks, its experts'
    gradients, and the dispatch/combine all-to-alls seen by CommLog next to the bytes the plan predicts.
    """
    N, r = dist.get_world_size(), dist.get_rank()
    moe, x, w = build(E, k, N)
    ep = ExpertParallelMoE(moe, group=None, balance_group=dist.group.WORLD)
    xs, ws = x[r * T_RANK : (r + 1) * T_RANK].clone().requires_grad_(True), w[r * T_RANK : (r + 1) * T_RANK]
    with CommLog() as log:
        y = ep(xs)
        loss_r = ((y * ws).sum() + ep.aux_loss) / N
        loss_r.backward()
    a2a = [rec for rec in log.records if rec.op == "all_to_all_single" and rec.dtype == "torch.float64"]
    sent, recvd = ep.stats["a2a_rows"]
    router_grad = ep.router.weight.grad.clone()
    dist.all_reduce(router_grad)  # the router is replicated: its gradient is the sum over ranks
    loss = loss_r.detach().clone()
    dist.all_reduce(loss)
    return dict(
        y=y.detach(),
        x_grad=xs.grad,
        loss=loss,
        router=router_grad,
        experts={n: p.grad for n, p in ep.experts.named_parameters()},
        first=ep.first_expert,
        a2a=[(rec.sent, rec.recv) for rec in a2a],
        rows=(sent, recvd),
        counts=[rec for rec in log.records if rec.op == "all_to_all_single" and rec.dtype == "torch.int64"],
    )


# --------------------------------------------------------------------- the MoE job (tests/test_experts_train.py)
def moe_job_reference(cfg):
    """One device, the plainest loop, float64: the MoE GPT, ``x.chunk(m)`` micro-batches each adding
    (its cross-entropy + its aux loss) / m to the gradients, torch's clip, AdamW. Returns [(step, ce)]:
    the mean cross-entropy of every step's batch, before its update (what the job logs as ``loss``)."""
    from minipar.data import CharCorpus, load_text, make_loader
    from minipar.job.config import build, lr_at
    from minipar.model.gpt import GPT
    from minipar.model.presets import default_dtype

    with default_dtype(torch.float64):
        corpus = CharCorpus(load_text(cfg.data))
        loader = make_loader(corpus.split("train", cfg.block_size), cfg.batch_size, seed=cfg.seed)
        model, opt = build(cfg, corpus.vocab_size)
        m, out = cfg.microbatches, []
        for step in range(cfg.steps):
            for g in opt.param_groups:
                g["lr"] = lr_at(step, cfg)
            x, y = next(loader)
            ce = 0.0
            for xm, ym in zip(x.chunk(m), y.chunk(m)):
                logits, loss = model(xm, ym)  # loss = cross-entropy + Σ aux (GPT.forward)
                (loss / m).backward()
                ce += GPT.loss(logits, ym).item() / m
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            out.append((step, ce))
    return out


def moe_save_and_resume(base: dict, ckpt_dir: str, steps: int, every: int, saver: dict, resumers: list) -> dict:
    """dp4 with ``saver``'s settings (ep, zero) saving every ``every`` steps; the later checkpoints deleted
    (as if it died after the first); resumed with each of ``resumers`` (the checkpoint holds whole tensors)."""
    import os
    import shutil

    from minipar.checkpoint import dcp as ckpt
    from minipar.job.config import TrainConfig
    from tests._workers_train import train_float64

    full = train_float64(TrainConfig(**base, **saver, dp=4, ckpt_dir=ckpt_dir, ckpt_every=every))
    if dist.get_rank() == 0:
        for s in range(2 * every, steps + 1, every):
            shutil.rmtree(ckpt.step_dir(ckpt_dir, s), ignore_errors=True)
    dist.barrier()
    files = sorted(os.listdir(ckpt_dir))
    resumed = [train_float64(TrainConfig(**base, **kw, dp=4, ckpt_dir=ckpt_dir, resume=True)) for kw in resumers]
    return {"full": full, "resumed": resumed, "files": files}


def mesh_ep_groups(pp: int, tp: int, ep: int, cp: int = 1) -> dict:
    """``init_mesh(pp, tp=tp, cp=cp, ep=ep)`` on this rank: its ep/edp coordinates, group ranks, and the sums
    of the global ranks over its EP, expert-dp and expert-dp × cp groups (real process groups, not just lists)."""
    from minipar.runtime.mesh import init_mesh

    mesh = init_mesh(pp=pp, tp=tp, cp=cp, ep=ep)
    sums = []
    for g in (mesh.ep_group, mesh.edp_group, mesh.edp_cp_group):
        t = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(t, group=g)
        sums.append(int(t.item()))
    ranks = {k: mesh.ranks.get(k) for k in ("ep", "edp", "edp_cp")}
    return dict(ep_rank=mesh.ep_rank, edp_rank=mesh.edp_rank, sums=sums, **ranks)
