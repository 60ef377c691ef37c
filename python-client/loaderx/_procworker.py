"""A DataLoader's worker process: runs the transform on batches it maps from
the daemon's rings and writes the arrays it returns into the loader's arena.

Started by ``_procpool`` as a fresh interpreter (``python -c``, with the
loader's ``sys.path``), never a fork of the training process, so nothing of the
training process (its threads, locks, a GPU context) is inherited. It holds no
connection to the daemon: the loader owns the loader session, and a worker
only reads slots the loader holds for it until it reports the task done. It
ignores SIGINT (Ctrl-C is the training process's to handle: the loader stops its
workers) and exits when the training process does, whatever it is doing (a
thread waits on a pidfd of its parent), or when its channel closes.

Messages (``_pwire``) from the loader: ``hello`` (the transform, pickled; the
layout; the sampler parameters the generators are keyed by; how to import
``__main__`` if the transform lives there), then ``task``s; to the loader:
``ready`` or ``fatal``, then per task ``done`` (the output: its pickle, where
its arrays are), ``error`` (the exception, pickled if it can be, and the
traceback) or ``unshippable`` (the output must not leave this process).
"""

import mmap
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback

__all__ = ["main", "IMPORTING_MAIN"]

# True while a worker imports the training script for a transform defined in
# it: a DataLoader made then is the script running again (dataloader.py says so).
IMPORTING_MAIN = False


def _watch_parent(ppid):
    """Exits this process when the training process ends, whatever the main
    thread is doing."""
    if os.getppid() != ppid:
        os._exit(1)
    try:
        fd = os.pidfd_open(ppid)
    except (AttributeError, OSError):
        try:                     # no pidfd: the kernel's parent-death signal
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))   # PR_SET_PDEATHSIG
        except Exception:
            pass
        if os.getppid() != ppid:
            os._exit(1)
        return
    if os.getppid() != ppid:
        os._exit(1)

    def watch():
        import select
        select.select([fd], [], [])
        os._exit(1)
    threading.Thread(target=watch, name="loaderx-parent-watch", daemon=True).start()


def _import_main(spec):
    """Imports the training script as __mp_main__ and names it __main__, as
    multiprocessing's spawn does, so a transform defined there unpickles."""
    global IMPORTING_MAIN
    import runpy
    import types
    kind, name = spec
    IMPORTING_MAIN = True
    try:
        if kind == "module":
            content = runpy.run_module(name, run_name="__mp_main__", alter_sys=True)
        else:
            content = runpy.run_path(name, run_name="__mp_main__")
    finally:
        IMPORTING_MAIN = False
    mod = types.ModuleType("__mp_main__")
    mod.__dict__.update(content)
    sys.modules["__main__"] = sys.modules["__mp_main__"] = mod


class _Ring:
    __slots__ = ("mm", "address")

    def __init__(self, fd, nbytes):
        import numpy as np
        try:
            self.mm = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self.address = np.frombuffer(self.mm, np.uint8).ctypes.data


class _Buf:
    __slots__ = ("mm", "size")

    def __init__(self, fd, size, close=True):
        try:
            self.mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED,
                                prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            if close:
                os.close(fd)
        self.size = size


def _exc_payload(e):
    try:
        data = pickle.dumps(e, protocol=5)
        pickle.loads(data)
        return data
    except Exception:
        return None


