"""How the learner's code computes its answer, not only what it returns (issue 23).

:class:`Watch` is a context manager put around one call of the learner's code. While it is open:

- a profile hook (``sys.setprofile``) notes every call of a *refused* function: minipar's own
  reference of the exercise, PyTorch's implementation of the same thing (``torch.optim``,
  ``torch.utils.checkpoint``, autograd inside a hand-written backward, ...) and the reference
  solutions in ``exercises/solutions/``. It sees the call however the function was reached (an
  alias, a re-export, a wrapper), because it compares the code object that runs;
- a ``TorchDispatchMode`` notes every operator that reaches PyTorch's dispatcher: the
  communication ops (``c10d::send``, ``c10d::allreduce_``, ... with their sizes and peers) however
  they were called (``dist.*``, ``distributed_c10d``, a ``ProcessGroup`` method, functional
  collectives), and the ATen ops the check asks about (``native_layer_norm_backward``, ...).

Everything it notes is plain data (picklable), so a worker on a real rank returns it to the check.
"""

from __future__ import annotations

import ast
import collections
import functools
import importlib
import importlib.util
import inspect
import os
import sys
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def _codes(obj, seen=None) -> set:
    """Code objects of a function, of every method of a class, or of every function/class of a module."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return set()
    seen.add(id(obj))
    out = set()
    if inspect.ismodule(obj):
        for v in vars(obj).values():
            if getattr(v, "__module__", None) == obj.__name__ and (inspect.isfunction(v) or inspect.isclass(v)):
                out |= _codes(v, seen)
    elif inspect.isclass(obj):
        for v in vars(obj).values():
            v = getattr(v, "__func__", v)  # staticmethod / classmethod
            if isinstance(v, property):
                v = v.fget
            if inspect.isfunction(v) or inspect.isclass(v):
                out |= _codes(v, seen)
    elif callable(obj):
        fn = getattr(obj, "__func__", obj)
        while fn is not None:
            if hasattr(fn, "__code__"):
                out.add(fn.__code__)
            fn = getattr(fn, "__wrapped__", None)
    return out


def resolve(name: str):
    """``"pkg.mod"`` -> the module; ``"pkg.mod:Class.attr"`` -> that object.

    Raises:
        LookupError: ``name`` names nothing importable (a module moved or renamed): the rule that
            names it must be updated, not silently ignored.
    """
    mod_name, _, attr = name.partition(":")
    try:
        obj = importlib.import_module(mod_name)
        for part in filter(None, attr.split(".")):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise LookupError(f"the checker's rule {name!r} names nothing ({type(exc).__name__}: {exc})") from None
    return obj


def source_of(name: str) -> tuple[str, bool]:
    """Where module or package ``name`` (``"minipar.dp"``, ``"torch.optim"``) keeps its code, without
    importing it: ``(its folder + os.sep, True)`` for a package (every file under it), ``(its file,
    False)`` for a module.

    Raises:
        LookupError: ``name`` is no module or package with Python source (moved, renamed, mistyped).
    """
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a parent package that does not exist
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return os.path.abspath(next(iter(spec.submodule_search_locations))) + os.sep, True
    if spec is None or not (spec.origin or "").endswith(".py"):
        raise LookupError(
            f"the checker's rule {name!r} names no module or package with Python source: "
            "name it as it is imported now (a module that moved must be renamed in the rule)"
        )
    return os.path.abspath(spec.origin), False


def module_name(path: str, name: str, folder: str) -> str:
    """The dotted name of the module in file ``path`` under package ``name`` whose folder is ``folder``."""
    rel = os.path.splitext(path[len(folder) :])[0].split(os.sep)
    return ".".join([name] + [p for p in rel if p != "__init__"])


ANSWER = "this is the reference solution: write the exercise yourself"


def _is_exercise(code) -> bool:
    """A function of exercises/solutions/ whose docstring has ``Hint:`` (an exercise, as make_stubs reads it)."""
    doc = code.co_consts[0] if code.co_consts and isinstance(code.co_consts[0], str) else ""
    return "Hint:" in doc


SOLUTIONS = "exercises.solutions"  # the reference solutions: always refused (their exercises only)


class Refuse:
    """What an exercise may not call: ``{what: why}``. ``what`` is a module or a package by its
    import name (``"torch.optim"``, ``"minipar.dp"``: every function defined in its files, nested
    ones and private ones included; ``"minipar.comm.collectives"``: every function of that module)
    or one object (``"torch.autograd:grad"``, ``"torch._tensor:Tensor.backward"``). ``allow``:
    objects inside a refused module that the exercise is given (``chunk_bounds``, ``Action``).
    ``c_names``: names of C functions refused (``run_backward``). The reference solutions
    (``exercises.solutions``) are always refused.

    Raises:
        LookupError: a name of ``refuse`` or ``allow`` resolves to nothing (a module moved or was
            renamed): a rule that names nothing would refuse nothing, so it fails here, loudly.
    """

    def __init__(self, refuse: dict[str, str], allow=(), c_names: dict[str, str] | None = None):
        self.codes: dict = {}
        self.sources: list[tuple[str, str, bool, str]] = []  # (name, file or folder, is a package, why)
        for what, why in {**refuse, SOLUTIONS: ANSWER}.items():
            if ":" in what:
                for c in _codes(resolve(what)):
                    self.codes[c] = (what.split(":")[0], why)
            else:
                self.sources.append((what, *source_of(what), why))
        self.allowed = set()
        for obj in allow:
            self.allowed |= _codes(resolve(obj) if isinstance(obj, str) else obj)
        self.c_names = c_names or {}
        self._cache: dict = {}

    def names(self) -> list[str]:
        """The modules and packages refused, by import name (the solutions last)."""
        return [name for name, *_ in self.sources]

    def verdict(self, code):
        """``(name, why)`` if calling ``code`` is refused, else None (cached per code object); ``name``
        is the function's import name (``"minipar.dp.buckets.make_buckets"``)."""
        v = self._cache.get(code, False)
        if v is False:
            v = None if code in self.allowed else self.codes.get(code)
            if v is not None:
                v = (f"{v[0]}.{code.co_qualname}", v[1])
            elif code not in self.allowed:
                path = os.path.abspath(code.co_filename)
                for name, where, package, why in self.sources:
                    inside = path.startswith(where) if package else path == where
                    if inside and (name != SOLUTIONS or _is_exercise(code)):
                        v = (f"{module_name(path, name, where) if package else name}.{code.co_qualname}", why)
                        break
            self._cache[code] = v
        return v


