import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from minipar.runtime.mesh import init_mesh


def mesh_vs_torch(pp, dp, tp):
    m = init_mesh(pp=pp, dp=dp, tp=tp)
    tm = init_device_mesh("cpu", (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    same = all(sorted(m.ranks[d]) == sorted(dist.get_process_group_ranks(tm.get_group(d))) for d in ("pp", "dp", "tp"))
    t = torch.tensor([float(dist.get_rank())])
    if m.tp_group is not None:
        dist.all_reduce(t, group=m.tp_group)
    return {"coords": m.coords, "ranks": m.ranks, "same_as_torch": same, "tp_sum": t.item()}


def size_one_groups(pp, dp, tp):
    m = init_mesh(pp=pp, dp=dp, tp=tp)
    real = all(g is not None and dist.get_world_size(g) == len(m.ranks[d]) for d, g in m.groups.items())
    return {"real": real, **{d: dist.get_process_group_ranks(m.groups[d]) for d in ("pp", "dp", "tp")}}