class Worker:
    def __init__(self, chan, hello):
        from . import _session, _xform
        self.chan = chan
        self.transform = pickle.loads(hello["transform"])
        self.wants = _xform.rng_params(self.transform)
        self.layout = hello["layout"]
        self.seed, self.rank = hello["seed"], hello["rank"]
        self.batch_size = self.layout.batch_size
        self.small = hello["small"]
        self.rings = {}         # key -> _Ring
        self.bufs = {}          # id -> _Buf
        self._session = _session
        self._xform = _xform
        from . import _pwire
        self._pwire = _pwire
        # A slot's views, made once: a batch of dense streams alone lies the
        # same way in its slot at every step, so its arrays are new views of
        # those (a transform may change an array's shape in place).
        lay = self.layout
        packed = lay.packed or (None,) * len(lay.names)
        self.cacheable = not lay.with_indices and not lay.with_sources and all(
            pk is not None or kind[1] is not None for kind, pk in zip(lay.kinds, packed))
        self.views = {}         # (ring key, slot, spans) -> the slot's arrays

    def run(self):
        while True:
            try:
                msg, fds = self.chan.recv()
            except EOFError:
                return
            if msg["t"] == "task":
                self.task(msg, fds)
            elif msg["t"] == "stop":
                return

    def task(self, msg, fds):
        _pwire = self._pwire
        t_recv = time.monotonic_ns()
        for what, fd in zip(msg["fds"], fds):
            if what[0] == "ring":
                self.rings[what[1]] = _Ring(fd, what[2])
            else:
                self.bufs[what[1]] = _Buf(fd, what[2])
        if msg["drop_rings"]:
            for key in msg["drop_rings"]:
                self.rings.pop(key, None)
            self.views = {k: v for k, v in self.views.items() if k[0] in self.rings}
        for bid in msg["drop_bufs"]:
            self.bufs.pop(bid, None)
        step = msg["step"]
        ring = self.rings[msg["ring"]]
        key = (msg["ring"], msg["slot"], tuple(msg["spans"]))
        views = self.views.get(key)
        if views is not None:
            batch = {name: a.view() for name, a in views.items()}
        else:
            # (no per-stream maps come for dense streams alone: they lie by the spans)
            streams = msg["streams"] or [{}] * len(self.layout.names)
            t = self._session.Taken(msg["ring"], msg["slot"], step, streams, msg["spans"],
                                    msg["indices"], msg["sources"], None)
            batch = self._session.build_batch(self.layout, t, ring.mm, ring.address, None)
            del t
            if self.cacheable:
                self.views[key] = dict(batch)
        t0 = time.monotonic_ns()
        try:
            out = self._xform.call(self.transform, self.wants, batch, self.seed, step, self.rank,
                                   self.batch_size)
        except BaseException as e:
            del batch
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            self.chan.send({"t": "error", "step": step, "exc": _exc_payload(e), "tb": tb,
                            "what": f"{type(e).__name__}: {e}"})
            return
        t1 = time.monotonic_ns()
        del batch
        lo = min(a for a, b in msg["spans"]) if msg["spans"] else 0
        hi = max(b for a, b in msg["spans"]) if msg["spans"] else 0
        try:
            data, arrays, refs = _pwire.encode(
                out, self.small, (ring.address + lo, ring.address + hi, ring.address))
            t_enc = time.monotonic_ns()
        except _pwire.Unshippable as e:
            self.chan.send({"t": "unshippable", "step": step, "why": str(e)})
            return
        except BaseException as e:
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            self.chan.send({"t": "error", "step": step, "exc": _exc_payload(e), "tb": tb,
                            "what": f"the transform's output cannot be pickled: "
                                    f"{type(e).__name__}: {e}"})
            return
        offs, total = _pwire.layout(arrays)
        used = None
        new_fd = None
        new_size = None
        specs = []
        buf = None
        if arrays:
            bid = msg["buf"]
            buf = self.bufs.get(bid) if bid is not None else None
            if buf is not None and total <= buf.size:
                used = bid
            else:
                from ._arena import size_class
                size = size_class(total)
                if size > msg["grant"]:
                    size = -(-total // mmap.PAGESIZE) * mmap.PAGESIZE
                if size <= msg["grant"]:
                    new_fd = os.memfd_create("loaderx-arena", os.MFD_CLOEXEC)
                    os.ftruncate(new_fd, size)
                    buf = _Buf(new_fd, size, close=False)
                    used = msg["new_id"]
                    new_size = size
                    self.bufs[used] = buf
            if used is not None:
                specs = _pwire.specs(arrays, offs)
            else:       # no room in the arena: the arrays travel in the pickle
                data = pickle.dumps(out, protocol=5)
                total = 0
                refs = []
        inline = bool(arrays) and used is None
        # The answer is pickled before the output is written: after a write of
        # the output's size every cache is cold, and all that follows it is the
        # send. When the write began and when the message left ride on it as
        # its stamps.
        reply = self.chan.prepare(("done", step, data, specs, refs, used, new_size,
                                   total if used is not None else 0, inline,
                                   (t_recv, t0, t1, t_enc)))      # _pwire.DONE
        t_write = time.monotonic_ns()
        if used is not None:
            _pwire.write(arrays, offs, buf.mm)
        try:
            self.chan.send_prepared(reply, [new_fd] if new_fd is not None else (), (t_write,))
        finally:
            if new_fd is not None:
                os.close(new_fd)
        del out, arrays     # the output's memory goes back after the answer has left

def main():
    fd, ppid = int(sys.argv[1]), int(sys.argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch_parent(ppid)
    from ._pwire import Channel
    chan = Channel(socket.socket(fileno=fd))
    try:
        hello, _ = chan.recv()
    except EOFError:
        return 0
    try:
        if hello.get("main"):
            _import_main(hello["main"])
        w = Worker(chan, hello)
    except BaseException as e:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        try:
            chan.send({"t": "fatal", "exc": _exc_payload(e), "tb": tb,
                       "what": f"{type(e).__name__}: {e}"})
        except OSError:
            pass
        return 1
    try:
        chan.send({"t": "ready", "pid": os.getpid()})
        w.run()
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass                # the loader closed: nobody waits for what this was sending
    return 0
