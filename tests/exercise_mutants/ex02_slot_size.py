"""grad_ready() copies a gradient into a slot of the wrong size (one element short): a shape error in backward."""

import torch.distributed as dist

from exercises.solutions import ex02_data_parallel as _sol
from exercises.solutions.ex02_data_parallel import *  # noqa: F401,F403


class BucketedDDP(_sol.BucketedDDP):
    def grad_ready(self, p):
        k, off = self.where[id(p)]
        self.buffers[k][off : off + p.numel() - 1].copy_(p.grad.reshape(-1))
        self.ready[k].add(id(p))
        while self.next < len(self.buckets) and len(self.ready[self.next]) == len(self.buckets[self.next]):
            self.works[self.next] = dist.all_reduce(self.buffers[self.next], group=self.group, async_op=True)
            self.next += 1
