"""Pipeline parallelism (GPipe: Huang et al. 2019, arXiv:1811.06965; 1F1B: Narayanan et al. 2019
PipeDream, arXiv:1806.03377; interleaved 1F1B: Narayanan et al. 2021, arXiv:2104.04473 §2.2).
Read in this order:

- :mod:`minipar.pp.schedules`  GPipe, 1F1B and interleaved 1F1B as data (actions per rank), and a
  labelled simulator of a schedule's timeline (bubble, peak in-flight micro-batches)
- :mod:`minipar.pp.stages`     the GPT cut into consecutive stages (one stage class, also for the 3D job)
- :mod:`minipar.pp.zero_bubble` ZB-H1 (Qi et al. 2023, arXiv:2401.10241): the backward split into I and W
- :mod:`minipar.pp.simulation` the result of a simulation (timelines, bubble, peak in-flight)
- :mod:`minipar.pp.executor`   an executor that runs any schedule over a rank's stages on real ranks
- :mod:`minipar.pp.p2p_order`  the point-to-point message order a schedule implies, checked for NCCL
- :mod:`minipar.pp.trace`      traced runs, measured bubble, Gantt charts (checked against the simulator)
- :mod:`minipar.pp.native`     the same schedules with ``torch.distributed.pipelining``
"""
