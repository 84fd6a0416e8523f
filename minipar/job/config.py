"""The settings of a training run (:class:`TrainConfig`), checked once (:func:`check`) into a :class:`Job`.

Every setting is written once: a field of the frozen :class:`TrainConfig` with its default and, in the
field's metadata, its section (``model``, ``parallelism``, ``optimizer`` or ``run``, as torchtitan's
``JobConfig`` groups them), its help text and its allowed values; :mod:`minipar.job.cli` builds
``python -m minipar.train``'s command line from those fields. :func:`check` is the one place a run's
settings are checked, before any file is touched or any rank is started: it returns a :class:`Job`
(the settings, the layout :class:`~minipar.runtime.mesh.Mesh`, the corpus, the step to start at), and
nothing downstream checks them again.

Also here, as the main job (:mod:`minipar.train`) and the plainest loop (:mod:`minipar.job.reference`) both
use them: :func:`lr_at` (the learning-rate schedule) and :func:`build` (the single-device model and AdamW).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from minipar.checkpoint.manifest import text_digest
from minipar.checkpoint.resume import check_run
from minipar.data import CharCorpus, check_fits, load_text
from minipar.errors import ConfigError
from minipar.job.fits import check_memory
from minipar.job.outdir import check_folder
from minipar.model.gpt import GPT, GPTConfig, adamw_groups
from minipar.model.moe.capacity import check_moe
from minipar.model.recompute import MODES as RECOMPUTE_MODES
from minipar.runtime.dist import default_timeout
from minipar.runtime.mesh import Mesh, divisors

DTYPES = ("fp32", "bf16", "fp16")
SCHEDULES_3D = ("gpipe", "1f1b")  # the main job runs one pipeline stage per rank
GRAD_COMPRESSION = ("none", "bf16", "topk", "powersgd")  # the dp all-reduce: plain, or compressed (lesson 09)
BETAS = (0.9, 0.95)  # AdamW's (β1, β2), as GPT-2: the single device's and every layout's
SECTIONS = ("model", "parallelism", "optimizer", "run")  # TrainConfig's groups of fields (torchtitan's JobConfig)


def _opt(section: str, default, help: str, **kw):
    """A field of ``section`` (one of :data:`SECTIONS`) with its command-line help in its metadata, and
    optionally ``choices`` (the allowed values) or ``minimum=k`` (an integer >= k; None allowed where None
    is the default) and ``maximum=n`` (<= n); :func:`check` checks them."""
    return field(default=default, metadata={"section": section, "help": help, **kw})


def _section(name: str) -> property:
    def get(self) -> SimpleNamespace:
        return SimpleNamespace(**{f.name: getattr(self, f.name) for f in fields_of(name)})

    return property(get, doc=f"the {name} settings (``cfg.{name}.<field>``), a copy: the config itself is frozen")


@dataclass(frozen=True)
class TrainConfig:
    """One training run, immutable (derive another with ``dataclasses.replace``). Every field is a flag of
    ``python -m minipar.train`` (``n_layer`` -> ``--n-layer``); grouped views: ``cfg.model``,
    ``cfg.parallelism``, ``cfg.optimizer``, ``cfg.run`` (:data:`SECTIONS`). Checked by :func:`check`."""

    steps: int = _opt("run", 1000, "optimizer steps", minimum=1)
    batch_size: int = _opt("run", 16, "global batch, sequences per step (all ranks together)", minimum=1)
    microbatches: int = _opt(
        "parallelism", 1, "gradient-accumulation micro-batches per rank (the pipeline's micro-batches)", minimum=1
    )
    block_size: int = _opt("model", 128, "context length T, characters", minimum=1)
    n_layer: int = _opt("model", 4, "transformer blocks", minimum=1)
    n_head: int = _opt("model", 4, "attention heads per block", minimum=1)
    d_model: int = _opt("model", 128, "hidden size", minimum=1)
    lr: float = _opt("optimizer", 3e-3, "peak learning rate (AdamW)")
    min_lr_frac: float = _opt("optimizer", 0.1, "the cosine decay ends at this fraction of --lr")
    warmup: int = _opt("optimizer", 20, "linear learning-rate warm-up, steps", minimum=0)
    weight_decay: float = _opt("optimizer", 0.1, "AdamW weight decay of the matrices")
    grad_clip: float = _opt("optimizer", 1.0, "clip the global gradient norm (0: off)")
    seed: int = _opt("run", 0, "seed of the weights and the data order", minimum=0, maximum=2**32 - 1)
    dtype: str = _opt("run", "fp32", "autocast precision (fp16: GPU only)", choices=DTYPES)
    data: str | None = _opt("run", None, "a UTF-8 text file (default: Python's pydoc_data.topics)")
    out: str | None = _opt("run", "runs/train", "output folder ('' for none)")
    log_every: int = _opt("run", 10, "log the training loss every N steps", minimum=1)
    eval_every: int = _opt("run", 100, "evaluate the validation loss every N steps", minimum=1)
    eval_batches: int = _opt("run", 8, "validation batches per evaluation", minimum=1)
    sample_chars: int = _opt("run", 300, "characters of text sampled from the trained model", minimum=0, maximum=10_000)
    ckpt_dir: str | None = _opt("run", None, "checkpoint folder (default: OUT/ckpt with --ckpt-every or --resume)")
    ckpt_every: int = _opt("run", 0, "save a checkpoint every N steps (0: never)", minimum=0)
    resume: bool = _opt("run", False, "continue from the newest complete checkpoint")
    dp: int | None = _opt(
        "parallelism", None, "data-parallel degree (default: the ranks left, world / (tp·pp))", minimum=1
    )
    tp: int = _opt("parallelism", 1, "tensor-parallel degree (divides --n-head and --d-model)", minimum=1)
    pp: int = _opt("parallelism", 1, "pipeline stages (at most --n-layer)", minimum=1)
    cp: int = _opt(
        "parallelism",
        1,
        "context-parallel degree: ring attention over a sequence split in 2·cp chunks (lesson 11)",
        minimum=1,
    )
    schedule: str = _opt("parallelism", "1f1b", "pipeline schedule", choices=SCHEDULES_3D)
    zero: int = _opt(
        "parallelism",
        0,
        "1: ZeRO-1 over the dp group (AdamW moments sharded; with --moe-experts the experts' over the expert-dp "
        "group); 3: ZeRO-3 per parameter over the dp group "
        "(minipar.zero.fully_shard; with --dtype bf16 it gathers and computes in bf16), needs --tp 1 --pp 1",
        choices=(0, 1, 3),
    )
    grad_compression: str = _opt(
        "parallelism",
        "none",
        "compress the data-parallel gradient all-reduce: bf16 (half the bytes), topk (the largest 1/100 of the "
        "entries, error feedback) or powersgd (rank-4 PowerSGD with error feedback); needs --zero 0 (lesson 09)",
        choices=GRAD_COMPRESSION,
    )
    recompute: str = _opt(
        "parallelism",
        "none",
        "activation recomputation: keep less for backward, re-run forward pieces (selective: the attention "
        "core; full: the whole block; lesson 08)",
        choices=RECOMPUTE_MODES,
    )
    moe_experts: int = _opt(
        "model", 0, "mixture of experts: every block's MLP becomes this many experts (0: dense; lesson 12)", minimum=0
    )
    moe_top_k: int = _opt("model", 1, "experts per token (with --moe-experts)", minimum=1)
    ep: int = _opt(
        "parallelism", 1, "expert-parallel degree, carved out of --dp: each rank holds E/ep experts", minimum=1
    )

    model, parallelism, optimizer, run = (_section(s) for s in SECTIONS)

    def accepts(self, pp: int, dp: int, tp: int) -> bool:
        """True if this model and batch can run on a (pp, dp, tp) layout (used to list valid layouts)."""
        return (
            _fits(self.gpt(1), pp, tp)
            and self.batch_size % dp == 0
            and self.batch_size // dp % self.microbatches == 0
            and dp % self.ep == 0
        )

    def meta(self, corpus: CharCorpus) -> dict:
        """What a checkpoint of this run only fits: the model's shape, the corpus (its vocabulary and the SHA-256
        of its text) and what else decides the trajectory (seed, global batch, experts per token), checked by
        :mod:`minipar.checkpoint.resume`; :func:`minipar.checkpoint.dcp.save_3d` adds the layout."""
        keys = ("n_layer", "n_head", "d_model", "block_size", "data", "moe_experts", "moe_top_k", "seed", "batch_size")
        shape = {k: getattr(self, k) for k in keys}
        return {**shape, "vocab": "".join(corpus.chars), "data_sha256": text_digest(corpus.text)}

    def gpt(self, vocab_size: int) -> GPTConfig:
        """The model these settings describe, over a ``vocab_size``-character vocabulary (the corpus's)."""
        keys = ("block_size", "n_layer", "n_head", "d_model", "moe_experts", "moe_top_k")
        return GPTConfig(vocab_size=vocab_size, **{k: getattr(self, k) for k in keys})


def fields_of(section: str) -> list[dataclasses.Field]:
    """:class:`TrainConfig`'s fields of ``section`` (one of :data:`SECTIONS`), in their order."""
    return [f for f in dataclasses.fields(TrainConfig) if f.metadata["section"] == section]


@dataclass(frozen=True)
class Job:
    """A checked run (made only by :func:`check`): its settings, its layout (pure: no process groups;
    :func:`minipar.runtime.mesh.init_groups` adds this rank's), its corpus, the step it starts at and the id
    its checkpoints record (:func:`minipar.checkpoint.resume.check_run`)."""

    cfg: TrainConfig
    mesh: Mesh
    corpus: CharCorpus
    start: int
    run_id: str = ""


def _fits(model: GPTConfig, pp: int, tp: int) -> bool:
    """True if :func:`check_model_fits` passes (used to list the layouts a model accepts)."""
    try:
        check_model_fits(model, pp, tp)
    except ConfigError:
        return False
    return True


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up for ``cfg.warmup`` steps, then cosine decay to ``min_lr_frac · lr``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def build(cfg: TrainConfig, vocab_size: int) -> tuple[GPT, torch.optim.Optimizer]:
    """The single-device model (seeded with ``cfg.seed``) and AdamW, decaying matrices only (as GPT-2).

    The 3D job builds the same weights and parameter groups for every layout
    (:func:`minipar.job.parallelize.parallelize`).
    """
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.gpt(vocab_size))
    return model, torch.optim.AdamW(adamw_groups(model, cfg.weight_decay), lr=cfg.lr, betas=BETAS)


