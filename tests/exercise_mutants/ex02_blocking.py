"""Blocking all_reduce (async_op=False) in the hook."""

import torch.distributed as dist

from exercises.solutions import ex02_data_parallel as _sol
from exercises.solutions.ex02_data_parallel import *  # noqa: F401,F403


class _Done:
    def wait(self):
        return True


class BucketedDDP(_sol.BucketedDDP):
    def grad_ready(self, p):
        k, off = self.where[id(p)]
        self.buffers[k][off : off + p.numel()].copy_(p.grad.reshape(-1))
        self.ready[k].add(id(p))
        while self.next < len(self.buckets) and len(self.ready[self.next]) == len(self.buckets[self.next]):
            dist.all_reduce(self.buffers[self.next], group=self.group)
            self.works[self.next] = _Done()
            self.next += 1
