"""The settings of a training run (:class:`TrainConfig`), their checks, and the command line made from them.

Every setting is written once: a field of :class:`TrainConfig` with its default and, in the field's
metadata, its help text (and choices); :mod:`minipar.job.cli` builds ``python -m minipar.train``'s
command line from those fields. :func:`check` runs every check of a run before any file is touched
or any rank is started.

Also here, because both the main job (:mod:`minipar.train`) and the plainest loop
(:mod:`minipar.job.reference`) use them: :func:`lr_at` (the learning-rate schedule) and :func:`build`
(the single-device model and its AdamW).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch

from minipar.checkpoint.resume import check_resume
from minipar.data import CharCorpus, check_fits, load_text
from minipar.errors import ConfigError
from minipar.job.outdir import check_folder
from minipar.model.gpt import GPT, GPTConfig, adamw_groups
from minipar.model.moe.dispatch import check_moe
from minipar.model.recompute import MODES as RECOMPUTE_MODES
from minipar.runtime.mesh import Mesh, check_ep
from minipar.tp.gpt import check_tp_config

DTYPES = ("fp32", "bf16", "fp16")
SCHEDULES_3D = ("gpipe", "1f1b")  # the main job runs one pipeline stage per rank
GRAD_COMPRESSION = ("none", "bf16", "topk", "powersgd")  # the dp all-reduce: plain, or compressed (lesson 09)


def _opt(default, help: str, **kw):
    """A field with its command-line help in its metadata, and optionally ``choices`` (the allowed
    values) or ``minimum=k`` (an integer >= k; None allowed where None is the default);
    :meth:`TrainConfig.validate` checks both."""
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class TrainConfig:
    """One training run. Every field is a flag of ``python -m minipar.train`` (``n_layer`` -> ``--n-layer``)."""

    steps: int = _opt(1000, "optimizer steps", minimum=1)
    batch_size: int = _opt(16, "global batch, sequences per step (all ranks together)", minimum=1)
    microbatches: int = _opt(
        1, "gradient-accumulation micro-batches per rank (the pipeline's micro-batches)", minimum=1
    )
    block_size: int = _opt(128, "context length T, characters", minimum=1)
    n_layer: int = _opt(4, "transformer blocks", minimum=1)
    n_head: int = _opt(4, "attention heads per block", minimum=1)
    d_model: int = _opt(128, "hidden size", minimum=1)
    lr: float = _opt(3e-3, "peak learning rate (AdamW)")
    min_lr_frac: float = _opt(0.1, "the cosine decay ends at this fraction of --lr")
    warmup: int = _opt(20, "linear learning-rate warm-up, steps", minimum=0)
    weight_decay: float = _opt(0.1, "AdamW weight decay of the matrices")
    grad_clip: float = _opt(1.0, "clip the global gradient norm (0: off)")
    seed: int = _opt(0, "seed of the weights and the data order")
    dtype: str = _opt("fp32", "autocast precision (fp16: GPU only)", choices=DTYPES)
    data: str | None = _opt(None, "a UTF-8 text file (default: Python's pydoc_data.topics)")
    out: str | None = _opt("runs/train", "output folder ('' for none)")
    log_every: int = _opt(10, "log the training loss every N steps", minimum=1)
    eval_every: int = _opt(100, "evaluate the validation loss every N steps", minimum=1)
    eval_batches: int = _opt(8, "validation batches per evaluation", minimum=1)
    sample_chars: int = _opt(300, "characters of text sampled from the trained model", minimum=0)
    ckpt_dir: str | None = _opt(None, "checkpoint folder (default: OUT/ckpt with --ckpt-every or --resume)")
    ckpt_every: int = _opt(0, "save a checkpoint every N steps (0: never)", minimum=0)
    resume: bool = _opt(False, "continue from the newest complete checkpoint")
    dp: int | None = _opt(None, "data-parallel degree (default: the ranks left, world / (tp·pp))", minimum=1)
    tp: int = _opt(1, "tensor-parallel degree (divides --n-head and --d-model)", minimum=1)
    pp: int = _opt(1, "pipeline stages (at most --n-layer)", minimum=1)
    cp: int = _opt(
        1, "context-parallel degree: ring attention over a sequence split in 2·cp chunks (lesson 11)", minimum=1
    )
    schedule: str = _opt("1f1b", "pipeline schedule", choices=SCHEDULES_3D)
    zero: int = _opt(
        0,
        "1: ZeRO-1 over the dp group (AdamW moments sharded; with --moe-experts the experts' over the expert-dp "
        "group); 3: ZeRO-3 per parameter over the dp group "
        "(minipar.zero.fully_shard; with --dtype bf16 it gathers and computes in bf16), needs --tp 1 --pp 1",
        choices=(0, 1, 3),
    )
    grad_compression: str = _opt(
        "none",
        "compress the data-parallel gradient all-reduce: bf16 (half the bytes), topk (the largest 1/100 of the "
        "entries, error feedback) or powersgd (rank-4 PowerSGD with error feedback); needs --zero 0 (lesson 09)",
        choices=GRAD_COMPRESSION,
    )
    recompute: str = _opt(
        "none",
        "activation recomputation: keep less for backward, re-run forward pieces (selective: the attention "
        "core; full: the whole block; lesson 08)",
        choices=RECOMPUTE_MODES,
    )
    moe_experts: int = _opt(
        0, "mixture of experts: every block's MLP becomes this many experts (0: dense; lesson 12)", minimum=0
    )
    moe_top_k: int = _opt(1, "experts per token (with --moe-experts)", minimum=1)
    ep: int = _opt(1, "expert-parallel degree, carved out of --dp: each rank holds E/ep experts", minimum=1)

    def validate(self) -> None:
        """Raise :class:`ConfigError` for a bad setting that needs no world size (the layout: :meth:`layout`)."""
        for f in dataclasses.fields(self):
            v, flag, choices = getattr(self, f.name), "--" + f.name.replace("_", "-"), f.metadata.get("choices")
            low = f.metadata.get("minimum")
            if low is not None and not (v is None and f.default is None) and (not isinstance(v, int) or v < low):
                raise ConfigError(f"{flag} {v}: must be an integer >= {low}")
            if choices and v not in choices:
                raise ConfigError(f"{flag} {v}: use one of {', '.join(choices)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"--lr {self.lr}: must be a finite number > 0, e.g. --lr 3e-3")
        if not (self.grad_clip >= 0 and math.isfinite(self.grad_clip)):
            raise ConfigError(f"--grad-clip {self.grad_clip}: must be a finite number >= 0 (0 turns clipping off)")
        if not 0 <= self.min_lr_frac <= 1:
            raise ConfigError(f"--min-lr-frac {self.min_lr_frac}: must be in [0, 1] (a fraction of --lr)")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise ConfigError(f"--weight-decay {self.weight_decay}: must be a finite number >= 0")
        if self.ckpt_every and not self.ckpt_dir:
            raise ConfigError(
                f"--ckpt-every {self.ckpt_every} has nowhere to save (--out '' and no --ckpt-dir): "
                "add --ckpt-dir DIR, or --out DIR (checkpoints go to DIR/ckpt)"
            )
        if self.zero not in (0, 1, 3):
            raise ConfigError(
                f"--zero {self.zero}: use 0 (all-reduce), 1 (ZeRO-1 over the dp group) or 3 (ZeRO-3 per parameter)"
            )
        if self.zero == 3 and (self.tp > 1 or self.pp > 1):
            raise ConfigError(
                f"--zero 3 with --tp {self.tp} --pp {self.pp}: the main job shards ZeRO-3 over the dp group "
                "only; use --tp 1 --pp 1 (and more --dp), or --zero 1"
            )
        if self.resume and not self.ckpt_dir:
            raise ConfigError(
                "--resume needs a checkpoint directory to look in: add --ckpt-dir DIR "
                "(or --out DIR, whose DIR/ckpt is the default)"
            )
        check_grad_compression(self.grad_compression, self.zero)
        if self.moe_experts or self.ep > 1:  # experts: dense parameters over dp, experts over ep
            check_moe_job(self.moe_experts, self.moe_top_k, self.ep, self.dp, self)

    def layout(self, world_size: int) -> Mesh:
        """The (pp, dp, tp) layout of this run (ep folded into dp) on ``world_size`` ranks, checked against the model.

        Raises:
            ConfigError: see :class:`minipar.runtime.mesh.Mesh`; a world-size error lists the layouts this
            model and batch accept (:meth:`accepts`).
        """
        what = (
            f"this model (--n-layer {self.n_layer}, --n-head {self.n_head}, "
            f"--d-model {self.d_model}) and --batch-size {self.batch_size}"
        )
        check_model_fits(self.gpt(1), self.pp, self.tp, self.cp)
        return Mesh(world_size, self.pp, self.dp, self.tp, self.cp, self.ep, accepts=self.accepts, what=what)

    def accepts(self, pp: int, dp: int, tp: int) -> bool:
        """True if this model and batch can run on a (pp, dp, tp) layout (used to list valid layouts)."""
        return (
            _fits(self.gpt(1), pp, tp)
            and self.batch_size % dp == 0
            and self.batch_size // dp % self.microbatches == 0
            and dp % self.ep == 0
        )

    def meta(self, corpus: CharCorpus) -> dict:
        """What a checkpoint of this run only fits: the model's shape and the corpus's vocabulary
        (:func:`minipar.checkpoint.dcp.save_3d` adds the layout; checked by :mod:`minipar.checkpoint.resume`)."""
        keys = ("n_layer", "n_head", "d_model", "block_size", "data") + (("moe_experts",) if self.moe_experts else ())
        shape = {k: getattr(self, k) for k in keys}
        return {**shape, "vocab": "".join(corpus.chars)}

    def gpt(self, vocab_size: int) -> GPTConfig:
        return GPTConfig(
            vocab_size=vocab_size,
            block_size=self.block_size,
            n_layer=self.n_layer,
            n_head=self.n_head,
            d_model=self.d_model,
            moe_experts=self.moe_experts,
            moe_top_k=self.moe_top_k,
        )


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
    (:func:`minipar.job.parallelize.build_piece`).
    """
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.gpt(vocab_size))
    return model, torch.optim.AdamW(adamw_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.95))