def _compiled(path: str) -> list:
    """Every code object compiled from the file at ``path`` as it is on disk (nested ones included)."""
    try:
        with open(path, encoding="utf-8") as f:
            src = f.read()
        flags = 0
        tree = ast.parse(src)
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                for a in node.names:
                    import __future__

                    flags |= getattr(__future__, a.name).compiler_flag
        todo, out = [compile(src, path, "exec", flags=flags, dont_inherit=True)], []
    except (OSError, SyntaxError, ValueError):
        return []
    while todo:
        c = todo.pop()
        out.append(c)
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return out


def defined_elsewhere(mod, names) -> str | None:
    """The first of ``names`` (``"fn"`` or ``"Class.method"``) whose code is not in ``mod``'s own file:
    defined in another file, or compiled from another source under the file's name (``exec(compile(src,
    __file__, ...))``): the running code must be what the file's own text compiles to."""
    here = os.path.abspath(mod.__file__)
    compiled = None
    for name in names:
        obj = mod
        for part in name.split("."):
            obj = getattr(obj, part, None)
        obj = getattr(obj, "__func__", obj)
        code = getattr(inspect.unwrap(obj), "__code__", None) if obj is not None else None
        if code is None or os.path.abspath(code.co_filename) != here:
            where = os.path.relpath(code.co_filename) if code is not None else "nowhere"
            return (
                f"{name} is defined in {where}, not in your file {os.path.relpath(here)}: write it there "
                "yourself (importing or re-exporting an implementation is not the exercise)"
            )
        compiled = _compiled(here) if compiled is None else compiled
        if not any(c == code for c in compiled):
            return (
                f"{name} runs code that your file {os.path.relpath(here)} does not hold at line {code.co_firstlineno} "
                "(source compiled under your file's name, or a file changed since it was imported): write the "
                "function's def in your file yourself"
            )
    return None


