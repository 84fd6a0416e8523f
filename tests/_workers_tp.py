"""Functions the tensor-parallel tests run on several ranks (importable by child processes)."""

from __future__ import annotations

import torch

import minipar.runtime.dist as md
from minipar.data import CharCorpus, load_text, make_loader
from minipar.model.gpt import GPT, GPTConfig, adamw_groups
from minipar.tp.gpt import TensorParallelGPT, allreduce_sequence_parallel_grads
from minipar.tp.mappings import new_tp_group


def small_cfg(vocab_size: int, **kw) -> GPTConfig:
    return GPTConfig(**{**dict(vocab_size=vocab_size, block_size=32, n_layer=2, n_head=4, d_model=32), **kw})


def batches(steps: int, batch_size: int = 4, T: int = 32, seed: int = 0):
    corpus = CharCorpus(load_text())
    loader = make_loader(corpus.split("train", T), batch_size, seed=seed)
    return corpus.vocab_size, [next(loader) for _ in range(steps)]


def _opt(model, **kw):
    return torch.optim.AdamW(adamw_groups(model, 0.1), lr=3e-3, betas=(0.9, 0.95), **kw)


def train_steps(
    steps: int = 3,
    tp: int | None = None,
    sequence_parallel: bool = False,
    seed: int = 0,
    tie_weights: bool = False,
    dtype=torch.float64,
) -> dict:
    """Train K AdamW steps on the same batches; single device when ``tp`` is None.

    Returns losses per step, the gradients of the last step and the final parameters, both as
    full (gathered) ``GPT`` state dicts, plus the replicated parameters' local grads (to check
    they agree across ranks).
    """
    vocab, data = batches(steps)
    cfg = small_cfg(vocab, tie_weights=tie_weights)
    torch.manual_seed(seed)
    if tp is None:
        model = GPT(cfg)
    else:
        group = new_tp_group(tp)
        model = TensorParallelGPT(cfg, group=group, sequence_parallel=sequence_parallel)
    dev = torch.device("cpu") if tp is None else md.device()  # cuda:LOCAL_RANK on NCCL
    model.to(device=dev, dtype=dtype)  # float64 by default: see the tolerances in tests/test_tensor_parallel.py
    opt = _opt(model)
    losses, grads = [], None
    for x, y in data:
        x, y = x.to(dev), y.to(dev)
        _, loss = model(x, y)
        loss.backward()
        if tp is not None:
            allreduce_sequence_parallel_grads(model, group)
        grads = (
            model.full_state_dict(grads=True)
            if tp is not None
            else {k: p.grad.clone() for k, p in model.named_parameters(remove_duplicate=False)}
        )
        opt.step()
        opt.zero_grad(set_to_none=False)
        losses.append(loss.item())
    params = model.full_state_dict() if tp is not None else {k: v.clone() for k, v in model.state_dict().items()}
    return {"losses": losses, "grads": grads, "params": params}


def make_group(tp: int):
    new_tp_group(tp)
    return md.rank()


def train_steps_dtensor(steps: int = 3, vocab_parallel: bool = False, seed: int = 0, dtype=torch.float64) -> dict:
    """The same K steps with PyTorch's DTensor TP over the whole world (``minipar.tp.dtensor``)."""
    from torch.distributed.device_mesh import init_device_mesh

    from minipar.tp.dtensor import full_state_dict_dtensor, loss_context, parallelize_gpt_dtensor

    vocab, data = batches(steps)
    torch.manual_seed(seed)
    dev = md.device()
    model = parallelize_gpt_dtensor(
        GPT(small_cfg(vocab)).to(device=dev, dtype=dtype),
        init_device_mesh(dev.type, (md.world_size(),)),
        vocab_parallel=vocab_parallel,
    )
    opt = _opt(model, foreach=False)  # DTensor and plain parameters (minipar.tp.dtensor): no mixed foreach on CUDA
    losses, grads = [], None
    for x, y in data:
        x, y = x.to(dev), y.to(dev)
        with loss_context(model):
            _, loss = model(x, y)
            loss.backward()
        grads = full_state_dict_dtensor(model, grads=True)
        opt.step()
        opt.zero_grad(set_to_none=False)
        losses.append(loss.full_tensor().item() if hasattr(loss, "full_tensor") else loss.item())
    return {"losses": losses, "grads": grads, "params": full_state_dict_dtensor(model)}


