"""Communication: the primitives every parallelism is built on (lesson 01), what they cost, and who sees them.

- ``minipar.comm.collectives``  ring reduce-scatter / all-gather / all-reduce from send/recv [01]
- ``minipar.comm.p2p``          isend/irecv/send/recv with NCCL's per-pair order checked on CPU
  (``MINIPAR_P2P_ORDER=strict``, on in the tests) [06]
- ``minipar.comm.all_to_all``  the all-to-all with uneven splits, differentiable (expert parallelism) [12]
- ``minipar.comm.links``       the link table: datasheet rates (NVLink, InfiniBand, PCIe), ``Link`` [05, 10]
- ``minipar.comm.cost``        the α–β time of each collective (ring all-reduce, reduce-scatter, ...) [01, 04, 07]
- ``minipar.comm.intercept``   the one interception of torch.distributed's calls, with listeners [01]
- ``minipar.comm.comm_log``     ``CommLog``: bytes sent/received by every collective and send/recv [01]
"""