def check(cfg: TrainConfig, world_size: int = 1, device_type: str = "cpu") -> Job:
    """Every check of a run, in one place: called by :func:`minipar.train.main` before any rank is
    started (so a bad setting costs no launch and no lost run), or by :func:`minipar.train.train` when
    it is given settings rather than a :class:`Job`; before any output file is touched.

    Returns:
        the :class:`Job`: ``cfg``, the layout ``Mesh(world_size, ...)``, the corpus, and the step to
        start at (the newest checkpoint's with ``--resume``, else 0).
    Raises:
        ConfigError: a bad flag or combination of flags, a layout that does not fit ``world_size`` or
        the model, fp16 off GPU, a text too short for the splits, an ``--out``/``--ckpt-dir`` that is a
        file, lies under one or cannot be written, every checkpoint damaged, a checkpoint past
        ``--steps``, of another model or of another seed, batch or text, a fresh run over another run's
        checkpoints, a ``--ckpt-dir`` of two runs (:func:`minipar.checkpoint.resume.check_run`), too little memory,
        a ``MINIPAR_TIMEOUT`` that is no number of seconds up to a day (:func:`minipar.runtime.dist.env_seconds`).
    """
    _check_flags(cfg)
    what = (
        f"this model (--n-layer {cfg.n_layer}, --n-head {cfg.n_head}, "
        f"--d-model {cfg.d_model}) and --batch-size {cfg.batch_size}"
    )
    check_model_fits(cfg.gpt(1), cfg.pp, cfg.tp, cfg.cp)
    mesh = Mesh(world_size, cfg.pp, cfg.dp, cfg.tp, cfg.cp, cfg.ep, accepts=cfg.accepts, what=what)  # ep | dp too
    dp = mesh.dp_size
    if cfg.dtype == "fp16" and device_type != "cuda":
        raise ConfigError("--dtype fp16 needs a GPU; use --dtype bf16 on CPU")
    corpus = CharCorpus(load_text(cfg.data))
    if cfg.batch_size % dp:
        lo = cfg.batch_size // dp * dp
        raise ConfigError(
            f"--batch-size {cfg.batch_size} is not divisible by the {dp} data-parallel "
            "ranks; use " + (f"{lo} or {lo + dp}" if lo else f"a multiple of {dp}, e.g. --batch-size {dp}")
        )
    check_fits(len(corpus.text), cfg.block_size, cfg.batch_size, dp)
    local = cfg.batch_size // dp
    if local % cfg.microbatches:
        fits = [m for m in range(1, local + 1) if local % m == 0]
        raise ConfigError(
            f"--microbatches {cfg.microbatches} does not divide the per-rank batch {local} "
            f"(= --batch-size {cfg.batch_size} / dp {dp}); use --microbatches "
            f"{', '.join(map(str, fits))}, or a --batch-size divisible by {dp * cfg.microbatches}"
        )
    check_memory(cfg, dp, world_size, device_type)  # every rank of this machine, against its free memory
    job = Job(cfg, mesh, corpus, *check_run(cfg, corpus))  # check_run reads --ckpt-dir only where it is a folder
    default_timeout()  # the process groups' timeout from the environment: a setting too, checked before any rank
    if cfg.out:  # the folders last: nothing is created or touched here, only looked at
        check_folder(cfg.out, "--out")
    if cfg.ckpt_dir and (cfg.ckpt_every or cfg.resume):
        check_folder(cfg.ckpt_dir, "--ckpt-dir", write=bool(cfg.ckpt_every))
    return job