def equivalence_suite(steps: int = 3) -> dict:
    """TP over the whole world, without and with sequence parallelism; plus local shard shapes."""
    tp = md.world_size()
    out = {sp: train_steps(steps, tp, sp) for sp in (False, True)}
    vocab, _ = batches(1)
    model = TensorParallelGPT(small_cfg(vocab), group=new_tp_group(tp))
    out["shapes"] = {k: tuple(p.shape) for k, p in model.named_parameters()}
    return out


def block_comm_counts(B: int = 2, T: int = 8) -> dict:
    """Collectives of one tensor-parallel block's forward and backward, counted by ``CommLog``, per op."""
    from minipar.comm.comm_log import CommLog, label
    from minipar.model.gpt import Block
    from minipar.tp.gpt import parallelize_block_

    cfg = small_cfg(103)
    n = md.world_size()
    out = {}
    for sp in (False, True):
        torch.manual_seed(0)
        block = parallelize_block_(Block(cfg), sequence_parallel=sp)
        for p in block.parameters():
            torch.nn.init.normal_(p, std=0.02)
        x = torch.randn(B, T // n if sp else T, cfg.d_model, requires_grad=True)
        with CommLog() as log:
            with label("forward"):
                y = block(x)
            with label("backward"):
                y.sum().backward()
        out[sp] = [(r.label, r.op, r.bytes, r.sent) for r in log.records]
    return out


def operator_semantics() -> dict:
    """Forward values and input gradients of the conjugate operators on this rank."""
    import minipar.tp.mappings as T

    r = md.rank()
    res = {}
    for name in (
        "copy_to_tensor_parallel_region",
        "reduce_from_tensor_parallel_region",
        "scatter_to_tensor_parallel_region",
        "gather_from_tensor_parallel_region",
        "scatter_to_sequence_parallel_region",
        "gather_from_sequence_parallel_region",
        "reduce_scatter_to_sequence_parallel_region",
    ):
        x = (torch.arange(8.0, device=md.device()).view(1, 4, 2) + 10 * r).requires_grad_(True)
        y = getattr(T, name)(x)
        (y * (1 + torch.arange(y.numel(), dtype=y.dtype, device=y.device).view_as(y))).sum().backward()
        res[name] = (y.detach(), x.grad.clone())
    return res


def layer_options() -> dict:
    """ColumnParallelLinear(gather_output=True) and RowParallelLinear(input_is_parallel=False)
    against the full nn.Linear: outputs and input gradients (max abs differences)."""
    from minipar.tp.layers import ColumnParallelLinear, RowParallelLinear

    torch.manual_seed(0)
    full = torch.nn.Linear(8, 6).double()  # float64: the test's bound is float64 rounding
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    out = {}
    for layer in (ColumnParallelLinear(8, 6, gather_output=True), RowParallelLinear(8, 6, input_is_parallel=False)):
        layer.double()
        layer.load_full_(full.weight, full.bias)
        xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        ya, yb = layer(xa), full(xb)
        ya.square().sum().backward()
        yb.square().sum().backward()
        out[type(layer).__name__] = ((ya - yb).abs().max().item(), (xa.grad - xb.grad).abs().max().item())
    return out


def sp_bad_length():
    vocab, _ = batches(1)
    model = TensorParallelGPT(small_cfg(vocab), sequence_parallel=True)
    model(torch.zeros(1, 7, dtype=torch.long))


def dtensor_optimizer_step(foreach: bool) -> str:
    """One AdamW step on a DTensor-TP GPT with ``foreach`` forced (CUDA's default is True): "ok" or the error."""
    from torch.distributed.device_mesh import init_device_mesh

    from minipar.tp.dtensor import parallelize_gpt_dtensor

    vocab, [(x, y)] = batches(1)
    torch.manual_seed(0)
    model = parallelize_gpt_dtensor(GPT(small_cfg(vocab)), init_device_mesh("cpu", (md.world_size(),)))
    opt = _opt(model, foreach=foreach)
    model(x, y)[1].backward()
    try:
        opt.step()
    except RuntimeError as e:
        return str(e)
    return "ok"
