"""One benchmark module per lesson: ``bNN_topic.py`` defining ``rows(quick) -> list[minipar.course.bench.Row]``."""
