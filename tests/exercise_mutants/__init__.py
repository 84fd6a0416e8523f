"""Deliberately wrong solutions, one mistake each, that tests/test_exercises.py feeds to the checker."""
