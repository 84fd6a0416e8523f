"""Lesson 10's ``all_reduce_perf`` (the reference solution) on NCCL, its buffers on the GPUs.

    torchrun --nproc-per-node N examples/all_reduce_perf_nccl.py OUT_FOLDER

Runs 1 MiB, 64 MiB and 1 GiB on the world and 1 MiB on a sub-group of rank 0, prints the rows as JSON and
writes them to ``OUT_FOLDER/ex10_nccl.json``; exit 1 if a row has ``#wrong`` > 0 (or, on one rank, a busbw
other than 0). A run on one H100 (2026-11-28) is stored in ``examples/h100_2026-11-28/``.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

from exercises.solutions.ex10_nccl import all_reduce_perf


def main() -> int:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    rows = all_reduce_perf([1 << 20, 1 << 26, 1 << 30], warmup=5, iters=20)
    rows_sub = all_reduce_perf([1 << 20], group=dist.new_group([0]))
    out = dict(
        backend=dist.get_backend(),
        gpu=torch.cuda.get_device_name(),
        torch=torch.__version__,
        nccl=".".join(map(str, torch.cuda.nccl.version())),
        rows=rows,
        rows_subgroup=rows_sub,
    )
    one = dist.get_world_size() == 1
    ok = all(r["wrong"] == 0 and r["time_us"] > 0 and (r["busbw"] == 0 or not one) for r in rows + rows_sub)
    if dist.get_rank() == 0:
        print(json.dumps(out, indent=1))
        with open(os.path.join(sys.argv[1], "ex10_nccl.json"), "w") as f:
            json.dump(out, f, indent=1)
        print("all_reduce_perf on NCCL:", "PASS" if ok else "FAIL")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
