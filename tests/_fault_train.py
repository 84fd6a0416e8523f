"""``python -m tests._fault_train RANK:STEP [train flags]``: the main job with one rank SIGKILLed.

Restart tests run this under ``torchrun --max-restarts 1`` instead of ``-m minipar.train``: rank RANK
kills itself as it reaches step STEP, on the first attempt only (``TORCHELASTIC_RESTART_COUNT``, which
``minipar.runtime.dist`` keeps equal on every node), so the restarted job must resume from its checkpoint.
The hook replaces the ``lr_at`` (:func:`minipar.job.config.lr_at`) that ``minipar.train``'s loop calls
once per step, before the step, so the job itself carries no test code.
"""

import os
import signal
import sys

import minipar.train as job
from minipar.runtime import dist as mdist


def inject(rank: int, step: int) -> None:
    lr_at = job.lr_at

    def lr_at_or_die(s, cfg):
        if s == step and mdist.rank() == rank and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        return lr_at(s, cfg)

    job.lr_at = lr_at_or_die


if __name__ == "__main__":
    r, s = (int(v) for v in sys.argv[1].split(":"))
    inject(r, s)
    mdist.exit_process(job.main(sys.argv[2:]))  # a torchrun rank on gloo: as python -m minipar.train ends one
