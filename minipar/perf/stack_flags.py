"""The command line's software-stack flags (``python -m minipar.plan --framework F --precision P
--grad-reduce-dtype D --attention-kernel K --compile`` or ``--fused-kernels``, ``--fused-loss``, ``--fsdp2``): whose
kernels run the step, in which dtypes."""

from __future__ import annotations

from minipar.errors import ConfigError
from minipar.perf.gemm import ATTN_KERNELS
from minipar.perf.hardware import FRAMEWORKS
from minipar.perf.layout import STATE_BYTES

GRAD_BYTES = {"fp32": 4, "bf16": 2}  # --grad-reduce-dtype: bytes per gradient element on the wire
# Megatron-Core's precision-aware optimizer state flags: (dest, choices, whose dtype)
STATE_FLAGS = (("main_params_dtype", ("fp32", "fp16"), "the fp32 master weights'"),
               ("exp_avg_dtype", tuple(STATE_BYTES), "Adam's first moment's"),
               ("exp_avg_sq_dtype", tuple(STATE_BYTES), "Adam's second moment's"))  # fmt: skip


def add_stack_flags(p) -> None:
    """``--grad-reduce-dtype``, ``--precision``, ``--fp8-param-gather``, ``--framework``, ``--attention-kernel``,
    ``--fused-loss``, ``--compile`` and ``--fsdp2`` on the argparse parser ``p``."""
    p.add_argument(
        "--grad-reduce-dtype",
        default="fp32",
        choices=sorted(GRAD_BYTES),
        help="dtype of the gradients' all-reduce / reduce-scatter (fp32: Megatron's main grads; bf16: grad_sync_dtype)",
    )
    p.add_argument(
        "--precision",
        default="bf16",
        choices=("bf16", "fp8"),
        help="the blocks' weight GEMMs: bf16, or fp8 at the device's FP8 peak and 0.79 of bf16's efficiency (measured "
        "on an H100; attention, norms, embedding, logit stay bf16; --framework megatron keeps their inputs in FP8)",
    )
    p.add_argument(
        "--fp8-param-gather",
        action="store_true",
        help="with --precision fp8, the blocks' weights kept in FP8 (no bf16 copy) and ZeRO's all-gather of them in "
        "1 byte each (Megatron-LM's flag; NeMo's fp8_params; torchao's FSDP2 float8 all-gather); --zero 1 or more",
    )
    p.add_argument(
        "--framework",
        default="pytorch",
        choices=FRAMEWORKS,
        help="whose kernels run the GEMMs, which sets the device's GEMM efficiency (each chosen on its own published "
        "runs): pytorch (FSDP stacks: llm-foundry, torchtitan) or megatron (Megatron-Core + Transformer Engine: NeMo)",
    )
    p.add_argument(
        "--attention-kernel",
        default=None,
        choices=ATTN_KERNELS,
        help="the FlashAttention kernel (with --flash-attention; default: the framework's, flash for pytorch, cudnn "
        "for megatron): flash (FlashAttention-2), cudnn, triton (FlashAttention in Triton, llm-foundry's attn_impl)",
    )
    p.add_argument(
        "--fused-loss",
        action="store_true",
        help="a fused cross-entropy kernel (Transformer Engine's, flash-attn's, Liger's): 6 bytes of HBM traffic per "
        "logit value, where the unfused loss moves 52 (Megatron-LM) or 48 (PyTorch's F.cross_entropy on fp32 logits); "
        "the A100's constants carry the loss (0 there either way)",
    )
    p.add_argument(
        "--compile",
        "--fused-kernels",
        dest="compile",
        action="store_true",
        help="the blocks under torch.compile, or with hand-fused RMSNorm/SwiGLU/rotary kernels (pytorch stacks: "
        "TinyLlama's): a gated model's elementwise operators fused, its memory passes the fit set's; eager (the "
        "default): 3.8 more, as measured in torchtitan's eager Llama block",
    )
    p.add_argument(
        "--use-precision-aware-optimizer",
        action="store_true",
        help="Megatron-Core's optimizer states in the dtypes below (Transformer Engine's FusedAdam; the distributed "
        "optimizer only: --zero 1 or more): memory, not the update's arithmetic",
    )
    for flag, choices, whose in STATE_FLAGS:
        p.add_argument(
            f"--{flag.replace('_', '-')}",
            default="fp32",
            choices=choices,
            help=f"{whose} dtype with --use-precision-aware-optimizer (Megatron-Core's flag; DeepSeek-V3's recipe: "
            "bf16 moments)",
        )
    p.add_argument(
        "--fsdp2",
        action="store_true",
        help="ZeRO 2/3 as PyTorch's FSDP2 (fully_shard: torchtitan, OLMo-core): each gathered unit copied out of the "
        "all-gather buffer and each gradient into the reduce-scatter buffer on the compute stream, not hidden; "
        "default: FSDP1's flat parameters (llm-foundry, fms-fsdp), gathered in place",
    )


