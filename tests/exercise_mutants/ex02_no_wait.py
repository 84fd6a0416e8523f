"""finish() reads the buffers without waiting for the async all-reduces."""

from exercises.solutions import ex02_data_parallel as _sol
from exercises.solutions.ex02_data_parallel import *  # noqa: F401,F403


class BucketedDDP(_sol.BucketedDDP):
    def finish(self):
        import torch.distributed as dist

        for k in range(self.next, len(self.buckets)):
            self.works[k] = dist.all_reduce(self.buffers[k], group=self.group, async_op=True)
        for k, bucket in enumerate(self.buckets):
            self.buffers[k].div_(self.world_size)
            for p in bucket:
                off = self.where[id(p)][1]
                p.grad.copy_(self.buffers[k][off : off + p.numel()].view_as(p))
