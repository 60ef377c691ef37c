"""Transforms: where a DataLoader runs them, and the generators they may ask for.

A transform runs inline (``num_workers=0``), on threads of the training
process, or in worker processes (``_procpool``). :func:`choose` picks for
``workers=None``: processes where the interpreter has a GIL and the transform
can be sent to another process (it pickles, by reference to a module a worker
can import), threads where it cannot (a lambda, a closure: code written for
loaderx 1.5.7 runs unchanged) or where processes gain nothing or cannot start
(free-threaded CPython; a daemonic process such as a torch DataLoader worker).
Its reason is kept for ``stats()``.

A transform that names a parameter ``rng`` gets a ``numpy.random.Generator``
keyed by (seed, step, rank); one that names ``rngs`` gets one generator per
record, record j's keyed by (seed, step, rank × batch_size + j), its position
in the step's global batch. Both are pure functions of the loader's
parameters, so a resumed run, a thread and a process draw the same numbers,
and the per-record ones are the same at any world size with the same global
batch (docs/DESIGN.md, "Transforms").
"""

import ast
import collections.abc
import inspect
import io
import os
import pickle
import sys
import threading
import types
from typing import NamedTuple, Optional

import numpy as np

__all__ = ["Choice", "choose", "rng_params", "call", "batch_rng", "RecordRngs", "WORKERS"]

WORKERS = ("process", "thread")
# SeedSequence spawn keys: a domain each, so neither generator repeats the
# other's stream or the sampler's (proto/SAMPLERS.md keys its own).
RNG_BATCH = 0x6C78_7262     # "lxrb"
RNG_RECORD = 0x6C78_7272    # "lxrr"


class Choice(NamedTuple):
    kind: str               # "process", "thread" or "inline"
    why: str                # the reason, for stats()
    payload: Optional[bytes] = None   # the pickled transform (processes)
    main: Optional[tuple] = None      # ("path", file) or ("module", name): __main__ a worker imports


def _gil_enabled():
    f = getattr(sys, "_is_gil_enabled", None)
    return True if f is None else bool(f())


def _daemonic():
    mp = sys.modules.get("multiprocessing")
    if mp is None:
        return False
    try:
        return bool(mp.current_process().daemon)
    except Exception:
        return False


class _Scan(pickle.Pickler):
    """Pickles and notes the modules of the functions, classes and instances
    pickled, so a reference to ``__main__`` is seen."""

    def __init__(self, f):
        super().__init__(f, protocol=5)
        self.modules = set()

    def reducer_override(self, obj):
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            self.modules.add(getattr(obj, "__module__", None))
        else:
            self.modules.add(getattr(type(obj), "__module__", None))
        return NotImplemented


def _main_spec():
    """How a worker imports this process's __main__: ("module", name) for
    ``python -m``, ("path", file) for a script, None when it has no file (an
    interactive session, a notebook, ``python -c``)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return ("module", spec.name[:-len(".__main__")] if spec.name.endswith(".__main__")
                else spec.name)
    path = getattr(main, "__file__", None)
    if path and os.path.isfile(path):
        return ("path", os.path.abspath(path))
    return None


def _guards(path):
    """Line ranges of a script's top-level ``if __name__ == '__main__':`` blocks."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return []

    def is_name(n):
        return isinstance(n, ast.Name) and n.id == "__name__"

    def is_main(n):
        return isinstance(n, ast.Constant) and n.value == "__main__"

    out = []
    for node in tree.body:
        t = getattr(node, "test", None)
        if isinstance(node, ast.If) and isinstance(t, ast.Compare) and len(t.ops) == 1 and \
                isinstance(t.ops[0], ast.Eq) and (
                    (is_name(t.left) and is_main(t.comparators[0])) or
                    (is_main(t.left) and is_name(t.comparators[0]))):
            out.append((node.lineno, node.end_lineno or node.lineno))
    return out


