"""Checkpoints of the MoE job (experts over EP groups): logical single-device tensors, any ep on resume.

    save_moe(ckpt_dir, step, piece, loader, meta)     # collective
    step = load_moe(path, piece, loader)              # collective; ep may differ from the saver's

The same format as the dense job's :func:`minipar.checkpoint.dcp.state_3d` (``model.<name>``,
``optim.exp_avg.<name>``, ``optim.exp_avg_sq.<name>``, the fused ``qkv`` as its ``.q``/``.k``/``.v``
thirds, ``progress``, ``rng``; written with DCP by
:func:`minipar.checkpoint.dcp.save`), every tensor the single-device GPT's: an expert tensor, of which
EP rank r holds rows ``[r·E/ep, (r+1)·E/ep)`` (dim 0 is the expert), is all-gathered over the EP
group before saving (E/ep · ep rows, the whole (E, ...) tensor; course-sized models: a production job
would save ``DTensor`` shards, as torchtitan does for its expert mesh), and each rank cuts its own rows
back out after loading. So a run saved with dp4·ep2 resumes with ep 1, 2 or 4, or on one device, and
:mod:`minipar.checkpoint.resume` checks it against the model like any other checkpoint
(tests/test_experts_train.py: saved at step 3 with ep 2, resumed with ep 1 and ep 4, equal to a
run without a stop). With ZeRO-1 (:mod:`minipar.ep.zero`) the moments' flat shards are first
all-gathered over their group (dp, or expert-dp), as :func:`minipar.checkpoint.dcp.moment_tensors` does.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from minipar.checkpoint import dcp as ckpt
from minipar.ep.parallel import gather_experts, is_expert


def _expert_rows(piece) -> dict[str, tuple[int, int]]:
    """``{expert param name: (first row, rows)}`` of this rank's block of each expert tensor."""
    r = piece.mesh.ep_rank
    return {n: (r * p.shape[0], p.shape[0]) for n, p in piece.stage.named_parameters() if is_expert(n)}


def _logical(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint's names: the fused ``qkv`` as ``.q``/``.k``/``.v`` thirds (views, so loading fills them)."""
    out = {}
    for n, t in tensors.items():
        if n.endswith(("attn.qkv.weight", "attn.qkv.bias")):
            out.update({f"{n}.{k}": part for k, part in zip("qkv", t.chunk(3))})
        else:
            out[n] = t
    return out


def _state(piece, loader, step: int, weights: dict, moments: dict) -> dict:
    pos = loader.state_dict()
    return {
        "model": _logical(weights),
        "optim": {k: _logical(v) for k, v in moments.items()},
        "progress": torch.tensor(  # device-ok: saved as plain CPU tensors, as minipar.checkpoint.dcp.state_3d does
            [step, pos["epoch"], pos["step_in_epoch"]], dtype=torch.long
        ),
        "rng": torch.get_rng_state(),
    }


def _zero_parts(piece) -> list:
    """With ZeRO-1 (:class:`~minipar.ep.zero.MoEZero1`): stand-ins for :func:`minipar.checkpoint.dcp.moment_tensors`
    and :func:`~minipar.checkpoint.dcp.set_zero_moments`, one per ZeroOptimizer (dense, experts); else []."""
    return [SimpleNamespace(optimizer=opt, zero=1) for opt in piece.optimizer.parts] if piece.zero else []


def _moments(piece) -> dict[str, dict[str, torch.Tensor]]:
    """``{"exp_avg": {name: tensor}, ...}`` shaped like this rank's params:
    :func:`minipar.checkpoint.dcp.moment_tensors`
    of the piece (AdamW's live state), or with ZeRO-1 of each part (flat shards all-gathered: copies; collective)."""
    out = {k: {} for k in ckpt.MOMENTS}
    for part in _zero_parts(piece) or [piece]:
        for k, d in ckpt.moment_tensors(part).items():
            out[k].update(d)
    return out


def _inner(piece) -> list[torch.optim.Optimizer]:
    return [p.optimizer.optimizer for p in _zero_parts(piece)] or [piece.optimizer]


def save_moe(ckpt_dir: str, step: int, piece, loader, meta: dict | None = None) -> str:
    """Save the MoE job's checkpoint ``step`` (collective): full expert tensors, AdamW moments, the
    loader's position, the RNG state; ``meta`` plus the layout (``"dp4·ep2"``). Returns its directory."""
    m = piece.mesh
    weights = gather_experts(piece.mesh, {n: p.detach() for n, p in piece.stage.named_parameters()})
    moments = {k: gather_experts(piece.mesh, v) for k, v in _moments(piece).items()}
    meta = None if meta is None else {**meta, "layout": f"dp{m.dp_size}·ep{m.ep_size}" + (" zero1" * piece.zero)}
    return ckpt.save(ckpt_dir, step, _state(piece, loader, step, weights, moments), meta)


@torch.no_grad()
def load_moe(path: str, piece, loader) -> int:
    """Load checkpoint ``path`` (saved with any ep, or by one device) into ``piece``; returns its step.

    Every rank reads the whole tensors, then keeps its rows of the expert ones. Collective.
    """
    rows = _expert_rows(piece)
    for inner in _inner(piece):
        ckpt.init_optimizer_state(None, inner)
    params = dict(piece.stage.named_parameters())
    local = _moments(piece)  # live state (plain AdamW) or gathered copies (ZeRO-1), this rank's shapes

    def full_like(n: str, t: torch.Tensor) -> torch.Tensor:
        return t.new_empty((t.shape[0] * piece.mesh.ep_size, *t.shape[1:])) if n in rows else t

    weights = {n: full_like(n, p.detach()) for n, p in params.items()}
    moments = {k: {n: full_like(n, local[k][n]) for n in params} for k in ckpt.MOMENTS}
    state = _state(piece, loader, 0, weights, moments)
    ckpt.load(path, state)
    for n, p in params.items():
        if n in rows:
            a, k = rows[n]
            p.copy_(weights[n][a : a + k])
            for key in ckpt.MOMENTS:
                local[key][n].copy_(moments[key][n][a : a + k])
    for part in _zero_parts(piece):
        ckpt.set_zero_moments(part, local)  # the full per-parameter moments cut back into the flat shards
    step, epoch, in_epoch = state["progress"].tolist()
    for st in (st for inner in _inner(piece) for st in inner.state.values()):
        st["step"] = torch.tensor(float(step))  # device-ok: AdamW keeps "step" on CPU, as torch.optim does
    loader.load_state_dict({"epoch": epoch, "step_in_epoch": in_epoch})
    torch.set_rng_state(state["rng"])
    return step
