"""The main job's parts (``python -m minipar.train`` reads them top to bottom, in :mod:`minipar.train`).

- ``minipar.job.config``       ``TrainConfig``: a run's settings (frozen, in sections), checked once into a ``Job`` [00]
- ``minipar.job.cli``          the command line, made from ``TrainConfig``'s fields
- ``minipar.job.parallelize``  ``parallelize(model, mesh, cfg)``: TP or EP, recompute, the pipeline stage, CP,
  ZeRO and the optimizer applied once to the GPT, dense or experts [07, 11, 12]
- ``minipar.job.piece``        ``Piece``: this rank's piece and its one training step, every layout [07, 12]
- ``minipar.job.outdir``       its folders: checked before any rank starts, one run at a time (a lock), atomic writes
- ``minipar.job.run_log``      its progress bar, metrics.jsonl, loss plot and text sample (replaced together,
  at the end)
- ``minipar.job.reference``    the plain single-device loop every layout is tested against [00]
"""
