"""minipar.pipeline on real ranks: pipeline training equals single-device training.

p = 2 and 4 pipeline ranks, m = 1..8 micro-batches, GPipe, 1F1B and interleaved 1F1B (v = 2),
2 AdamW steps of a small GPT on real text; the single-device reference runs in this process.
"""
import functools

import pytest
import torch

from minipar import ConfigError, launch
from tests import _workers_pp as W

LOSS_TOL = 1e-5
PARAM_TOL = 2e-5


@functools.lru_cache(maxsize=None)
def _reference(m, n_layer):
    torch.set_num_threads(1)
    return W.reference(m, n_layer)


def _cases(p):
    out = []
    for name, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
        for m in range(1, 9):
            if name == "interleaved" and m % p:
                continue  # interleaved needs m to be a multiple of p (tested in test_pipeline_schedules)
            out.append((name, m, v, 2 * p if name == "interleaved" else 4))
    return out


@pytest.mark.parametrize("p", [2, 4])
def test_pipeline_equals_single_device(p):
    """Same losses and parameters as one device after 2 AdamW steps.

    Tolerances: losses 1e-5 (absolute, losses ~4.8), parameters 2e-5 (absolute, lr 1e-3).
    The pipeline sums m micro-batch gradients, each of a mean over B/m·T positions divided by
    m; one device takes one mean over B·T positions: the same value added in another order, so
    gradients agree to fp32 rounding (~1e-7 relative), not bit for bit. AdamW divides by
    sqrt(v) + eps, which amplifies that rounding for entries with tiny gradients: the largest
    parameter difference seen is ~6e-6 (0.6% of one step's lr-sized update), so 2e-5 is safe
    while a real bug (a missing micro-batch, a wrong 1/m, a stale activation) moves parameters
    by ~lr = 1e-3.
    """
    cases = _cases(p)
    results = launch(W.pipeline_train, world_size=p, args=(cases,))
    for i, case in enumerate(cases):
        name, m, v, n_layer = case
        ref_losses, ref_params = _reference(m, n_layer)
        losses = results[-1][i][0]
        assert max(abs(a - b) for a, b in zip(losses, ref_losses)) < LOSS_TOL, (case, losses, ref_losses)
        seen = set()
        for r in range(p):
            for k, t in results[r][i][1].items():
                seen.add(k)
                assert (t - ref_params[k]).abs().max().item() < PARAM_TOL, (case, r, k)
        assert seen == set(ref_params), (case, set(ref_params) - seen)  # every parameter lives on some rank
