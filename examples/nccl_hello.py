"""The smallest NCCL job: one all-reduce per size, to read ``NCCL_DEBUG=INFO`` (lesson 10).

    NCCL_DEBUG=INFO torchrun --standalone --nproc-per-node 1 examples/nccl_hello.py
    NCCL_DEBUG=WARN SAME_GPU=1 torchrun --standalone --nproc-per-node 2 examples/nccl_hello.py

The first prints NCCL's start-up log (version, network, channels, ``Init COMPLETE``). The second puts
two ranks on GPU 0 — the bug of a script without ``torch.cuda.set_device(local_rank)`` — and NCCL
refuses it ("Duplicate GPU detected"). Lesson 10 shows both logs as recorded on one H100
(``lessons/nccl_logs/``). Needs a CUDA GPU per rank.
"""

import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(0 if os.environ.get("SAME_GPU") == "1" else local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    for nbytes in (1 << 10, 1 << 28):
        x = torch.ones(nbytes // 4, device="cuda")
        dist.all_reduce(x)  # warm-up
        torch.cuda.synchronize()
        t = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        if rank == 0:
            us = (time.perf_counter() - t) * 1e6
            print(f"all_reduce {nbytes} bytes on {world} rank(s): {us:.0f} us, sum={x[0].item():.0f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
