"""Experiment drivers for lesson 08 (when memory runs short). They only call minipar and torch, in one
process: this lesson's memory savings are per rank, so one rank shows them."""

from __future__ import annotations

import math

import torch

from minipar.course.bench import median_times
from minipar.course.loop import train_steps
from minipar.course.schematic import Arrow, Box, draw_boxes
from minipar.data import builtin_corpus
from minipar.model.gpt import Block, GPTConfig
from minipar.model.memory import SavedTensorMeter, saved_activation_bytes
from minipar.model.presets import MEDIUM, SMALL, seeded_gpt
from minipar.model.recompute import set_recompute, use_torch_checkpoint
from minipar.optim.amp import DynamicLossScaler, MixedPrecisionAdamW
from minipar.optim.offload import OffloadedAdamW

MODES = ("none", "selective", "full")
# Timings and memory use MEDIUM with a block of 128, not its 64: activations grow with the sequence length
# (Korthikanti et al.: s·b·h per saved tensor), and this lesson measures them.
MEDIUM_T128 = {**MEDIUM, "block_size": 128}


def batch(B: int, T: int, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Training windows ``step·B .. step·B + B − 1``: (x, y), each (B, T) int64. Deterministic."""
    w = builtin_corpus().split("train", T)
    xs, ys = zip(*(w[(step * B + i) % len(w)] for i in range(B)))
    return torch.stack(xs), torch.stack(ys)


# ---- 1. activation recomputation ----------------------------------------------------------------
def layer_bytes(s: int, b: int, h: int, a: int, dropout: float = 0.1, dtype=torch.bfloat16) -> dict[str, int]:
    """Bytes one transformer layer (explicit attention, dropout on, ``dtype``) keeps for backward,
    per mode, counted with saved-tensor hooks (forward only: what waits for backward)."""
    torch.manual_seed(0)
    blk = Block(GPTConfig(d_model=h, n_head=a, dropout=dropout, attention="explicit", block_size=s)).to(dtype)
    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    out = {}
    for mode in MODES:
        set_recompute(blk, mode)
        out[mode] = saved_activation_bytes(lambda: blk(x), exclude=blk)
    return out


def train_losses(mode: str, steps: int = 3, cfg=SMALL, dropout: float = 0.1, B: int = 4) -> dict:
    """float64 GPT with dropout, ``steps`` AdamW steps with recompute ``mode`` (or "torch": native
    checkpoint). Returns losses, final parameters. The data and dropout seeds are the same in every mode."""
    model = seeded_gpt(cfg, dropout=dropout, attention="explicit")
    if mode == "torch":
        use_torch_checkpoint(model)
    else:
        set_recompute(model, mode)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    torch.manual_seed(123)  # dropout masks
    losses = train_steps(model, opt, (batch(B, cfg["block_size"], step) for step in range(steps)))
    return {"losses": torch.tensor(losses, dtype=torch.float64), "params": dict(model.named_parameters())}


def step_peak_and_time(modes=(*MODES, "torch"), cfg=MEDIUM_T128, B: int = 4, repeats: int = 9) -> dict:
    """fp32 GPT (explicit attention, dropout 0.1) per recompute mode: peak saved bytes of one forward+backward
    (counted), and the median seconds of one, the modes' runs interleaved (``median_times``); "forward": one
    no-grad forward of the plain model, for comparison."""
    x, y = batch(B, cfg["block_size"])
    models, out = {}, {}
    for mode in modes:
        model = seeded_gpt(cfg, torch.float32, dropout=0.1, attention="explicit")
        if mode == "torch":
            use_torch_checkpoint(model, reentrant=True)
        else:
            set_recompute(model, mode)
        with SavedTensorMeter(exclude=model) as m:
            model(x, y)[1].backward()  # also the warm-up
        models[mode], out[mode] = model, {"peak": m.peak}

    def step_of(model):
        return lambda: model(x, y)[1].backward()

    def forward():
        with torch.no_grad():
            models[modes[0]](x, y)

    times = median_times({**{mode: step_of(models[mode]) for mode in modes}, "forward": forward}, repeats, warmup=0)
    for mode in modes:
        out[mode]["time"] = times[mode]
    out["forward"] = times["forward"]
    return out


# ---- 2. gradient accumulation -------------------------------------------------------------------
def accumulate(k: int, B: int = 8, cfg=SMALL) -> dict:
    """One optimizer step's gradient from ``k`` micro-batches of B/k (float64): loss, grads, and the
    peak saved-activation bytes of the whole accumulation loop (counted)."""
    model = seeded_gpt(cfg)
    x, y = batch(B, cfg["block_size"])
    total = 0.0
    with SavedTensorMeter(exclude=model) as m:
        for xm, ym in zip(x.chunk(k), y.chunk(k)):
            _, loss = model(xm, ym)
            (loss / k).backward()  # the mean over micro-batches = the big batch's mean
            total += loss.item() / k
    grads = {n: p.grad for n, p in model.named_parameters()}
    return {"loss": torch.tensor(total, dtype=torch.float64), "peak": m.peak, "grads": grads}


def peak_for(micro: int, k: int, cfg=MEDIUM_T128) -> int:
    """Peak saved bytes of k accumulation steps with ``micro`` sequences each (fp32, counted)."""
    model = seeded_gpt(cfg, torch.float32)
    with SavedTensorMeter(exclude=model) as m:
        for i in range(k):
            x, y = batch(micro, cfg["block_size"], i)
            model(x, y)[1].backward()
    return m.peak


# ---- 3. mixed precision ------------------------------------------------------------------------
def mixed_precision_run(kind: str, steps: int = 30, cfg=SMALL, B: int = 8, lr: float = 3e-3) -> dict:
    """``kind``: "fp32" (plain AdamW), "bf16-master" (bf16 compute + fp32 master weights),
    "bf16-pure" (bf16 weights and AdamW state, no master). Losses per step, state bytes."""
    model = seeded_gpt(cfg, torch.float32)
    if kind == "bf16-master":
        opt = MixedPrecisionAdamW(model, torch.bfloat16, lr=lr)
    else:
        model = model.to(torch.bfloat16 if kind == "bf16-pure" else torch.float32)
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = train_steps(model, opt, (batch(B, cfg["block_size"], step) for step in range(steps)))
    return {"losses": losses, "opt": opt, "model": model}


def state_bytes_per_param(opt: MixedPrecisionAdamW) -> dict[str, float]:
    """Bytes per parameter of a mixed-precision AdamW after a step (gradients still held): counted."""
    n = sum(p.numel() for p in opt.params)
    nb = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
    state = [v for st in opt.opt.state.values() for v in st.values() if torch.is_tensor(v) and v.dim() > 0]
    return {
        "16-bit weights": nb(opt.params) / n,
        "16-bit grads": nb(p.grad for p in opt.params) / n,
        "fp32 master": nb(opt.master) / n,
        "AdamW m + v": nb(state) / n,
    }


def fp16_loss_scaling(steps: int = 12, init_scale: float = 2.0**24, cfg=SMALL, B: int = 8) -> dict:
    """fp16 compute (on CPU: PyTorch runs fp16 matmuls here) with fp32 master weights and dynamic
    loss scaling, starting from a scale so large that the first gradients overflow."""
    model = seeded_gpt(cfg, torch.float32)
    scaler = DynamicLossScaler(init_scale=init_scale, growth_interval=4)
    opt = MixedPrecisionAdamW(model, torch.float16, scaler=scaler, lr=3e-3)
    rows = []
    for step in range(steps):
        x, y = batch(B, cfg["block_size"], step)
        _, loss = model(x, y)
        scale = scaler.scale
        opt.backward(loss)
        ok = opt.step()
        opt.zero_grad()
        rows.append({"step": step, "scale": scale, "stepped": ok, "loss": loss.item()})
    return {"rows": rows, "skipped": opt.skipped}


def fp16_underflow(divide: int = 1024, scales=(1.0, 2.0**10), cfg=SMALL, B: int = 8) -> dict:
    """Why loss scaling exists: one fp16 backward of ``loss / divide`` (each of ``divide`` accumulated micro-batches)
    per loss scale S, unscaled, vs the float64 gradient ``"ref"`` (flat). Per S: ``grad``; ``flushed``, the share
    of nonzero entries that come out 0 in fp16 (below 2⁻²⁴, its smallest subnormal); ``rel_err`` ‖g16 − g64‖/‖g64‖."""
    x, y = batch(B, cfg["block_size"])
    ref = seeded_gpt(cfg, torch.float64)
    (ref(x, y)[1] / divide).backward()
    g64 = torch.cat([p.grad.flatten() for p in ref.parameters()])
    nonzero = g64 != 0
    out = {"ref": g64}
    for S in scales:
        model = seeded_gpt(cfg, torch.float16)
        (model(x, y)[1] / divide * S).backward()
        g = torch.cat([p.grad.double().flatten() for p in model.parameters()]) / S
        flushed = ((g == 0) & nonzero).sum().item() / nonzero.sum().item()
        out[S] = {"grad": g, "flushed": flushed, "rel_err": ((g - g64).norm() / g64.norm()).item()}
    return out


def draw_underflow(res: dict, ax) -> None:
    """Histogram of log2|g| of the float64 gradient, with the fp16 flush-to-zero line of each loss scale."""
    g = res["ref"].abs()
    ax.hist(torch.log2(g[g > 0]).numpy(), bins=80, color="0.6")
    for S, color in zip([k for k in res if k != "ref"], ("tab:red", "tab:green", "tab:blue")):
        line = -24 - math.log2(S)
        ax.axvline(line, color=color, lw=1.5, label=f"scale 2^{int(math.log2(S))}: below 2^{line:.0f} → 0 in fp16")
    ax.set(xlabel="log2 |gradient| (float64 reference)", ylabel="entries")
    ax.legend(fontsize=8)


def draw_decision_guide(steps: list[tuple[str, str, str]]) -> None:
    """The decision guide, top to bottom: one row per technique (name, what it saved here, what it cost)."""
    import matplotlib.pyplot as plt

    boxes, arrows = [], []
    for i, (name, save, costs) in enumerate(steps):
        y = -1.2 * i
        boxes += [Box(f"t{i}", 0, y, name, "param", 3.0, 0.9), Box(f"s{i}", 3.4, y, save, "optimizer", 3.4, 0.9)]
        boxes.append(Box(f"c{i}", 6.9, y, costs, "comm", 3.2, 0.9))
        arrows += [Arrow(f"t{i - 1}", f"t{i}", "still too big?")] if i else []
    fig, ax = plt.subplots(figsize=(10, 5.4))
    legend = {"technique": "param", "saves (measured here)": "optimizer", "costs": "comm"}
    draw_boxes(ax, boxes, arrows, title="when memory runs short: try in this order", legend=legend)
    plt.tight_layout()
    plt.show()


# ---- 4. offload -----------------------------------------------------------------------------
def offload_vs_plain(steps: int = 3, cfg=SMALL, B: int = 4) -> dict:
    """The same bf16 mixed-precision run with and without ZeRO-Offload: parameters, bytes, transfers."""
    out = {}
    for name, cls in (("plain", MixedPrecisionAdamW), ("offload", OffloadedAdamW)):
        model = seeded_gpt(cfg, torch.float32)
        opt = cls(model, torch.bfloat16, lr=3e-3)
        train_steps(model, opt, (batch(B, cfg["block_size"], step) for step in range(steps)))
        params = [p.detach().float() for p in opt.params]
        out[name] = {"params": params, "opt": opt, "n": sum(p.numel() for p in params)}
    return out


# ---- 5. the main job --------------------------------------------------------------------------
def main_job(recompute: str, tp: int = 1, pp: int = 1, steps: int = 6) -> dict:
    """``python -m minipar.train --recompute ... --tp .. --pp ..`` on the launched ranks, in float64
    (default dtype): the logged training losses."""
    from minipar.course.presets import tiny_train_config, train_float64

    hist = train_float64(tiny_train_config(steps, tp=tp, pp=pp, recompute=recompute))
    return {"losses": torch.tensor([r["loss"] for r in hist if "loss" in r], dtype=torch.float64)}


def grad_scaler_trajectory() -> dict:
    """The same gradients (finite, or with an inf/nan) through ``torch.amp.GradScaler("cpu")`` and
    :class:`minipar.optim.amp.DynamicLossScaler`, both from scale 2^10 growing every 3 good steps: per step
    (scale after the step, stepped?)."""
    p = torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.SGD([p], lr=1.0)
    native = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)
    mine = DynamicLossScaler(init_scale=2.0**10, growth_interval=3)
    out = {"torch": [], "minipar": []}
    for kind in ("ok", "ok", "inf", "ok", "ok", "ok", "ok", "nan", "inf", "ok", "ok", "ok"):
        g = torch.full((4,), 0.5)
        if kind != "ok":
            g[1] = float(kind)
        opt.zero_grad()
        native.scale((p * g).sum()).backward()  # p.grad = g · scale
        before = p.detach().clone()
        native.step(opt)
        native.update()
        out["torch"].append((native.get_scale(), not torch.equal(before, p.detach())))
        grads = [g * mine.scale]
        ok = mine.unscale_and_check(grads)
        mine.update(ok)
        out["minipar"].append((mine.scale, ok))
    return out


# ---- FP8, emulated (minipar.optim.fp8) ----------------------------------------------------------
def fp8_gemm_errors(ratios=(1.0, 1e2, 1e3, 1e4, 1e5, 1e6), channel: int = 7) -> dict:
    """The second MLP GEMM of block 1 of the MEDIUM GPT (x: 512 tokens × 512, w: 128 × 512) on real data, with
    channel ``channel`` of x scaled so that its amax is ``ratio`` × the median |x| (1: as is). Per ratio, the
    relative Frobenius error of the 511 clean channels' product, per-tensor e4m3 / block e4m3 / bf16 vs float64;
    and, as is, max over elements of |Δy| / (derived bound) for both FP8 recipes (≤ 1: within it)."""
    from minipar.optim.fp8 import gemm_error_bound, quantize_blocks, quantize_tensor

    model, grab = seeded_gpt(MEDIUM_T128, torch.float32), {}
    hook = model.blocks[1].mlp.proj.register_forward_pre_hook(lambda m, a: grab.update(x=a[0].detach()))
    model(*batch(4, 128))
    hook.remove()
    x, w = grab["x"].reshape(-1, 512), model.blocks[1].mlp.proj.weight.detach()
    clean = torch.arange(512) != channel
    recipes = {
        "per-tensor e4m3": lambda a, b: (quantize_tensor(a), quantize_tensor(b)),
        "block e4m3 (1×128, 128×128)": lambda a, b: (quantize_blocks(a), quantize_blocks(b, block=(128, 128))),
        "bf16": lambda a, b: (a.bfloat16().float(), b.bfloat16().float()),
    }
    out = {"ratios": list(ratios), "err": {k: [] for k in recipes}, "median": x.abs().median().item()}
    for r in ratios:
        xo = x.clone()
        if r > 1:
            xo[:, channel] *= r * out["median"] / xo[:, channel].abs().max()
        ref = x[:, clean].double() @ w[:, clean].double().t()
        for k, f in recipes.items():
            xq, wq = f(xo, w)
            y = (xq[:, clean] @ wq[:, clean].t()).double()
            out["err"][k].append(((y - ref).norm() / ref.norm()).item())
    ref = x.double() @ w.double().t()
    bound = gemm_error_bound(x, w).double()
    out["within"] = {
        k: ((f(x, w)[0] @ f(x, w)[1].t()).double() - ref).abs().div(bound).max().item()
        for k, f in list(recipes.items())[:2]
    }
    return out


def fp8_training(kind: str, steps: int = 30, cfg=SMALL, B: int = 8, lr: float = 3e-3, seed: int = 0) -> list[float]:
    """Losses of ``steps`` AdamW steps of the small GPT: "fp32", "bf16" (bf16 compute, fp32 master weights) or
    "fp8-<recipe>" (fp32 weights, every linear of the blocks in emulated FP8: forward e4m3, gradients e5m2)."""
    from minipar.optim.fp8 import to_fp8

    if kind == "bf16":
        return mixed_precision_run("bf16-master", steps, cfg, B, lr)["losses"]
    model = seeded_gpt(cfg, torch.float32, seed=seed)
    if kind.startswith("fp8-"):
        to_fp8(model.blocks, kind[4:])
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    return train_steps(model, opt, (batch(B, cfg["block_size"], step) for step in range(steps)))
