"""The model: what one device trains, written to be split later (no parallelism imported here).

- ``minipar.model.gpt``        a small GPT (and an MLP) built to be split by layer, head and column [00]
- ``minipar.model.presets``    named GPT sizes the lessons share (``SMALL``, ``MEDIUM``), ``seeded_gpt``, the
  ``default_dtype`` scope of the float64 proofs
- ``minipar.model.recompute``  activation recomputation: full and selective (``set_recompute``), Korthikanti's
  bytes per layer [08]
- ``minipar.model.memory``     bytes of weights, gradients, optimizer state, activations; measured peak [00, 08]
- ``minipar.model.moe``        the mixture-of-experts layer on one device: router, dispatch, experts [12]
"""
