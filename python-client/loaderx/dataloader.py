"""DataLoader: an endless, step-based loader served by zrecordd.

The daemon gathers the batch of each step straight into a shared-memory ring the
loader maps read-only (PROTOCOL.md section 10), ahead of the consumer. A batch is a
dict ``{name: values}``: a dense stream's value is a read-only ``(batch_size,
*item_shape)`` array that is a view into the ring (no copy on this side), a ragged
stream's is a list of read-only arrays, also views. A ring slot goes back to the
daemon when the last view into it is garbage, never earlier; copy what you keep
for long (``np.array(v)``).

Loaders with the same streams and parameters, in this process or any other, form a
group in the daemon: each step's batch is gathered once, into a slot of any
member's ring, and every member reads it there. So a loader maps the rings of the
other members too (each comes in a RING event and goes with RING_CLOSE); a batch
is named by (ring, slot), and that pair is what the loader holds and releases. A
loader never holds more than ``prefetch`` batches, wherever they lie.

Batch ``k`` of a loader opened at ``start_step`` is the batch of step
``start_step + k``, a pure function of (content, sampler, seed, batch_size, rank,
world_size, step), so ``state_dict()`` / ``load_state_dict()`` resume exactly.

This module holds the loader's policy: parameters, resume, reconnecting after a
daemon restart or a fork, transforms on worker threads. The protocol side of one
open loader (its rings, the slots it holds, batches as views) is a
``LoaderSession`` (_session.py).
"""

import collections
import concurrent.futures
import gc
import os
import threading

import numpy as np

from . import _conn, _errors, _store
from ._errors import (StaleError, ZrecordConnectionError, ZrecordRuntimeError, ZrecordTypeError,
                      ZrecordValueError)
from ._session import INDEX_KEY, Layout, LoaderSession
from .dataset import DenseDataset, MSDataset, RaggedDataset, _Dataset

__all__ = ["DataLoader", "INDEX_KEY", "SAMPLERS", "MODES"]

SAMPLERS = ("sequential", "iid", "cyclic", "cyclic-lx157")
#: loaderx 1.5.7's ``mode`` numbers (``Sampler.Mode``) as zrecord's samplers: its
#: cyclic is ``cyclic-lx157`` bit for bit; its iid is not reproduced (zrecord's
#: seeks in O(1)).
MODES = {0: "sequential", 1: "iid", 2: "cyclic-lx157"}
_STATE_VERSION = 1


def _pick(what, lx_name, lx_value, name, value, default):
    """The value of a parameter given by loaderx 1.5.7's keyword or zrecord's, or
    both when they agree."""
    if lx_value is not None and value is not None and lx_value != value:
        raise ZrecordValueError(
            f"DataLoader: {lx_name}={lx_value!r} and {name}={value!r} disagree; give one "
            f"(they are the same {what})")
    return value if value is not None else (lx_value if lx_value is not None else default)


def _check_fingerprint(fp):
    if fp is not None and (isinstance(fp, bool) or not isinstance(fp, (int, np.integer))
                           or not 0 <= fp < 2**64):
        raise ZrecordValueError(f"fingerprint must be an int of 64 bits (a loader's "
                                f"fingerprint), got {fp!r}")


