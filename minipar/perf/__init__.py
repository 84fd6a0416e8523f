"""Performance: one model of step time and memory per layout, with two device descriptions (lesson 07).

A MODEL (arithmetic with sources), not a measurement. Import from the submodules (this package
imports nothing, so :mod:`minipar.tp` can use :mod:`minipar.perf.factors` without loading the model):

- :mod:`minipar.perf.hardware`   devices and links: GPU presets (NVLink/InfiniBand), this CPU measured
- :mod:`minipar.perf.layout`     a model's shape, a layout (dp, tp, pp, b, v, ZeRO, recompute), the estimate
- :mod:`minipar.perf.model`      FLOPs, memory, activation bytes, α–β times: :func:`~minipar.perf.model.estimate`
- :mod:`minipar.perf.search`     every layout estimated, rejected or ranked; rank correlation with a measurement
- :mod:`minipar.perf.published`  Megatron-LM Table 1 and MegaScale rows the model is checked against
- :mod:`minipar.perf.timeline`   a simulated two-stream timeline of communication overlapped with compute
- :mod:`minipar.perf.factors`    divisors (pure arithmetic)

``python -m minipar.plan`` is the command line over :func:`minipar.perf.search.plan`.
"""