def check(cfg: TrainConfig, world_size: int = 1, device_type: str = "cpu") -> tuple[CharCorpus, int]:
    """Every check of a run, in one place: called by :func:`minipar.train.train` before any output
    file is touched, and by :func:`minipar.train.main` before any rank is started (so a bad setting
    costs no launch and no lost run).

    Returns:
        (the corpus, the step to start at: the newest checkpoint's with ``--resume``, else 0).
    Raises:
        ConfigError: a bad flag, a layout that does not fit ``world_size`` or the model, fp16 off
        GPU, a text too short for the splits, an ``--out``/``--ckpt-dir`` that is a file, lies under
        one or cannot be written, every checkpoint damaged, a checkpoint past ``--steps`` or of
        another model (:func:`minipar.checkpoint.resume.check_resume`).
    """
    cfg.validate()
    if cfg.out:
        check_folder(cfg.out, "--out")
    if cfg.ckpt_dir and (cfg.ckpt_every or cfg.resume):
        check_folder(cfg.ckpt_dir, "--ckpt-dir", write=bool(cfg.ckpt_every))
    dp = cfg.layout(world_size).dp_size  # the Mesh checks ep | dp, also when dp is left to the world size
    if cfg.dtype == "fp16" and device_type != "cuda":
        raise ConfigError("--dtype fp16 needs a GPU; use --dtype bf16 on CPU")
    corpus = CharCorpus(load_text(cfg.data))
    if cfg.batch_size % dp:
        lo = cfg.batch_size // dp * dp
        raise ConfigError(
            f"--batch-size {cfg.batch_size} is not divisible by the {dp} data-parallel "
            f"ranks; use {lo or dp} or {lo + dp}"
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
    return corpus, (check_resume(cfg, corpus) if cfg.resume else 0)


def check_model_fits(model: GPTConfig, pp: int, tp: int, cp: int = 1) -> None:
    """Raise :class:`ConfigError` unless ``model`` can be split into ``pp`` stages of ``tp`` shards.

    pp <= n_layer (every stage holds at least one block); tp divides d_model, n_head and 4·d_model
    (:func:`minipar.tp.gpt.check_tp_config`, Megatron's column/row split of heads and the FFN);
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
    check_tp_config(model, tp)


def check_grad_compression(method: str, zero: int) -> None:
    """Raise ConfigError unless ``method`` is one of :data:`GRAD_COMPRESSION` and usable with ``zero``.

    Compression replaces the dp *all-reduce*; ZeRO-1 reduce-scatters sharded flat gradients
    instead (PowerSGD needs whole matrices on every rank), so the two do not combine here.
    """
    if method not in GRAD_COMPRESSION:
        raise ConfigError(f"--grad-compression {method}: use one of {', '.join(GRAD_COMPRESSION)}")
    if method != "none" and zero:
        raise ConfigError(
            f"--grad-compression {method} with --zero {zero}: ZeRO reduce-scatters flat gradient "
            "shards, so there is no all-reduce to compress; use --zero 0, or --grad-compression none"
        )


def check_moe_job(experts: int, top_k: int, ep: int, dp: int | None, cfg) -> None:
    """The main job's MoE rules, one line each (``cfg``: the TrainConfig, for the other settings).

    Accepted with experts: dp, ep, ``--cp``, ``--microbatches``, ``--recompute``, ``--ckpt-every``/``--resume``,
    ``--zero 1`` (tests/test_experts_train.py proves each equal to one device).
    Raises:
        ConfigError: ``--ep`` without experts; E, k or ep inconsistent (ep must divide E, and dp:
            :func:`minipar.runtime.mesh.check_ep`); a setting the MoE job does not combine with (tp, pp, ZeRO-3,
            gradient compression), naming the flags to drop.
    """
    if ep > 1 and not experts:
        raise ConfigError(f"--ep {ep} needs experts to shard: add --moe-experts E (a multiple of {ep})")
    check_moe(experts, top_k, None, ep)
    if dp is not None:
        check_ep(ep, dp)
    clash = {
        "--tp": cfg.tp > 1,
        "--pp": cfg.pp > 1,
        "--zero 3 (use --zero 1)": cfg.zero == 3,
        "--grad-compression": cfg.grad_compression != "none",
    }
    bad = [k for k, v in clash.items() if v]
    if bad:
        raise ConfigError(
            f"--moe-experts {experts} runs with data, expert and context parallelism (and micro-batches, "
            f"recompute, checkpoints, ZeRO-1) only: drop {', '.join(bad)}"
        )