class DataLoader:
    """An endless iterator of batches over index-aligned streams.

    The signature is loaderx 1.5.7's, ``DataLoader(streams, num_workers=4,
    batch_size=256, prefetch_size=4, mode=2, seed=42, transform=identity)``, and
    zrecord's keywords follow it.

    ``streams``: ``{name: dataset}`` (any mapping: DenseDataset / RaggedDataset; a
    Zrecord gives lists of uint8 arrays) or an MSDataset.
    ``batch_size`` records per stream per step. The sampler: ``mode`` (loaderx
    1.5.7's 0 sequential, 1 iid, 2 cyclic, :data:`MODES`) or ``sampler``, one of
    ``'sequential'``, ``'iid'``, ``'cyclic'`` (zrecord's permutation, cheaper) and
    ``'cyclic-lx157'`` (loaderx 1.5.7's, the default, as ``mode=2``: a run started
    there resumes here on the same records); ``seed`` (42); ``start_step`` the step
    of the first batch; ``rank`` / ``world_size`` shard each global batch;
    ``prefetch_size`` or ``prefetch``: ring slots the daemon fills ahead;
    ``transform`` a function batch -> anything, run on ``num_workers`` background
    threads so it overlaps the next gather (results still come in step order);
    ``num_workers=0`` runs it inline in ``next()`` (cheaper for trivial transforms).
    ``capacity``: ``{name: bytes}`` per-slot room for ragged streams (the daemon
    picks a default; a batch that does not fit reopens with twice the room).
    ``with_indices``: add the batch's record indices as ``batch['__index__']``.
    ``fingerprint``: the streams' fingerprint this loader expects (an int, another
    loader's :attr:`fingerprint`, e.g. rank 0's on another node): a daemon whose
    stores hold other records refuses the open (:class:`StaleError`). Without it the
    loader takes the fingerprint of its first open, and a reopen (after a daemon
    restart) over other records is refused the same way.
    Where loaderx 1.5.7's keyword and zrecord's both name a parameter, either may
    be given, or both if they agree.
    """

    def __init__(self, streams, num_workers=4, batch_size=256, prefetch_size=None, mode=None,
                 seed=42, transform=None, *, sampler=None, prefetch=None, start_step=0, rank=0,
                 world_size=1, capacity=None, with_indices=False, fingerprint=None):
        if mode is not None and (isinstance(mode, bool) or mode not in MODES):
            raise ZrecordValueError(
                f"unknown mode {mode!r}: expected 0 (sequential), 1 (iid) or 2 (cyclic)",
                name="ZR_E_SAMPLER")
        if mode is not None and sampler is not None and MODES[mode] != sampler:
            raise ZrecordValueError(
                f"DataLoader: mode={mode} ({MODES[mode]}) and sampler={sampler!r} disagree; "
                "give one (they name the same sampler)", name="ZR_E_SAMPLER")
        sampler = sampler or MODES[2 if mode is None else mode]
        prefetch = _pick("prefetch depth", "prefetch_size", prefetch_size, "prefetch", prefetch, 4)
        if isinstance(streams, MSDataset):
            streams = streams.streams
        try:
            streams = dict(streams)
        except (TypeError, ValueError):
            raise ZrecordTypeError("DataLoader takes a mapping {name: dataset} or an MSDataset, "
                                   f"not {type(streams).__name__}") from None
        if not streams:
            raise ZrecordValueError("need at least one stream")
        from .zrecord import Zrecord
        streams = {k: (v._ds if isinstance(v, Zrecord) else v) for k, v in streams.items()}
        for name, ds in streams.items():
            if not isinstance(ds, _Dataset):
                raise ZrecordTypeError(
                    f"stream {name!r}: expected a DenseDataset or RaggedDataset, got "
                    f"{type(ds).__name__}")
        if sampler not in SAMPLERS:
            raise ZrecordValueError(
                f"unknown sampler {sampler!r}: expected one of {', '.join(SAMPLERS)}",
                name="ZR_E_SAMPLER")
        for what, v in (("batch_size", batch_size), ("seed", seed), ("start_step", start_step),
                        ("rank", rank), ("world_size", world_size), ("prefetch", prefetch)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ZrecordTypeError(f"{what} must be an integer, got {type(v).__name__}")
            if v < 0:
                raise ZrecordValueError(f"{what} must be >= 0, got {v}")
        if batch_size < 1:
            raise ZrecordValueError("batch_size must be >= 1", name="ZR_E_SAMPLER")
        if world_size < 1 or rank >= world_size:
            raise ZrecordValueError(
                f"rank must be in 0..world_size-1: rank {rank}, world_size {world_size}",
                name="ZR_E_SAMPLER")
        if prefetch < 1:
            raise ZrecordValueError("prefetch must be >= 1")
        _check_fingerprint(fingerprint)
        self.streams = dict(streams)
        self.names = list(streams)
        self.batch_size = int(batch_size)
        self.sampler = sampler
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.prefetch = int(prefetch)
        self.transform = transform
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) \
                or num_workers < 0:
            raise ZrecordTypeError(f"num_workers must be an integer >= 0, got {num_workers!r}")
        self.num_workers = int(num_workers) if transform is not None else 0
        self.with_indices = bool(with_indices)
        self._capacity = {k: int(v) for k, v in (capacity or {}).items()}
        self._fingerprint = None if fingerprint is None else int(fingerprint)
        self._session = None
        self._pool = None
        self._futures = collections.deque()
        self._closed = False
        self._lock = threading.RLock()
        self.length = None
        self._step = int(start_step)
        self._open(self._step, None)

    def __len__(self):
        raise TypeError("Eternal loader has no length.")

    def __bool__(self):             # an endless loader is never empty (not len() == 0)
        return True

    # ------------------------------------------------------------ open/close
    def _open(self, step, length):
        conn = _conn.default()
        specs = []
        kinds = []
        for name in self.names:
            ds = self.streams[name]
            h = ds._h.h()
            if ds._h.conn is not conn:     # opened on another connection: reopen here
                ds._h = _store.Handle(ds.path)
                h = ds._h.h()
                conn = ds._h.conn
            spec = {"handle": h}
            if isinstance(ds, RaggedDataset) and name in self._capacity:
                spec["capacity"] = self._capacity[name]
            specs.append(spec)
            kinds.append((ds.dtype, ds.item_shape if isinstance(ds, DenseDataset) else None,
                          getattr(ds, "_ndim", None)))
        if not conn.has_feature("loader"):
            raise ZrecordRuntimeError(
                f"this zrecordd ({conn.daemon}) does not serve loaders (no \"loader\" feature "
                "in its HELLO reply); update the daemon")
        fields = {"streams": specs, "sampler": self.sampler, "batch_size": self.batch_size,
                  "seed": self.seed, "start_step": int(step), "rank": self.rank,
                  "world_size": self.world_size, "prefetch": self.prefetch}
        if length is not None:
            fields["length"] = int(length)
        if self.with_indices:
            fields["indices"] = True
        if self._fingerprint is not None:
            fields["fingerprint"] = self._fingerprint
        layout = Layout(tuple(self.names), tuple(kinds), self.batch_size, self.with_indices)
        self._session = LoaderSession.open(conn, fields, layout)
        self.length = self._session.length
        if self._fingerprint is None:
            self._fingerprint = self._session.fingerprint

    def _close_session(self):
        session, self._session = self._session, None
        if session is None:
            return
        session.detach()
        for f in self._futures:
            f.cancel()
        self._futures.clear()
        session.close()

    def close(self):
        """Closes the loader; batches still referenced stay readable."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._close_session()
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Dropped without close(): stop releases and close the loader without
        # blocking (a finalizer may run inside this thread's own request).
        try:
            session = self._session
            if not self._closed and session is not None and session.pid == os.getpid():
                self._closed = True
                session.abandon()
                if self._pool is not None:
                    self._pool.shutdown(wait=False, cancel_futures=True)
        except Exception:
            pass

    # ------------------------------------------------------------ state
    @property
    def step(self):
        """The step of the next batch this loader returns."""
        return self._step

    @property
    def fingerprint(self):
        """The streams' fingerprint (an int; PROTOCOL.md section 10): equal on every
        node whose daemon serves the same records; None from a daemon without it."""
        return self._fingerprint

    def state_dict(self):
        """What resumes this loader exactly (a small dict of ints and strings)."""
        return {"version": _STATE_VERSION, "step": self._step, "sampler": self.sampler,
                "seed": self.seed, "batch_size": self.batch_size, "rank": self.rank,
                "world_size": self.world_size, "length": self.length,
                "fingerprint": self._fingerprint, "streams": list(self.names)}

    def load_state_dict(self, state, allow_length_change=False):
        """Continues from a state_dict(): the next batch is that of state['step'].

        The state may come from another rank, and from a run of another world size
        with the same global batch (``batch_size × world_size``): the steps' global
        batches do not depend on how they are sharded, so a run resumed on another
        number of nodes goes on with the same sequence. Refuses (StaleError) when the
        stores' length or fingerprint differs from the state's, since the batches
        would differ; ``allow_length_change=True`` resumes anyway.
        """
        for k in ("sampler", "seed"):
            if k in state and state[k] != getattr(self, k):
                raise ZrecordValueError(
                    f"load_state_dict: the state has {k}={state[k]!r}, this loader "
                    f"{k}={getattr(self, k)!r}; build the DataLoader with the same parameters")
        if "batch_size" in state:
            theirs = int(state["batch_size"]) * int(state.get("world_size", 1))
            mine = self.batch_size * self.world_size
            if theirs != mine:
                raise ZrecordValueError(
                    f"load_state_dict: the state's global batch is {theirs} (batch_size "
                    f"{state['batch_size']} x world_size {state.get('world_size', 1)}), this "
                    f"loader's {mine} ({self.batch_size} x {self.world_size}); keep "
                    "batch_size x world_size to resume the same sequence")
        with self._lock:
            if self._closed:
                raise ZrecordValueError("load_state_dict on a closed DataLoader")
            self._close_session()
            length = None if allow_length_change else state.get("length")
            fingerprint = None if allow_length_change else state.get("fingerprint")
            _check_fingerprint(fingerprint)
            step = int(state["step"])
            pinned, self._fingerprint = self._fingerprint, fingerprint
            try:
                self._open(step, length)
            except StaleError as e:
                self._fingerprint = pinned
                what = (f"other records than the state's (fingerprint {fingerprint:016x})"
                        if "fingerprint" in e.message else
                        f"{state.get('length')} records, and the stores now hold a different "
                        "number")
                raise StaleError(
                    f"cannot resume at step {step}: the state was saved over {what} "
                    f"({e.message}); the batches would differ from the interrupted run's. "
                    "Pass allow_length_change=True to resume anyway", code=e.zr_code,
                    name=e.name) from None
            self._step = step

    # ------------------------------------------------------------ batches
    def __iter__(self):
        return self

    def _fetch(self):
        """The next raw batch from the ring (blocks until the daemon announces it)."""
        session = self._session
        if session is None:
            raise ZrecordValueError(
                "the DataLoader is closed" if self._closed else
                "the DataLoader has no open loader (a load_state_dict() failed): call "
                "load_state_dict() again, e.g. with allow_length_change=True")
        if session.pid != os.getpid() or session.conn.closed:   # forked child: reconnect
            self._reopen_after_fork()
            session = self._session
        while True:
            ev = self._next_event(session)
            if ev is None:
                return self._after_disconnect()
            msg, fds = ev
            kind = msg.get("kind")
            if kind == "ring":
                session.add_ring(msg, fds)
                continue
            for fd in fds:
                os.close(fd)
            if kind == "ring_close":
                session.close_ring(msg)
            elif kind == "loader_end":
                if _errors.is_code(msg, "ZR_E_SHUTDOWN"):
                    return self._after_disconnect()
                return self._loader_end(msg)
            elif kind == "batch":
                return session.batch(msg)

    def _next_event(self, session):
        """The loader's next event, waiting for it; None if the connection is gone."""
        session.flush()
        ev = session.conn.poll_event(session.loader)
        if ev is not None:
            return ev
        if session.closed or session.conn.broken is not None:
            return None
        if len(session.held) >= session.slots:
            gc.collect()
            session.flush()
            if session.closed or session.conn.broken is not None:
                return None
            if len(session.held) >= session.slots:
                raise ZrecordRuntimeError(
                    f"every ring slot of this DataLoader ({session.slots}, "
                    f"prefetch={self.prefetch}) is held by a batch that is still referenced, so "
                    "the daemon cannot deliver the next one (waiting would deadlock). Drop "
                    "references to old batches (copy what you keep: np.array(v)), or create "
                    "the DataLoader with a larger prefetch=")
        try:
            return session.conn.wait_event(session.loader)
        except ZrecordConnectionError:
            return None

    def _after_disconnect(self):
        """The daemon went away (a restart): reconnect and reopen at the next step.
        Batches are a pure function of the step, so the run goes on exactly; a store
        whose length changed meanwhile is refused (StaleError)."""
        session, self._session = self._session, None
        session.detach()
        conn = session.conn
        if not conn.closed and conn.pid == os.getpid():
            conn.drop_events(session.loader)    # a RING's descriptor among them is closed
        if conn is _conn._default:
            # a drain announced by LOADER_END: the connection closes next
            conn.mark_broken("the daemon is shutting down")
        _conn.reconnect()
        self._open(session.next_step, self.length)
        return self._fetch()

    def _loader_end(self, msg):
        session = self._session
        step = int(msg.get("step", session.next_step))
        text = msg.get("message", "")
        if _errors.is_code(msg, "ZR_E_BUFFER"):
            # a ragged batch outgrew its region: reopen at that step with twice the room
            for name, (_, cap), (_, item_shape, _) in zip(self.names, session.regions,
                                                          session.layout.kinds):
                if item_shape is None:
                    self._capacity[name] = max(self._capacity.get(name, 0), cap) * 2
            self._close_session()
            self._open(step, self.length)
            return self._fetch()
        if _errors.is_code(msg, "ZR_E_STALE"):
            raise StaleError(
                f"a store of this DataLoader was appended to, deleted from or compacted; the "
                f"loader stopped before step {step} ({text}). To go on over the changed data: "
                "loader.load_state_dict(loader.state_dict(), allow_length_change=True)",
                name="ZR_E_STALE")
        raise _errors.from_reply(msg, context=f"the DataLoader stopped at step {step}")

    def _reopen_after_fork(self):
        # The parent's ring, pool threads and pipeline are not this process's: open
        # a loader of our own on the child's connection, at the step not yet returned.
        session, self._session = self._session, None
        if session is not None:
            session.detach()
        self._futures = collections.deque()
        self._pool = None
        self._lock = threading.RLock()
        self._open(self._step, None)

    def __next__(self):
        if self._session is not None and self._session.pid != os.getpid():
            self._reopen_after_fork()
        with self._lock:
            if self._closed:
                raise StopIteration
            if self.transform is None or self.num_workers == 0:
                b = self._fetch()
                if self.transform is not None:      # num_workers=0: inline
                    b = self.transform(b)
                self._step += 1
                return b
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.num_workers, thread_name_prefix="loaderx-transform")
            if not self._futures:
                self._futures.append(self._pool.submit(self.transform, self._fetch()))
            fut = self._futures.popleft()
            self._fill()
            out = fut.result()
            self._step += 1
            return out

    def _fill(self):
        """Starts transforms of the next batches while slots are free."""
        session = self._session
        while session is not None and len(self._futures) < self.num_workers:
            session.flush()
            if len(session.held) >= session.slots:
                break
            try:
                raw = self._fetch()
            except Exception as e:   # reported when its turn comes, in step order
                f = concurrent.futures.Future()
                f.set_exception(e)
                self._futures.append(f)
                break
            self._futures.append(self._pool.submit(self.transform, raw))
            session = self._session
