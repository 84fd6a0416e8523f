"""The command line's fixed layout (``python -m minipar.plan --tp T --pp P --dp D``, :func:`check_fixed_flags`) and the
flags that modify its sharding, recomputation or pipeline split (``--recompute-layers N``, ``--recompute-modules
layernorm,moe``, ``--hsdp N``, ``--hpz N``, ``--stage-split 9,9,8,6``), checked before any work: one line each, naming
the value and the fix (:class:`minipar.errors.ConfigError`); :func:`minipar.perf.layout_checks.check_layout` checks the
layout they make."""

from __future__ import annotations

import argparse

from minipar.errors import ConfigError
from minipar.perf.pp_layout import parse_layout
from minipar.runtime.mesh import divisors

# Layout fields of these names, in --json when given
SHARD_FLAGS = ("recompute_layers", "recompute_modules", "hsdp", "hpz", "stage_split", "bucket_mb")
# Megatron-Core's layout string: parsed into stage_split and v here (minipar.perf.pp_layout), not a Layout field


def add_shard_flags(p) -> None:
    """``--recompute-layers``, ``--hsdp`` and ``--hpz`` on the argparse parser ``p``."""
    p.add_argument(
        "--recompute-layers",
        type=int,
        default=None,
        help="with --recompute full: recompute only N blocks of each model chunk (Megatron-LM's "
        "--recompute-num-layers, --recompute-method block)",
    )
    p.add_argument(
        "--recompute-modules",
        default=None,
        help="with --recompute selective: Megatron-Core's modules recomputed, comma-separated, of core_attn (the "
        "default), layernorm, moe_act, moe, mla_up_proj, mlp, shared_experts (--recompute-modules; "
        "minipar.perf.recompute_modules): layernorm,moe; DeepSeek-V3's recipe: mla_up_proj,mlp",
    )
    p.add_argument(
        "--hsdp",
        type=int,
        default=None,
        help="hybrid sharding: ZeRO (--zero 1-3) shards over N dp ranks, replicated over dp/N (FSDP2's HSDP)",
    )
    p.add_argument(
        "--hpz",
        type=int,
        default=None,
        help="with --zero 3: reshard the weights after the forward over N dp ranks (a node: 8), so the backward's "
        "all-gather stays inside them, for 2/N bytes more per parameter (ZeRO++'s hpZ, DeepSpeed's "
        "zero_hpz_partition_size; FSDP2's fully_shard(reshard_after_forward=N))",
    )
    p.add_argument(
        "--ddp-bucket-mb",
        dest="bucket_mb",
        type=float,
        default=None,
        help="with --zero 0/1: reduce the gradients in buckets of N MiB of 16-bit gradients, each its own collective "
        "(PyTorch DDP's bucket_cap_mb, default 25; without it Megatron-Core's buckets)",
    )
    p.add_argument(
        "--stage-split",
        default=None,
        help="the blocks of each model chunk (with --v 1: each pipeline stage), comma-separated (nanotron's "
        "cost-balanced split): 9,9,8,6 for 32 layers on --pp 4",
    )
    p.add_argument(
        "--pipeline-model-parallel-layout",
        dest="pp_layout",
        default=None,
        help="Megatron-Core's layout string: model chunks split by |, E embedding, t block, m MTP block, L loss, (…)*n "
        'repeats; sets --v and the blocks of each chunk (DeepSeek-V3 on --pp 8: "Et|(tt|)*30mL")',
    )


def stage_split(text: str | None) -> tuple | None:
    """``--stage-split 9,9,8,6`` as a tuple of block counts (None: not given).

    Raises:
        ConfigError: a count that is not an integer >= 0.
    """
    if text is None:
        return None
    parts = [x.strip() for x in text.split(",")]
    if not all(x.isdigit() for x in parts):
        raise ConfigError(f"--stage-split {text}: give the blocks of each pipeline stage, integers >= 0: 9,9,8,6")
    return tuple(int(x) for x in parts)


def check_fixed_flags(a: argparse.Namespace, only_fixed: tuple) -> list:
    """A fixed layout is ``--tp --pp --dp``, all three, of ``--gpus`` GPUs when given; the flags ``only_fixed`` set
    (``--zero``, ``--sp``, ...) need it: the search tries its own, so they are refused, not dropped. Returns the given
    ones of tp, pp, dp; raises ConfigError."""
    fixed = [f for f in ("tp", "pp", "dp") if getattr(a, f) is not None]
    if fixed and len(fixed) < 3:
        raise ConfigError(f"a fixed layout needs --tp, --pp and --dp (got --{' --'.join(fixed)}): give all three")
    loose = [f"--{f.replace('_', '-')}" + ("" if v is True else f" {v}") for f in only_fixed
             if (v := getattr(a, f)) not in (None, False)]  # fmt: skip
    if loose and not fixed:
        raise ConfigError(f"{' '.join(loose)} sets a fixed layout (the search tries its own): add --tp --pp --dp")
    if fixed and a.gpus is not None and a.tp * a.pp * a.dp * (a.cp or 1) != a.gpus:
        n, cp = a.tp * a.pp * a.dp * (a.cp or 1), f" --cp {a.cp}" if a.cp else ""
        raise ConfigError(
            f"--tp {a.tp} --pp {a.pp} --dp {a.dp}{cp} is a layout of {n} GPUs, not --gpus {a.gpus}; "
            f"use --gpus {n} (or leave it out), or a layout whose tp·pp·dp·cp is {a.gpus}"
        )
    return fixed


