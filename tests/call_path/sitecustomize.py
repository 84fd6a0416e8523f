"""Records the minipar files one run passes through (``tests/test_call_path.py`` puts this folder first on
``PYTHONPATH`` and sets ``MINIPAR_CALL_PATH`` to an output folder; without it this file does nothing).

Every Python process of the run imports it at start-up (the CLI's process, the forkserver, the ranks forked
from it). A profile hook keeps each call event whose code lives under ``minipar/``: the CLI's process until it
calls :func:`minipar.runtime.launch.launch`, each rank from :func:`minipar.runtime.rank_process.run_rank` to its
optimizer's first ``step``. Each process writes its list of ``(file, function, caller's file)`` to ``<pid>.json``.
"""

import json
import os
import sys

_OUT = os.environ.get("MINIPAR_CALL_PATH")

if _OUT:
    _events: list = []
    _state = {"on": True}

    def _write(kind: str) -> None:
        sys.setprofile(None)
        _state["on"] = False
        with open(os.path.join(_OUT, f"{os.getpid()}.json"), "w") as f:
            json.dump({"kind": kind, "rank": os.environ.get("RANK"), "events": _events}, f)

    def _profile(frame, event, arg):
        if event != "call" or not _state["on"]:
            return
        code = frame.f_code
        path = code.co_filename.replace(os.sep, "/")
        if "/torch/optim/" in path and code.co_name == "step":
            _write("rank")
            return
        i = path.rfind("/minipar/")
        if i < 0:
            return
        name = path[i + 1 :]
        if name == "minipar/runtime/rank_process.py" and code.co_name == "run_rank":
            _events.clear()  # a rank starts here (what came before is the forkserver's)
        back = frame.f_back.f_code.co_filename.replace(os.sep, "/") if frame.f_back else ""
        _events.append((name, code.co_name, back[back.rfind("/minipar/") + 1 :] if "/minipar/" in back else ""))
        if name == "minipar/runtime/launch.py" and code.co_name == "launch":
            _write("parent")

    sys.setprofile(_profile)
