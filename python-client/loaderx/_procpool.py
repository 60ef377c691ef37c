"""A DataLoader's worker processes: the loader's side.

The loader (dataloader.py) takes each BATCH from its session as a ``Taken``
(the slot stays held) and submits it here; a worker maps the slot's ring
read-only (its memfd crossed once to each worker that needs it) and runs the
transform on views of it: the input is never copied or pickled. The worker
writes the arrays of the output once into the arena (``_arena``) and reports
the task done; only then is the Taken dropped, so the slot goes back to the
daemon after the worker is done with it, never before. An output array that is
a view of the batch itself comes back as that view of the ring (mapped here
once, ``_ring_map``) and holds the slot, as a batch does, until it is garbage. Results wait here by
step and the loader takes them in step order, whichever worker finished first.

Each worker has at most :data:`DEPTH` tasks (one running, the next waiting in
its socket), handed to the least busy. A worker that dies (a signal, the OOM
killer) is started again and its tasks are sent again, still holding their
slots; the task it was running counts a death, and a step whose worker died
:data:`ATTEMPTS` times fails with an error naming the step and the signal. A
worker that cannot start (the transform does not unpickle there) breaks the
pool with the worker's traceback. :meth:`kill` (Ctrl-C in the loader) stops
every worker at once; the tasks wait for the next start.

Workers are fresh interpreters (``python -c``, the loader's ``sys.path``),
started together; a worker holds no connection to the daemon (the loader's
session owns every slot, so a worker that dies leaves nothing in the daemon,
and the daemon counts one client, not k + 1). Everything here runs on the
thread in the loader's ``next()``, under its lock.
"""

import collections
import heapq
import json
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import time

import numpy as np

from . import _arena, _pwire
from ._errors import ZrecordRuntimeError
from ._shm import MappedBuffer, View

__all__ = ["ProcessPool", "WorkerError", "TransformError", "DEPTH", "ATTEMPTS"]

DEPTH = 2           # tasks a worker holds: one running, the next already sent
ATTEMPTS = 2        # deaths of the worker running a step before the step fails
_START_FAILURES = 2  # workers that die before they are ready, in a row: the pool breaks
_REAP_S = 10.0      # how long a worker whose channel closed may take to exit
_STOP_S = 1.0       # close(): how long workers may take to exit before SIGKILL
_RECENT = 256       # batches whose hop, write and transform times stats() takes medians of

_BOOT = ("import json, os, sys; sys.path[:] = json.loads(os.environ.pop('LOADERX_WORKER_PATH')); "
         "from loaderx._procworker import main; sys.exit(main())")


class WorkerError(ZrecordRuntimeError):
    """A worker process died running a step, or could not start."""


class TransformError(ZrecordRuntimeError):
    """The worker's traceback of a transform that raised, as the cause of the
    exception it raised."""


def _death_text(rc):
    if rc is None:
        return "did not exit"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"was killed by {name}" + (" (the OOM killer sends it when memory runs out)"
                                          if -rc == signal.SIGKILL else "")
    return f"exited with code {rc}"


def remote_exception(msg, where):
    """The exception a worker reported, with its traceback as the cause and
    `where` (the step, the worker) as a note."""
    exc = None
    if msg.get("exc") is not None:
        try:
            exc = pickle.loads(msg["exc"])
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):
        exc = TransformError(msg.get("what", "the transform failed"))
    cause = TransformError(f"\n\nthe worker's traceback ({where}):\n\n{msg.get('tb', '')}")
    exc.__cause__ = cause
    try:
        exc.add_note(f"raised by the transform {where}")
    except AttributeError:
        pass
    return exc


class _Task:
    __slots__ = ("step", "taken", "key", "attempts", "buf", "grant", "new_id", "worker",
                 "t_sent", "t_hop", "idle", "pre")

    def __init__(self, taken, key):
        self.step = taken.step
        self.taken = taken
        self.key = key
        self.attempts = 0
        self.buf = None
        self.grant = 0
        self.new_id = 0
        self.worker = None
        self.t_sent = 0
        self.t_hop = 0
        self.pre = None         # (form id, arrays over its buffer) made when it was sent
        self.idle = False

    def __lt__(self, other):
        return self.step < other.step