def _check_flags(cfg: TrainConfig) -> None:
    """:func:`check`'s first part: each flag alone and the flags together (no world size needed)."""
    for f in dataclasses.fields(cfg):
        v, flag, choices = getattr(cfg, f.name), "--" + f.name.replace("_", "-"), f.metadata.get("choices")
        low, high = f.metadata.get("minimum"), f.metadata.get("maximum")
        if low is not None and not (v is None and f.default is None) and (not isinstance(v, int) or v < low):
            raise ConfigError(f"{flag} {v}: must be an integer >= {low}" + (f" and <= {high}" if high else ""))
        if high is not None and v > high:
            raise ConfigError(f"{flag} {v}: must be an integer <= {high}; use {flag} {high} or less")
        if choices and v not in choices:
            raise ConfigError(f"{flag} {v}: use one of {', '.join(map(str, choices))}")
    if not (cfg.lr > 0 and math.isfinite(cfg.lr)):
        raise ConfigError(f"--lr {cfg.lr}: must be a finite number > 0, e.g. --lr 3e-3")
    if not (cfg.grad_clip >= 0 and math.isfinite(cfg.grad_clip)):
        raise ConfigError(f"--grad-clip {cfg.grad_clip}: must be a finite number >= 0 (0 turns clipping off)")
    if not 0 <= cfg.min_lr_frac <= 1:
        raise ConfigError(f"--min-lr-frac {cfg.min_lr_frac}: must be in [0, 1] (a fraction of --lr)")
    if not (cfg.weight_decay >= 0 and math.isfinite(cfg.weight_decay)):
        raise ConfigError(f"--weight-decay {cfg.weight_decay}: must be a finite number >= 0")
    if cfg.ckpt_every and not cfg.ckpt_dir:
        raise ConfigError(
            f"--ckpt-every {cfg.ckpt_every} has nowhere to save (--out '' and no --ckpt-dir): "
            "add --ckpt-dir DIR, or --out DIR (checkpoints go to DIR/ckpt)"
        )
    if cfg.resume and not cfg.ckpt_dir:
        raise ConfigError(
            "--resume needs a checkpoint directory to look in: add --ckpt-dir DIR "
            "(or --out DIR, whose DIR/ckpt is the default)"
        )
    if cfg.zero == 3 and (cfg.tp > 1 or cfg.pp > 1 or cfg.cp > 1):  # the --zero rule, written once
        raise ConfigError(
            f"--zero 3 with --tp {cfg.tp} --pp {cfg.pp}" + (f" --cp {cfg.cp}" if cfg.cp > 1 else "") + ": the main "
            "job shards ZeRO-3 over the dp group only; use --tp 1 --pp 1 --cp 1 (and more --dp), or --zero 1"
        )
    if cfg.grad_compression != "none" and cfg.zero:
        raise ConfigError(
            f"--grad-compression {cfg.grad_compression} with --zero {cfg.zero}: ZeRO reduce-scatters flat gradient "
            "shards, so there is no all-reduce to compress; use --zero 0, or --grad-compression none"
        )
    if cfg.moe_experts or cfg.ep > 1:  # experts: dense parameters over dp, experts over ep
        _check_experts(cfg)


