"""Data parallelism: every rank holds the whole model and a share of the batch (lessons 02, 09).

- ``minipar.dp.ddp``            naive DP and a bucketed, overlapped ``DistributedDataParallel`` [02]
- ``minipar.dp.compression``    gradient compression: bf16, top-k with error feedback, PowerSGD [09]
- ``minipar.dp.param_server``   a parameter server: synchronous, and asynchronous with bounded staleness [09]

ZeRO (``minipar.zero``, lesson 03) is data parallelism too, with sharded state: its own package.
"""
