"""Test-wide settings.

``MINIPAR_P2P_ORDER=strict`` (issue #14): every point-to-point message of every test goes through
``minipar.comm.p2p``'s strict order check, so a send/receive order that NCCL could not run (it matches
a rank pair's messages in posting order) fails a test on CPU. Set before any worker is launched;
``minipar.launch`` passes the environment to the ranks. ``MINIPAR_P2P_ORDER=off pytest ...``
runs without it.
"""

import os

os.environ.setdefault("MINIPAR_P2P_ORDER", "strict")
