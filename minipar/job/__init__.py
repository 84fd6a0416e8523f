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

The path of ``python -m minipar.train --dp 2 --tp 2 --pp 2`` to the first optimizer step, as the job's own code
calls it (``tests/test_call_path.py`` traces it and counts the hops between files):

- the CLI's process: ``train.main`` → ``job.cli.parse_args`` → ``job.config.check`` (every setting, the layout
  ``Mesh``, the corpus, ``--resume``'s checkpoint, then the folders: ``job.outdir.check_folder``) →
  ``job.outdir.hold`` → ``runtime.launch.launch``;
- each rank: ``train.train`` → ``runtime.mesh.init_groups`` → ``data.make_loader`` and the validation batches →
  ``model.gpt.GPT`` (its FLOPs per token) → ``job.parallelize.parallelize`` (tp, recompute, the pipeline stage and
  schedule, the optimizer) → the val loss at step 0 (``optim.amp.autocast``, ``job.piece.Piece.forward_loss``) →
  ``job.config.lr_at`` → ``job.piece.Piece.step`` (``pp.executor`` runs the schedule, gradients averaged over
  ``mesh.dp_cp_group``, clipped, AdamW).

Measured (``tests/test_call_path.py``): 30 file-to-file hops, 8 of them back into a file already visited.
"""
