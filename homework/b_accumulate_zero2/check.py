"""Check homework (b):  python -m homework.b_accumulate_zero2.check [--module NAME]

Runs your ``accumulation_step`` (``homework/b_accumulate_zero2/accumulate.py``) with ZeRO-2 on
N = 1, 2 and 4 gloo ranks and k = 1, 2, 4 micro-batches, and compares with one device on the whole
global batch (no accumulation, plain AdamW):

- after the k backward passes, every rank's accumulated gradient shards equal its slices of one
  device's gradient. float32: the sums differ only by the order of additions (micro-batches, ranks),
  so the bound is 1e-5 · max|gradient| + 1e-7 (≈ 100 ε32 per unit, far below the 1/k or 1/N that
  a missing scale, micro-batch or rank gives);
- ``p.grad`` is None after every backward (ZeRO-2 keeps only shards);
- after the step, the parameters equal one device's AdamW step: with eps = 1e-4 a gradient off by δ ≈ 1e-8
  moves a parameter by at most lr·δ/eps = 1e-6, so the bound is 1e-5.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import torch

CASES = [(1, 1), (1, 4), (2, 2), (4, 1), (4, 2)]  # (ranks, micro-batches k)
B, T, LR = 8, 16, 1e-2
EPS = (
    1e-4  # AdamW's first step is ~lr·g/(|g| + eps): a large eps bounds how far a rounding-level δ moves it (≤ lr·δ/eps)
)


def _model():
    from minipar.models import GPT, GPTConfig

    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=23, block_size=T, n_layer=2, n_head=2, d_model=16))


def _batch():
    g = torch.Generator().manual_seed(4)
    return torch.randint(0, 23, (B, T), generator=g), torch.randint(0, 23, (B, T), generator=g)


def worker(module, k):
    from minipar import dist as mdist
    from minipar.zero.stage12 import ZeroOptimizer

    mod = importlib.import_module(module)
    n, r = mdist.world_size(), mdist.rank()
    model = _model()
    opt = ZeroOptimizer(model, stage=2, lr=LR, eps=EPS)
    x, y = _batch()
    share = B // n
    seen = {"full_grads": 0, "calls": 0}
    captured = {}

    def after_backward():
        seen["calls"] += 1
        seen["full_grads"] += sum(p.grad is not None for p in model.parameters())
        captured["shards"] = [None if g is None else g.clone() for g in opt.grad_shards]

    real_step = opt.step

    def step():
        captured["at_step"] = [None if g is None else g.clone() for g in opt._grad_shards()]
        real_step()

    opt.step = step
    mod.accumulation_step(
        model, opt, x[r * share : (r + 1) * share], y[r * share : (r + 1) * share], k, after_backward=after_backward
    )
    units = [(u.lo, u.hi, u.numel) for u in opt.units]
    return {
        "seen": seen,
        "shards": captured.get("at_step"),
        "units": units,
        "params": {kk: v.detach().clone() for kk, v in model.named_parameters()},
    }


def reference():
    model = _model()
    x, y = _batch()
    model(x, y)[1].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=EPS, weight_decay=0.0)
    opt.step()
    return model, grads, {n: p.detach().clone() for n, p in model.named_parameters()}


def check(module: str) -> list[str]:
    from minipar import launch
    from minipar.zero.flat import FlatUnit, default_units

    failures = []
    ref_model, ref_grads, ref_params = reference()
    for n, k in CASES:
        what = f"{n} rank(s), k = {k}"
        try:
            out = launch(worker, world_size=n, args=(module, k), timeout=20, prefix=True)
        except NotImplementedError as exc:
            return [str(exc).split("] ", 1)[-1]]
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        for r, res in enumerate(out):
            if res["seen"]["calls"] != k:
                failures.append(f"{what}: rank {r} ran {res['seen']['calls']} backward passes, expected k = {k}")
                break
            if res["seen"]["full_grads"]:
                failures.append(
                    f"{what}: rank {r}: p.grad was set after a backward — ZeRO-2 keeps no full gradient "
                    "(use ZeroOptimizer(stage=2) and do not keep p.grad yourself)"
                )
                break
            units = [FlatUnit(name, m, r, n) for name, m in default_units(ref_model)]
            for u, (_, _mod_u), shard in zip(units, default_units(ref_model), res["shards"]):
                full = u.flatten([ref_grads[f"{u.name}.{pn}"] for pn in u.names])
                want = full[u.lo : u.hi]
                bound = 1e-5 * float(full.abs().max()) + 1e-7
                d = float((shard - want).abs().max()) if shard.numel() else 0.0
                if not d < bound:
                    ratio = float(shard.norm() / want.norm()) if want.norm() > 0 else float("nan")
                    failures.append(
                        f"{what}: rank {r}, unit {u.name}: accumulated gradient shard off by {d:.3g} "
                        f"(bound {bound:.3g}); |got|/|want| = {ratio:.3f}: each micro-batch's loss must "
                        "be divided by k (a ratio of k means it was not; 1/k means only one micro-batch counted)"
                    )
                    break
            worst = max(float((res["params"][kk] - v).abs().max()) for kk, v in ref_params.items())
            if not worst < 1e-5 and not failures:
                failures.append(
                    f"{what}: rank {r}: parameters after the step differ from one device by {worst:.3g} "
                    "(bound 1e-5): call opt.step() once, after the last micro-batch"
                )
    return failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", default="homework.b_accumulate_zero2.accumulate")
    a = ap.parse_args(argv)
    fails = check(a.module)
    if not fails:
        print(
            f"✓ accumulation_step: {len(CASES)} cases (N = 1, 2, 4 ranks; k = 1, 2, 4) = one device "
            "(gradient shards and the AdamW step, float32 bounds); ZeRO-2 kept no full gradient"
        )
        return 0
    for f in fails:
        print(f"{'·' if f.startswith('not implemented yet') else '✗'} accumulation_step: {f}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
