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
"""

import collections
import concurrent.futures
import gc
import os
import threading

import numpy as np

from . import _conn, _errors, _shm, _store, _wire
from ._errors import (StaleError, ZrecordConnectionError, ZrecordError, ZrecordRuntimeError,
                      ZrecordTypeError, ZrecordValueError)
from .dataset import DenseDataset, MSDataset, RaggedDataset, _Dataset

__all__ = ["DataLoader", "SAMPLERS"]

SAMPLERS = ("sequential", "iid", "cyclic")
INDEX_KEY = "__index__"
_STATE_VERSION = 1


def _proto_error(text):
    return ZrecordRuntimeError(f"zrecordd broke the protocol: {text}", name="ZR_E_PROTO")


class _Ring:
    """One LOADER_OPEN: its handle, the rings it reads (its own, passed with the
    reply, and its group's, passed by RING events) and the (ring, slot)s this side
    holds."""

    def __init__(self, conn, loader, ring_id, mapped, slots, slot_bytes):
        self.conn = conn
        self.pid = os.getpid()
        self.loader = loader
        self.own = ring_id
        self.mapped = mapped              # the loader's own ring
        self.slots = slots                # most batches held at once, whatever rings
        self.slot_bytes = slot_bytes
        self.rings = {ring_id: (mapped, slots)}   # ring id -> (MappedBuffer, slots)
        self.held = set()                 # (ring, slot) announced to us, not yet released
        self.pending = collections.deque()  # (ring, slot) freed by the collector, to RELEASE
        self.closed = False

    # ---------------------------------------------------------- group rings
    def add_ring(self, msg, fds):
        """A RING event: maps another member's ring read-only and closes its fd."""
        try:
            if len(fds) != 1:
                raise _proto_error(f"a RING event with {len(fds)} descriptors (1 expected)")
            try:
                rid, slots = int(msg["ring"]), int(msg["slots"])
                slot_bytes, ring_bytes = int(msg["slot_bytes"]), int(msg["ring_bytes"])
            except (KeyError, TypeError, ValueError):
                raise _proto_error(f"a RING event without ring, slots, slot_bytes and "
                                   f"ring_bytes: {msg!r}") from None
            if rid in self.rings:
                raise _proto_error(f"RING {rid} was already passed to loader {self.loader}")
            if slots < 1 or slot_bytes != self.slot_bytes or ring_bytes != slots * slot_bytes:
                raise _proto_error(
                    f"RING {rid}: {slots} slots of {slot_bytes} bytes in {ring_bytes} bytes "
                    f"(the loader's slots are {self.slot_bytes} bytes)")
            size = os.fstat(fds[0]).st_size
            if size < ring_bytes:
                raise _proto_error(f"RING {rid}: the memfd holds {size} bytes, "
                                   f"ring_bytes is {ring_bytes}")
            fd = fds[0]
            fds = ()
            mapped = _shm.MappedBuffer(fd, ring_bytes)     # closes fd
        finally:
            for fd in fds:
                os.close(fd)
        self.rings[rid] = (mapped, slots)

    def close_ring(self, msg):
        """A RING_CLOSE event: forgets the ring. Arrays that still view it keep the
        mapping alive through their base; it is unmapped with the last of them."""
        rid = msg.get("ring")
        if rid == self.own or rid not in self.rings:
            raise _proto_error(f"RING_CLOSE of ring {rid}, which is not a ring passed by "
                               f"RING to loader {self.loader}")
        del self.rings[rid]

    def drop_rings(self):
        """The loader is closed: no ring is named again (views keep theirs mapped)."""
        self.rings = {}
        self.mapped = None

    # ---------------------------------------------------------- releases
    def slot_free(self, key):
        """Called when the last view of a (ring, slot) is gone (any thread, any time)."""
        if self.closed or os.getpid() != self.pid:
            return
        self.pending.append(key)
        self.flush(blocking=False)

    def flush(self, blocking=True):
        """Sends RELEASE for every freed slot. Non-blocking from finalizers: if the
        send lock is busy (maybe held by this very thread), the release waits for the
        next flush."""
        if not self.pending or self.closed or os.getpid() != self.pid:
            return
        lock = self.conn._send_lock
        if not lock.acquire(blocking):
            return
        try:
            while self.pending:
                key = self.pending.popleft()
                if self.closed:
                    break
                # no longer held once sent: the daemon may announce it again at once
                self.held.discard(key)
                try:
                    self.conn._fs.send({"kind": "release", "loader": self.loader,
                                        "ring": key[0], "slot": key[1]})
                except OSError as e:
                    self.closed = True
                    if self.conn._broken is None:
                        self.conn._broken = str(e)
                    break
        finally:
            lock.release()


class _SlotOwner:
    """Owns one announced (ring, slot): when it is garbage, the slot goes back."""

    __slots__ = ("ring", "key", "__weakref__")

    def __init__(self, ring, key):
        self.ring = ring
        self.key = key

    def __del__(self):
        try:
            self.ring.slot_free(self.key)
        except Exception:
            pass


class _View:
    """A numpy array interface over ring memory. Its base keeps the slot owner (the
    slot stays held) and the mmap (the memory stays mapped after RING_CLOSE or the
    loader's close)."""

    __slots__ = ("owner", "mm", "__array_interface__")

    def __init__(self, owner, mm, address, shape, typestr):
        self.owner = owner
        self.mm = mm
        self.__array_interface__ = {"data": (address, True), "shape": shape,
                                    "typestr": typestr, "version": 3}


class DataLoader:
    """An endless iterator of batches over index-aligned streams.

    ``streams``: ``{name: dataset}`` (DenseDataset / RaggedDataset; a Zrecord gives
    lists of uint8 arrays) or an MSDataset.
    ``batch_size`` records per stream per step; ``sampler`` one of ``'sequential'``,
    ``'iid'``, ``'cyclic'`` (without replacement, a fresh permutation each cycle);
    ``seed``; ``start_step`` the step of the first batch; ``rank`` / ``world_size``
    shard each global batch; ``prefetch`` ring slots the daemon fills ahead;
    ``transform`` a function batch -> anything, run on ``num_workers`` background
    threads so it overlaps the next gather (results still come in step order);
    ``num_workers=0`` runs it inline in ``next()`` (cheaper for trivial transforms).
    ``capacity``: ``{name: bytes}`` per-slot room for ragged streams (the daemon
    picks a default; a batch that does not fit reopens with twice the room).
    ``with_indices``: add the batch's record indices as ``batch['__index__']``.
    """

    def __init__(self, streams, batch_size=256, transform=None, sampler="cyclic", seed=0,
                 start_step=0, rank=0, world_size=1, prefetch=4, num_workers=2,
                 capacity=None, with_indices=False):
        if isinstance(streams, MSDataset):
            streams = streams.streams
        if not isinstance(streams, dict) or not streams:
            raise ZrecordTypeError("DataLoader takes a non-empty dict {name: dataset} or an MSDataset")
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
        self._ring = None
        self._pool = None
        self._futures = collections.deque()
        self._closed = False
        self._lock = threading.RLock()
        self.length = None
        self._step = int(start_step)
        self._open(self._step, None)

    # ------------------------------------------------------------ open/close
    def _open(self, step, length):
        conn = _conn.default()
        specs = []
        self._kinds = []
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
            self._kinds.append((ds.dtype, ds.item_shape if isinstance(ds, DenseDataset) else None,
                                getattr(ds, "ndim", None)))
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
        r = conn.request("loader_open", fields, context="DataLoader")
        fds = list(r["_fds"])
        try:
            if len(fds) != 1:
                raise _proto_error(f"a LOADER_OPEN reply with {len(fds)} descriptors")
            mapped = _shm.MappedBuffer(fds.pop(), int(r["ring_bytes"]))   # closes the fd
        except BaseException:
            for fd in fds:
                os.close(fd)
            try:
                conn.request("loader_close", {"loader": r["loader"]})
            except ZrecordError:
                pass
            conn.drop_events(r["loader"])
            raise
        # (a daemon from before shared rings names no ring: BATCH then names none either)
        self._ring = _Ring(conn, r["loader"], r.get("ring", 0), mapped, int(r["slots"]),
                           int(r["slot_bytes"]))
        self._regions = [(int(s["offset"]), int(s["capacity"])) for s in r["streams"]]
        self.length = int(r["length"])
        self._next_fetch = int(step)

    def _close_ring(self):
        ring, self._ring = self._ring, None
        if ring is None:
            return
        ring.closed = True
        ring.drop_rings()
        for f in self._futures:
            f.cancel()
        self._futures.clear()
        if ring.conn.pid == os.getpid() and not ring.conn.closed:
            try:
                ring.conn.request("loader_close", {"loader": ring.loader})
            except ZrecordError:
                pass
            ring.conn.drop_events(ring.loader)

    def close(self):
        """Closes the loader; batches still referenced stay readable."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._close_ring()
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
            ring = self._ring
            if not self._closed and ring is not None and ring.pid == os.getpid():
                self._closed = True
                ring.closed = True
                ring.drop_rings()
                ring.conn.mark_dead(ring.loader)
                ring.conn.request_nowait("loader_close", {"loader": ring.loader})
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
            self._close_ring()
            length = None if allow_length_change else state.get("length")
            step = int(state["step"])
            try:
                self._open(step, length)
            except StaleError as e:
                raise StaleError(
                    f"cannot resume at step {step}: the state was saved with {state.get('length')} "
                    f"records and the stores now hold a different number ({e.message}); the "
                    "batches would differ from the interrupted run's. Pass "
                    "allow_length_change=True to resume anyway", code=e.code, name=e.name) from None
            self._step = step

    # ------------------------------------------------------------ batches
    def __iter__(self):
        return self

    def _fetch(self):
        """The next raw batch from the ring (blocks until the daemon announces it)."""
        ring = self._ring
        if ring is None:
            raise ZrecordValueError(
                "the DataLoader is closed" if self._closed else
                "the DataLoader has no open loader (a load_state_dict() failed): call "
                "load_state_dict() again, e.g. with allow_length_change=True")
        if ring.pid != os.getpid() or ring.conn.closed:   # forked child: reconnect
            self._reopen_after_fork()
            ring = self._ring
        while True:
            ev = self._next_event(ring)
            if ev is None:
                return self._after_disconnect()
            msg, fds = ev
            kind = msg.get("kind")
            if kind == "ring":
                ring.add_ring(msg, fds)
                continue
            for fd in fds:
                os.close(fd)
            if kind == "ring_close":
                ring.close_ring(msg)
            elif kind == "loader_end":
                if _errors.is_code(msg, "ZR_E_SHUTDOWN"):
                    return self._after_disconnect()
                return self._loader_end(msg)
            elif kind == "batch":
                return self._batch(ring, msg)

    def _next_event(self, ring):
        """The loader's next event, waiting for it; None if the connection is gone."""
        ring.flush()
        ev = ring.conn.poll_event(ring.loader)
        if ev is not None:
            return ev
        if ring.closed or ring.conn._broken is not None:
            return None
        if len(ring.held) >= ring.slots:
            gc.collect()
            ring.flush()
            if ring.closed or ring.conn._broken is not None:
                return None
            if len(ring.held) >= ring.slots:
                raise ZrecordRuntimeError(
                    f"every ring slot of this DataLoader ({ring.slots}, prefetch={self.prefetch}) "
                    "is held by a batch that is still referenced, so the daemon cannot "
                    "deliver the next one (waiting would deadlock). Drop references to old "
                    "batches (copy what you keep: np.array(v)), or create the DataLoader "
                    "with a larger prefetch=")
        try:
            return ring.conn.wait_event(ring.loader)
        except ZrecordConnectionError:
            return None

    def _batch(self, ring, msg):
        """The batch a BATCH event announces: views into the (ring, slot) it names."""
        rid = msg.get("ring", ring.own)
        slot, step = int(msg["slot"]), int(msg["step"])
        if rid not in ring.rings:
            raise _proto_error(
                f"BATCH of step {step} names ring {rid}, which loader {ring.loader} does "
                "not know (neither its own nor passed by a RING event)")
        mapped, nslots = ring.rings[rid]
        if slot >= nslots:
            raise _proto_error(f"BATCH of step {step} names slot {slot} of ring {rid}, "
                               f"which has {nslots}")
        key = (rid, slot)
        if key in ring.held:
            raise _proto_error(f"BATCH of step {step} names slot {slot} of ring {rid}, "
                               "which this loader holds")
        if step != self._next_fetch:
            raise ZrecordRuntimeError(
                f"the daemon announced step {step}, expected {self._next_fetch}")
        streams = msg["streams"]
        spans = []                     # (lo, hi) ring bytes each stream's views cover
        for name, st, (dt, item_shape, ndim) in zip(self.names, streams, self._kinds):
            if item_shape is not None:
                lo = int(st["offset"])
                hi = lo + self.batch_size * int(np.prod(item_shape, dtype=np.int64)) * dt.itemsize
            else:
                offs = _wire.from_u64s(st.get("offsets"))
                lens = _wire.from_u64s(st.get("lengths"))
                lo = int(offs.min()) if len(offs) else int(st["offset"])
                hi = int((offs + lens).max()) if len(offs) else lo
            if not 0 <= lo <= hi <= mapped.nbytes:
                raise _proto_error(f"BATCH of step {step}: stream {name!r} lies past the "
                                   f"end of ring {rid}")
            spans.append((lo, hi))
        self._next_fetch += 1
        ring.held.add(key)
        owner = _SlotOwner(ring, key)
        base, mm = mapped.address, mapped.mm
        batch = {}
        for name, st, (dt, item_shape, ndim), (lo, hi) in zip(self.names, streams, self._kinds,
                                                               spans):
            if item_shape is not None:
                batch[name] = np.asarray(_View(owner, mm, base + lo,
                                               (self.batch_size,) + tuple(item_shape), dt.str))
            else:
                offs = _wire.from_u64s(st.get("offsets"))
                lens = _wire.from_u64s(st.get("lengths"))
                shapes = _wire.from_u64s(st.get("shapes")).reshape(-1, ndim)
                region = np.asarray(_View(owner, mm, base + lo, (hi - lo,), "|u1"))
                recs = []
                for j in range(len(offs)):
                    o = int(offs[j]) - lo
                    recs.append(region[o:o + int(lens[j])].view(dt).reshape(
                        tuple(int(x) for x in shapes[j])))
                batch[name] = recs
        if self.with_indices:
            batch[INDEX_KEY] = _wire.from_u64s(msg.get("indices")).copy()
        return batch

    def _after_disconnect(self):
        """The daemon went away (a restart): reconnect and reopen at the next step.
        Batches are a pure function of the step, so the run goes on exactly; a store
        whose length changed meanwhile is refused (StaleError)."""
        ring, self._ring = self._ring, None
        if ring is not None:
            ring.closed = True
            ring.drop_rings()
        conn = ring.conn if ring is not None else None
        if conn is not None and not conn.closed and conn.pid == os.getpid():
            conn.drop_events(ring.loader)    # a RING's descriptor among them is closed
        if conn is not None and conn is _conn._default and conn._broken is None:
            # a drain announced by LOADER_END: the connection closes next
            conn._broken = "the daemon is shutting down"
        _conn.reconnect()
        self._open(self._next_fetch, self.length)
        return self._fetch()

    def _loader_end(self, msg):
        step = int(msg.get("step", self._next_fetch))
        text = msg.get("message", "")
        if _errors.is_code(msg, "ZR_E_BUFFER"):
            # a ragged batch outgrew its region: reopen at that step with twice the room
            for name, (off, cap), (dt, item_shape, ndim) in zip(self.names, self._regions, self._kinds):
                if item_shape is None:
                    self._capacity[name] = max(self._capacity.get(name, 0), cap) * 2
            self._close_ring()
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
        ring, self._ring = self._ring, None
        if ring is not None:
            ring.closed = True
            ring.drop_rings()
        self._futures = collections.deque()
        self._pool = None
        self._lock = threading.RLock()
        self._open(self._step, None)

    def __next__(self):
        if self._ring is not None and self._ring.pid != os.getpid():
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
        ring = self._ring
        while ring is not None and len(self._futures) < self.num_workers:
            ring.flush()
            if len(ring.held) >= ring.slots:
                break
            try:
                raw = self._fetch()
            except Exception as e:   # reported when its turn comes, in step order
                f = concurrent.futures.Future()
                f.set_exception(e)
                self._futures.append(f)
                break
            self._futures.append(self._pool.submit(self.transform, raw))
            ring = self._ring
