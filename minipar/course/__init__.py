"""The course's own tooling, beside the library: nothing under ``minipar/`` outside this folder imports it.

- ``minipar.course.verify``          proofs that read the same on every CPU: a verdict against a derived bound
- ``minipar.course.bench``           ``python -m minipar.course.bench``: minipar vs PyTorch-native, measured ratios
  (one module per lesson in ``benchmarks/``); ``all_reduce_sweep``, the α–β sweep of lessons 01, 04, 07, 10
- ``minipar.course.gpu_check``       ``python -m minipar.course.gpu_check``: the GPU check-list (``make gpu-check``)
- ``minipar.course.pipeline_trace``  traced pipeline runs, measured bubble, Gantt charts (lessons 05-06)
- ``minipar.course.loop``            ``train_steps``: the lessons' small training loop, written once [08, 09];
  ``corpus_batches``, a rank's first batches of the course text [09, 12]; ``random_batch`` [07]
- ``minipar.course.presets``         the main job at lesson size (``tiny_train_config``), in float64
  (``train_float64``) [08, 12], the H100 step of slow motion
- ``minipar.course.zero_strategies`` lesson 03's sharding strategies applied to one GPT (``apply_strategy``)
- ``minipar.course.capture``         launches whose output reads the same on every run (``launch_quiet``, ``env``,
  ``quiet_fds``)
- ``minipar.course.clock_view``      the cluster clock's timelines summed and drawn (``draw_lanes``)
- ``minipar.course.clock_runs``      each mode's fastest step on the cluster clock (``fastest_on_clock``),
  a value's slowest rank (``slowest_rank``) [02, 06, 07, 09, 11]
- ``minipar.course.memory_timeline`` live tensor bytes over a step, by category (PyTorch's memory profiler) [00]
- ``minipar.course.autograd_graph``  the graph autograd builds, walked and drawn [00]
"""
