"""finish() forgets to divide by the world size: steps with N times the gradient."""

from exercises.solutions import ex02_data_parallel as _sol
from exercises.solutions.ex02_data_parallel import *  # noqa: F401,F403


class BucketedDDP(_sol.BucketedDDP):
    def finish(self):
        n, self.world_size = self.world_size, 1
        try:
            super().finish()
        finally:
            self.world_size = n
