"""Homework (b): gradient accumulation with ZeRO-2, on top of minipar — checked against one device.

    python -m homework.b_accumulate_zero2.check          # runs your code on 1, 2 and 4 ranks
    python -m homework.b_accumulate_zero2.accumulate --world 4 --accum 4 --steps 50   # a real run

A batch too large for memory is split into ``k`` micro-batches on each rank; their gradients are
summed before one optimizer step. With ZeRO-2 (``minipar.zero.stage12.ZeroOptimizer(stage=2)``,
lesson 03) each unit's gradient is reduce-scattered as soon as backward has finished it and the
full gradient is dropped, so accumulation happens in the 1/N *shards* (``opt.grad_shards``), never in
full-size ``p.grad`` tensors: gradient memory stays 4Ψ/N however many micro-batches you run.

Your task: :func:`accumulation_step`. The invariant the checker tests: with N ranks and k
micro-batches, the accumulated gradient shards equal the matching slices of one device's gradient of
the mean loss over the whole global batch (float32, bound derived in ``check.py``), ``p.grad`` is
None after every backward (ZeRO-2 keeps no full gradient), and the step matches one device's AdamW.
Then wire it into a training loop (:func:`main`, given) and report tokens/s and held bytes for k = 1, 2, 4.
"""

from __future__ import annotations

import argparse

import torch


def accumulation_step(model, opt, x: torch.Tensor, y: torch.Tensor, k: int, after_backward=None) -> float:
    """TODO: one optimizer step over this rank's batch ``x``, ``y`` (B_local, T), in ``k`` micro-batches.

    Args:
        model: a ``minipar.model.gpt.GPT`` (``model(x, y)`` returns ``(logits, loss)``, loss = mean over tokens).
        opt: ``ZeroOptimizer(model, stage=2, ...)`` over the data-parallel group (it reduce-scatters in backward).
        k: micro-batches; ``B_local % k == 0``.
        after_backward: if given, call ``after_backward()`` after each micro-batch's backward (the
            checker uses it to look at ``p.grad`` and the shards).

    Returns:
        the mean loss over the k micro-batches (a float, this rank's).

    Must: split ``x``, ``y`` into k equal micro-batches; scale each loss so that the k gradients
    add up to the gradient of the *mean* loss over the whole local batch; ``opt.step()`` once, then
    ``opt.zero_grad()``. (ZeRO-2 averages over ranks itself.)

    Hint: lesson 03, "Build it: stages 1 and 2" (``ZeroOptimizer._reduce_scatter_unit`` adds each
    backward's shard to ``grad_shards``), and lesson 02 on ``no_sync`` / accumulation.
    """
    raise NotImplementedError("not implemented yet: accumulation_step")


def train_worker(steps: int, k: int, global_batch: int, block: int) -> dict:
    """Given: a small GPT trained with ZeRO-2 + your accumulation on the launched ranks."""
    import time

    from minipar.data import CharCorpus, load_text, make_loader
    from minipar.model.gpt import GPT, GPTConfig
    from minipar.runtime import dist as mdist
    from minipar.zero.stage12 import ZeroOptimizer

    corpus = CharCorpus(load_text())
    loader = make_loader(
        corpus.split("train", block), global_batch, dp_rank=mdist.rank(), dp_size=mdist.world_size(), seed=0
    )
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=corpus.vocab_size, block_size=block, n_layer=2, n_head=2, d_model=64))
    opt = ZeroOptimizer(model, stage=2, lr=3e-3)
    losses, t0 = [], time.perf_counter()
    for _ in range(steps):
        x, y = next(loader)
        losses.append(accumulation_step(model, opt, x, y, k))
    dt = time.perf_counter() - t0
    return {"losses": losses, "tokens_per_s": steps * global_batch * block / dt, "held": opt.held_bytes()}


def main(argv=None) -> int:
    from minipar import launch

    ap = argparse.ArgumentParser(description="ZeRO-2 + gradient accumulation on a small GPT")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16, help="global batch (sequences per optimizer step)")
    a = ap.parse_args(argv)
    out = launch(train_worker, world_size=a.world, args=(a.steps, a.accum, a.batch, 64))
    r0 = out[0]
    print(
        f"loss {r0['losses'][0]:.3f} -> {r0['losses'][-1]:.3f}; held bytes per rank {r0['held']}; "
        f"tokens/s ⏱ {r0['tokens_per_s']:.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
