"""Worker functions the benchmarks launch (importable, so child processes can find them)."""

import torch
import torch.distributed as dist


def noop() -> int:
    from minipar.runtime import dist as mdist

    t = torch.ones(1, device=mdist.device())  # cuda:LOCAL_RANK under NCCL
    dist.all_reduce(t)
    return int(t.item())


def spawn_noop(rank: int, world_size: int, port: int) -> None:
    """The same job under ``torch.multiprocessing.spawn`` (the PyTorch-native launcher)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    t = torch.ones(1, device="cpu")  # this job is gloo by construction: CPU tensors
    dist.all_reduce(t)
    dist.destroy_process_group()