def _ignore(key):
    pass


def _cancel(pre):
    """Arrays made ahead for an answer that came otherwise: their garbage must
    not free the buffer (it may hold another result by then)."""
    if pre is not None and pre[1]:
        pre[1][0].base.owner.gone = _ignore


class _Form:
    """An output's form a worker described once (_pwire.form()): its data and
    specs, and per arena buffer the arrays' interfaces over it, made once."""
    __slots__ = ("data", "specs", "ifaces")

    def __init__(self, data, specs):
        self.data = data
        self.specs = specs
        self.ifaces = {}


class _Worker:
    __slots__ = ("slot", "proc", "chan", "pid", "tasks", "rings", "bufs", "ready", "dead",
                 "tids", "forms", "form")

    def __init__(self, slot):
        self.slot = slot
        self.proc = None
        self.chan = None
        self.pid = None
        self.tasks = collections.deque()
        self.rings = set()
        self.bufs = set()
        self.ready = False
        self.dead = False
        self.tids = {}          # (ring key, slot, spans) -> the id of the views it made
        self.forms = {}         # form id -> _Form
        self.form = None        # the form of its last output (its next one, likely)


class ProcessPool:
    def __init__(self, choice, k, layout, seed, rank, budget):
        self.choice = choice
        self.k = k
        self.layout = layout
        # a worker reads a BATCH's per-stream maps only for ragged streams
        # (their records' offsets and shapes); dense ones lie by the spans
        packed = layout.packed or (None,) * len(layout.names)
        self.ragged = any(pk is None and kind[1] is None for kind, pk in zip(layout.kinds, packed))
        # a slot's views are the same at every step (a worker makes them once)
        self.cacheable = not self.ragged and not layout.with_indices and not layout.with_sources
        self._tids = 0
        self.seed, self.rank = seed, rank
        self.window = DEPTH * k
        self.arena = _arena.Arena(budget)
        self.workers = []
        self.rings = {}            # (session serial, ring id) -> (fd, nbytes)
        self.maps = {}             # ring key -> MappedBuffer, for outputs that view it
        self.live = set()          # ring keys the loader's session still has
        self.results = {}          # step -> ("ok", obj) | ("error", exc) | ("unshippable", why, task)
        self.redo = []             # tasks to send again (a heap by step)
        self.broken = None
        self.closed = False
        self.started = 0
        self.restarts = 0
        self._start_failures = 0
        # per batch, summed (stats()): the hop's parts and the work
        self.n = 0
        self.hop_ns = 0            # the dispatch of the task being sent, then summed
        self.recent = collections.deque(maxlen=_RECENT)   # (hop, write, transform) ns
        self.write_ns = 0
        self.transform_ns = 0
        self.pickled = 0           # bytes of outputs pickled into messages
        self.task_bytes = 0        # bytes of the tasks sent (the batches' descriptions)
        self._waiting = 0          # when poll() began to wait
        self._pid = os.getpid()
        self.start()

    # ------------------------------------------------------------ workers
    def start(self):
        """Starts every worker slot that has none (all, the first time); none
        once the pool is broken or closed."""
        if self.broken is not None or self.closed:
            return
        if not self.workers:
            self.workers = [_Worker(i) for i in range(self.k)]
        for i, w in enumerate(self.workers):
            if w.proc is None or w.dead:
                self.workers[i] = self._spawn(i)

    def _spawn(self, slot):
        w = _Worker(slot)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            env = dict(os.environ, LOADERX_WORKER_PATH=json.dumps(
                [p if p else os.getcwd() for p in sys.path]))
            w.proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(theirs.fileno()),
                                       str(os.getpid())], pass_fds=[theirs.fileno()],
                                      stdin=subprocess.DEVNULL, env=env)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        w.chan = _pwire.Channel(mine, nonblocking=True)
        self.started += 1
        hello = {"t": "hello", "transform": self.choice.payload, "main": self.choice.main,
                 "layout": self.layout, "seed": self.seed, "rank": self.rank,
                 "small": _pwire.SMALL}
        try:
            w.chan.send(hello)
        except (OSError, EOFError):
            pass            # it died already: poll() finds out
        return w

    def alive(self):
        return [w for w in self.workers if w.proc is not None and not w.dead]

    def note_rings(self, session):
        """The rings the loader's session holds now: new ones are kept (a copy
        of the descriptor) for the workers; those it no longer has are dropped
        once no task reads them."""
        live = set()
        for rid, fd in session.ring_fds.items():
            key = (session.serial, rid)
            live.add(key)
            if key not in self.rings:
                self.rings[key] = (os.dup(fd), session.rings[rid][0].nbytes)
        self.live = live
        if len(self.rings) > len(live):
            used = {t.key for w in self.workers for t in w.tasks} | {t.key for t in self.redo}
            for key in [k for k in self.rings if k not in live and k not in used]:
                os.close(self.rings.pop(key)[0])
                self.maps.pop(key, None)

    # ------------------------------------------------------------ tasks
    def room(self):
        """True if a worker can take a task now."""
        return self.broken is None and not self.closed and any(
            len(w.tasks) < DEPTH for w in self.alive())

    def inflight(self):
        return sum(len(w.tasks) for w in self.workers) + len(self.redo)

    def submit(self, taken, serial):
        """Sends the batch of a Taken to a worker (room() must be true)."""
        self._send(_Task(taken, (serial, taken.ring)))

    def resend(self):
        """Sends the tasks of dead workers again, while there is room."""
        while self.redo and self.room():
            self._send(heapq.heappop(self.redo))

    def _send(self, t):
        t0 = time.monotonic_ns()
        if self.k == 1:     # room() found it alive with room
            w = self.workers[0]
        else:
            w = min((w for w in self.alive() if len(w.tasks) < DEPTH),
                    key=lambda w: (len(w.tasks), w.slot))
        buf, grant = self.arena.assign(self.window)
        t.buf, t.grant, t.new_id = buf, grant, self.arena.new_id()
        names, fds = [], []
        if t.key not in w.rings:
            fd, nbytes = self.rings[t.key]
            names.append(("ring", t.key, nbytes))
            fds.append(fd)
            w.rings.add(t.key)
        if buf is not None and buf.id not in w.bufs:
            names.append(("buf", buf.id, buf.size))
            fds.append(buf.fd)
            w.bufs.add(buf.id)
        drop_rings = [k for k in w.rings if k not in self.rings]
        drop_bufs = [b for b in w.bufs if b not in self.arena.bufs]
        if drop_rings:
            w.rings.difference_update(drop_rings)
            w.tids = {k: v for k, v in w.tids.items() if k[0] in w.rings}
        if drop_bufs:
            w.bufs.difference_update(drop_bufs)
        tk = t.taken
        tid = tkey = None
        if self.cacheable:
            tkey = (t.key, tk.slot, tuple(tk.spans))
            tid = w.tids.get(tkey)
        if buf is not None and w.form is not None:
            # the arrays of the answer expected (the worker's last output's form,
            # in this buffer), made now: the answer finds them ready
            form = w.forms[w.form]
            t.pre = (w.form, self.arena.views(buf, form.specs, form.ifaces))
        t.idle = w.ready and not w.tasks    # its wait for the task is the hop's
        t.worker = w
        w.tasks.append(t)
        sent = w.chan.sent_bytes
        try:
            if tid is not None and not names and not drop_rings and not drop_bufs:
                # the steady state: a struct naming the views the worker made
                w.chan.send_raw(_pwire.TASK.pack(t.step, tid, -1 if buf is None else buf.id,
                                                 grant, t.new_id))
            else:
                if tkey is not None and tid is None:
                    self._tids += 1
                    tid = w.tids[tkey] = self._tids
                else:
                    tid = None
                w.chan.send({"t": "task", "step": t.step, "ring": t.key, "slot": tk.slot,
                             "streams": tk.streams if self.ragged else None, "spans": tk.spans,
                             "indices": tk.indices, "sources": tk.sources,
                             "buf": None if buf is None else buf.id, "grant": grant,
                             "new_id": t.new_id, "fds": names, "drop_rings": drop_rings,
                             "drop_bufs": drop_bufs, "tid": tid}, fds)
        except (OSError, EOFError):
            self._death(w, drain=True)
            return
        t.t_sent = time.monotonic_ns()
        t.t_hop = t.t_sent - t0
        self.task_bytes += w.chan.sent_bytes - sent

    # ------------------------------------------------------------ results
    def take(self, step):
        """The result of `step` if it is here: ("ok", obj), ("error", exc) or
        ("unshippable", why, task); else None."""
        return self.results.pop(step, None)

    def poll(self, timeout=0.0, also=()):
        """Reads what the workers sent, waiting up to `timeout` seconds (None:
        until something comes) for the first message; returns the descriptors of
        `also` that became readable. At most one message of each worker a call
        (the callers call again while they wait for more): a message read is
        one system call, and one worker with nothing else to watch is waited
        for in its recvmsg(), not in a select() first."""
        ws = self.alive()
        ready = [w for w in ws if w.chan.ready()]
        got = []
        self._waiting = time.monotonic_ns()   # a result that came before was not waited for
        if not ready:
            if timeout is None and not also and len(ws) == 1:
                self._read(ws[0], True)
                return got
            try:
                r, _, _ = select.select([w.chan for w in ws] + list(also), [], [], timeout)
            except InterruptedError:
                r = []
            got = [x for x in r if not isinstance(x, _pwire.Channel)]
            ready = [w for w in ws if w.chan in r]
        for w in ready:
            self._read(w, False)
        return got

    def _read(self, w, wait):
        """Reads and handles one message of worker w (wait: until one comes)."""
        try:
            got = w.chan.recv() if wait else w.chan.try_recv()
        except EOFError:
            self._death(w)
            return
        except OSError as e:
            self._death(w, why=str(e))
            return
        if got is not None:
            self._handle(w, *got)

    def _unassign(self, t):
        """Task t will not report: its buffer and grant go back."""
        _cancel(t.pre)
        t.pre = None
        self.arena.unassign(t.buf, t.grant)

    def _done_fast(self, w, data, fds):
        """A DONE_FAST: the answer of a task whose output has a form described
        before, written into the buffer assigned."""
        for fd in fds:
            os.close(fd)
        (step, sid, used, _, nbytes, t_recv, t0, t1, t_enc, t_write,
         t2) = _pwire.DONE_FAST.unpack(data)
        t = w.tasks.popleft() if w.tasks else None
        pre = None
        if t is not None:
            pre, t.pre = t.pre, None
        form = w.forms.get(sid)
        if t is None or t.step != step or form is None or t.buf is None or t.buf.id != used:
            _cancel(pre)
            self.broken = WorkerError(f"worker {w.slot} answered for step {step} (form {sid}, "
                                      f"buffer {used}), expected {None if t is None else t.step}")
            return
        t_got = time.monotonic_ns()
        arena = self.arena
        buf = arena.settle(t.buf, t.grant, t.new_id, None, None, used, nbytes)
        w.form = sid
        if pre is not None and pre[0] == sid:
            views = pre[1]
        else:
            _cancel(pre)
            views = arena.views(buf, form.specs, form.ifaces)
        self.results[step] = ("ok", views[0] if form.data[0] == "a" else
                              dict(zip(form.data[1], views)))
        del views
        self._account(w, t, t_recv, t0, t1, t_write, t2, t_got)
        t.taken = None              # the slot goes back to the daemon

    def _account(self, w, t, t_recv, t0, t1, t_write, t2, t_got):
        """Counts an answered task's hop, write and transform times. The hop's
        parts: sending the task, the worker's wake-up (when it waited for it),
        its intake (views of the ring), encoding the output (with its answer,
        before the write), the way back (the loader's wake-up when it waited,
        and its recvmsg()), reading the answer, making the output's arrays."""
        t_arrived = w.chan.arrived
        t_done = time.monotonic_ns()
        parts = (t.t_hop, max(0, t_recv - t.t_sent) if t.idle else 0, t0 - t_recv,
                 t_write - t1, max(0, t_arrived - max(t2, self._waiting)),
                 t_got - t_arrived, t_done - t_got)
        hop = sum(parts)
        self.recent.append((hop, t2 - t_write, t1 - t0) + parts)
        self.hop_ns += hop
        self.write_ns += t2 - t_write
        self.transform_ns += t1 - t0
        self.n += 1

    def _handle(self, w, msg, fds):
        if type(msg) is bytes:          # a DONE_FAST
            self._done_fast(w, msg, fds)
            return
        if type(msg) is tuple:          # a "done" (_pwire.DONE)
            msg = dict(zip(_pwire.DONE, msg))
        kind = msg.get("t")
        if kind == "ready":
            w.ready = True
            w.pid = msg.get("pid")
            self._start_failures = 0
            return
        if kind == "fatal":
            for fd in fds:
                os.close(fd)
            self.broken = remote_exception(msg, "when a worker process started (unpickling it)")
            return
        t = w.tasks.popleft() if w.tasks else None
        if t is None or t.step != msg.get("step"):
            for fd in fds:
                os.close(fd)
            self.broken = WorkerError(f"worker {w.slot} answered for step {msg.get('step')}, "
                                      f"expected {None if t is None else t.step}")
            return
        t_got = time.monotonic_ns()
        _cancel(t.pre)
        t.pre = None
        if kind == "done":
            new_fd = fds[0] if fds else None
            for fd in fds[1:]:
                os.close(fd)
            buf = self.arena.settle(t.buf, t.grant, t.new_id, new_fd, msg["new_size"],
                                    msg["buf"], msg["nbytes"])
            if new_fd is not None:
                w.bufs.add(t.new_id)
            if msg["sid"] is not None:      # its form: DONE_FASTs name it after
                w.forms[msg["sid"]] = _Form(msg["data"], msg["specs"])
                w.form = msg["sid"]
            views = self.arena.views(buf, msg["specs"]) if buf is not None else []
            refs = []
            if msg["refs"]:          # views of the batch's own slot: it stays held
                m = self._ring_map(t.key)
                refs = [np.asarray(View(t.taken.owner, m.mm, m.address + off, shape, dtype,
                                        strides=strides))
                        for off, dtype, shape, strides in msg["refs"]]
            obj = _pwire.decode(msg["data"], views, refs)
            del views, refs
            if type(msg["data"]) is bytes:     # else described in the answer, not pickled
                self.pickled += len(msg["data"])
            if msg["inline"]:
                self.arena.inline += 1
            self.results[t.step] = ("ok", obj)
            t_recv, t0, t1, _ = msg["times"]
            t_write, t2 = w.chan.stamps
            self._account(w, t, t_recv, t0, t1, t_write, t2, t_got)
        else:
            for fd in fds:
                os.close(fd)
            self._unassign(t)
            if kind == "error":
                self.results[t.step] = ("error", remote_exception(
                    msg, f"of step {t.step} in worker process {w.slot} (pid {w.proc.pid})"))
            elif kind == "unshippable":
                self.results[t.step] = ("unshippable", msg["why"], t)
                return              # keeps its slot: the loader runs it again itself
            else:
                self.broken = WorkerError(f"worker {w.slot} sent a message of kind {kind!r}")
                return
        t.taken = None              # the slot goes back to the daemon

    def _death(self, w, why=None, drain=False):
        """Worker w is gone: its tasks go to the next one; the step it was
        running counts a death (a worker that was not ready ran none). With
        `drain`, what it sent before it went is read first (its last results, or
        why it could not start)."""
        if w.dead:
            return
        while drain:
            try:
                msg, fds = w.chan.recv()
            except (EOFError, OSError):
                break
            self._handle(w, msg, fds)
        w.dead = True
        w.chan.close()
        try:
            rc = w.proc.wait(timeout=_REAP_S)
        except subprocess.TimeoutExpired:
            w.proc.kill()
            rc = w.proc.wait()
        tasks = list(w.tasks)
        w.tasks.clear()
        what = f"worker process {w.slot} (pid {w.proc.pid}) {_death_text(rc)}"
        if why:
            what += f" ({why})"
        if not w.ready:
            self._start_failures += 1
        if self._start_failures >= _START_FAILURES and self.broken is None:
            self.broken = WorkerError(f"the DataLoader's worker processes exit as they start: "
                                      f"{what}; their standard error says why")
        if tasks and w.ready:
            first = tasks[0]
            first.attempts += 1
            if first.attempts >= ATTEMPTS:
                self._unassign(first)
                first.buf = None
                self.results[first.step] = ("error", WorkerError(
                    f"the transform of step {first.step} killed its worker process "
                    f"{first.attempts} times: the last time, {what}. The step is not tried "
                    "again; the loader goes on with the next step"))
                first.taken = None
                tasks = tasks[1:]
        for t in tasks:
            self._unassign(t)
            t.buf, t.grant = None, 0
            heapq.heappush(self.redo, t)
        if not self.closed and self.broken is None:
            self.restarts += 1
            self.workers[w.slot] = self._spawn(w.slot)

    def drain(self):
        """Waits until every task sent has its result (those of dead workers sent
        again): the workers read no slot after it."""
        while self.broken is None and not self.closed:
            self.start()
            self.resend()
            if not self.redo and not any(w.tasks for w in self.workers):
                return
            self.poll(None)

    def reset(self):
        """Forgets every task and result (their slots go back), stopping the
        workers at once if they have tasks; start() starts them again."""
        if self.redo or any(w.tasks for w in self.workers):
            self.kill()
        for t in self.redo:
            t.taken = None
        self.redo = []
        self.results = {}

    def ring_view(self, key):
        """A mapping of ring `key` in this process (a MappedBuffer)."""
        fd, nbytes = self.rings[key]
        return MappedBuffer(os.dup(fd), nbytes)

    def _ring_map(self, key):
        """Ring `key` mapped here, once, for outputs that are views of it (arrays
        over it keep the mapping after the pool lets it go)."""
        m = self.maps.get(key)
        if m is None:
            m = self.maps[key] = self.ring_view(key)
        return m

    # ------------------------------------------------------------ stopping
    def kill(self):
        """Stops every worker at once (SIGKILL); their tasks wait, with their
        slots, for start() to run them again."""
        for w in self.workers:
            if w.proc is not None and not w.dead:
                w.dead = True
                try:
                    w.proc.kill()
                except OSError:
                    pass
                w.chan.close()
                for t in w.tasks:
                    self._unassign(t)
                    t.buf, t.grant = None, 0
                    heapq.heappush(self.redo, t)
                w.tasks.clear()
        for w in self.workers:
            if w.proc is not None:
                try:
                    w.proc.wait(timeout=_REAP_S)
                except subprocess.TimeoutExpired:
                    pass

    def close(self):
        """Stops the workers (their channels close; any still running after
        _STOP_S is killed), drops every task (their slots go back) and the
        arena's free buffers; results already made stay valid."""
        if self.closed:
            return
        self.closed = True
        running = []
        for w in self.workers:
            if w.proc is not None and not w.dead:
                w.dead = True
                w.chan.close()
                running.append(w.proc)
            w.tasks.clear()
        self.redo = []
        deadline = time.monotonic() + _STOP_S
        for p in running:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for fd, _ in self.rings.values():
            os.close(fd)
        self.rings = {}
        self.maps = {}
        self.results = {}
        self.arena.close()

    def abandon(self):
        """close() for finalizers and forked children: kills without waiting
        (a child only closes its copies of the channels)."""
        self.closed = True
        mine = os.getpid() == self._pid
        for w in self.workers:
            if w.chan is not None:
                w.chan.close()
            if mine and w.proc is not None and not w.dead:
                try:
                    w.proc.kill()
                except OSError:
                    pass
        for fd, _ in self.rings.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.rings = {}
        try:
            self.arena.close()
        except Exception:
            pass

    def stats(self):
        def median(i):
            v = sorted(r[i] for r in self.recent)
            return v[len(v) // 2] / 1e9 if v else None
        n = max(1, self.n)
        return {"count": self.k, "pids": [w.proc.pid for w in self.workers if not w.dead],
                "started": self.started, "restarts": self.restarts, "batches": self.n,
                "hop_s": median(0), "write_s": median(1), "transform_s": median(2),
                "hop_parts_s": {name: median(3 + i) for i, name in enumerate(
                    ("send", "wake", "intake", "encode", "back", "recv", "decode"))},
                "hop_mean_s": self.hop_ns / n / 1e9, "write_mean_s": self.write_ns / n / 1e9,
                "transform_mean_s": self.transform_ns / n / 1e9,
                "pickled_bytes": self.pickled, "task_bytes": self.task_bytes,
                "arena": self.arena.stats()}