def _main_is_guarded():
    """True if importing __main__ again (as a worker does for a transform defined
    there) would not run the code that is running now: the main thread is
    inside the script's ``if __name__ == '__main__':`` block. False when that
    cannot be told (no such block, or the main thread is not in the script's
    own code any more)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path:
        return False
    guards = _guards(path)
    if not guards:
        return False
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        if frame.f_globals is vars(main) and frame.f_code.co_name == "<module>":
            return any(lo <= frame.f_lineno <= hi for lo, hi in guards)
        frame = frame.f_back
    return False


def choose(transform, num_workers, workers):
    """Where `transform` runs: a Choice. ``workers`` is None (choose), 'process'
    or 'thread'. Raises TypeError / ValueError for a 'process' that cannot be."""
    from ._errors import ZrecordTypeError, ZrecordValueError
    if workers is not None and workers not in WORKERS:
        raise ZrecordValueError(f"workers must be 'process', 'thread' or None (choose), got "
                                f"{workers!r}")
    if transform is None or num_workers == 0:
        return Choice("inline", "no transform" if transform is None else
                      "num_workers=0: the transform runs inline in next()")
    if workers == "thread":
        return Choice("thread", "workers='thread'")
    if workers is None and not _gil_enabled():
        return Choice("thread", "free-threaded CPython (no GIL): threads run Python in "
                                "parallel without a process hop")
    if _daemonic():
        why = ("this process is a daemonic process (a torch DataLoader worker, a "
               "multiprocessing pool's), which may not start processes of its own")
        if workers == "process":
            raise ZrecordValueError(f"workers='process': {why}; use workers='thread'")
        return Choice("thread", why)
    buf = io.BytesIO()
    scan = _Scan(buf)
    try:
        scan.dump(transform)
    except Exception as e:
        why = (f"the transform cannot be pickled ({type(e).__name__}: {e}), so it cannot be "
               "sent to a process: a lambda, a closure or an object that holds one")
        if workers == "process":
            raise ZrecordTypeError(
                f"workers='process' needs a transform that can be pickled: {why}. Define it as "
                "a function at the top level of a module (or a picklable object), or use "
                "workers='thread'") from None
        return Choice("thread", why)
    main = None
    if "__main__" in scan.modules:
        main = _main_spec()
        why = None
        if main is None:
            why = ("the transform is defined in __main__ of an interactive session or "
                   "'python -c', which a worker process cannot import")
        elif not _main_is_guarded():
            why = (f"the transform is defined in the script {main[1]}, and the code that "
                   "starts this DataLoader is not under \"if __name__ == '__main__':\"; a "
                   "worker process imports the script and would run it again")
        if why is not None:
            if workers == "process":
                raise ZrecordValueError(
                    f"workers='process': {why}. Move the transform into a module the script "
                    "imports, or put the script's training code under \"if __name__ == "
                    "'__main__':\"")
            return Choice("thread", why)
    if workers == "process":
        return Choice("process", "workers='process'", buf.getvalue(), main)
    return Choice("process", "the transform can be pickled (a module-level function or a "
                             "picklable object) and this interpreter has a GIL",
                  buf.getvalue(), main)


def rng_params(f):
    """The generator parameters `f` names: a frozenset of 'rng' and 'rngs'."""
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):
        return frozenset()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in sig.parameters.values()
                     if p.kind in kinds and p.name in ("rng", "rngs"))


def batch_rng(seed, step, rank):
    """The generator of a step's batch on a rank."""
    return np.random.Generator(np.random.PCG64(
        np.random.SeedSequence(int(seed), spawn_key=(RNG_BATCH, int(step), int(rank)))))


class RecordRngs(collections.abc.Sequence):
    """One generator per record of a batch, made when first asked for: record
    j's is keyed by (seed, step, first + j), its position in the global batch."""

    __slots__ = ("seed", "step", "first", "n", "_made")

    def __init__(self, seed, step, first, n):
        self.seed, self.step, self.first, self.n = int(seed), int(step), int(first), int(n)
        self._made = {}

    def __len__(self):
        return self.n

    def __getitem__(self, j):
        if isinstance(j, slice):
            return [self[i] for i in range(*j.indices(self.n))]
        j = int(j)
        if j < 0:
            j += self.n
        if not 0 <= j < self.n:
            raise IndexError(f"record {j} of a batch of {self.n}")
        g = self._made.get(j)
        if g is None:
            g = self._made[j] = np.random.Generator(np.random.PCG64(np.random.SeedSequence(
                self.seed, spawn_key=(RNG_RECORD, self.step, self.first + j))))
        return g


def call(f, wants, batch, seed, step, rank, batch_size):
    """f(batch), with the generators it names (rng_params(f) is `wants`)."""
    if not wants:
        return f(batch)
    kw = {}
    if "rng" in wants:
        kw["rng"] = batch_rng(seed, step, rank)
    if "rngs" in wants:
        kw["rngs"] = RecordRngs(seed, step, rank * batch_size, batch_size)
    return f(batch, **kw)
