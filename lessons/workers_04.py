"""Experiment drivers for lesson 04 (tensor parallelism): child processes import them by name."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar.checkpoint.full_state import full_state_dict
from minipar.comm.comm_log import CommLog, label
from minipar.comm.cost import all_reduce_time
from minipar.course.loop import corpus_batches, train_steps
from minipar.course.schematic import Arrow, Box, draw_boxes
from minipar.data import builtin_corpus
from minipar.model.gpt import Block, GPTConfig
from minipar.model.memory import saved_activation_bytes, state_bytes
from minipar.model.presets import seeded_gpt
from minipar.tp.gpt import TensorParallelGPT, allreduce_sequence_parallel_grads, parallelize_block_
from minipar.tp.mappings import new_tp_group, tp_rank

CFG = dict(block_size=32, n_layer=2, n_head=4, d_model=32)
PROOF_DTYPE = torch.float64  # the equivalence proofs: reordered sums then differ by ~1e-16 relative on every CPU


def data(steps: int) -> list:
    """``steps`` (x, y) batches of 4 sequences of the built-in corpus (seed 0)."""
    return corpus_batches(CFG["block_size"], 4, steps)


def _tp_gpt(group=None, sequence_parallel: bool = False, cfg: GPTConfig | None = None) -> TensorParallelGPT:
    """minipar's tensor-parallel GPT of ``cfg`` (default: ``CFG``), seeded 0 on every rank."""
    torch.manual_seed(0)
    cfg = cfg or GPTConfig(vocab_size=builtin_corpus().vocab_size, **CFG)
    return TensorParallelGPT(cfg, group=group, sequence_parallel=sequence_parallel)


def train(model, batches, group=None, sync_sp: bool = False) -> tuple[list[float], dict, dict]:
    """AdamW (lr 3e-3) over ``batches``, the model first cast to ``PROOF_DTYPE`` (float64); returns the
    losses, the full (gathered) gradients of the last step and the full parameters after it."""
    model.to(PROOF_DTYPE)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    grads = {}

    def before_step():  # after backward: SP's replicated gradients summed, then all gradients gathered
        if sync_sp:
            allreduce_sequence_parallel_grads(model, group)
        grads.update(full_state_dict(model, grads=True, group=group, remove_duplicate=False))

    losses = train_steps(model, opt, batches, before_step=before_step)
    return losses, grads, full_state_dict(model, group=group, remove_duplicate=False)


def single_device(steps: int) -> tuple[list[float], dict, dict]:
    """:func:`train` of the single-device GPT (seed 0)."""
    return train(seeded_gpt(CFG, torch.float32), data(steps))


def tp_runs(steps: int) -> dict:
    """On 4 ranks: TP = 2 (two groups of 2) and TP = 4, each without and with sequence parallelism;
    and one step of TP = 4 with SP but without ``allreduce_sequence_parallel_grads`` (wrong on purpose)."""
    batches = data(steps)
    out = {}
    for tp in (2, 4):
        group = new_tp_group(tp)
        for sp in (False, True):
            out[(tp, sp)] = train(_tp_gpt(group, sp), batches, group, sync_sp=sp)
    # the mistake to avoid: SP without summing the replicated parameters' grads (one step: its gradients)
    missing = train(_tp_gpt(group, True), batches[:1], group, sync_sp=False)
    return out, missing