def _stmts(node):
    return node.body[1:] if ast.get_docstring(node) is not None else node.body


def _bodies(path: str) -> dict:
    """``{body: function name}`` of the file's functions of 3 statements or more (docstrings aside,
    as AST dumps); a one-liner is no telling copy."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    fns = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return {"\n".join(ast.dump(b) for b in _stmts(n)): n.name for n in fns if len(_stmts(n)) >= 3}


@functools.lru_cache(maxsize=8)
def _reference_bodies(sources: tuple) -> dict:
    ref = {}
    for src in sources:
        where, package = source_of(src)
        files = [os.path.join(d, f) for d, _, fs in os.walk(where) for f in fs if f.endswith(".py")]
        for path in files if package else [where]:
            name = module_name(path, src, where) if package else src
            ref.update({k: (name, v) for k, v in _bodies(path).items()})
    return ref


def copied_body(mod, names, sources) -> str | None:
    """The first of ``names`` whose body (docstring aside) is, token for token, a function's of one of
    ``sources`` (module or package import names, e.g. ``"minipar.cp"``): an implementation pasted in."""
    ref = _reference_bodies(tuple(sources))
    mine = _bodies(os.path.abspath(mod.__file__))
    for name in names:
        short = name.split(".")[-1]
        for body, fn in mine.items():
            if fn == short and body in ref:
                return (
                    f"{name} in your file is {ref[body][0]}.{ref[body][1]}, token for token: write the exercise "
                    "yourself, not a copy of the course's implementation"
                )
    return None


class _Ops(TorchDispatchMode):
    def __init__(self, watch):
        super().__init__()
        self.watch = watch

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.watch._op(func, args)
        return func(*args, **(kwargs or {}))


def _numel(x) -> int:
    if torch.is_tensor(x):
        return x.numel()
    if isinstance(x, (list, tuple)):
        return sum(_numel(y) for y in x)
    return 0


class Watch:
    """Context manager: what the code inside called. Attributes after the block:

    - ``refused``: ``[(name, why), ...]`` refused functions called (first 5, each once);
    - ``comm``: ``[(op, numel of arg 0, numel of arg 1, peer), ...]`` every communication op that
      reached the dispatcher (``op`` without namespace and trailing ``_``: ``send``, ``recv``,
      ``allreduce``, ``_allgather_base``, ``_reduce_scatter_base``, ``all_reduce`` for functional
      collectives, ...); ``peer`` is the group rank of a send/recv, else None;
    - ``ops``: ``{aten op name: count}`` for the ATen ops whose name contains one of ``op_words``.
    """

    def __init__(self, refuse: Refuse | None = None, op_words=(), ops=True, own=None):
        self.rules, self.op_words, self.use_ops = refuse, tuple(op_words), ops
        self.own = getattr(own, "__file__", own)  # the learner's file: never refused
        self.refused: list = []
        self.comm: list = []
        self.ops: dict[str, int] = {}

    # -- the profile hook
    def _profile(self, frame, event, arg):
        if frame.f_code.co_name == "<module>":  # an import running (lazy imports inside torch): not a call
            self._importing += 1 if event == "call" else -1 if event == "return" else 0
            return
        if self._importing > 0:
            return
        if event == "call":
            if frame.f_code.co_filename == self.own:
                return
            v = self.rules.verdict(frame.f_code)
        elif event == "c_call":
            name = getattr(arg, "__name__", "")
            v = (name, self.rules.c_names[name]) if name in self.rules.c_names else None
        else:
            return
        if v is not None and v not in self.refused and len(self.refused) < 20:
            self.refused.append(v)

    # -- the dispatch mode
    def _op(self, func, args):
        ns, _, name = func.name().partition("::")
        if ns in ("c10d", "_c10d_functional"):
            op = name.rstrip("_") if ns == "c10d" else name
            peer = args[2] if op in ("send", "recv") and len(args) > 2 else None
            self.comm.append((op, _numel(args[0]) if args else 0, _numel(args[1]) if len(args) > 1 else 0, peer))
        elif self.op_words and any(w in name for w in self.op_words):
            self.ops[name] = self.ops.get(name, 0) + 1

    def __enter__(self) -> "Watch":
        self._mode = _Ops(self) if self.use_ops else None
        if self._mode is not None:
            self._mode.__enter__()
        self._old, self._importing = sys.getprofile(), 0
        if self.rules is not None:
            sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(self._old)
        if self._mode is not None:
            self._mode.__exit__(*exc)

    def summary(self) -> dict:
        return {"refused": list(self.refused), "comm": list(self.comm), "ops": dict(self.ops)}


def refused_message(what: str, refused, answer: bool = False) -> str | None:
    """The one-line verdict for the first refused call (``answer``: only calls of the reference
    solution's exercises, else only the others), or None."""
    refused = [r for r in refused if (r[1] == ANSWER) == answer]
    if not refused:
        return None
    name, why = refused[0]
    return f"{what}: your code called {name}: {why}"


def watched(what: str, rules: Refuse, own, fn, *args, op_words=(), **kwargs):
    """``call(what, fn, *args)`` inside a :class:`Watch`; raises CheckFailed on a refused call.

    Returns ``(result, watch summary)``."""
    from exercises.checks.common import call

    with Watch(rules, op_words, own=own) as w:
        out = call(what, fn, *args, **kwargs)
    judge(what, w.summary())
    return out, w.summary()


def finally_own(mod, names, seen=(), copies_of=("minipar",)) -> None:
    """The last verdict of a check: no exercise of the reference solution was called (``seen``: the
    watch summaries) and every exercise in ``names`` is defined in the learner's own file, by its own
    text (``copies_of``: packages whose functions' bodies, of 3 statements or more, must not be pasted
    in verbatim)."""
    from exercises.checks.common import CheckFailed

    for what, summary in seen:
        judge(what, summary, answer=True)
    msg = defined_elsewhere(mod, names) or (copied_body(mod, names, copies_of) if copies_of else None)
    if msg:
        raise CheckFailed(msg)


def judge(what: str, summary: dict, answer: bool = False) -> None:
    """Raise CheckFailed when the watched code called a refused function: minipar's or PyTorch's
    reference (first, before any other verdict), or with ``answer`` the reference solution's own
    exercises (last: a wrong solution built on the reference solution reports its own mistake)."""
    from exercises.checks.common import CheckFailed

    msg = refused_message(what, summary["refused"], answer)
    if msg:
        raise CheckFailed(msg)


def tensor_elements(obj, skip=(), depth=0, seen=None) -> int:
    """Elements of every tensor reachable from ``obj``: dicts, lists, tuples, sets, objects' attributes
    (an optimizer kept in the state counts its moments), closures; modules, classes and functions are
    not entered (their code is not state)."""
    seen = {id(x) for x in skip} if seen is None else seen
    if id(obj) in seen or depth > 6:
        return 0
    seen.add(id(obj))
    if torch.is_tensor(obj):
        return obj.numel()
    if isinstance(obj, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, str, bytes)):
        return 0
    if inspect.isroutine(obj):
        return 0
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = list(obj)
    elif hasattr(obj, "__dict__"):
        items = list(vars(obj).values())
    else:
        return 0
    return sum(tensor_elements(x, skip, depth + 1, seen) for x in items)


