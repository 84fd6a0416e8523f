"""``--recompute op``'s memory (``minipar.perf.flops.op_saved_values``) counted on a real block: torchtitan's per-op
selective checkpointing policy (its ``_save_list`` and "every second mm", torchtitan at 9dec370,
``parallelize_llama.py``) run through PyTorch's own ``create_selective_checkpoint_contexts`` on a Llama-shaped block
(RMSNorm, GQA with repeated K/V, an elementwise stand-in for RoPE, SDPA, SwiGLU or a GELU MLP) on this CPU, fp32.
Counted: the storages created in the forward that are still alive after it (what the backward will read), without
the weights, the block's input and its output; the model's count adds the input (the checkpoint holds it).
Not ``minipar.model.memory.SavedTensorMeter``: it sees what autograd's saved-tensor hooks pack, and under
non-reentrant checkpointing that is only the block's input; the policy's saved outputs sit in the checkpoint's own
cache, which only the storages still alive reveal."""

from __future__ import annotations

import gc
import weakref
from collections import defaultdict
from functools import partial

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from minipar.perf.flops import op_saved_values
from minipar.perf.shape import ModelShape

# torchtitan's save list; on a CPU the attention kernel is the "_for_cpu" flash op (torchtitan lists the CUDA ones)
SAVE = {
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
    torch.ops.aten.abs.default,
    torch.ops.aten.max.default,
}


def _policy(meta):
    def policy(ctx, func, *args, **kwargs):
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        save = func in SAVE and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


class LlamaBlock(nn.Module):
    def __init__(self, h: int, a: int, kv: int, f: int, gated: bool = True):
        super().__init__()
        self.a, self.kv, self.hd, self.gated = a, kv, h // a, gated
        lin = partial(nn.Linear, bias=False)
        self.wq, self.wk, self.wv, self.wo = lin(h, h), lin(h, kv * self.hd), lin(h, kv * self.hd), lin(h, h)
        self.w1, self.w3, self.w2 = lin(h, f), lin(h, f), lin(f, h)
        self.n1, self.n2 = nn.Parameter(torch.ones(h)), nn.Parameter(torch.ones(h))

    @staticmethod
    def norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def forward(self, x):
        b, t, h = x.shape
        y = self.norm(x, self.n1)
        q = self.wq(y).view(b, t, self.a, self.hd)
        k = self.wk(y).view(b, t, self.kv, self.hd)
        v = self.wv(y).view(b, t, self.kv, self.hd)
        q, k = q * 0.5 + q.flip(-1) * 0.5, k * 0.5 + k.flip(-1) * 0.5  # elementwise, as RoPE
        r = self.a // self.kv  # torchtitan's repeat_kv: expand, then a copy
        k = k[:, :, :, None].expand(b, t, self.kv, r, self.hd).reshape(b, t, self.a, self.hd)
        v = v[:, :, :, None].expand(b, t, self.kv, r, self.hd).reshape(b, t, self.a, self.hd)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, t, h))
        z = self.norm(x, self.n2)
        if not self.gated:  # a GELU MLP: up, down
            return x + self.w2(F.gelu(self.w1(z)))
        return x + self.w2(F.silu(self.w1(z)) * self.w3(z))


class _Created(TorchDispatchMode):
    """Weak references to the storage of every tensor an op returns."""

    def __init__(self):
        super().__init__()
        self.storages = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for o in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(o, torch.Tensor):
                st = o.untyped_storage()
                self.storages.append((weakref.ref(st), st.nbytes(), st.data_ptr()))
        return out


def _kept_bytes(block: nn.Module, x: torch.Tensor, recompute: str) -> int:
    created = _Created()
    with created:
        if recompute == "op":
            ctx = partial(create_selective_checkpoint_contexts, _policy(defaultdict(int)))
            y = checkpoint(block, x, use_reentrant=False, context_fn=ctx)
        elif recompute == "full":
            y = checkpoint(block, x, use_reentrant=False)
        else:
            y = block(x)
    gc.collect()
    skip = {p.untyped_storage().data_ptr() for p in block.parameters()}
    skip |= {x.untyped_storage().data_ptr(), y.untyped_storage().data_ptr()}
    kept = {ptr: n for ref, n, ptr in created.storages if ref() is not None and ptr not in skip}
    y.sum().backward()  # the backward runs from what was kept
    return sum(kept.values())


@pytest.mark.parametrize("gated", [True, False])
def test_op_recompute_keeps_what_the_model_counts(gated):
    """Counted = the model's :func:`op_saved_values` less the block's input, to the byte (fp32: 4 bytes per value;
    the attention kernel's log-sum-exp is fp32 in any precision, which the model counts as 2 bf16 values per head);
    full recomputation keeps nothing but the input; no recomputation keeps more than op."""
    h, a, kv, f, b, t = 64, 4, 2, 96, 2, 64
    torch.manual_seed(0)
    block = LlamaBlock(h, a, kv, f, gated)
    x = torch.randn(b, t, h, requires_grad=True)
    kept = {rc: _kept_bytes(block, x, rc) for rc in ("none", "op", "full")}
    shape = ModelShape(layers=1, hidden=h, heads=a, seq=t, vocab=32, bias=False, kv_heads=kv, ffn=f, gated=gated)
    values = op_saved_values(shape, 1, False)  # bf16 values per token, the log-sum-exp as 2 per head
    model_fp32 = b * t * (4 * (values - 2 * a) + 4 * a)
    assert kept["op"] + 4 * b * t * h == model_fp32, (kept, model_fp32)
    assert kept["full"] == 0 and kept["none"] > kept["op"]
