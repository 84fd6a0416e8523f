"""Experiment drivers for lesson 04 (tensor parallelism). They only call minipar; child processes
import them by name, so they live in a module, not in the notebook."""

from __future__ import annotations

import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar.checkpoint.full_state import full_state_dict
from minipar.comm.comm_log import CommLog, label
from minipar.data import builtin_corpus, make_loader
from minipar.model.gpt import GPT, Block, GPTConfig
from minipar.model.memory import saved_activation_bytes, state_bytes
from minipar.tp.gpt import TensorParallelGPT, allreduce_sequence_parallel_grads, parallelize_block_
from minipar.tp.mappings import new_tp_group, tp_rank

CFG = dict(block_size=32, n_layer=2, n_head=4, d_model=32)
PROOF_DTYPE = torch.float64  # the equivalence proofs: reordered sums then differ by ~1e-16 relative on every CPU


def data(steps: int, batch_size: int = 4, T: int = 32):
    """The vocabulary size and ``steps`` (x, y) batches of the built-in corpus (seed 0)."""
    corpus = builtin_corpus()
    loader = make_loader(corpus.split("train", T), batch_size, seed=0)
    return corpus.vocab_size, [next(loader) for _ in range(steps)]


def train(model, batches, group=None, sync_sp: bool = False) -> tuple[list[float], dict, dict]:
    """AdamW (lr 3e-3) over ``batches``, the model first cast to ``PROOF_DTYPE`` (float64); returns the
    losses, the full (gathered) gradients of the last step and the full parameters after it."""
    model.to(PROOF_DTYPE)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    losses = []
    for x, y in batches:
        _, loss = model(x, y)
        loss.backward()
        if sync_sp:
            allreduce_sequence_parallel_grads(model, group)
        grads = full_state_dict(model, grads=True, group=group, remove_duplicate=False)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, grads, full_state_dict(model, group=group, remove_duplicate=False)


def single_device(steps: int) -> tuple[list[float], dict, dict]:
    vocab, batches = data(steps)
    torch.manual_seed(0)
    return train(GPT(GPTConfig(vocab_size=vocab, **CFG)), batches)


def tp_runs(steps: int) -> dict:
    """On 4 ranks: TP = 2 (two groups of 2) and TP = 4, each without and with sequence parallelism;
    and one step of TP = 4 with SP but without ``allreduce_sequence_parallel_grads`` (wrong on purpose)."""
    vocab, batches = data(steps)
    out = {}
    for tp in (2, 4):
        group = new_tp_group(tp)
        for sp in (False, True):
            torch.manual_seed(0)
            model = TensorParallelGPT(GPTConfig(vocab_size=vocab, **CFG), group=group, sequence_parallel=sp)
            out[(tp, sp)] = train(model, batches, group, sync_sp=sp)
    torch.manual_seed(0)  # the mistake to avoid: SP without summing the replicated parameters' grads
    model = TensorParallelGPT(GPTConfig(vocab_size=vocab, **CFG), group=group, sequence_parallel=True)
    missing = train(model, batches[:1], group, sync_sp=False)  # one step: its gradients
    return out, missing


def shards() -> dict:
    """This rank's slices of block 0's weights, next to the full single-device weights."""
    vocab, _ = data(1)
    torch.manual_seed(0)
    full = GPT(GPTConfig(vocab_size=vocab, **CFG))
    torch.manual_seed(0)
    tp = TensorParallelGPT(GPTConfig(vocab_size=vocab, **CFG))
    b, fb = tp.blocks[0], full.blocks[0]
    return {
        "rank": md.rank(),
        "fc": b.mlp.fc.weight.detach().clone(),
        "proj": b.mlp.proj.weight.detach().clone(),
        "qkv": b.attn.qkv.weight.detach().clone(),
        "full_fc": fb.mlp.fc.weight.detach().clone(),
        "full_proj": fb.mlp.proj.weight.detach().clone(),
        "full_qkv": fb.attn.qkv.weight.detach().clone(),
    }


