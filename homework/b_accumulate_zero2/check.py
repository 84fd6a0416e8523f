"""Check homework (b):  python -m homework.b_accumulate_zero2.check [--module NAME]

Runs your ``accumulation_step`` (``homework/b_accumulate_zero2/accumulate.py``) with ZeRO-2 on
N = 1, 2 and 4 gloo ranks and k = 1, 2, 4 micro-batches, ``STEPS`` = 3 consecutive steps on
another global batch each, and compares with one device on the whole global batch (no
accumulation, plain AdamW):

- the checker's own forward hook on the model sees k forward passes of B_local/k rows per step
  (one full-batch backward followed by k calls of ``after_backward()`` is no accumulation), and
  ZeRO-2 reduce-scatters every unit k times (one backward of the k losses summed is none either);
- after the k backward passes, every rank's accumulated gradient shards equal its slices of one
  device's gradient at the same weights (a step that kept the previous step's shards — no
  ``opt.zero_grad()`` — is off from the second step on). float32: the sums differ only by the
  order of additions (micro-batches, ranks), so the bound is 1e-5 · max|gradient| + 1e-7
  (≈ 100 ε32 per unit, far below the 1/k or 1/N that a missing scale, micro-batch or rank gives);
- ``p.grad`` is None after every backward (ZeRO-2 keeps only shards);
- after each step, the parameters equal one device's AdamW steps: with eps = 1e-4 a gradient off by
  δ ≈ 1e-8 moves a parameter by at most lr·δ/eps = 1e-6 per step, so the bound is 1e-5 per step.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import torch

CASES = [(1, 1), (1, 4), (2, 2), (4, 1), (4, 2)]  # (ranks, micro-batches k)
B, T, LR = 8, 16, 1e-2
JOB_TIMEOUT = 180  # seconds for one case, all ranks: a learner's endless loop is stopped and reported
MAX_RANKS, MAX_K = 8, 16  # --case bounds: this is a laptop check
STEPS = 3  # consecutive accumulation steps: a gradient left over from the step before shows up in the next
EPS = (
    1e-4  # AdamW's first step is ~lr·g/(|g| + eps): a large eps bounds how far a rounding-level δ moves it (≤ lr·δ/eps)
)
PARAM_BOUND = STEPS * 1e-5  # each step may move a parameter by ≤ lr·δ/eps ≈ 1e-6 from one device's; 10x headroom


def _model():
    from minipar.model.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=23, block_size=T, n_layer=2, n_head=2, d_model=16))


def _batch(step: int = 0):
    """The global batch of step ``step`` (another one each step)."""
    g = torch.Generator().manual_seed(4 + step)
    return torch.randint(0, 23, (B, T), generator=g), torch.randint(0, 23, (B, T), generator=g)


def _one_device_grads(model, x, y) -> dict:
    """One device's gradient of the mean loss over the whole global batch, at ``model``'s current weights."""
    ref = _model()
    ref.load_state_dict({k: v.detach().clone() for k, v in model.state_dict().items()})
    ref(x, y)[1].backward()
    return {n: p.grad for n, p in ref.named_parameters()}


def worker(module, k):
    """Runs on every rank: STEPS calls of the learner's ``accumulation_step``, watched by the checker's own hooks.

    Per step it records the rows of every forward the model ran (a forward pre-hook: the micro-batch
    count and sizes, seen by the checker, not reported by the learner), the backward passes and full
    ``p.grad`` tensors (``after_backward``), the accumulated shards at ``opt.step()`` and, for each
    unit, the slice of one device's gradient at the same weights they must equal.
    """
    from minipar.runtime import dist as mdist
    from minipar.zero.stage12 import ZeroOptimizer

    mod = importlib.import_module(module)
    n, r = mdist.world_size(), mdist.rank()
    model = _model()
    opt = ZeroOptimizer(model, stage=2, lr=LR, eps=EPS)
    name_of = {id(p): name for name, p in model.named_parameters()}
    share = B // n
    rows: list[int] = []
    model.register_forward_pre_hook(
        lambda m, args, kwargs: rows.append(int((args[0] if args else kwargs["idx"]).shape[0])), with_kwargs=True
    )
    seen = {"full_grads": 0, "calls": 0, "reduce_scatters": 0}
    captured = {}
    real_rs = opt._reduce_scatter_unit

    def reduce_scatter_unit(j):  # ZeRO-2 reduce-scatters a unit once per backward pass that reached it
        seen["reduce_scatters"] += 1
        real_rs(j)

    opt._reduce_scatter_unit = reduce_scatter_unit

    def after_backward():
        seen["calls"] += 1
        seen["full_grads"] += sum(p.grad is not None for p in model.parameters())

    real_step = opt.step

    def step():
        captured["at_step"] = [None if g is None else g.clone() for g in opt._grad_shards()]
        real_step()

    opt.step = step
    steps = []
    for s in range(STEPS):
        x, y = _batch(s)
        ref = _one_device_grads(model, x, y)
        want = [u.flatten([ref[name_of[id(p)]] for p in ps])[u.lo : u.hi] for u, ps in zip(opt.units, opt.params)]
        rows.clear()
        seen.update(full_grads=0, calls=0, reduce_scatters=0)
        captured.clear()
        sl = slice(r * share, (r + 1) * share)
        mod.accumulation_step(model, opt, x[sl], y[sl], k, after_backward=after_backward)
        steps.append(
            {
                "rows": list(rows),
                "seen": dict(seen),
                "shards": captured.get("at_step"),
                "want": want,
                "units": [u.name for u in opt.units],
                "params": {kk: v.detach().clone() for kk, v in model.named_parameters()},
            }
        )
    return steps


def reference():
    """One device, no accumulation, plain AdamW: the parameters after each of the STEPS steps."""
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=EPS, weight_decay=0.0)
    params = []
    for s in range(STEPS):
        x, y = _batch(s)
        opt.zero_grad()
        model(x, y)[1].backward()
        opt.step()
        params.append({n: p.detach().clone() for n, p in model.named_parameters()})
    return params


def check_step(n: int, k: int, r: int, s: int, res: dict, ref_params: dict) -> str | None:
    """The first thing wrong with rank ``r``'s step ``s`` (a message saying what to do), or None."""
    at = f"{n} rank(s), k = {k}: rank {r}, step {s + 1} of {STEPS}"
    share = B // n
    if res["rows"] != [share // k] * k:
        return (
            f"{at}: the model ran forward on {len(res['rows'])} batch(es) of {res['rows']} rows (seen by the "
            f"checker's forward hook); expected k = {k} micro-batches of {share // k} rows: split x, y into k "
            "equal chunks and run forward and backward on each as model(x, y) (one full-batch backward is no "
            "accumulation)"
        )
    if res["seen"]["reduce_scatters"] != k * len(res["units"]):
        return (
            f"{at}: ZeRO-2 reduce-scattered its {len(res['units'])} units {res['seen']['reduce_scatters']} times, "
            f"expected k = {k} times each: run one backward per micro-batch (one backward of the summed "
            "losses keeps every micro-batch's activations alive: accumulation saves no memory then)"
        )
    if res["seen"]["calls"] != k:
        return (
            f"{at}: after_backward() was called {res['seen']['calls']} times, expected once per micro-batch (k = {k})"
        )
    if res["seen"]["full_grads"]:
        return (
            f"{at}: p.grad was set after a backward — ZeRO-2 keeps no full gradient "
            "(use ZeroOptimizer(stage=2) and do not keep p.grad yourself)"
        )
    for name, shard, want in zip(res["units"], res["shards"], res["want"]):
        bound = 1e-5 * float(want.abs().max()) + 1e-7 if want.numel() else 1e-7
        d = float((shard - want).abs().max()) if shard.numel() else 0.0
        if not d < bound:
            ratio = float(shard.norm() / want.norm()) if want.norm() > 0 else float("nan")
            hint = (
                "each micro-batch's loss must be divided by k (a ratio of k means it was not; 1/k means only "
                "one micro-batch counted)"
                if s == 0
                else "the first step was right, so the shards still held the previous step's gradient: "
                "call opt.zero_grad() after opt.step()"
            )
            return (
                f"{at}, unit {name}: accumulated gradient shard off by {d:.3g} (bound {bound:.3g}); "
                f"|got|/|want| = {ratio:.3f}: {hint}"
            )
    worst = max(float((res["params"][kk] - v).abs().max()) for kk, v in ref_params.items())
    if not worst < PARAM_BOUND:
        return (
            f"{at}: parameters after the step differ from one device's AdamW by {worst:.3g} "
            f"(bound {PARAM_BOUND:g}): call opt.step() once, after the last micro-batch"
        )
    return None


def check(module: str, cases=CASES) -> list[str]:
    from minipar import launch

    failures = []
    ref_params = reference()
    for n, k in cases:
        what = f"{n} rank(s), k = {k}"
        try:
            out = launch(worker, world_size=n, args=(module, k), timeout=20, prefix=True, job_timeout=JOB_TIMEOUT)
        except NotImplementedError as exc:
            return [str(exc).split("] ", 1)[-1]]
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        found = (
            check_step(n, k, r, s, res, ref_params[s]) for r, steps in enumerate(out) for s, res in enumerate(steps)
        )
        wrong = next((m for m in found if m), None)
        if wrong:
            failures.append(wrong)
    return failures


def parse_case(text: str, ap: argparse.ArgumentParser) -> tuple[int, int]:
    """``"RANKS,K"`` -> (ranks, k), each checked (1..MAX_RANKS ranks, 1..MAX_K micro-batches); else one line, exit 2."""
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        ap.error(f"--case {text}: give RANKS,K as two integers, e.g. --case 2,2")
    n, k = (int(p) for p in parts)
    if not (1 <= n <= MAX_RANKS and 1 <= k <= MAX_K):
        ap.error(f"--case {text}: use 1 to {MAX_RANKS} ranks and 1 to {MAX_K} micro-batches, e.g. --case 2,2")
    return n, k


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", default="homework.b_accumulate_zero2.accumulate")
    ap.add_argument("--case", help="only one case, RANKS,K (e.g. 2,2): a quick first look")
    a = ap.parse_args(argv)
    cases = [parse_case(a.case, ap)] if a.case else CASES
    fails = check(a.module, cases)
    if not fails:
        print(
            f"✓ accumulation_step: {len(cases)} case(s) (ranks, k: {cases}), {STEPS} steps each = one "
            "device (gradient shards and the AdamW steps, float32 bounds); k micro-batches seen by the checker's "
            "hooks; ZeRO-2 kept no full gradient"
        )
        return 0
    for f in fails:
        print(f"{'·' if f.startswith('not implemented yet') else '✗'} accumulation_step: {f}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
