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
import time
import warnings

import numpy as np

from . import _conn, _errors, _store
from ._errors import (StaleError, ZrecordConnectionError, ZrecordRuntimeError, ZrecordTypeError,
                      ZrecordValueError)
from ._session import INDEX_KEY, Layout, LoaderSession
from .dataset import DenseDataset, MSDataset, RaggedDataset, _Dataset

__all__ = ["DataLoader", "INDEX_KEY", "LoaderStallWarning", "SAMPLERS", "MODES"]

SAMPLERS = ("sequential", "iid", "cyclic", "cyclic-lx157")
#: loaderx 1.5.7's ``mode`` numbers (``Sampler.Mode``) as zrecord's samplers: its
#: cyclic is ``cyclic-lx157`` bit for bit; its iid is not reproduced (zrecord's
#: seeks in O(1)).
MODES = {0: "sequential", 1: "iid", 2: "cyclic-lx157"}
_STATE_VERSION = 1
# warn_stalls: the share of time the consumer may wait before it is told (the
# daemon's own data-bound rule), how often this process looks, and how often
# it may say so.
_STALL_RATIO = 0.05
_STALL_CHECK_S = 10.0
_STALL_WARN_S = 60.0


class LoaderStallWarning(UserWarning):
    """The training loop waits for data: the loader is its bottleneck
    (``DataLoader(..., warn_stalls=True)``)."""


