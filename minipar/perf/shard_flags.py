"""The command line's flags that modify a fixed layout's sharding or recomputation (``python -m minipar.plan --tp T
--pp P --dp D ... --recompute-layers N``, ``--hsdp N``, ``--hpz N``), checked before any work: one line each, naming
the value and the fix (:class:`minipar.errors.ConfigError`); :func:`minipar.perf.layout_checks.check_layout` checks the
layout they make."""

from __future__ import annotations

import argparse

from minipar.errors import ConfigError
from minipar.runtime.mesh import divisors

SHARD_FLAGS = ("recompute_layers", "hsdp", "hpz")  # Layout fields of the same names, in --json when given


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


def check_shard_flags(a: argparse.Namespace, fixed: list) -> None:
    """``--recompute-layers``, ``--hsdp`` and ``--hpz`` modify a fixed layout: each needs it and what it modifies."""
    for flag, v in (("--recompute-layers", a.recompute_layers), ("--hsdp", a.hsdp), ("--hpz", a.hpz)):
        if v is not None and v < 1:
            raise ConfigError(f"{flag} {v}: must be an integer >= 1")
        if v is not None and not fixed and a.moe_experts is None:
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