def comm_per_layer(B: int = 4, T: int = 32) -> dict:
    """CommLog of one tensor-parallel block's forward and backward, without and with sequence parallelism."""
    n = md.world_size()
    cfg = GPTConfig(vocab_size=128, **CFG)
    out = {}
    for sp in (False, True):
        torch.manual_seed(0)
        block = parallelize_block_(Block(cfg), sequence_parallel=sp)
        x = torch.randn(B, T // n if sp else T, cfg.d_model, requires_grad=True)
        with CommLog() as log:
            with label("forward"):
                y = block(x)
            with label("backward"):
                y.square().mean().backward()
        out[sp] = [(r.label, r.op, r.bytes, r.sent) for r in log.records]
    return out


def memory(B: int = 4, T: int = 64, d: int = 128, n_head: int = 8, n_layer: int = 4) -> dict:
    """Per rank, for TP = 1, 2, 4 (+/- SP): parameter bytes of the whole GPT and the bytes autograd
    saves for backward in one transformer block's forward (what the activations cost)."""
    vocab, _ = data(1)
    cfg = GPTConfig(vocab_size=vocab, block_size=T, n_layer=n_layer, n_head=n_head, d_model=d)
    out = {}
    for tp in (1, 2, 4):
        group = new_tp_group(tp)
        for sp in (False, True):
            torch.manual_seed(0)
            model = TensorParallelGPT(cfg, group=group, sequence_parallel=sp)
            block = model.blocks[0]
            x = torch.randn(B, T // tp if sp else T, d, requires_grad=True)
            act = saved_activation_bytes(lambda: block(x), exclude=block)
            out[(tp, sp)] = {"params": state_bytes(model)["params"], "act": act - x.numel() * 4}
    return out


def dtensor_vs_minipar(steps: int) -> dict:
    """The same K steps with minipar's TP and with PyTorch's DTensor TP on this world."""
    from torch.distributed.device_mesh import init_device_mesh

    from minipar.tp.dtensor import loss_context, parallelize_gpt_dtensor

    vocab, batches = data(steps)
    cfg = GPTConfig(vocab_size=vocab, **CFG)
    torch.manual_seed(0)
    mine = train(TensorParallelGPT(cfg), batches)
    torch.manual_seed(0)
    model = parallelize_gpt_dtensor(
        GPT(cfg).to(PROOF_DTYPE), init_device_mesh("cpu", (md.world_size(),)), vocab_parallel=True
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    losses = []
    for x, y in batches:
        with loss_context(model):
            _, loss = model(x, y)
            loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.full_tensor().item())
    local = {
        k: (type(p).__name__, tuple(p.to_local().shape) if hasattr(p, "to_local") else tuple(p.shape))
        for k, p in model.named_parameters()
        if k.startswith("blocks.0.") or k in ("wte.weight", "lm_head.weight")
    }
    return {
        "minipar": mine[::2],
        "dtensor": (losses, full_state_dict(model)),
        "local": local,
        "rank": tp_rank(),
    }


def make_tp_group(tp: int):
    """Create the tensor-parallel groups of size ``tp`` (raises ConfigError for a bad ``tp``).

    The barrier first: every rank has finished connecting before any raises, so no rank prints gloo's
    "connectFullMesh failed" when a faster one exits (the cell's output stays the same on every run)."""
    dist.barrier()
    new_tp_group(tp)


# ---------------------------------------------------------------- pictures (drawn from real tensors)
def block_shapes(B: int = 4, T: int = 32) -> dict:
    """The shapes one tensor-parallel block's layers see on this rank, without and with sequence
    parallelism: ``{sp: {name: (input shape, output shape)}}`` for ln_1, attn.qkv, attn.proj, ln_2,
    mlp.fc, mlp.proj, recorded by forward hooks on a real forward."""
    cfg = GPTConfig(vocab_size=128, **CFG)
    out = {}
    for sp in (False, True):
        torch.manual_seed(0)
        block = parallelize_block_(Block(cfg), sequence_parallel=sp)
        seen, hooks = {}, []
        for name in ("ln_1", "attn.qkv", "attn.proj", "ln_2", "mlp.fc", "mlp.proj"):
            mod = block.get_submodule(name)
            hooks.append(
                mod.register_forward_hook(
                    lambda m, i, o, name=name: seen.update({name: (tuple(i[0].shape), tuple(o.shape))})
                )
            )
        block(torch.randn(B, T // md.world_size() if sp else T, cfg.d_model))
        for h in hooks:
            h.remove()
        out[sp] = seen
    return out


def draw_block_dataflow(shapes: dict, n: int, heads: int, axes) -> None:
    """One block's data flow on one of ``n`` ranks, top without and bottom with sequence parallelism:
    each layer with the shape it produces here (from :func:`block_shapes`), f and g (or all-gather /
    reduce-scatter along T), and the regions: replicated or sequence-split (grey), split over ranks (blue)."""
    import matplotlib.pyplot as plt

    for ax, sp in zip(axes, (False, True)):
        s = shapes[sp]
        full_T = s["attn.qkv"][1][1]
        shp = lambda t: "(" + ",".join(map(str, t)) + ")"  # noqa: E731
        comm_in = (
            "all-gather\nalong T" if sp else "f\n(id / AR)",
            shp(s["attn.qkv"][0][:1] + (full_T,) + s["attn.qkv"][0][2:]),
        )
        comm_out = ("reduce-scatter\nalong T" if sp else "g\n(AR / id)", shp(s["attn.proj"][1]))
        steps = [
            ("x", shp(s["ln_1"][0]), "rep"),
            ("LN₁", shp(s["ln_1"][1]), "rep"),
            (*comm_in, "comm"),
            ("qkv\ncolumn", shp(s["attn.qkv"][1]), "split"),
            (f"attention\n{heads // n} of {heads} heads", shp(s["attn.proj"][0]), "split"),
            ("proj\nrow", shp(s["attn.proj"][0][:2] + (s["attn.proj"][1][-1],)) + "\npartial sum", "split"),
            (*comm_out, "comm"),
            ("+ x, LN₂", shp(s["ln_2"][1]), "rep"),
            (comm_in[0], comm_in[1], "comm"),
            ("fc column\n+ GELU", shp(s["mlp.fc"][1]), "split"),
            ("proj\nrow", shp(s["mlp.fc"][1][:2] + (s["mlp.proj"][1][-1],)) + "\npartial sum", "split"),
            (comm_out[0], shp(s["mlp.proj"][1]), "comm"),
            ("+ x", shp(s["mlp.proj"][1]), "rep"),
        ]
        colors = {"rep": "#e6e6e6", "split": "#cfe2f3", "comm": "#f4cccc"}
        for i, (name, shape, kind) in enumerate(steps):
            ax.add_patch(plt.Rectangle((i + 0.06, 0.35), 0.88, 0.5, fc=colors[kind], ec="0.4"))
            ax.text(i + 0.5, 0.6, name, ha="center", va="center", fontsize=7.5, weight="bold")
            ax.text(i + 0.5, 0.2, shape, ha="center", va="top", fontsize=7)
            if i:
                ax.annotate("", (i + 0.06, 0.6), (i - 0.06, 0.6), arrowprops=dict(arrowstyle="->", lw=0.8))
        ax.set_xlim(0, len(steps))
        ax.set_ylim(-0.35, 1.0)
        ax.axis("off")
        region = f"sequence-split (B, T/{n}, d)" if sp else "replicated (B, T, d)"
        ax.set_title(
            f"{'with' if sp else 'without'} sequence parallelism, one of {n} ranks — grey: {region}; "
            f"blue: split over ranks; red: communication",
            fontsize=9,
        )


def draw_shards(full: dict, axes, colors=("tab:blue", "tab:orange")) -> None:
    """Block 0's single-device weights in grey, each rank's shard shaded: fc (rows split), proj
    (columns split), qkv (each rank's heads of q, of k and of v: stride 3), for 2 ranks."""
    import matplotlib.pyplot as plt

    def draw(ax, w, boxes, title):
        ax.imshow(w.numpy(), cmap="gray", aspect="auto", interpolation="nearest")
        for r0, r1, c0, c1, rank in boxes:
            ax.add_patch(
                plt.Rectangle((c0 - 0.5, r0 - 0.5), c1 - c0, r1 - r0, fill=True, alpha=0.35, color=colors[rank], lw=0)
            )
            ax.text((c0 + c1) / 2, (r0 + r1) / 2, f"rank {rank}", ha="center", va="center", fontsize=10, weight="bold")
        ax.set_title(title, fontsize=10)

    d, h = full["full_proj"].shape[0], full["full_fc"].shape[0]
    draw(
        axes[0],
        full["full_fc"],
        [(r * h // 2, (r + 1) * h // 2, 0, d, r) for r in range(2)],
        f"mlp.fc.weight {tuple(full['full_fc'].shape)}\ncolumn-parallel: rows split",
    )
    draw(
        axes[1],
        full["full_proj"],
        [(0, d, r * h // 2, (r + 1) * h // 2, r) for r in range(2)],
        f"mlp.proj.weight {tuple(full['full_proj'].shape)}\nrow-parallel: columns split",
    )
    boxes = [(j * d + r * d // 2, j * d + (r + 1) * d // 2, 0, d, r) for j in range(3) for r in range(2)]
    draw(
        axes[2],
        full["full_qkv"],
        boxes,
        f"attn.qkv.weight {tuple(full['full_qkv'].shape)} = [q; k; v]\nstride 3: each rank takes its heads of q, k, v",
    )
    axes[2].set_yticks([d / 2, 3 * d / 2, 5 * d / 2], ["q", "k", "v"], fontsize=12)
    axes[1].set_xlabel("input feature")
    axes[0].set_ylabel("output feature")


def draw_allreduce_model(links: dict, n: int, S: float, t_layer: float, ax) -> None:
    """Ring all-reduce time on ``n`` ranks against the message size, per link ``{name: (α, β)}``
    (:func:`minipar.comm.cost.all_reduce_time`), with the layer's activation S and compute / 4."""
    import numpy as np

    from minipar.comm.cost import all_reduce_time

    sizes = np.logspace(3, 9, 60)
    for name, link in links.items():
        ax.loglog(sizes, [all_reduce_time(n, x, link) * 1e3 for x in sizes], label=name)
    ax.axvline(S, color="gray", ls=":")
    ax.text(S * 1.2, 8, "GPT-3 layer\nactivation", fontsize=8)
    ax.axhline(t_layer / 4 * 1e3, color="k", ls="--", lw=1, label="compute per layer / 4")
    ax.set(
        xlabel="message size S (bytes)",
        ylabel=f"ring all-reduce time, N={n} (ms)",
        title="α–β model: ring all-reduce time",
    )
    ax.legend(fontsize=8)