def hiding_places(fn):
    """Where a function keeps values between calls: mutable defaults, its attributes, its closure."""
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if c.cell_contents is not None]
    return [fn.__defaults__ or (), fn.__kwdefaults__ or {}, getattr(fn, "__dict__", {}), cells]


def _own(mod, obj) -> bool:
    """``obj`` (a function or class) is defined in the learner's module ``mod``."""
    if inspect.isclass(obj):
        return getattr(obj, "__module__", None) == mod.__name__
    code = getattr(inspect.unwrap(obj), "__code__", None) if callable(obj) else None
    return code is not None and os.path.abspath(code.co_filename) == os.path.abspath(mod.__file__)


def state_places(mod) -> dict:
    """``{name: value}`` of everywhere the learner's module ``mod`` can keep values between calls:
    its globals (not the modules, nor functions and classes it imported), the attributes of the
    classes defined in it (class attributes escape a walk of the instances), and the defaults,
    attributes and closures of the functions defined in it (methods included)."""
    places = {}
    for k, v in vars(mod).items():
        if k.startswith("__") or isinstance(v, types.ModuleType):
            continue
        if inspect.isclass(v):
            if _own(mod, v):
                for a, x in vars(v).items():
                    x = getattr(x, "__func__", x)
                    if inspect.isfunction(x):
                        places[f"{k}.{a}"] = [hiding_places(x), hiding_places(inspect.unwrap(x))]
                    elif not (a.startswith("__") or isinstance(x, (property, types.MemberDescriptorType))):
                        places[f"{k}.{a}"] = x
        elif inspect.isfunction(v) or inspect.isbuiltin(v):
            if inspect.isfunction(v) and _own(mod, v):  # the decorated function and the one it wraps
                places[k] = [hiding_places(v), hiding_places(inspect.unwrap(v))]
        else:
            places[k] = v
    return places


