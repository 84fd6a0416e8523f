"""Checkpoints that lose nothing: sharded per rank with PyTorch Distributed Checkpoint (DCP).

Why DCP (``torch.distributed.checkpoint``): every rank writes only what it holds, in parallel,
and a checkpoint saved under one layout loads under another — DCP records each tensor's
*global* shape and each shard's offsets, and at load time every rank reads exactly the pieces
its new shards overlap. Replicated tensors (the same on every data-parallel rank) are written
once. It is the ecosystem's format (torchtitan, FSDP2), so a learner's checkpoint is a real one.

What a training checkpoint holds (see ``minipar.train``): model parameters, optimizer state
(per parameter, keyed by its name, so it survives a change of layout), the data-loader
position, the step, and the RNG state.

Across 3D layouts (:func:`state_3d`) every tensor is saved as the *logical* tensor of the
single-device GPT, each rank contributing its piece: a TP-sharded weight becomes a ``DTensor``
on the 1-D tensor-parallel ``DeviceMesh`` with placement ``Shard(0)`` (column-parallel rows,
vocabulary rows) or ``Shard(1)`` (row-parallel columns); TP-replicated tensors are plain
tensors (written once: DCP de-duplicates equal keys); each pipeline stage contributes its own
keys (``blocks.3.…`` with the global layer index). Two pieces of minipar's TP layout are not a
contiguous slice of the GPT's tensor, so they are saved as other logical tensors:
the fused ``qkv`` (rank r holds heads r of q, of k and of v: ``stride=3``) is saved as
``….qkv.weight.q``/``.k``/``.v``, and the vocabulary padded to a multiple of tp keeps only its
real rows (torch's ``Shard`` splits unevenly exactly like the padding: ceil(V/tp) rows per rank).
A checkpoint saved with dp2·tp2·pp2 therefore loads under dp4·tp1·pp2, on one device, or any
other layout: DCP reads for each rank the pieces its new shards overlap. With ZeRO-1 the AdamW
moments are first all-gathered over the dp group (course-sized models; a production job would
save the flat shards with their offsets).

Never a half-written checkpoint: every rank writes into ``step_NNNNNNNN.partial/``; only after
all ranks have finished (a barrier) does rank 0 rename it to ``step_NNNNNNNN/`` — an atomic
``rename`` on one file system — so :func:`latest` only ever sees complete checkpoints. A job
killed mid-save leaves a ``.partial`` directory, which is ignored and overwritten next time.
On a multi-node job ``ckpt_dir`` must be on a file system every node sees.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.tensor import DTensor, Shard

from minipar.checkpoint.manifest import checksums
from minipar.checkpoint.reader import SafeFileSystemReader, SafeLoadPlanner
from minipar.errors import CheckpointError
from minipar.tp.partition import param_is_tensor_parallel
from minipar.zero.param_shard import gather_full, local_rows

_STEP_DIR = re.compile(r"^step_(\d{8})$")


def step_dir(ckpt_dir: str, step: int) -> str:
    return os.path.join(ckpt_dir, f"step_{step:08d}")


def latest(ckpt_dir: str | None, before: int | None = None) -> str | None:
    """The newest *complete* checkpoint directory under ``ckpt_dir`` (None if there is none), or the
    newest before step ``before``. Complete: renamed from ``.partial`` (whether its files are intact:
    :func:`minipar.checkpoint.resume.damage`)."""
    if not ckpt_dir or not os.path.isdir(ckpt_dir):
        return None
    steps = [
        int(m.group(1))
        for d in os.listdir(ckpt_dir)
        if (m := _STEP_DIR.match(d))
        and os.path.exists(os.path.join(ckpt_dir, d, ".metadata"))
        and (before is None or int(m.group(1)) < before)
    ]
    return step_dir(ckpt_dir, max(steps)) if steps else None


def step_of(path: str) -> int:
    """The step of checkpoint directory ``path`` (``…/step_00000030`` -> 30)."""
    return int(_STEP_DIR.match(os.path.basename(os.path.normpath(path))).group(1))


META = "minipar.json"  # the settings a checkpoint only fits (model shape, corpus) and its layout, beside DCP's files


def read_meta(path: str) -> dict | None:
    """The ``meta`` dict saved with checkpoint ``path`` (None for a checkpoint saved without one).

    Raises:
        ValueError: the file is not a JSON object (damaged).
    """
    try:
        with open(os.path.join(path, META)) as f:
            meta = json.load(f)
    except FileNotFoundError:
        return None
    if not isinstance(meta, dict):
        raise ValueError(f"a JSON {type(meta).__name__}")
    return meta


def _barrier():
    if dist.is_initialized():
        dist.barrier()


@contextlib.contextmanager
def _as_checkpoint_error(verb: str, path: str):
    """DCP's ``CheckpointException`` (a ``BaseException``) as a :class:`~minipar.errors.CheckpointError`."""
    try:
        yield
    except CheckpointException as e:
        why = "; ".join(
            f"rank {r}: {type(x).__name__}: {str(x).splitlines()[0][:200] if str(x) else ''}"
            for r, (x, _) in e.failures.items()
        )
        raise CheckpointError(f"could not {verb} checkpoint {path}: {why}") from e


