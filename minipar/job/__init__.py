"""The main job's parts (``python -m minipar.train`` reads them top to bottom, in :mod:`minipar.train`).

- ``minipar.job.config``       ``TrainConfig``: a run's settings, their checks, the command line made from them [00]
- ``minipar.job.parallelize``  this rank's piece of the GPT on a (pp, dp, [cp,] tp) mesh and its training step [07]
- ``minipar.job.moe_piece``    the same for a mixture-of-experts GPT: experts over EP groups carved out of dp [12]
- ``minipar.job.outdir``       its folders: checked before any rank starts, one run at a time (a lock), atomic writes
- ``minipar.job.run_log``      its progress bar, metrics.jsonl, loss plot and text sample (replaced together,
  at the end)
- ``minipar.job.reference``    the plain single-device loop every layout is tested against [00]
"""
