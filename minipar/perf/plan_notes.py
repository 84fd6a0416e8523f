"""What ``python -m minipar.plan`` prints under its table: where published runs of the top layout's kind read against
this model, so a plan says how far to trust it.

Each note quotes the errors of the test rows it names (:func:`minipar.perf.runs.out_of_sample`); the constants are
those errors as text, and ``tests/test_plan_framework.py`` recomputes them from the rows, so a note cannot outlive a
change of the model. Units: none (text).
"""

from __future__ import annotations

from minipar.perf.flops import attention_share
from minipar.perf.gemm import attention_kernel
from minipar.perf.layout import Estimate, Layout
from minipar.perf.moe import ep_nodes
from minipar.perf.shape import ModelShape

# NeMo's long-sequence H100 rows at FlashAttention-2's rate (minipar.perf.nemo_long), Megatron-MoE-ModelZoo's at cuDNN's
# (minipar.perf.moe_zoo)
LONG_SEQ_FLASH, LONG_SEQ_CUDNN = "-14 to +3 %", "+3 to +5 %"
# The runs whose all-to-all crossed nodes on NCCL with nothing hiding it, by its share of the modelled step: a third or
# more (DGX Cloud's DeepSeek-V3, minipar.perf.dgxc; Megatron-Bridge 25.09's Qwen3 235B-A22B, minipar.perf.mb_archive),
# an eighth (DGX Cloud's Grok-1)
NCCL_A2A_LARGE, NCCL_A2A_SMALL = "+14 to +20 %", "-2 to +7 %"
LARGE_SHARE = 1 / 3
# NeMo AutoModel's runs with expert parallelism on its PyTorch stack (FSDP2, PyTorch's pipelining, DeepEP; bf16 on
# 8-1,024 H100s: minipar.perf.automodel), every one optimistic
PYTORCH_MOE = "+8 to +24 %"


def exposed_nccl_a2a(layout: Layout, dev) -> bool:
    """True where ``layout``'s all-to-all crosses nodes on NCCL's dispatcher (``"alltoall"``) with nothing hiding it
    (no ``"ep"`` in the overlap): the kind of run the all-to-all note speaks of."""
    nccl = layout.ep > 1 and layout.dispatcher == "alltoall" and "ep" not in layout.overlap
    return nccl and ep_nodes(dev, layout)[1] > 1


def pytorch_moe(layout: Layout, dev) -> bool:
    """True for a layout with expert parallelism (ep > 1) on a GPU under the PyTorch stack (``dev.framework``
    "pytorch"): the kind of run the PyTorch-MoE note speaks of."""
    return layout.ep > 1 and dev.framework == "pytorch" and bool(dev.sms)


def plan_notes(estimate: Estimate, dev, model: ModelShape) -> list[str]:
    """The notes for a plan whose top layout's estimate on ``dev`` for ``model`` is ``estimate``: attention at 30 %
    or more of a block's FLOPs on cuDNN's kernel (its rate checked only by Megatron-MoE-ModelZoo's long-context rows);
    an all-to-all across nodes on NCCL's dispatcher (``"alltoall"``) without ``"ep"`` in the overlap, which the model
    times at DeepEP's measured NIC rate (:func:`minipar.perf.moe.a2a_seconds`): the published runs of that kind where
    it held a third of the step or more ran slower than modelled, those where it held an eighth did not; expert
    parallelism on the PyTorch stack (:func:`pytorch_moe`), whose published runs all ran slower than modelled."""
    layout, out = estimate.layout, []
    share = attention_share(model)
    if layout.flash_attention and attention_kernel(dev) == "cudnn" and share >= 0.3:
        out.append(
            f"  (attention is {100 * share:.0f} % of a block's FLOPs, at cuDNN's measured rate: Megatron-MoE-"
            f"ModelZoo's Qwen3 235B runs at 16K-128K tokens, 55-91 % attention, read {LONG_SEQ_CUDNN} at it; NeMo's "
            f"2024 runs on FlashAttention-2 {LONG_SEQ_FLASH} at that kernel's: --attention-kernel flash)"
        )
    if exposed_nccl_a2a(layout, dev):
        a2a = estimate.time.get("ep", 0.0) / estimate.time["total"]
        out.append(
            f"  (the all-to-all crosses nodes on NCCL with nothing hiding it, {100 * a2a:.0f} % of this step: "
            f"published runs of that kind read {NCCL_A2A_LARGE} where it held a third of the step or more (DGX "
            f"Cloud's DeepSeek-V3, Megatron-Bridge 25.09's Qwen3 235B-A22B), {NCCL_A2A_SMALL} where it held an "
            "eighth (DGX Cloud's Grok-1): the larger its share, the longer the real step may be; minipar/perf/dgxc.py)"
        )
    if pytorch_moe(layout, dev):
        out.append(
            "  (expert parallelism on a PyTorch stack: NeMo AutoModel's published runs of that kind (FSDP2, DeepEP; "
            f"DeepSeek-V3, Kimi K2, Qwen3 30B-A3B on 8-1,024 H100s) read {PYTORCH_MOE}, every one optimistic: the "
            "real step may be longer; minipar/perf/automodel.py)"
        )
    return out
