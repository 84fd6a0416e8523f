"""Functions the tensor-parallel tests run on several ranks (importable by child processes)."""
from __future__ import annotations

import torch

import minipar.dist as md
from minipar.data import CharCorpus, load_text, make_loader
from minipar.models import GPT, GPTConfig
from minipar.tensor_parallel import new_tp_group
from minipar.tp_gpt import TensorParallelGPT, allreduce_sequence_parallel_grads


def small_cfg(vocab_size: int, **kw) -> GPTConfig:
    return GPTConfig(**{**dict(vocab_size=vocab_size, block_size=32, n_layer=2, n_head=4, d_model=32), **kw})


def batches(steps: int, batch_size: int = 4, T: int = 32, seed: int = 0):
    corpus = CharCorpus(load_text())
    loader = make_loader(corpus.split("train", T), batch_size, seed=seed)
    return corpus.vocab_size, [next(loader) for _ in range(steps)]


def _opt(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=3e-3, betas=(0.9, 0.95))


def train_steps(steps: int = 3, tp: int | None = None, sequence_parallel: bool = False, seed: int = 0,
                tie_weights: bool = False) -> dict:
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
    opt = _opt(model)
    losses, grads = [], None
    for x, y in data:
        _, loss = model(x, y)
        loss.backward()
        if tp is not None:
            allreduce_sequence_parallel_grads(model, group)
        grads = (model.full_state_dict(grads=True) if tp is not None
                 else {k: p.grad.clone() for k, p in model.named_parameters(remove_duplicate=False)})
        opt.step()
        opt.zero_grad(set_to_none=False)
        losses.append(loss.item())
    params = model.full_state_dict() if tp is not None else {k: v.clone() for k, v in model.state_dict().items()}
    return {"losses": losses, "grads": grads, "params": params}


def initial_state(tp: int, sequence_parallel: bool = False) -> dict:
    vocab, _ = batches(1)
    torch.manual_seed(0)
    model = TensorParallelGPT(small_cfg(vocab), group=new_tp_group(tp), sequence_parallel=sequence_parallel)
    return {"full": model.full_state_dict(), "shapes": {k: tuple(p.shape) for k, p in model.named_parameters()}}


def make_group(tp: int):
    new_tp_group(tp)
    return md.rank()


def build_bad(cfg_kw: dict, tp: int):
    TensorParallelGPT(GPTConfig(**cfg_kw), group=new_tp_group(tp))
