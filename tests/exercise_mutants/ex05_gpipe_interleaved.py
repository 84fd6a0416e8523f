"""'GPipe' that alternates F and B: not GPipe (a forward after a backward)."""

from exercises.solutions.ex05_pipeline_microbatches import bubble_fraction  # noqa: F401
from exercises.solutions.ex06_1f1b import one_f_one_b as gpipe  # noqa: F401
