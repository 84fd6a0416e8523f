"""Performance: one model of step time and memory per layout, with two device descriptions (lesson 07).

A MODEL (arithmetic with sources), not a measurement. Import from the submodules (this package imports nothing):

- :mod:`minipar.perf.hardware`   devices and links: A100/H100/H200/B200 presets, networks, this CPU measured
- :mod:`minipar.perf.shape`      a model's shape (GQA, SwiGLU, FFN, experts, head width, sliding window, embeddings)
- :mod:`minipar.perf.layout`     a layout (dp, tp, pp, cp, b, v, ZeRO, ep, ...) and an estimate's answer
- :mod:`minipar.perf.flops`      FLOPs, activation bytes and parameters per stage, from the shape
- :mod:`minipar.perf.model`      seconds and bytes per layout, α–β links: :func:`~minipar.perf.model.estimate`
- :mod:`minipar.perf.memory`     bytes per device: ZeRO's states, activations held along the real schedule
- :mod:`minipar.perf.placement`  whether a group's ranks straddle nodes, and how many share one
- :mod:`minipar.perf.sharding`   which link each group runs on; DP / ZeRO / HSDP communication per step
- :mod:`minipar.perf.moe`        a mixture of experts: counts, expert GEMMs, the all-to-all's links, the host's floor
- :mod:`minipar.perf.search`     every layout (cp included) estimated, rejected or ranked; rank correlation
- :mod:`minipar.perf.published`  the FIT set (Megatron-LM Table 1) and preset shapes
- :mod:`minipar.perf.runs`       the TEST set (MegaScale Tables 2–3, Fig. 9; Narayanan Table 2; Llama 3
                                 Table 4 on H100s), not tuned on, and the sources it gathers, a module each:
                                 ``foundry``, ``torchtitan``, ``nemo``, ``nemo_long``, ``dgxc``, ``megatron_lm``,
                                 ``fms``, ``bloom``, ``tinyllama``, ``olmo``, ``nanotron``, ``moe_zoo``
                                 (NVIDIA's models' shapes: ``nemo_shapes``)
- :mod:`minipar.perf.timeline`   a simulated two-stream timeline of communication overlapped with compute

``python -m minipar.plan`` is the command line over :func:`minipar.perf.search.plan`; its flags by kind:
``shape_flags``, ``stack_flags``, ``shard_flags``, ``moe_flags``; the notes under its table (where published runs of
the top layout's kind read against the model): ``plan_notes``.
"""
