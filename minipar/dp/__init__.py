"""Data parallelism: every rank holds the whole model and a share of the batch (lessons 02, 09).

- ``minipar.dp.sync``           naive DP (one ``all_reduce`` per gradient); replicas start from rank 0's weights [02]
- ``minipar.dp.buckets``        gradient buckets in reverse parameter order, one flat buffer each [02]
- ``minipar.dp.ddp``            ``DistributedDataParallel``: bucketed all-reduces overlapped with backward [02]
- ``minipar.dp.compression``    gradient compression: bf16, top-k with error feedback, PowerSGD [09]
- ``minipar.dp.param_server``   a parameter server: synchronous, and asynchronous with bounded staleness [09]

ZeRO (``minipar.zero``, lesson 03) is data parallelism too, with sharded state: its own package.
"""
