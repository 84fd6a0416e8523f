"""Measure this GPU's attention core and one Llama block, beside what ``minipar.perf`` models for them: the check
of the planner's attention and memory-bound terms on a real device (``examples/gemm_rate.py`` checks the GEMMs).

    python examples/attention_rate.py [OUT.jsonl] [--mpt | --mpt-step]   # a CUDA GPU; one JSON line per measurement

1. ``scaled_dot_product_attention``, causal, bf16, head dim 128, forward + backward, per backend (PyTorch's
   FlashAttention-2 "flash", cuDNN's "cudnn") over b·heads in (8, 32, 64, 128) and s from 1K to 32K: the fraction
   of the device preset's dense bf16 peak, FLOPs 3.5 · 2·b·a·s²·d (the causal half; backward 2.5 forwards).
   ``minipar.perf.gemm.ATTN_EFF_H100`` is this table as one H100 SXM measured it (2026-11-27, PyTorch 2.11).
2. One Llama 3 block (8B at 8,192 tokens; 70B at 4,096 and 8,192; one GPU, no TP), written as torchtitan writes it
   in eager PyTorch (RMSNorm in fp32, complex RoPE, K/V repeated for GQA, SwiGLU), forward + backward, each
   attention backend; a profiler splits the CUDA kernel time into GEMMs, attention and the rest (memory-bound).
3. HBM bandwidth of elementwise kernels (copy, add, scale, a bf16 → fp32 cast) on 1 and 4 GiB tensors, GB/s of bytes
   read and written: the check of ``minipar.perf.hardware.HBM_EFF`` (0.85 of the datasheet, ASSUMED).
4. ``--mpt``: only this part. One MPT block (llm-foundry's ``mpt-*.yaml`` shapes at their benchmark micro-batches),
   as llm-foundry writes it: low-precision (bf16) LayerNorm, one fused QKV projection, GELU MLP of 4h, no biases, no
   RoPE (a learned position table outside the blocks); forward + backward with FlashAttention-2, split as in 2.
   ``tests/test_perf_model.py::test_eager_blocks_measured_on_an_h100`` holds the model to it.
5. ``--mpt-step``: only this part. A whole MPT-1B step (24 of those blocks, embedding, learned positions, the tied
   logit layer over 50,368 tokens and its fp32 loss, fused AdamW), fp32 master weights under bf16 autocast as Composer's
   ``amp_bf16`` runs it: the step, the step without the optimizer, and its 24 blocks alone under the same autocast
   (``tests/test_perf_model.py::test_a_whole_mpt_step_measured_on_an_h100``).
Timings: CUDA events, the median of 20 after 5 warm-ups (``gemm_rate.cuda_time``; the stored run took 10 after 3). The
stored outputs of the H100 runs are in ``examples/h100_2026-11-27/``: probe1, a first pass (also with PyTorch's fused
RMSNorm; its blocks accumulated gradients across repeats); probe2, the attention table of
``minipar.perf.gemm.ATTN_EFF_H100``; probe3, this script as it stands, whose blocks
``tests/test_perf_model.py::test_an_eager_llama_block_measured_on_an_h100`` holds the model to (before part 3 was
added); hbm.json, part 3's operations run on their own; mpt.jsonl and mpt_step.jsonl, parts 4 and 5 (a second
H100 the same day; part 5 as a first draft of it ran, the same model, step and timers).
"""

from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F
from gemm_rate import cuda_time  # examples/gemm_rate.py: CUDA events, the median
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
BLOCKS = (("8B", 4096, 32, 8, 14336, 8192), ("70B", 8192, 64, 8, 28672, 4096), ("70B", 8192, 64, 8, 28672, 8192))
HD, EPS = 128, 1e-5
# (llm-foundry name, d_model, heads, micro-batch, s): MPT shapes at micro-batches of llm-foundry's H100 table
MPT_BLOCKS = (
    ("1b", 2048, 16, 14, 2048),
    ("1b", 2048, 16, 2, 16384),
    ("3b", 2560, 20, 5, 4096),
    ("7b", 4096, 32, 6, 2048),
    ("13b", 5120, 40, 2, 2048),
    ("30b", 7168, 64, 3, 2048),
)