def save(ckpt_dir: str, step: int, state: dict, meta: dict | None = None) -> str:
    """Write ``state`` (nested dicts of tensors, DTensors and plain values) as checkpoint ``step``.

    ``meta``: JSON-able settings saved beside it (:func:`read_meta`), e.g. the model shape, so a
    resume can say which setting differs instead of failing deep inside DCP; with ``"files"``, the
    size and SHA-256 of every file written (:mod:`minipar.checkpoint.manifest`).
    Collective: every rank calls it. Returns the final directory.
    """
    final = step_dir(ckpt_dir, step)
    partial = final + ".partial"
    rank0 = not dist.is_initialized() or dist.get_rank() == 0
    if rank0:
        os.makedirs(ckpt_dir, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)
    _barrier()
    with warnings.catch_warnings():  # one process: DCP warns that it assumes so, which is the intent
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        with _as_checkpoint_error("write", partial):
            dcp.save(state, checkpoint_id=partial, no_dist=not dist.is_initialized())
    _barrier()  # every rank's shard file and rank 0's metadata are written
    if rank0:  # minipar.json: ``meta`` and every file's size and checksum (checked at --resume: resume.damage)
        with open(os.path.join(partial, META), "w") as f:
            json.dump({**(meta or {}), "files": checksums(partial, skip=(META,))}, f)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(partial, final)
    _barrier()
    return final


def load(path: str, state: dict) -> None:
    """Fill ``state``'s tensors in place from checkpoint ``path`` (resharding as needed). Collective.

    Read with :class:`~minipar.checkpoint.reader.SafeFileSystemReader` and
    :class:`~minipar.checkpoint.reader.SafeLoadPlanner`: a crafted ``.metadata`` or shard raises, never runs.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        with _as_checkpoint_error("read", path):
            dcp.load(  # no code from the folder runs: minipar.checkpoint.reader
                state,
                storage_reader=SafeFileSystemReader(path),
                planner=SafeLoadPlanner(),
                no_dist=not dist.is_initialized(),
            )


def optimizer_state(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    """The optimizer's per-parameter state keyed by parameter name: ``{name: {"exp_avg": ..., ...}}``.

    Keys by name (not by position in ``param_groups``) so a model cut differently — another
    pipeline stage, another shard — finds its entries. Tensors are the live state (loading into
    this dict writes into the optimizer).
    """
    out = {}
    for name, p in model.named_parameters():
        st = opt.state.get(p)
        if st:
            out[name] = {k: v for k, v in st.items()}
    return out


def init_optimizer_state(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    """Create AdamW's state tensors (zeros, step 0) so :func:`load` has somewhere to write."""
    for group in opt.param_groups:
        for p in group["params"]:
            if p not in opt.state or not opt.state[p]:
                opt.state[p] = {
                    "step": torch.zeros(
                        (), dtype=torch.float32
                    ),  # device-ok: AdamW's CPU step count, as torch.optim makes it
                    "exp_avg": torch.zeros_like(p),
                    "exp_avg_sq": torch.zeros_like(p),
                }