def optimizer_dtypes(a) -> tuple | None:
    """``(main params, exp_avg, exp_avg_sq)`` dtypes of Megatron-Core's precision-aware optimizer
    (``Layout.optimizer_dtypes``), or None without ``--use-precision-aware-optimizer``."""
    return tuple(getattr(a, f) for f, *_ in STATE_FLAGS) if a.use_precision_aware_optimizer else None


def check_stack_flags(a) -> None:
    """Raise :class:`ConfigError` (one line) for a stack flag that contradicts the layout: ``--fp8-param-gather``
    without ``--precision fp8``; ``--fsdp2`` with a fixed
    ``--zero`` 0 or 1 (FSDP2 shards the weights or at least the gradients: ZeRO 2 or 3); an optimizer state dtype
    without ``--use-precision-aware-optimizer``, or that flag outside Megatron-Core's distributed optimizer
    (``--framework megatron``, ZeRO 1 or more: "only supported with distributed optimizer",
    megatron/core/optimizer/__init__.py)."""
    if a.fp8_param_gather and a.precision != "fp8":
        raise ConfigError(
            f"--fp8-param-gather with --precision {a.precision}: it keeps FP8 weights; add --precision fp8, or drop it"
        )
    for flag, *_ in STATE_FLAGS:
        if getattr(a, flag) != "fp32" and not a.use_precision_aware_optimizer:
            raise ConfigError(
                f"--{flag.replace('_', '-')} {getattr(a, flag)} is a precision-aware optimizer's state dtype: add "
                "--use-precision-aware-optimizer (Megatron-Core's), or drop it"
            )
    if a.use_precision_aware_optimizer and a.framework != "megatron":
        raise ConfigError(
            "--use-precision-aware-optimizer is Megatron-Core's (Transformer Engine's FusedAdam): add --framework "
            "megatron, or drop it"
        )
    zero = a.zero if a.zero is not None or a.tp is None else 0  # a fixed layout's default: ZeRO 0
    if a.fp8_param_gather and zero == 0 and a.tp is not None and a.dp * (a.cp or 1) > 1:
        raise ConfigError(
            "--fp8-param-gather with --zero 0: Megatron-LM gathers FP8 weights only with its distributed optimizer or "
            "FSDP2 (its arguments.py); add --zero 1 (or 2, 3)"
        )
    if a.use_precision_aware_optimizer and zero is not None and zero not in (1, 2):
        raise ConfigError(
            f"--use-precision-aware-optimizer with --zero {zero}: Megatron-Core supports it only with its "
            "distributed optimizer; use --zero 1 (or 2)"
        )
    if a.fsdp2 and a.zero is not None and a.zero < 2:
        raise ConfigError(
            f"--fsdp2 with --zero {a.zero}: FSDP2's fully_shard is ZeRO-3 (or ZeRO-2 with its weights kept after "
            "the forward); use --zero 3 or 2, or leave --fsdp2 out (ZeRO 0/1: DDP or a distributed optimizer)"
        )
