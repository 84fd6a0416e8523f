"""One check file per lesson (``checks/lessonNN.py``); shared helpers in ``checks/common.py``."""