# ----------------------------------------------------------------------------- 3D layouts
def logical(stage: nn.Module, tensors: dict[str, torch.Tensor], tp_mesh, tp_rank: int, tp: int) -> dict:
    """This rank's pieces of the single-device GPT's tensors, keyed by logical name.

    ``tensors``: ``{param name: tensor shaped like this rank's param}`` (the params, or AdamW
    moments). How each is split is read from the parameter's own TP marks
    (:func:`~minipar.tp.partition.set_tensor_model_parallel_attributes`: ``partition_dim``,
    ``partition_stride``, ``full_size``). Returns views (so :func:`load` writes into them): plain
    tensors for replicated params (and for everything when tp = 1), ``DTensor`` with ``Shard(dim)``
    on ``tp_mesh`` for sharded ones; ``qkv`` split into ``.q``/``.k``/``.v``; padded vocabulary rows dropped.
    """
    params = dict(stage.named_parameters())
    out = {}
    for name, t in tensors.items():
        p = params[name]
        if not param_is_tensor_parallel(p):
            out[name] = t
            continue
        dim, stride, true = p.partition_dim, p.partition_stride, p.full_size
        for k, piece in enumerate(t.chunk(stride, dim=0) if stride > 1 else [t]):
            key = f"{name}.{'qkv'[k]}" if stride == 3 else (f"{name}.{k}" if stride > 1 else name)
            per = piece.shape[dim]
            n_true = true // stride
            valid = max(0, min(per, n_true - tp_rank * per))
            piece = piece.narrow(dim, 0, valid)
            if tp == 1:
                out[key] = piece
                continue
            shape = list(piece.shape)
            shape[dim] = n_true
            strides = torch.empty(shape, device="meta").stride()
            out[key] = DTensor.from_local(
                piece, tp_mesh, [Shard(dim)], run_check=False, shape=torch.Size(shape), stride=strides
            )
    return out


MOMENTS = ("exp_avg", "exp_avg_sq")


def moment_tensors(piece) -> dict[str, dict[str, torch.Tensor]]:
    """``{"exp_avg": {param name: tensor}, "exp_avg_sq": {...}}`` shaped like this rank's params.

    Plain AdamW: the live state tensors (loading writes into them). ZeRO-1: each unit's flat
    moment shards all-gathered over the dp group and cut back into parameters (copies: write them
    back with :func:`set_zero_moments`). Collective with ZeRO-1.
    """
    opt = piece.optimizer
    if piece.zero != 1:
        named = [(n, p) for n, p in piece.stage.named_parameters() if opt.state.get(p)]
        if piece.zero == 3:  # per-parameter dim-0 shards: all-gathered copies (write back with set_zero_moments)
            return {k: {n: gather_full(opt.state[p][k], p.shard_spec) for n, p in named} for k in MOMENTS}
        return {k: {n: opt.state[p][k] for n, p in named} for k in MOMENTS}
    from minipar.zero.flat import all_gather_flat

    out = {k: {} for k in MOMENTS}
    for j, u in enumerate(opt.units):
        for k in MOMENTS:
            shard = opt.flats[j].new_zeros(u.shard_size)
            for jj, a, b, v in opt.pieces:
                if jj == j and opt.optimizer.state.get(v):
                    shard[a:b] = opt.optimizer.state[v][k]
            full = all_gather_flat(opt.flats[j].new_empty(u.padded), shard, opt.group)
            for name, off, n, shape in zip(u.names, u.offsets, u.numels, u.shapes):
                out[k][f"{u.name}.{name}"] = full[off : off + n].view(shape)
    return out


