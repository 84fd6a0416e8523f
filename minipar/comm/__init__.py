"""Communication: the primitives every parallelism is built on (lesson 01).

- ``minipar.comm.collectives``  ring reduce-scatter / all-gather / all-reduce from send/recv [01]
- ``minipar.comm.p2p``          isend/irecv/send/recv with NCCL's per-pair order checked on CPU
  (``MINIPAR_P2P_ORDER=strict``, on in the tests) [06]
- ``minipar.comm.all_to_all``  the all-to-all with uneven splits, differentiable (expert parallelism) [12]
- ``minipar.comm.comm_log``     ``CommLog``: bytes sent/received by every collective and send/recv [01]
"""
