"""Performance: one model of step time and memory per layout, with two device descriptions (lesson 07)."""
