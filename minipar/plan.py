"""``python -m minipar.plan``: which layout for N GPUs and a model? (a MODEL: :mod:`minipar.perf`)

    python -m minipar.plan --model 70b --gpus 64 --gpu h100 --seq 4096 --global-batch 1024

prints the best layouts (dp, tp, pp, micro-batch b, interleaving v, ZeRO stage, recompute) with
their modelled MFU, step time and memory per GPU, then one line per reason the other layouts
were rejected (does not fit, TP across nodes, bubble) with an example of each. Only the command
line: the model is :mod:`minipar.perf.model`, the search :func:`minipar.perf.search.plan`.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import replace

from minipar.errors import ConfigError
from minipar.perf.hardware import GPUS
from minipar.perf.published import MODELS
from minipar.perf.search import plan

OVERLAP = ("dp", "pp", "tp")  # the communication minipar.perf.model can hide behind compute


def check_args(a: argparse.Namespace) -> None:
    """Raise :class:`ConfigError` (one line: the flag, the value, the fix) for an impossible input."""
    for flag in ("gpus", "gpus_per_node", "seq", "global_batch", "top"):
        v = getattr(a, flag)
        if v is not None and v < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} {v}: must be an integer >= 1")
    bad = [x for x in a.overlap.split(",") if x and x not in OVERLAP]
    if bad:
        raise ConfigError(
            f"--overlap {a.overlap}: {', '.join(bad)} is not one of {', '.join(OVERLAP)} (comma-separated)"
        )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m minipar.plan", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="70b", choices=sorted(MODELS), help="model shape (layers, hidden, heads)")
    p.add_argument("--gpus", type=int, default=64)
    p.add_argument("--gpu", default="h100", choices=sorted(GPUS))
    p.add_argument("--gpus-per-node", type=int, default=None, help="default: the GPU's (8)")
    p.add_argument("--seq", type=int, default=None, help="sequence length (default: the model's)")
    p.add_argument("--global-batch", type=int, default=1024, help="sequences per optimizer step")
    p.add_argument("--top", type=int, default=5)
    p.add_argument(
        "--overlap", default="", help=f"communication hidden behind compute, of {','.join(OVERLAP)}; e.g. dp,pp"
    )
    a = p.parse_args(argv)
    try:
        check_args(a)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    model = MODELS[a.model] if a.seq is None else replace(MODELS[a.model], seq=a.seq)
    dev = GPUS[a.gpu] if a.gpus_per_node is None else replace(GPUS[a.gpu], gpus_per_node=a.gpus_per_node)
    try:
        rows = plan(model, dev, a.gpus, a.global_batch, overlap=frozenset(x for x in a.overlap.split(",") if x))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    kept = [e for e, why in rows if not why]
    print(
        f"{a.model} ({model.params / 1e9:.1f}B params, seq {model.seq}) on {a.gpus} × {dev.name}, "
        f"global batch {a.global_batch}: {len(rows)} layouts modelled, {len(kept)} kept (a MODEL, not a measurement)"
    )
    print(f"{'layout':42s} {'MFU':>5s} {'step s':>7s} {'mem/GPU GB':>10s} {'bubble':>6s}")
    for e in kept[: a.top]:
        print(
            f"{str(e.layout):42s} {e.mfu:5.1%} {e.time['total']:7.2f} {e.mem['total'] / 1e9:10.1f} "
            f"{e.time['bubble'] / e.time['total']:6.1%}"
        )
    if not rows:
        print(
            f"  (none: no layout of {a.gpus} GPUs is valid here: tp must divide the heads ({model.heads}) and "
            f"the hidden size, pp the layers ({model.layers}), dp·micro-batch the global batch ({a.global_batch}))"
        )
    elif not kept:
        print("  (none: every layout was rejected; see below)")
    reasons = Counter(
        why.split(" (")[0].split(" ")[0] if why.startswith("bubble") else why.split(" (")[0] for _, why in rows if why
    )
    print("rejected:")
    for reason, n in reasons.most_common():
        ex = next((e, why) for e, why in rows if why and why.startswith(reason))
        print(f"  {n:5d} × {reason:16s} e.g. {ex[0].layout}: {ex[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