def _check_experts(cfg: TrainConfig) -> None:
    """The main job's MoE rules, one line each. Accepted with experts: dp, ep, ``--cp``, ``--microbatches``,
    ``--recompute``, ``--ckpt-every``/``--resume``, ``--zero 1`` (tests/test_experts_train.py proves each
    equal to one device); refused: ``--ep`` without experts, E, k or ep inconsistent (ep must divide E;
    that it divides dp, the :class:`~minipar.runtime.mesh.Mesh` checks), tp, pp, ZeRO-3, gradient compression."""
    if cfg.ep > 1 and not cfg.moe_experts:
        raise ConfigError(f"--ep {cfg.ep} needs experts to shard: add --moe-experts E (a multiple of {cfg.ep})")
    n, k = cfg.moe_experts, cfg.moe_top_k
    if k > n:
        raise ConfigError(f"--moe-top-k {k}: at most --moe-experts {n} experts per token; use --moe-top-k {n} or less")
    if n % cfg.ep:
        fits = ", ".join(map(str, divisors(n)[:12]))
        raise ConfigError(f"--ep {cfg.ep} must divide --moe-experts {n} (whole experts per rank); use --ep {fits}")
    check_moe(n, k, None, cfg.ep)
    clash = {
        "--tp": cfg.tp > 1,
        "--pp": cfg.pp > 1,
        "--zero 3 (use --zero 1)": cfg.zero == 3,
        "--grad-compression": cfg.grad_compression != "none",
    }
    bad = [k for k, v in clash.items() if v]
    if bad:
        raise ConfigError(
            f"--moe-experts {cfg.moe_experts} runs with data, expert and context parallelism (and micro-batches, "
            f"recompute, checkpoints, ZeRO-1) only: drop {', '.join(bad)}"
        )


