"""Plain PyTorch DDP, nothing hidden: the script a cluster job runs (lesson 10).

    torchrun --standalone --nproc-per-node 2 examples/ddp_plain.py          # 2 ranks on this machine
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
             --rdzv-endpoint $HEAD:29500 examples/ddp_plain.py                # 2 nodes × 8 GPUs

torchrun starts one process per GPU and sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT; everything else is below, top to bottom. With CUDA, each process drives the GPU
``cuda:LOCAL_RANK`` and talks NCCL; without it, gloo on CPU (how lesson 10 runs it).

The model is a small MLP in float64 on a fixed synthetic regression set, so the lesson can
prove this script equal to minipar's DistributedDataParallel to 1e-12. ``--out FILE`` makes rank 0
save the per-step losses and the final parameters there (``torch.save``).
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

SAMPLES, FEATURES, BATCH_PER_RANK, EPOCHS, LR = 64, 8, 8, 2, 0.05


def make_dataset() -> TensorDataset:
    """The same 64 (x, y) pairs on every rank: y = sin(x·w) + noise, float64."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g, dtype=torch.float64)
    w = torch.randn(FEATURES, 1, generator=g, dtype=torch.float64)
    y = torch.sin(x @ w) + 0.1 * torch.randn(SAMPLES, 1, generator=g, dtype=torch.float64)
    return TensorDataset(x, y)


def make_model() -> nn.Module:
    torch.manual_seed(0)  # every rank builds the same weights (DDP also broadcasts rank 0's)
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.Tanh(), nn.Linear(32, 1)).double()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None, help="rank 0 saves {'losses', 'params'} here")
    args = p.parse_args()

    # 1. Join the process group. torchrun set the environment; init_process_group reads it (env://).
    local_rank = int(os.environ["LOCAL_RANK"])  # which GPU of this node is mine
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)  # before any CUDA work: NCCL uses the current device
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    # 2. Data: each rank reads its own 1/world of every epoch's shuffled order.
    data = make_dataset()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(data, batch_size=BATCH_PER_RANK, sampler=sampler)

    # 3. Model: on my device, wrapped in DDP (device_ids only for a GPU module; none on CPU).
    model = make_model().to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    losses = []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces (averages) the gradients here
            opt.step()
            losses.append(loss.item())  # this rank's local loss
        if rank == 0:
            print(f"epoch {epoch}: rank 0 loss {losses[-1]:.4f} after {len(losses)} steps on {world} ranks ({backend})")

    if rank == 0 and args.out:
        params = {k: v.detach().cpu() for k, v in model.module.state_dict().items()}
        torch.save({"losses": losses, "params": params}, args.out)
    dist.destroy_process_group()  # leave cleanly (NCCL warns otherwise)
    if backend == "gloo":
        # gloo's worker threads outlive destroy_process_group and may still be freeing the last gradient
        # all-reduce, which needs Python: if Python's shutdown has begun by then, the rank aborts (lesson 10,
        # appendix). os._exit skips that shutdown; the file is saved and the output flushed first.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
