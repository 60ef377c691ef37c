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
import struct
import sys
import threading
import time
import traceback

__all__ = ["main", "IMPORTING_MAIN"]

# True while a worker imports the training script for a transform defined in
# it: a DataLoader made then is the script running again (dataloader.py says so).
IMPORTING_MAIN = False
_ndarray = None     # numpy.ndarray, once numpy is imported (Worker)


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
    __slots__ = ("mm", "address", "key")

    def __init__(self, fd, nbytes, key=None):
        import numpy as np
        self.key = key
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


# DONE_FAST's last five fields: when the transform began and ended, encoding
# ended, the write began, the answer left
_STAMPS = struct.Struct("<5Q")
_STAMPS_AT = 48


def _guess(sid, offs, total, out):
    """What the next output of form `sid` is expected to be (_matches()): (sid,
    offsets, bytes, keys or None for an array, dtypes, shapes)."""
    import numpy as np
    if type(out) is np.ndarray:
        return sid, offs, total, None, (out.dtype,), (out.shape,)
    return (sid, offs, total, tuple(out), tuple(v.dtype for v in out.values()),
            tuple(v.shape for v in out.values()))


def _matches(out, keys, dtypes, shapes):
    """True if `out` has the form _guess() expects: the same type, keys, dtypes
    (the same objects) and shapes, arrays that own their memory (none a view of
    the batch's slot)."""
    nd = _ndarray
    if keys is None:
        return (type(out) is nd and out.base is None and out.dtype is dtypes[0] and
                out.shape == shapes[0])
    if type(out) is not dict or len(out) != len(keys):
        return False
    for (k, v), kk, d, sh in zip(out.items(), keys, dtypes, shapes):
        if k != kk or type(v) is not nd or v.base is not None or v.dtype is not d or \
                v.shape != sh:
            return False
    return True


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
        import numpy
        self._np = numpy
        self.tmpl = {}          # template id -> (a slot's arrays, its _Ring, lo, hi)
        self.forms = {}         # an output's form (_pwire.form()) -> (id, offsets, bytes)
        self.guess = None       # the next output's form, expected (_guess())
        global _ndarray
        _ndarray = numpy.ndarray

    def run(self):
        TASK = self._pwire.TASK
        while True:
            try:
                msg, fds = self.chan.recv()
            except EOFError:
                return
            if type(msg) is bytes:          # a TASK: a slot whose views were made before
                t_recv = time.monotonic_ns()
                step, tid, bid, grant, new_id = TASK.unpack(msg)
                views, ring, lo, hi = self.tmpl[tid]
                batch = {name: a.view() for name, a in views.items()}
                self.run_task(step, batch, ring, lo, hi, bid if bid >= 0 else None, grant,
                              new_id, t_recv)
            elif msg["t"] == "task":
                self.task(msg, fds)
            elif msg["t"] == "stop":
                return

    def task(self, msg, fds):
        t_recv = time.monotonic_ns()
        for what, fd in zip(msg["fds"], fds):
            if what[0] == "ring":
                self.rings[what[1]] = _Ring(fd, what[2], what[1])
            else:
                self.bufs[what[1]] = _Buf(fd, what[2])
        if msg["drop_rings"]:
            for key in msg["drop_rings"]:
                self.rings.pop(key, None)
            self.tmpl = {k: v for k, v in self.tmpl.items() if self.rings.get(v[1].key) is v[1]}
        for bid in msg["drop_bufs"]:
            self.bufs.pop(bid, None)
        step = msg["step"]
        ring = self.rings[msg["ring"]]
        # (no per-stream maps come for dense streams alone: they lie by the spans)
        streams = msg["streams"] or [{}] * len(self.layout.names)
        t = self._session.Taken(msg["ring"], msg["slot"], step, streams, msg["spans"],
                                msg["indices"], msg["sources"], None)
        batch = self._session.build_batch(self.layout, t, ring.mm, ring.address, None)
        del t
        spans = msg["spans"]
        lo = min(a for a, b in spans) if spans else 0
        hi = max(b for a, b in spans) if spans else 0
        if msg.get("tid") is not None:
            # A slot's views, made once: a batch of dense streams alone lies the
            # same way in its slot at every step, so the TASKs after name these
            # and get new views of them (a transform may change an array's shape
            # in place).
            self.tmpl[msg["tid"]] = (dict(batch), ring, lo, hi)
        self.run_task(step, batch, ring, lo, hi, msg["buf"], msg["grant"], msg["new_id"], t_recv)

    def run_task(self, step, batch, ring, lo, hi, bid, grant, new_id, t_recv):
        _pwire = self._pwire
        buf = self.bufs.get(bid) if bid is not None else None
        # The answer expected: the output of the same form as the last one, into
        # the buffer assigned. It is made now, on the caches the intake left
        # warm; after the transform (which may leave them cold) it takes a look
        # at the output's types, dtypes and shapes, the write, and a stamp.
        guess = self.guess
        reply = None
        if guess is not None and buf is not None and guess[2] <= buf.size:
            reply = bytearray(_pwire.DONE_FAST.pack(step, guess[0], bid, 0, guess[2], t_recv,
                                                    0, 0, 0, 0, 0))
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
        if reply is not None and _matches(out, guess[3], guess[4], guess[5]):
            sid, offs = guess[0], guess[1]
            arrays = (out,) if guess[3] is None else tuple(out.values())
        else:
            # An output of a form sent before (an array, a dict of arrays, of the
            # same dtypes and shapes) into the buffer assigned: a DONE_FAST too.
            reply = None
            f = _pwire.form(out, self.small, (ring.address + lo, ring.address + hi,
                                              ring.address))
            known = self.forms.get(f[0]) if f is not None and buf is not None else None
            if known is not None and known[2] <= buf.size:
                sid, offs, total = known
                arrays = f[1]
                reply = bytearray(_pwire.DONE_FAST.pack(step, sid, bid, 0, total, t_recv, 0, 0,
                                                        0, 0, 0))
                self.guess = _guess(sid, offs, total, out)
        if reply is not None:
            np, mm = self._np, buf.mm
            t_enc = t_write = time.monotonic_ns()
            for a, off in zip(arrays, offs):
                np.copyto(np.ndarray(a.shape, a.dtype, buffer=mm, offset=off), a, casting="no")
            _STAMPS.pack_into(reply, _STAMPS_AT, t0, t1, t_enc, t_write, time.monotonic_ns())
            self.chan.send_raw(reply)
            del out, arrays
            return
        bounds = (ring.address + lo, ring.address + hi, ring.address)
        try:
            data, arrays, refs = _pwire.encode(out, self.small, bounds)
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
        if arrays:
            if buf is not None and total <= buf.size:
                used = bid
            else:
                from ._arena import size_class
                size = size_class(total)
                if size > grant:
                    size = -(-total // mmap.PAGESIZE) * mmap.PAGESIZE
                if size <= grant:
                    new_fd = os.memfd_create("loaderx-arena", os.MFD_CLOEXEC)
                    os.ftruncate(new_fd, size)
                    buf = _Buf(new_fd, size, close=False)
                    used = new_id
                    new_size = size
                    self.bufs[used] = buf
            if used is not None:
                specs = _pwire.specs(arrays, offs)
            else:       # no room in the arena: the arrays travel in the pickle
                data = pickle.dumps(out, protocol=5)
                total = 0
                refs = []
        inline = bool(arrays) and used is None
        sid = None
        if f is not None and used is not None and f[0] not in self.forms:
            # the form's first output: its answer describes it, under an id
            # the answers of its next outputs name
            sid = len(self.forms)
            self.forms[f[0]] = (sid, offs, total)
            self.guess = _guess(sid, offs, total, out)
        # The answer is pickled before the output is written: after a write of
        # the output's size every cache is cold, and all that follows it is the
        # send. When the write began and when the message left ride on it as
        # its stamps.
        reply = self.chan.prepare(("done", step, data, specs, refs, used, new_size,
                                   total if used is not None else 0, inline,
                                   (t_recv, t0, t1, t_enc), sid))      # _pwire.DONE
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
