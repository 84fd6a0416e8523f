"""The course's own tooling, beside the library: nothing under ``minipar/`` outside this folder imports it.

- ``minipar.course.verify``          proofs that read the same on every CPU: a verdict against a derived bound
- ``minipar.course.bench``           ``python -m minipar.course.bench``: minipar vs PyTorch-native, measured ratios
  (one module per lesson in ``benchmarks/``)
- ``minipar.course.gpu_check``       ``python -m minipar.course.gpu_check``: the GPU check-list (``make gpu-check``)
- ``minipar.course.pipeline_trace``  traced pipeline runs, measured bubble, Gantt charts (lessons 05-06)
"""
