"""The lessons' small training loop, written once: lessons 08 and 09 compare two ways of training the same
model (recompute modes, mixed precision, offload, a compression hook, PyTorch's DDP or Accelerate against
minipar's) by running exactly these steps on each and comparing losses and parameters; and the batches the
lessons' drivers feed such steps (real text, or fixed random ids).

    losses = train_steps(model, opt, batches)                       # plain steps
    losses = train_steps(ddp, opt, batches, mean_over_ranks=True)   # the loss averaged over the ranks
    batches = corpus_batches(32, 8, steps, md.rank(), md.world_size())   # this rank's share of real text
    x, y = random_batch(vocab_size, 8, 32, seed=1)                       # a fixed batch of random ids

The main job's loop is :mod:`minipar.train`; this one has no schedule, no clipping and no logging, so a
lesson can read it in one glance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.distributed as dist

from minipar.data import builtin_corpus, make_loader


def train_steps(
    net,
    opt,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    backward: Callable[[torch.Tensor], None] | None = None,
    before_step: Callable[[], None] | None = None,
    mean_over_ranks: bool = False,
) -> list[float]:
    """One optimizer step per ``(x, y)`` of ``batches``: ``opt.zero_grad()``, ``loss = net(x, y)[1]``,
    ``backward(loss)`` (default ``loss.backward()``; e.g. ``accelerator.backward``), ``before_step()``
    (e.g. a compressor's gradient all-reduce), ``opt.step()``. The gradients of the last step stay in
    place (zeroed before each step, not after), so the optimizer's state can be counted afterwards.

    Returns the losses, one float per step; with ``mean_over_ranks`` each is the mean over the default
    process group's ranks (one all-reduce per step, after the step's own collectives).
    """
    losses = []
    for x, y in batches:
        opt.zero_grad()
        _, loss = net(x, y)
        if backward is None:
            loss.backward()
        else:
            backward(loss)
        if before_step is not None:
            before_step()
        opt.step()
        if mean_over_ranks:
            t = loss.detach().clone()
            dist.all_reduce(t)
            losses.append(t.item() / dist.get_world_size())
        else:
            losses.append(loss.item())
    return losses


def corpus_batches(
    block_size: int, global_batch: int, steps: int, dp_rank: int = 0, dp_size: int = 1, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The first ``steps`` batches ``(x, y)`` of the built-in corpus's training windows, each ``(global_batch //
    dp_size, block_size)`` int64: rank ``dp_rank``'s share (:func:`minipar.data.make_loader`, shuffled by ``seed``)."""
    loader = make_loader(builtin_corpus().split("train", block_size), global_batch, dp_rank, dp_size, seed)
    return [next(loader) for _ in range(steps)]


def random_batch(vocab_size: int, batch: int, block_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets ``(x, y)``, each ``(batch, block_size)`` int64 uniform over ``vocab_size``, drawn in
    that order from one CPU generator seeded ``seed`` (the global RNG untouched): a fixed batch of random ids."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab_size, (batch, block_size), generator=g, device="cpu")
    return x, torch.randint(0, vocab_size, (batch, block_size), generator=g, device="cpu")
