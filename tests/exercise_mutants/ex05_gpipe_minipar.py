"""gpipe re-exported from minipar's schedules."""

from exercises.solutions.ex05_pipeline_microbatches import *  # noqa: F401,F403
from minipar.pp.schedules import gpipe  # noqa: F401