def kernel_split(fn) -> dict:
    """Seconds per call of fn's CUDA kernels by kind: cuBLAS/CUTLASS GEMMs, attention, the rest."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
    out = {"gemm": 0.0, "attn": 0.0, "other": 0.0}
    for e in p.key_averages():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        n = e.key.lower()
        kind = "attn" if ("flash" in n or "fmha" in n or "sdpa" in n) else "other"
        if kind == "other" and any(w in n for w in ("gemm", "xmma", "cutlass", "nvjet", "cublas")):
            kind = "gemm"
        out[kind] += e.device_time_total / 3 / 1e6
    return out


class Block(nn.Module):
    """A Llama 3 decoder block as torchtitan's eager code runs it (bf16 weights, fp32 norm and RoPE)."""

    def __init__(self, h: int, heads: int, kv: int, ffn: int):
        super().__init__()
        self.heads, self.kv = heads, kv
        self.wq, self.wk, self.wv = (nn.Linear(h, n * HD, bias=False) for n in (heads, kv, kv))
        self.wo = nn.Linear(heads * HD, h, bias=False)
        self.w1, self.w3 = nn.Linear(h, ffn, bias=False), nn.Linear(h, ffn, bias=False)
        self.w2 = nn.Linear(ffn, h, bias=False)
        self.n1, self.n2 = nn.Parameter(torch.ones(h)), nn.Parameter(torch.ones(h))

    @staticmethod
    def norm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).type_as(x) * w

    @staticmethod
    def rope(x, cis):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * cis.view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)

    def forward(self, x, cis):
        b, s, h = x.shape
        y = self.norm(x, self.n1)
        q = self.rope(self.wq(y).view(b, s, self.heads, HD), cis)
        k = self.rope(self.wk(y).view(b, s, self.kv, HD), cis).repeat_interleave(self.heads // self.kv, dim=2)
        v = self.wv(y).view(b, s, self.kv, HD).repeat_interleave(self.heads // self.kv, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, h))
        y = self.norm(x, self.n2)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


class MPTBlock(nn.Module):
    """An MPT block as llm-foundry's eager code runs it in bf16 (``LPLayerNorm``, ``Wqkv``, GELU, ``no_bias``)."""

    def __init__(self, h: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(h, bias=False), nn.LayerNorm(h, bias=False)
        self.wqkv, self.out = nn.Linear(h, 3 * h, bias=False), nn.Linear(h, h, bias=False)
        self.up, self.down = nn.Linear(h, 4 * h, bias=False), nn.Linear(4 * h, h, bias=False)

    def forward(self, x):
        b, s, h = x.shape
        qkv = self.wqkv(self.ln1(x)).chunk(3, -1)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in qkv)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(o.transpose(1, 2).reshape(b, s, h))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


def time_mpt_blocks(emit) -> None:
    """Part 4: each of :data:`MPT_BLOCKS`, forward + backward with FlashAttention-2, and its kernel split."""
    for name, h, heads, b, s in MPT_BLOCKS:
        t, split = time_mpt_block(h, heads, b, s)
        emit(what="mpt_block", model=name, b=b, s=s, step_s=t, split_s=split)
        torch.cuda.empty_cache()


def time_mpt_block(h: int, heads: int, b: int, s: int) -> tuple[float, dict]:
    """(seconds, kernel split) of one MPT block's forward + backward on ``b`` sequences of ``s`` tokens."""
    torch.manual_seed(0)
    blk = MPTBlock(h, heads).to("cuda", torch.bfloat16)
    x = torch.randn(b, s, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn_like(x)

    def step():
        blk.zero_grad(set_to_none=True)
        x.grad = None
        blk(x).backward(g)

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return cuda_time(step), kernel_split(step)


class MPT(nn.Module):
    """MPT-1B as llm-foundry builds it: 24 :class:`MPTBlock` of d 2048, 16 heads; learned positions; a tied head."""

    def __init__(self, s: int, layers: int = 24, h: int = 2048, heads: int = 16, vocab: int = 50368):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, h), nn.Embedding(s, h)
        self.blocks = nn.ModuleList(MPTBlock(h, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(h, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return F.linear(self.ln(x), self.wte.weight)


def time_mpt_steps(emit) -> None:
    """Part 5: a whole MPT-1B step at (b, s) in (4, 2048), (8, 2048), (1, 8192); seconds of the step, of the step
    without the optimizer, and of its blocks alone, all under bf16 autocast over fp32 weights."""
    for b, s in ((4, 2048), (8, 2048), (1, 8192)):
        torch.manual_seed(0)
        m = MPT(s).cuda()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
        idx, tgt = (torch.randint(0, m.wte.num_embeddings, (b, s), device="cuda") for _ in "it")

        def step(with_opt=True, m=m, opt=opt, idx=idx, tgt=tgt):
            with torch.autocast("cuda", torch.bfloat16):
                logits = m(idx)
            F.cross_entropy(logits.float().flatten(0, 1), tgt.flatten()).backward()
            if with_opt:
                opt.step()
            opt.zero_grad(set_to_none=True)

        def blocks(m=m, opt=opt, b=b, s=s):
            y = torch.randn(b, s, m.wte.embedding_dim, device="cuda", requires_grad=True)
            with torch.autocast("cuda", torch.bfloat16):
                for blk in m.blocks:
                    y = blk(y)
            y.float().sum().backward()
            opt.zero_grad(set_to_none=True)

        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            times = [cuda_time(f, reps=8, warm=3) for f in (step, lambda: step(False), blocks)]
            emit(what="mpt1b_step", b=b, s=s, step_s=times[0], no_optimizer_s=times[1], blocks_s=times[2],
                 split_s=kernel_split(step), mem_gb=torch.cuda.max_memory_allocated() / 1e9)  # fmt: skip
        del m, opt
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def main(path: str | None = None, mpt_only: bool = False, mpt_step: bool = False) -> None:
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: examples/attention_rate.py needs a GPU")
    from minipar.course.gpu_check import PEAK_BF16_DENSE

    name = torch.cuda.get_device_name()
    peak = next(p for k, p in PEAK_BF16_DENSE if k in name)
    out = open(path, "a") if path else None

    def emit(**row):
        print(json.dumps(row), flush=True)
        if out:
            print(json.dumps(row), file=out, flush=True)

    emit(what="env", torch=torch.__version__, gpu=name, peak_bf16=peak)
    if mpt_only or mpt_step:
        return time_mpt_steps(emit) if mpt_step else time_mpt_blocks(emit)
    dev = "cuda"
    for ba in (8, 32, 64, 128):
        b, heads = (4, 32) if ba == 128 else (1, ba)
        for s in (1024, 2048, 4096, 8192, 16384, 32768):
            if ba * s > 2**20:
                continue
            shape = (b, heads, s, HD)
            q, k, v = (torch.randn(shape, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
            do, flops = torch.randn_like(q), 3.5 * 2 * b * heads * s * s * HD
            for kernel, be in BACKENDS.items():
                with sdpa_kernel([be]):
                    t = cuda_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(do))
                emit(what="sdpa", backend=kernel, ba=ba, s=s, fwd_bwd_s=t, total_eff=flops / t / peak)
    for gib in (1, 4):
        emit(what="hbm", gib=gib, **hbm_rates(gib))
    for label, h, heads, kv, ffn, s in BLOCKS:
        for kernel, t, split in time_block(h, heads, kv, ffn, s):
            emit(what="block", model=label, s=s, backend=kernel, step_s=t, split_s=split)
        torch.cuda.empty_cache()


def hbm_rates(gib: int) -> dict:
    """GB/s (1e9 bytes read + written per second) of copy, add, scale and a bf16 → fp32 cast on ``gib`` GiB of bf16."""
    x = torch.randn(gib * 2**30 // 2, device="cuda", dtype=torch.bfloat16)
    y, z, n = torch.empty_like(x), torch.randn_like(x), x.numel()
    return {
        "copy": 4 * n / cuda_time(lambda: y.copy_(x)) / 1e9,
        "add": 6 * n / cuda_time(lambda: torch.add(x, z, out=y)) / 1e9,
        "scale": 4 * n / cuda_time(lambda: torch.mul(x, 1.5, out=y)) / 1e9,
        "cast_fp32": 6 * n / cuda_time(lambda: x.float()) / 1e9,
    }


def time_block(h: int, heads: int, kv: int, ffn: int, s: int) -> list[tuple[str, float, dict]]:
    """(backend, seconds, kernel split) of one block's forward + backward on one sequence of ``s`` tokens."""
    torch.manual_seed(0)
    dev = "cuda"
    blk = Block(h, heads, kv, ffn).to(dev, torch.bfloat16)
    x = torch.randn(1, s, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
    freqs = 1.0 / 500000.0 ** (torch.arange(0, HD, 2, device=dev).float() / HD)
    cis = torch.polar(torch.ones(s, HD // 2, device=dev), torch.outer(torch.arange(s, device=dev).float(), freqs))
    g = torch.randn_like(x)

    def step():  # fresh gradients each step, as one micro-batch per step makes them (no accumulation kernels)
        blk.zero_grad(set_to_none=True)
        x.grad = None
        blk(x, cis).backward(g)

    rows = []
    for kernel, be in BACKENDS.items():
        with sdpa_kernel([be]):
            rows.append((kernel, cuda_time(step), kernel_split(step)))
    return rows


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(args[0] if args else None, mpt_only="--mpt" in sys.argv, mpt_step="--mpt-step" in sys.argv)