def _pick(what, lx_name, lx_value, name, value, default):
    """The value of a parameter given by loaderx 1.5.7's keyword or zrecord's, or
    both when they agree."""
    if lx_value is not None and value is not None and lx_value != value:
        raise ZrecordValueError(
            f"DataLoader: {lx_name}={lx_value!r} and {name}={value!r} disagree; give one "
            f"(they are the same {what})")
    return value if value is not None else (lx_value if lx_value is not None else default)


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
    ``warn_stalls``: warn (:class:`LoaderStallWarning`, at most once a minute)
    when the daemon finds the loop data-bound, naming the stage to blame.
    Where loaderx 1.5.7's keyword and zrecord's both name a parameter, either may
    be given, or both if they agree.

    :meth:`stats` tells whether the loop waits for data and why (the daemon's
    telemetry: docs/TELEMETRY.md).
    """

    def __init__(self, streams, num_workers=4, batch_size=256, prefetch_size=None, mode=None,
                 seed=42, transform=None, *, sampler=None, prefetch=None, start_step=0, rank=0,
                 world_size=1, capacity=None, with_indices=False, warn_stalls=False):
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
        self._session = None
        self._pool = None
        self._futures = collections.deque()
        self._closed = False
        self._lock = threading.RLock()
        self.length = None
        self._step = int(start_step)
        # what this process measures of its own waits (stats()'s "local", warn_stalls)
        self._opened_ns = time.monotonic_ns()
        self._blocked_ns = 0      # waiting for the daemon's events, in total
        self._wait_ns = 0         # of that, within next()
        self._next_ns = 0         # time in next(), transforms and views included
        self._returned = 0
        self.warn_stalls = bool(warn_stalls)
        self._stall_mark = (self._opened_ns, 0)     # (when, wait_ns then)
        self._stall_warned_ns = None
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
        layout = Layout(tuple(self.names), tuple(kinds), self.batch_size, self.with_indices)
        self._session = LoaderSession.open(conn, fields, layout)
        self.length = self._session.length

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

    def state_dict(self):
        """What resumes this loader exactly (a small dict of ints and strings)."""
        return {"version": _STATE_VERSION, "step": self._step, "sampler": self.sampler,
                "seed": self.seed, "batch_size": self.batch_size, "rank": self.rank,
                "world_size": self.world_size, "length": self.length,
                "streams": list(self.names)}

    def load_state_dict(self, state, allow_length_change=False):
        """Continues from a state_dict(): the next batch is that of state['step'].

        Refuses (StaleError) when the stores' length differs from the state's,
        since the batches would differ; ``allow_length_change=True`` resumes anyway.
        """
        for k in ("sampler", "seed", "batch_size", "rank", "world_size"):
            if k in state and state[k] != getattr(self, k):
                raise ZrecordValueError(
                    f"load_state_dict: the state has {k}={state[k]!r}, this loader "
                    f"{k}={getattr(self, k)!r}; build the DataLoader with the same parameters")
        with self._lock:
            if self._closed:
                raise ZrecordValueError("load_state_dict on a closed DataLoader")
            self._close_session()
            length = None if allow_length_change else state.get("length")
            step = int(state["step"])
            try:
                self._open(step, length)
            except StaleError as e:
                raise StaleError(
                    f"cannot resume at step {step}: the state was saved with {state.get('length')} "
                    f"records and the stores now hold a different number ({e.message}); the "
                    "batches would differ from the interrupted run's. Pass "
                    "allow_length_change=True to resume anyway", code=e.zr_code, name=e.name) from None
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
        t0 = time.monotonic_ns()
        try:
            return session.conn.wait_event(session.loader)
        except ZrecordConnectionError:
            return None
        finally:
            self._blocked_ns += time.monotonic_ns() - t0

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
        t0, b0 = time.monotonic_ns(), self._blocked_ns
        b = self._next_batch()
        self._waited(self._blocked_ns - b0, time.monotonic_ns() - t0)
        return b

    def _waited(self, blocked, total):
        """The loop spent `total` ns in next() for the batch just returned, `blocked`
        of them waiting for the daemon. The wait is told to the daemon with a
        RELEASE (PROTOCOL.md); both are kept here for stats() and warn_stalls."""
        self._wait_ns += blocked
        self._next_ns += total
        self._returned += 1
        session = self._session
        if session is not None:
            session.waits.append(blocked)
        if self.warn_stalls:
            self._check_stall()

    def _check_stall(self):
        now = time.monotonic_ns()
        since, waited = self._stall_mark
        if now - since < _STALL_CHECK_S * 1e9:
            return
        self._stall_mark = (now, self._wait_ns)
        if (self._wait_ns - waited) <= _STALL_RATIO * (now - since):
            return
        if self._stall_warned_ns is not None and now - self._stall_warned_ns < _STALL_WARN_S * 1e9:
            return
        try:
            st = self.stats()
        except _errors.ZrecordError:
            return
        if st.get("verdict") != "data-bound":
            return
        self._stall_warned_ns = now
        warnings.warn(LoaderStallWarning(
            f"the training loop waits for data {100 * st['wait_fraction']['10s']:.0f} % of its "
            f"time ({st['batches_per_s']['10s']:.1f} batches/s over 10 s); the loader's time "
            f"goes mostly to {st['stage']} (loader.stats() has the figures; "
            "docs/TELEMETRY.md says what helps)"), stacklevel=3)

    def stats(self):
        """Is the loop waiting for data, and why: the daemon's telemetry of this
        loader (docs/TELEMETRY.md), as a dict.

        ``verdict``: ``'data-bound'`` (the loop waited more than 5 % of the last
        10 s), ``'consumer-bound'``, ``'balanced'``, ``'idle'`` or ``'unknown'``;
        ``stage``: where the loader's batch time went (``'io'``, ``'decode'``,
        ``'copy'``, ``'contention'`` with other loaders, or ``'none'``);
        ``wait_fraction``, ``batches_per_s``, ``mib_per_s``: over ``'1s'``,
        ``'10s'`` and ``'60s'``; ``wait_p50_s``/``wait_p99_s`` (the loop's wait
        per batch), ``ready_p50_s``/``ready_p99_s`` (how long a ready batch
        waited for the loop), ``gather_p50_s``/``gather_p99_s``; ``stages_s``:
        seconds of the last 10 s by stage (lookup, read, decode, copy, io_wait,
        queue); ``waited_s``: the waits the daemon was told of since open;
        ``cache_hit_ratio`` (None without lookups), ``device_bytes``,
        ``prefetch_depth``, ``step``, ``batches``; ``local``: what this process
        measured itself (``wait_s``: blocked on the daemon within ``next()``, as
        told to the daemon; ``next_s``: all the time in ``next()``, transforms and
        building the arrays included; ``elapsed_s``; ``batches``).
        """
        with self._lock:
            session = self._session
            if session is None:
                raise ZrecordValueError("stats() of a closed DataLoader")
            r = session.conn.request("status", {"loader": session.loader}, context="stats()")
        entries = [e for e in r.get("per_loader", ()) if e.get("loader") == session.loader]
        if not entries or "telemetry" not in entries[0]:
            raise ZrecordRuntimeError(
                f"this zrecordd ({session.conn.daemon}) keeps no telemetry of its loaders; "
                "update the daemon")
        return _stats_of(entries[0], self)

    def _next_batch(self):
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


_WINDOWS = (("1s", "w1"), ("10s", "w10"), ("60s", "w60"))
_STAGES = ("lookup", "read", "decode", "copy", "io_wait", "queue")


def _stats_of(entry, loader):
    """stats()'s dict from a STATUS per_loader entry with telemetry."""
    tel = entry["telemetry"]

    def per_s(span, key, scale=1.0):
        return span[key] * 1e9 / span["span_ns"] / scale if span["span_ns"] else 0.0

    def frac(span):
        return min(1.0, span["wait_ns"] / span["span_ns"]) if span["span_ns"] else 0.0

    w10, total = tel["w10"], tel["total"]
    looked = total["hits"] + total["misses"]
    now = time.monotonic_ns()
    return {
        "verdict": tel["verdict"],
        "stage": tel["stage"],
        "reports": bool(tel["reports"]),
        "wait_fraction": {name: frac(tel[key]) for name, key in _WINDOWS},
        "batches_per_s": {name: per_s(tel[key], "batches") for name, key in _WINDOWS},
        "mib_per_s": {name: per_s(tel[key], "bytes", 2 ** 20) for name, key in _WINDOWS},
        "wait_p50_s": tel["wait_p50_ns"] / 1e9,
        "wait_p99_s": tel["wait_p99_ns"] / 1e9,
        "ready_p50_s": tel["ready_p50_ns"] / 1e9,
        "ready_p99_s": tel["ready_p99_ns"] / 1e9,
        "gather_p50_s": tel["fill_p50_ns"] / 1e9,
        "gather_p99_s": tel["fill_p99_ns"] / 1e9,
        "stages_s": {st: tel["group"][st + "_ns"] / 1e9 for st in _STAGES},
        "window_s": w10["span_ns"] / 1e9,
        "waited_s": total["wait_ns"] / 1e9,
        "cache_hit_ratio": total["hits"] / looked if looked else None,
        "device_bytes": total["device_bytes"],
        "prefetch_depth": tel["prefetch_depth"],
        "step": entry["step"],
        "batches": total["batches"],
        "local": {"wait_s": loader._wait_ns / 1e9,
                  "next_s": loader._next_ns / 1e9,
                  "elapsed_s": (now - loader._opened_ns) / 1e9,
                  "batches": loader._returned},
    }