def shards() -> dict:
    """This rank's slices of block 0's weights, next to the full single-device weights."""
    b, fb = _tp_gpt().blocks[0], seeded_gpt(CFG, torch.float32).blocks[0]
    names = {"fc": "mlp.fc", "proj": "mlp.proj", "qkv": "attn.qkv"}
    mine = {k: b.get_submodule(n).weight.detach().clone() for k, n in names.items()}
    full = {f"full_{k}": fb.get_submodule(n).weight.detach().clone() for k, n in names.items()}
    return {"rank": md.rank(), **mine, **full}


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
    cfg = GPTConfig(vocab_size=builtin_corpus().vocab_size, block_size=T, n_layer=n_layer, n_head=n_head, d_model=d)
    out = {}
    for tp in (1, 2, 4):
        group = new_tp_group(tp)
        for sp in (False, True):
            model = _tp_gpt(group, sp, cfg)
            block = model.blocks[0]
            x = torch.randn(B, T // tp if sp else T, d, requires_grad=True)
            act = saved_activation_bytes(lambda: block(x), exclude=block)
            out[(tp, sp)] = {"params": state_bytes(model)["params"], "act": act - x.numel() * 4}
    return out


def dtensor_vs_minipar(steps: int) -> dict:
    """The same K steps with minipar's TP and with PyTorch's DTensor TP on this world."""
    from torch.distributed.device_mesh import init_device_mesh

    from minipar.tp.dtensor import loss_context, parallelize_gpt_dtensor

    batches = data(steps)
    mine = train(_tp_gpt(), batches)
    mesh = init_device_mesh("cpu", (md.world_size(),))
    model = parallelize_gpt_dtensor(seeded_gpt(CFG, PROOF_DTYPE), mesh, vocab_parallel=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    with loss_context(model):  # the vocabulary-parallel loss: forward and backward inside it
        losses = train_steps(model, opt, batches)
    local = {
        k: (type(p).__name__, tuple(p.to_local().shape) if hasattr(p, "to_local") else tuple(p.shape))
        for k, p in model.named_parameters()
        if k.startswith("blocks.0.") or k in ("wte.weight", "lm_head.weight")
    }
    return {"minipar": mine[::2], "dtensor": (losses, full_state_dict(model)), "local": local, "rank": tp_rank()}


def make_tp_group(tp: int):
    """Create the tensor-parallel groups of size ``tp`` (ConfigError for a bad ``tp``); the barrier first, so no
    rank prints gloo's "connectFullMesh failed" when a faster one raises and exits."""
    dist.barrier()
    new_tp_group(tp)


def toy_group_all_reduce() -> dict:
    """4 ranks in two groups of 2 ({0, 1}, {2, 3}): all_reduce sums in place, within the caller's group only."""
    x = torch.tensor([10.0 ** md.rank()])
    y = x.clone()  # all_reduce overwrites its argument: reduce a copy when the input must survive
    dist.all_reduce(y, group=new_tp_group(2))
    return {"rank": md.rank(), "x": x.item(), "y": y.item()}


# ---------------------------------------------------------------- pictures (drawn from real tensors)
def block_shapes(B: int = 4, T: int = 32) -> dict:
    """``{sp: {layer: (input shape, output shape)}}``: what one tensor-parallel block's layers see on this rank in
    a real forward, without and with sequence parallelism."""
    cfg = GPTConfig(vocab_size=128, **CFG)
    out = {}
    for sp in (False, True):
        torch.manual_seed(0)
        block = parallelize_block_(Block(cfg), sequence_parallel=sp)
        names = {block.get_submodule(n): n for n in ("ln_1", "attn.qkv", "attn.proj", "ln_2", "mlp.fc", "mlp.proj")}
        seen = out[sp] = {}

        def record(module, inputs, output):
            if module in names:
                seen[names[module]] = (tuple(inputs[0].shape), tuple(output.shape))

        with torch.nn.modules.module.register_module_forward_hook(record):  # every module's forward, removed after
            block(torch.randn(B, T // md.world_size() if sp else T, cfg.d_model))
    return out


def draw_block_dataflow(shapes: dict, n: int, heads: int, axes) -> None:
    """One block's data flow on one of ``n`` ranks, top without and bottom with sequence parallelism:
    each layer with the shape it produces here (from :func:`block_shapes`), f and g (or all-gather /
    reduce-scatter along T), and the regions: replicated or sequence-split, split over ranks, communication."""
    for ax, sp in zip(axes, (False, True)):
        s = shapes[sp]
        shp = lambda t: "(" + ",".join(map(str, t)) + ")"  # noqa: E731
        full_in = shp(s["attn.qkv"][0][:1] + (s["attn.qkv"][1][1],) + s["attn.qkv"][0][2:])
        c_in, c_out = ("all-gather\nalong T", "reduce-\nscatter\nalong T") if sp else ("f", "g")
        part = lambda name: shp(s[name][0][:2] + (s[name][1][-1],)) + "\npartial"  # noqa: E731
        steps = [("x", shp(s["ln_1"][0]), "activation"), ("LN₁", shp(s["ln_1"][1]), "activation")]
        steps += [(c_in, full_in, "comm"), ("qkv\ncolumn", shp(s["attn.qkv"][1]), "forward")]
        steps += [(f"attention\n{heads // n} of {heads}\nheads", shp(s["attn.proj"][0]), "forward")]
        steps += [("proj row", part("attn.proj"), "forward"), (c_out, shp(s["attn.proj"][1]), "comm")]
        steps += [("+ x, LN₂", shp(s["ln_2"][1]), "activation"), (c_in, full_in, "comm")]
        steps += [("fc column\n+ GELU", shp(s["mlp.fc"][1]), "forward"), ("proj row", part("mlp.proj"), "forward")]
        steps += [(c_out, shp(s["mlp.proj"][1]), "comm"), ("+ x", shp(s["mlp.proj"][1]), "activation")]
        boxes = [Box(str(i), 1.5 * i, 0, f"{a}\n{b}", k, w=1.4, h=1.3) for i, (a, b, k) in enumerate(steps)]
        arrows = [Arrow(str(i), str(i + 1)) for i in range(len(steps) - 1)]
        region = f"sequence-split (B, T/{n}, d)" if sp else "replicated (B, T, d)"
        legend = {region: "activation", "split over ranks": "forward", "communication": "comm"}
        draw_boxes(ax, boxes, arrows, f"{'with' if sp else 'without'} sequence parallelism, one of {n} ranks", legend)


def draw_megatron(axes) -> None:
    """Megatron's MLP and self-attention on 2 ranks (Shoeybi et al. 2019, arXiv:1909.08053, Figure 3): a
    column → row pair between f and g; forward on top, backward (dashed, right to left) below."""
    parts = {"MLP": "GeLU(X·A_r)\n(b, s, 4h/N)", "self-attention": "softmax(Q_r K_rᵀ)V_r\nrank r's heads\n(b, s, h/N)"}
    back = [("dz", 12, "dZ"), ("gb", 9.6, "g backward:\nidentity"), ("rb", 6.1, "dX_r = dY_r·A_rᵀ\non each rank")]
    back += [("fb", 2.4, "f backward:\ndX = Σ_r dX_r\n(all-reduce)"), ("dx", 0, "dX")]
    for ax, (name, col) in zip(axes, parts.items()):
        boxes = [Box("x", 0, 1, "X\n(b, s, h)", "activation"), Box("z", 12, 1, "Z\n(b, s, h)", "activation")]
        boxes += [Box("f", 2.4, 1, "f forward:\nidentity", "comm", h=0.9)]
        boxes += [Box("g", 9.6, 1, "g forward:\nall-reduce", "comm", h=0.9)]
        arrows = [Arrow("x", "f"), Arrow("g", "z")]
        for r, y in enumerate((2.4, -0.4)):
            boxes += [Box(f"c{r}", 4.9, y, f"rank {r}:\n{col}", "forward", w=2.6, h=1.2)]
            boxes += [Box(f"r{r}", 7.5, y, "Y_r·B_r\n(b, s, h)\npartial sum", "forward", w=1.7, h=1.2)]
            arrows += [Arrow("f", f"c{r}"), Arrow(f"c{r}", f"r{r}"), Arrow(f"r{r}", "g")]
        boxes += [Box(k, x, -2.3, lab, "backward", w=2.2 if k[1] == "b" else 1.4, h=1.1) for k, x, lab in back]
        arrows += [Arrow(a[0], b[0], color="tab:orange", dashed=True) for a, b in zip(back, back[1:])]
        legend = {"replicated on every rank": "activation", "split over ranks": "forward"}
        legend |= {"communication (f, g)": "comm", "backward": "backward"}
        draw_boxes(ax, boxes, arrows, f"{name}: column → row between f and g", legend)


def draw_shards(d: int, heads: int, axes, colors=("tab:orange", "white")) -> None:
    """Which entries of block 0's weights each of 2 ranks holds, drawn on structured matrices: fc's entry
    (o, i) is its output feature o, proj's its input feature i, qkv's the head its row belongs to."""
    import matplotlib.pyplot as plt

    o4, i4 = torch.arange(4 * d)[:, None], torch.arange(4 * d)[None, :]
    head = (torch.arange(3 * d)[:, None] % d) // (d // heads) + torch.zeros(1, d)
    mats = [
        (o4 + torch.zeros(1, d), [(0, 2 * d, 0, d), (2 * d, 4 * d, 0, d)], "output feature o"),
        (i4 + torch.zeros(d, 1), [(0, d, 0, 2 * d), (0, d, 2 * d, 4 * d)], "input feature i"),
        (head, [(j * d + r * d // 2, j * d + (r + 1) * d // 2, 0, d) for j in range(3) for r in range(2)], "head"),
    ]
    names = ["mlp.fc.weight (4d, d): column-parallel", "mlp.proj.weight (d, 4d): row-parallel", "attn.qkv.weight"]
    names[2] += " (3d, d) = [q; k; v]: stride 3"
    for ax, (m, blocks, what), name in zip(axes, mats, names):
        im = ax.imshow(m.numpy(), cmap="viridis", aspect="auto", interpolation="nearest")
        for n, (r0, r1, c0, c1) in enumerate(blocks):
            rect = plt.Rectangle((c0 - 0.5, r0 - 0.5), c1 - c0, r1 - r0, fill=False, ec=colors[n % 2], lw=2.5)
            ax.add_patch(rect)
            ax.text((c0 + c1) / 2, (r0 + r1) / 2, f"rank {n % 2}", ha="center", va="center", color=colors[n % 2])
        ax.set(title=name, xlabel="input feature i", ylabel="output feature o (row of W)")
        plt.colorbar(im, ax=ax, label=f"entry = its {what}")
    axes[2].set_yticks([d / 2, 3 * d / 2, 5 * d / 2], ["q", "k", "v"])


def draw_allreduce_model(links: dict, n: int, S: float, t_layer: float, ax) -> None:
    """Ring all-reduce time on ``n`` ranks against the message size, per link ``{name: (α, β)}``
    (:func:`minipar.comm.cost.all_reduce_time`), with the layer's activation S and compute / 4."""
    sizes = np.logspace(3, 9, 60)
    for name, link in links.items():
        ax.loglog(sizes, [all_reduce_time(n, x, link) * 1e3 for x in sizes], label=name)
    ax.axvline(S, color="gray", ls=":")
    ax.text(S * 1.2, 8, "GPT-3 layer\nactivation", fontsize=8)
    ax.axhline(t_layer / 4 * 1e3, color="k", ls="--", lw=1, label="compute per layer / 4")
    ax.set(xlabel="message size S (bytes)", ylabel=f"ring all-reduce time, N={n} (ms)")
    ax.set_title("α–β model: ring all-reduce time")
    ax.legend(fontsize=8)
