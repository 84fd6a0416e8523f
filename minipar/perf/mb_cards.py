"""Megatron-Bridge's model verification cards: two H100 performance runs, BF16 (added 2026-11-29): DeepSeek-V3, a TEST
row (:data:`CARDS`, -5.9 %), and Qwen3 30B-A3B, the FIT of what CUDA graphs do to the host's floor (:data:`GRAPHS_FIT`).

Source: github.com/NVIDIA-NeMo/Megatron-Bridge, ``examples/model_verification_cards/<model>/card.yaml`` at 067f987
(the format: ``skills/create-model-verification-card/SKILL.md``). Each card's ``pretrain_performance.H100`` item is a
50-step mock-data run of one named recipe at one Megatron-Bridge commit; it records the layout in prose and the average
of steps 41-50: step time, model TFLOP/s per GPU and tokens/s per GPU (used here). Another release process than the
performance-summary archive :mod:`minipar.perf.mb_archive` holds (a card, its own commit, BF16 where the archive's rows
of these models are FP8). The settings below were written down from each recipe BEFORE either row's error was
computed. The cards' other H100 performance items (Nemotron-3 Super, Nemotron-3.5 Lightning, Qwen3.6 35B-A3B) are
hybrid Mamba / gated-delta-net models this planner cannot describe; the cards' ``pretrain`` items are functional runs
("sanity checks rather than optimized performance results", natural routing, checkpoints saved), left out.

- **DeepSeek-V3**, card verified 2026-08-15 at commit 79308d0 (``deepseek_v3_pretrain_1024gpu_h100_bf16_config``,
  ``src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py``; its base ``recipes/deepseek/h100/deepseek_v3.py``):
  1,024 H100s, BF16, TP 2, PP 8, VP 4, CP 1, EP 64, expert TP 1, sequence parallelism, GBS 16,384, MBS 1, s 4,096, one
  MTP layer, the layout ``Et|(tt|)*30mL``, ``recompute_modules=["mla_up_proj", "mlp"]``, HybridEP's flex dispatcher
  (``apply_flex_dispatcher_backend`` on a Hopper GPU), forced balancing, ``overlap_moe_expert_parallel_comm=False`` (the
  base recipe's; the performance recipe leaves it), ``tp_comm_overlap=False``, ``overlap_grad_reduce=False`` (the
  gradient reduction exposed; its parameter all-gather ASSUMED exposed too, as the archive's row, although
  ``overlap_param_gather_with_optimizer_step`` is set), gradients reduced in bf16 (``main_grads_dtype`` bf16), the
  precision-aware optimizer with fp32 master weights and bf16 moments (``exp_avg_dtype``, ``exp_avg_sq_dtype``:
  :attr:`~minipar.perf.layout.Layout.optimizer_dtypes`; added after the row's error was computed, memory only), no CUDA
  graphs (``cuda_graph_impl="none"``): 1,061.206 tokens/s/GPU (61.756 s a step).
- **Qwen3 30B-A3B**, card verified 2026-07-27 at commit 3a9559f (``qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config``,
  ``perf_recipes/qwen/h100/qwen3_moe.py`` over ``recipes/qwen/h100/qwen3_moe.py``): 16 H100s, BF16, TP 1, PP 1, CP 1, EP
  16, expert TP 1, DP 16, GBS 1,024, MBS 1, s 4,096, no recomputation, HybridEP's flex dispatcher, forced balancing,
  ``overlap_moe_expert_parallel_comm=True`` (``"ep"``), ``delay_wgrad_compute=False``, gradients reduced in bf16, the
  distributed optimizer with its grad-reduce and param-gather overlap (precision-aware, its states fp32: the memory of
  the default), and Transformer Engine CUDA graphs of the ``moe_router`` and ``moe_preprocess`` scopes (all 48 blocks
  captured, the card says): 13,011.378 tokens/s/GPU (20.147 s a step). The archive's FP8 rows of the same layout without
  CUDA graphs and without the overlap run 8,826-8,960 (:mod:`minipar.perf.mb_archive`).

Errors, in order: DeepSeek-V3 -14.2 % as first computed, -7.1 % with its node-limited routing
(:func:`minipar.perf.moe.node_hit`), -5.9 % with each rank's dispatched rows (:func:`minipar.perf.moe.dispatched_rows`);
Qwen3 30B-A3B -31 % under the host's floor (9.2 ms a block, more than the run's whole 6.56 ms), then, the graphs chosen
to lift that floor on this row (:func:`minipar.perf.moe.host_floor`), +3.8 % (+2.2 % with the overlap's share
re-chosen, 0.35).

Both are read as the archive's rows (:func:`minipar.perf.nemo.nemo_rows`: Transformer Engine's fused loss, the H100
preset's links, ZeRO-1), each with its recipe's settings (:data:`SETTINGS`).
"""

from __future__ import annotations

from minipar.perf.hardware import Device
from minipar.perf.layout import Estimate
from minipar.perf.nemo import nemo_rows

# (source, model, GPUs, (tp, pp, cp, v, ep), micro-batch, global batch, recompute layers, fp8, metric, published): as
# minipar.perf.mb_archive's rows; the source names the card's verification date. TEST:
CARDS = [("MB card 08-15", "DeepSeek-V3", 1024, (2, 8, 1, 4, 64), 1, 16384, None, False, "tps", 1061.206)]
# FIT of the CUDA graphs' effect on the host's floor (minipar.perf.moe.host_floor), chosen after its error was seen
GRAPHS_FIT = [("MB card 07-27", "Qwen3-30B-A3B", 16, (1, 1, 1, 1, 16), 1, 1024, None, False, "tps", 13011.378)]
# each card's recipe over minipar.perf.nemo.recipe()'s release and model defaults (module doc): given
GRAPHED = ("moe_router", "moe_preprocess")  # the Qwen3 recipe's cuda_graph_scope
SETTINGS = {
    # bf16 moments: mb_archive.RECIPES, as 25.09's
    ("MB card 08-15", "DeepSeek-V3"): {"a2a_overlap": False, "flex": True},
    ("MB card 07-27", "Qwen3-30B-A3B"): {"a2a_overlap": True, "flex": True, "cuda_graphs": GRAPHED},
}


def card_rows(dev: Device | None = None, rows=None) -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)`` per row of ``rows`` (default the TEST rows, :data:`CARDS`) on ``dev``
    (default the H100 preset with Megatron-Core's efficiency), read by :func:`minipar.perf.nemo.nemo_rows` with
    :data:`SETTINGS`."""
    return nemo_rows(dev, CARDS if rows is None else rows, SETTINGS)