def hidden_tensors(mod, skip=()) -> int:
    """Tensor elements kept in :func:`state_places` (``skip``: objects that are the contract's state)."""
    return tensor_elements(list(state_places(mod).values()), skip=skip)


def _snap(obj, own: str = "", depth=0, seen=None):
    """A comparable picture of ``obj``'s contents (values of numbers and strings, tensors' values,
    containers walked; the attributes of objects of the learner's own classes (module ``own``) and of
    namespaces walked; other objects (a logger with its caches, a torch object) by identity only)."""
    seen = set() if seen is None else seen
    if depth > 6 or id(obj) in seen:
        return "…"
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return obj
    if torch.is_tensor(obj):
        t = obj.detach()
        return ("tensor", tuple(t.shape), str(t.dtype), t.flatten()[:4096].tolist())
    if isinstance(obj, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)) or inspect.isroutine(
        obj
    ):
        return ("code", id(obj))
    seen = seen | {id(obj)}
    if isinstance(obj, dict):
        return ("dict", [(repr(k), _snap(v, own, depth + 1, seen)) for k, v in obj.items()])
    if isinstance(obj, (list, tuple, collections.deque)):
        return (type(obj).__name__, [_snap(v, own, depth + 1, seen) for v in obj])
    if isinstance(obj, (set, frozenset)):
        return ("set", sorted(repr(v) for v in obj))
    if hasattr(obj, "__dict__") and (type(obj).__module__ == own or isinstance(obj, types.SimpleNamespace)):
        return (type(obj).__name__, _snap(vars(obj), own, depth + 1, seen))
    return (type(obj).__name__, id(obj))


def state_snapshot(mod) -> dict:
    """What :func:`state_places` hold now; compare two with :func:`state_changed`."""
    return {k: _snap(v, mod.__name__) for k, v in state_places(mod).items()}


def state_changed(before: dict, after: dict) -> str | None:
    """The first place whose contents differ between two :func:`state_snapshot`\\ s (a global, a class
    attribute, a function's default/attribute/closure, written by the learner's code), or None."""
    for k in list(before) + [k for k in after if k not in before]:
        if before.get(k, "<absent>") != after.get(k, "<absent>"):
            return k
    return None


def kept_state_message(what: str, place: str, keep: str) -> str:
    """The verdict when the learner's code wrote to ``place`` between calls."""
    return (
        f"{what}: your code changed `{place}` of your module between calls (a global, a class attribute, a "
        f"default argument or a function's attribute): {keep}"
    )


def expect_no_state(what: str, mod, before: dict, keep: str) -> None:
    """Raise CheckFailed when the learner's code wrote to its module's state since ``before`` (a
    :func:`state_snapshot`): ``keep`` says where the exercise's state belongs instead."""
    from exercises.checks.common import CheckFailed

    place = state_changed(before, state_snapshot(mod))
    if place:
        raise CheckFailed(kept_state_message(what, place, keep))
