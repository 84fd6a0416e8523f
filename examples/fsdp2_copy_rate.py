"""Time FSDP2's two copies on the compute stream for one block, beside what ``minipar.perf`` charges for them
(``minipar.perf.sharding.fsdp2_copy_time``, ``--fsdp2``): the check of that term on a real device.

    python examples/fsdp2_copy_rate.py [OUT.jsonl]   # a CUDA GPU; one JSON line per block shape

FSDP2 (``torch.distributed.fsdp.fully_shard``) runs, per unit and per gather / reduction, the very calls timed here
(``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``):
1. copy-out, after each all-gather: ``torch.split_with_sizes_copy`` of the gathered buffer, viewed as world_size
   rows, into the unit's unsharded bf16 parameters (``foreach_all_gather_copy_out``);
2. copy-in, before each reduce-scatter: ``torch._chunk_cat`` of the unit's bf16 gradients into the reduce-scatter
   buffer, world_size chunks, cast to the reduction dtype, fp32 (``foreach_reduce_scatter_copy_in``); and the same
   into a bf16 buffer (``reduce_dtype`` bf16: no cast).
The units are one block of OLMo 2 7B and 13B and Llama 3 8B (``minipar.perf.olmo``: attention, SwiGLU MLP, two norms)
at world_size 8. The model charges 2·2 bytes per parameter for 1 and 2 + 4 (2 + 2) for 2, at the preset's HBM bandwidth
(``Device.hbm_bw``: 0.85 of the datasheet). Timings: CUDA events, the median of 20 after 5 warm-ups
(``gemm_rate.cuda_time``).
"""

from __future__ import annotations

import json
import sys

import torch
from gemm_rate import cuda_time  # examples/gemm_rate.py: CUDA events, the median

from minipar.perf.hardware import GPUS

WORLD = 8
BLOCKS = {  # name -> (hidden, FFN, KV heads' share of the hidden size)
    "OLMo2-7B": (4096, 11008, 1.0),
    "Llama3-8B": (4096, 14336, 0.25),
    "OLMo2-13B": (5120, 13824, 1.0),
}


def block_shapes(h: int, ffn: int, kv: float) -> list[tuple[int, ...]]:
    """One block's parameters: q, k, v, o; w1, w2, w3; the two norms."""
    k = int(h * kv)
    return [(h, h), (k, h), (k, h), (h, h), (ffn, h), (h, ffn), (ffn, h), (h,), (h,)]


def measure(name: str) -> dict:
    dev = torch.device("cuda")
    shapes = block_shapes(*BLOCKS[name])
    params = [torch.empty(s, dtype=torch.bfloat16, device=dev) for s in shapes]
    grads = [torch.randn(s, dtype=torch.bfloat16, device=dev) for s in shapes]
    numels = [p.numel() for p in params]
    n = sum(numels)
    gathered = torch.randn(n, dtype=torch.bfloat16, device=dev)  # world_size rows of n / world_size
    splits = [x // WORLD for x in numels]
    rs_input = torch.empty(n, dtype=torch.float32, device=dev)
    rs_bf16 = torch.empty(n, dtype=torch.bfloat16, device=dev)

    def copy_out():
        torch.split_with_sizes_copy(gathered.view(WORLD, -1), splits, dim=1, out=[p.view(WORLD, -1) for p in params])

    def copy_in():
        torch._chunk_cat(grads, dim=0, num_chunks=WORLD, out=rs_input.view(WORLD, -1))

    def copy_in_bf16():  # a bf16 reduction (reduce_dtype bf16): no cast
        torch._chunk_cat(grads, dim=0, num_chunks=WORLD, out=rs_bf16.view(WORLD, -1))

    bw = GPUS["h100"].hbm_bw
    t_out, t_in, t_in16 = cuda_time(copy_out), cuda_time(copy_in), cuda_time(copy_in_bf16)
    return {
        "block": name,
        "params": n,
        "gpu": torch.cuda.get_device_name(),
        "copy_out_s": t_out,
        "copy_in_s": t_in,
        "model_copy_out_s": n * 4 / bw,
        "model_copy_in_s": n * 6 / bw,
        "copy_in_bf16_s": t_in16,
        "model_copy_in_bf16_s": n * 4 / bw,
        "copy_out_gbps": n * 4 / t_out / 1e9,
        "copy_in_gbps": n * 6 / t_in / 1e9,
    }


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("fsdp2_copy_rate.py needs a CUDA GPU")
    out = open(sys.argv[1], "w") if len(sys.argv) > 1 else sys.stdout
    for name in BLOCKS:
        print(json.dumps(measure(name)), file=out, flush=True)


if __name__ == "__main__":
    main()