def check_shard_flags(a: argparse.Namespace, fixed: list) -> None:
    """``--recompute-layers``, ``--hsdp``, ``--hpz`` and ``--stage-split`` modify a fixed layout: each needs it and
    what it modifies (``a.stage_split`` becomes a tuple here)."""
    if a.bucket_mb is not None and not (0 < a.bucket_mb < float("inf")):
        raise ConfigError(f"--ddp-bucket-mb {a.bucket_mb:g}: a finite number of MiB > 0 (PyTorch DDP's default: 25)")
    if a.bucket_mb is not None and (not fixed or a.moe_experts is not None):
        raise ConfigError(f"--ddp-bucket-mb {a.bucket_mb:g} modifies a fixed dense layout: add --tp --pp --dp")
    if a.bucket_mb is not None and (a.zero or 0) >= 2:
        raise ConfigError(
            f"--ddp-bucket-mb {a.bucket_mb:g} with --zero {a.zero}: DDP's buckets are ZeRO 0/1's; FSDP reduces per "
            "unit: drop --ddp-bucket-mb"
        )
    if a.recompute_modules is not None:  # a tuple of names here; check_layout checks them against the model
        mods, a.recompute_modules = a.recompute_modules, tuple(x.strip() for x in a.recompute_modules.split(","))
        if not fixed:
            raise ConfigError(f"--recompute-modules {mods} modifies a fixed layout (the search does not try it): add "
                              "--tp --pp --dp")  # fmt: skip
        if (a.recompute or "selective") != "selective":
            raise ConfigError(f"--recompute-modules {mods} is selective recomputation: use --recompute selective, not "
                              f"--recompute {a.recompute}")  # fmt: skip
    text, a.stage_split = a.stage_split, stage_split(a.stage_split)
    if a.pp_layout is not None:  # Megatron-Core's string: v and the blocks of each chunk (minipar.perf.pp_layout)
        if not fixed:
            raise ConfigError(f"--pipeline-model-parallel-layout {a.pp_layout} places a fixed layout's blocks: add "
                              "--tp --pp --dp")  # fmt: skip
        if a.stage_split is not None:
            raise ConfigError("--pipeline-model-parallel-layout with --stage-split: give one of them")
        v, a.stage_split = parse_layout(a.pp_layout, a.pp, None, a.mtp_num_layers or 0)
        if a.v not in (None, v):
            raise ConfigError(f"--pipeline-model-parallel-layout holds {v * a.pp} chunks, v = {v} on --pp {a.pp}, not "
                              f"--v {a.v}: drop --v or match it")  # fmt: skip
        a.v, text = v, a.pp_layout
    if a.stage_split is not None and not fixed:
        raise ConfigError(f"--stage-split {text} splits a fixed layout's model chunks: add --tp --pp --dp")
    if a.stage_split is not None and (a.first_stage_layers is not None or a.last_stage_layers is not None):
        name = "--pipeline-model-parallel-layout" if a.pp_layout is not None else "--stage-split"
        raise ConfigError(f"{name} with --first/last-stage-layers: give the whole split, or only first/last")
    if a.stage_split is not None and len(a.stage_split) != a.pp * (a.v or 1):
        raise ConfigError(f"--stage-split has {len(a.stage_split)} counts for --pp {a.pp} · --v {a.v or 1}: give one "
                          "per model chunk")  # fmt: skip
    for flag, v in (("--recompute-layers", a.recompute_layers), ("--hsdp", a.hsdp), ("--hpz", a.hpz)):
        if v is not None and v < 1:
            raise ConfigError(f"{flag} {v}: must be an integer >= 1")
        if v is not None and not fixed:
            raise ConfigError(f"{flag} {v} modifies a fixed layout (the search does not try it): add --tp --pp --dp")
    if a.recompute_layers is not None and a.recompute != "full":
        raise ConfigError(
            f"--recompute-layers {a.recompute_layers} recomputes that many whole blocks per model chunk: add "
            f"--recompute full (not {a.recompute or 'selective, the default'}), or drop --recompute-layers"
        )
    if a.hsdp is not None and fixed and a.dp % a.hsdp:
        ok = ", ".join(map(str, divisors(a.dp)[:12]))
        raise ConfigError(f"--hsdp {a.hsdp} must divide --dp {a.dp} (shard groups inside dp); use --hsdp {ok}")
    if a.hsdp is not None and fixed and not a.zero:
        raise ConfigError(
            f"--hsdp {a.hsdp} shards ZeRO's model states over {a.hsdp} ranks: add --zero 3 (FSDP2's HSDP), or 1 / 2 "
            "(Megatron-LM's --num-distributed-optimizer-instances)"
        )
    if a.hpz is None or not fixed:
        return
    if a.zero != 3:
        raise ConfigError(f"--hpz {a.hpz} reshards ZeRO-3's weights after the forward: add --zero 3 (not {a.zero})")
    if a.hsdp is not None:
        raise ConfigError(f"--hpz {a.hpz} with --hsdp {a.hsdp}: pick one (HSDP's shard group holds its gathers)")
    ok = [x for x in divisors(a.dp) if 1 < x < a.dp]
    if a.hpz not in ok:
        use = ", ".join(map(str, ok[:12])) or f"none (--dp {a.dp} has no divisor between 1 and itself)"
        raise ConfigError(f"--hpz {a.hpz} must divide --dp {a.dp}, above 1 and below it (a secondary group); use {use}")
