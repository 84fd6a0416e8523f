"""minipar.pp.executor on real ranks: pipeline training equals single-device training.

p = 2 and 4 pipeline ranks, m = 1..8 micro-batches, GPipe, 1F1B and interleaved 1F1B (v = 2),
2 AdamW steps of a small GPT on real text; the single-device reference runs in this process.
"""

import functools
import re

import pytest
import torch

from minipar import ConfigError, launch
from tests import _workers_pp as W

# float64 runs (pipeline and reference): reordering the micro-batch sums moves results by
# ~1e-16 relative, amplified at most ~1e3x by AdamW's 1/(sqrt(v)+eps) on tiny gradients, i.e.
# ~1e-13·lr; a real bug moves parameters by ~lr = 1e-3. 1e-9 sits six orders from both, on any CPU.
LOSS_TOL = 1e-9
PARAM_TOL = 1e-9


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

    Both sides run in float64. Tolerances 1e-9 absolute on losses (~4.8) and parameters
    (lr 1e-3), derived, not fitted to one CPU: the pipeline sums m micro-batch gradients, each
    of a mean over B/m·T positions divided by m; one device takes one mean over B·T positions:
    the same value added in another order, so gradients agree to float64 rounding (~1e-16
    relative) whatever kernels the CPU picks (AVX2, AVX-512). AdamW divides by sqrt(v) + eps,
    which amplifies that rounding for entries with tiny gradients by at most ~|g|/eps, leaving
    parameter differences far below 1e-9, while a real bug (a missing micro-batch, a wrong 1/m,
    a stale activation) moves parameters by ~lr = 1e-3. (In fp32 the same rounding reached
    3e-5 on an AVX-512 CPU: a fitted fp32 tolerance is not portable.)
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


def test_coupled_mode_equals_single_device_and_refuses_interleaving():
    """Megatron-LM's blocking pairs (coupled=True) change when ranks wait, not what they compute;
    with several chunks per rank the pairing could deadlock, so the executor refuses it."""
    cases = [("gpipe", 3, 1, 4), ("1f1b", 4, 1, 4), ("1f1b", 8, 1, 4), ("1f1b", 2, 1, 4)]
    results = launch(W.pipeline_train, world_size=4, args=(cases,), kwargs=dict(coupled=True))
    for i, (name, m, _, n_layer) in enumerate(cases):
        ref_losses, ref_params = _reference(m, n_layer)
        losses = results[-1][i][0]
        assert max(abs(a - b) for a, b in zip(losses, ref_losses)) < LOSS_TOL, (name, m, losses, ref_losses)
        for r in results:
            for k, q in r[i][1].items():
                assert (q - ref_params[k]).abs().max().item() < PARAM_TOL, (name, m, k)
    with pytest.raises(ConfigError, match="coupled=True with 8 stages on 4 ranks"):
        launch(W.pipeline_train, world_size=4, args=([("interleaved", 4, 2, 8)],), kwargs=dict(coupled=True))


def test_same_numbers_as_torch_pipelining():
    """minipar's executor and torch.distributed.pipelining (ScheduleGPipe, Schedule1F1B,
    ScheduleInterleaved1F1B) on gloo, 2 ranks, same model and batches, 2 AdamW steps.
    Both in float64; tolerance 1e-9 on losses and parameters (derived as in
    test_pipeline_equals_single_device): both sum the same m micro-batch gradients, scaled
    by 1/m (we scale the loss, PyTorch the gradients), so they differ by float64 rounding only."""
    cases = [("gpipe", 4, 1, 4), ("1f1b", 4, 1, 4), ("interleaved", 4, 2, 4)]
    results = launch(W.against_native, world_size=2, args=(cases,))
    for i, case in enumerate(cases):
        assert results[1][i][0] < LOSS_TOL, (case, results[1][i])
        assert max(r[i][1] for r in results) < PARAM_TOL, (case, [r[i] for r in results])


def test_bad_input_on_real_ranks():
    """Wrong activation shape: a ConfigError naming the shapes, before anything is sent.
    Peers that run different schedules: the waiting rank raises after the timeout, no hang."""
    with pytest.raises(ConfigError, match=r"shape \(2, 16, 16\) but stage 1 expects .*\(2, 16, 32\)"):
        launch(W.shape_mismatch, world_size=2)
    with pytest.raises(RuntimeError) as info:
        launch(W.mismatched_schedules, world_size=2, args=(3,))
    assert re.search(r"receiving the input of 1F\d from pipeline rank 0 failed", str(info.value.__cause__)), info.value
