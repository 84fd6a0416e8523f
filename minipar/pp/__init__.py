"""Pipeline parallelism (GPipe: Huang et al. 2019, arXiv:1811.06965; 1F1B: Narayanan et al. 2019
PipeDream, arXiv:1806.03377; interleaved 1F1B: Narayanan et al. 2021, arXiv:2104.04473 §2.2).
Read in this order:

- :mod:`minipar.pp.schedules`  GPipe, 1F1B, interleaved 1F1B and ZB-H1 as data (actions per rank)
- :mod:`minipar.pp.stages`     the GPT cut into consecutive stages (one stage class, also for the 3D job)
- :mod:`minipar.pp.zero_bubble` ZB-H1 (Qi et al. 2024, arXiv:2401.10241): the backward split into I and W
- :mod:`minipar.pp.simulation` the vocabulary (Action, Overlap) and the simulator: timelines, bubble, peak in-flight
- :mod:`minipar.pp.dualpipe`   DeepSeek-V3's bidirectional DualPipe (arXiv:2412.19437 §3.2.1), simulated
- :mod:`minipar.pp.executor`   an executor that runs any schedule over a rank's stages on real ranks
- :mod:`minipar.pp.p2p_order`  the point-to-point message order a schedule implies, checked for NCCL
- :mod:`minipar.pp.native`     the same schedules with ``torch.distributed.pipelining``

Traced runs and Gantt charts of these schedules (lessons 05-06) are course tooling:
:mod:`minipar.course.pipeline_trace`.
"""