def check_model_fits(model: GPTConfig, pp: int, tp: int, cp: int = 1) -> None:
    """Raise :class:`ConfigError` unless ``model`` can be split into ``pp`` stages of ``tp`` shards.

    pp <= n_layer (every stage holds at least one block); tp divides d_model, n_head and 4·d_model
    (Megatron's column/row split of heads and the FFN: tp divides gcd(n_head, d_model));
    block_size >= 2·cp (the load-balanced split gives every cp rank two non-empty chunks,
    :func:`minipar.cp.split.load_balanced_ranges`; lengths need not divide).
    """
    if cp > 1 and model.block_size < 2 * cp:
        raise ConfigError(
            f"--cp {cp} needs sequences of at least 2·cp = {2 * cp} tokens, but --block-size is {model.block_size}; "
            f"use --cp <= {model.block_size // 2}"
        )
    if pp > model.n_layer:
        raise ConfigError(
            f"--pp {pp} stages but the model has only --n-layer {model.n_layer} blocks; "
            f"use --pp <= {model.n_layer} or --n-layer >= {pp}"
        )
    heads = math.gcd(model.n_head, model.d_model)  # tp must divide both (Megatron's split of heads and columns)
    if heads % tp:
        raise ConfigError(
            f"--tp {tp} must divide --n-head {model.n_head} and --d-model {model.d_model} (whole heads and columns "
            f"per rank); use --tp {', '.join(map(str, divisors(heads)[:12]))}"
        )