def set_zero_moments(piece, moments: dict[str, dict[str, torch.Tensor]]) -> None:
    """Write full (per-parameter) moments back into a ZeRO-1 or ZeRO-3 optimizer's shards (no communication)."""
    opt = piece.optimizer
    if piece.zero == 3:
        for n, p in piece.stage.named_parameters():
            for k in MOMENTS:
                opt.state[p][k].copy_(local_rows(moments[k][n], p.shard_spec))
        return
    for j, u in enumerate(opt.units):
        for k in MOMENTS:
            flat = u.flatten([moments[k][f"{u.name}.{name}"] for name in u.names])
            for jj, a, b, v in opt.pieces:
                if jj == j:
                    opt.optimizer.state[v][k].copy_(flat[u.lo + a : u.lo + b])


def model_tensors(piece) -> dict[str, torch.Tensor]:
    """``{param name: tensor}``: the live parameters, or with ZeRO-3 their all-gathered copies (collective)."""
    if piece.zero == 3:
        return {n: gather_full(p.detach(), p.shard_spec) for n, p in piece.stage.named_parameters()}
    return {n: p.detach() for n, p in piece.stage.named_parameters()}


def state_3d(piece, loader, step: int, moments=None, weights=None) -> dict:
    """What a 3D checkpoint holds, as logical single-device tensors (see the module doc). ``moments``,
    ``weights``: from :func:`moment_tensors` / :func:`model_tensors` when the caller keeps them (to load into)."""
    m = piece.mesh
    args = (piece.tp_device_mesh, m.tp_rank, m.tp_size)
    moments = moment_tensors(piece) if moments is None else moments
    weights = model_tensors(piece) if weights is None else weights
    pos = loader.state_dict()
    return {
        "model": logical(piece.stage, weights, *args),
        "optim": {k: logical(piece.stage, moments[k], *args) for k in MOMENTS},
        "progress": torch.tensor(
            [step, pos["epoch"], pos["step_in_epoch"]], dtype=torch.long
        ),  # device-ok: plain tensor DCP saves from rank 0 without a collective, CPU like "rng"
        "rng": torch.get_rng_state(),
    }


def save_3d(ckpt_dir: str, step: int, piece, loader, meta: dict | None = None) -> str:
    """Save a 3D job's checkpoint ``step`` (collective); ``meta`` as in :func:`save`, plus the layout
    it was written with (``"layout": "pp2·dp2·tp2"``: for the reader; any layout loads it)."""
    m = piece.mesh
    meta = None if meta is None else {**meta, "layout": f"pp{m.pp_size}·dp{m.dp_size}·tp{m.tp_size}"}
    return save(ckpt_dir, step, state_3d(piece, loader, step), meta)


def load_3d(path: str, piece, loader) -> int:
    """Load checkpoint ``path`` into a 3D job of any layout; returns its step (collective).

    Restores weights, AdamW moments and step count, the loader's position and the RNG state.
    """
    opt = piece.optimizer
    inner = opt.optimizer if piece.zero == 1 else opt
    init_optimizer_state(None, inner)
    moments = moment_tensors(piece)
    weights = model_tensors(piece)  # ZeRO-3: full copies, cut back into the shards after loading
    state = state_3d(piece, loader, 0, moments, weights)
    load(path, state)
    step, epoch, in_epoch = state["progress"].tolist()
    if piece.zero:
        set_zero_moments(piece, moments)
    if piece.zero == 3:
        with torch.no_grad():
            for n, p in piece.stage.named_parameters():
                p.copy_(local_rows(weights[n], p.shard_spec))
    for st in inner.state.values():
        st["step"] = torch.tensor(
            float(step)
        )  # device-ok: AdamW keeps "step" on CPU (not fused/capturable), as torch.optim does
    loader.load_state_dict({"epoch": epoch, "step_in_epoch": in_epoch})
    torch.set_rng_state(state["rng"])
    return step
