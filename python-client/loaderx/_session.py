"""A loader session: one LOADER_OPEN of the daemon and what this side holds of it.

A session owns the loader's number on its connection, the rings it reads (its own,
passed with the LOADER_OPEN reply, and those of the other members of its group,
passed by RING events and taken back by RING_CLOSE: PROTOCOL.md section 10), the
(ring, slot)s the daemon announced that this side still holds, and the releases
waiting to be sent. It turns a BATCH event into read-only numpy views of ring
memory (no copy): a slot goes back to the daemon (RELEASE) when the last view
into it is garbage, never earlier, and a ring stays mapped while a view of it
lives, whatever RING_CLOSE or the session's close say.

A session may also keep each ring's descriptor (``keep_fds``), for worker
processes that map the rings themselves (``_procpool``): then :meth:`take`
hands out a BATCH as a :class:`Taken`, whose owner holds the slot until it is
dropped, and :func:`build_batch` makes the views wherever the ring is mapped.

DataLoader (dataloader.py) runs sessions: one per open, reopened after a daemon
restart, a fork, a resume or a batch that outgrew its region.
"""

import collections
import itertools
import math
import os
import time
from typing import NamedTuple

import numpy as np

from . import _conn, _ctlring, _shm, _store, _wire
from ._errors import ZrecordError, ZrecordRuntimeError

__all__ = ["INDEX_KEY", "SOURCE_KEY", "Layout", "LoaderSession", "Taken", "build_batch",
           "proto_error"]

# The batch key of the records' indices (a loader opened with indices).
INDEX_KEY = "__index__"
# The batch key of a mixture's records' sources (a loader opened with provenance).
SOURCE_KEY = "__source__"


def proto_error(text):
    return ZrecordRuntimeError(f"zrecordd broke the protocol: {text}", name="ZR_E_PROTO")


class Layout(NamedTuple):
    """What a batch of a loader holds."""
    names: tuple        # stream names, in the order of LOADER_OPEN's streams
    kinds: tuple        # per stream: (dtype, item_shape or None if ragged, ndim)
    batch_size: int
    with_indices: bool
    sources: int = 0    # a mixture's number of sources (0: one set of streams)
    with_sources: bool = False  # the batch carries each record's source
    packed: tuple = ()  # per stream: None, or (seq_len, segments, positions) region offsets


# The keys beside a packed stream's tokens (PROTOCOL.md section 10, "Packed streams").
SEGMENTS_SUFFIX = "_segment_ids"
POSITIONS_SUFFIX = "_positions"


def packed_offsets(batch_size, seq_len, itemsize):
    """Where a packed stream's segment ids and positions start in its region, and
    the region's bytes: each array at the next multiple of 64 (PROTOCOL.md)."""
    def align(v):
        return (v + 63) // 64 * 64
    toks, segs = align(batch_size * seq_len * itemsize), align(batch_size * seq_len * 4)
    return toks, toks + segs, toks + 2 * segs


class Taken(NamedTuple):
    """A BATCH taken by this side: what makes its views, in any process that maps
    the ring. The slot is held while `owner` lives."""
    ring: int
    slot: int
    step: int
    streams: list       # BATCH's per-stream maps
    spans: list         # per stream: (lo, hi) ring bytes its views cover
    indices: bytes      # BATCH's `indices` (u64s), or None
    sources: object     # a mixture's records' sources (uint8 array), or None
    owner: object       # an _shm.Owner: slot_free(key) when it is garbage


_serials = itertools.count(1)

# A session that may hold releases back (lazy_release) sends them once half its
# slots are freed, or before it waits for the daemon, when its slots are at
# most this large: the daemon fills such a slot of a warm loader as it reads
# the RELEASE (its `loop-fill`, 256 KiB), in tens of microseconds, so the
# release's lead is worth less than the system calls on both sides it saves
# (bench/README.md, "Small batches").
LAZY_RELEASE_MAX = 256 << 10


class LoaderSession:
    """One LOADER_OPEN: its number, the rings it reads and the (ring, slot)s this
    side holds."""

    def __init__(self, conn, loader, ring_id, mapped, slots, slot_bytes, layout=None,
                 next_step=0, stride=1):
        self.conn = conn
        self.serial = next(_serials)      # tells this session's rings from a later one's
        self.pid = os.getpid()
        self.loader = loader
        self.own = ring_id
        self.mapped = mapped              # the loader's own ring
        self.slots = slots                # most batches held at once, whatever rings
        self.slot_bytes = slot_bytes
        self.layout = layout
        self.next_step = next_step        # the step the next BATCH must announce
        self.stride = stride              # between the steps it announces
        self.rings = {ring_id: (mapped, slots)}   # ring id -> (MappedBuffer, slots)
        self.ring_fds = {}                # ring id -> its memfd (kept with keep_fds)
        self.held = set()                 # (ring, slot) announced to us, not yet released
        self.pending = collections.deque()  # (ring, slot) freed by the collector, to RELEASE
        # telemetry, told to the daemon with RELEASE (PROTOCOL.md): when each held
        # batch was taken (CLOCK_MONOTONIC), and the consumer's waits, one per
        # batch returned, each riding on the next RELEASE
        self.taken = {}                   # (ring, slot) -> ns
        self.waits = collections.deque()
        self.closed = False
        # releases held back until half the slots are freed (set_lazy_release())
        self.release_batch = 1
        # per stream: bytes a dense stream's batch covers, else None; and the
        # views' templates of dense streams (_shm.ViewTemplate), else None
        self.dense_bytes = []
        self.templates = None
        if layout is not None:
            self.dense_bytes = [
                None if pk is not None or item_shape is None else
                layout.batch_size * math.prod(int(d) for d in item_shape) * dt.itemsize
                for (dt, item_shape, _), pk in zip(
                    layout.kinds, layout.packed or (None,) * len(layout.names))]
            self.templates = view_templates(layout)
        # a batch whose streams are all dense and carry nothing else (the common
        # small batch): take() checks only each stream's offset
        self.all_dense = (layout is not None and not layout.with_sources and
                          all(nb is not None for nb in self.dense_bytes))
        self.has_images = True            # BATCH may carry `skipped` (open() knows)
        # the loader's control memory (_ctlring.CtlRing), if the daemon gave one:
        # batches announced there, releases written there (take_ctl(), slot_free())
        self.ctl = None
        self.length = None                # the reply's fields (open())
        self.fingerprint = None           # the streams' (None from a daemon without it)
        self.regions = []                 # per stream: (offset, capacity) in a slot
        self.images_skipped = 0           # image records served as zeros (BATCH `skipped`)
        self.source_lengths = []          # a mixture's: per source

    @classmethod
    def open(cls, conn, fields, layout, keep_fds=False):
        """Sends LOADER_OPEN and maps the ring its reply passes; a failure closes
        the loader again. (A daemon from before shared rings names no ring: BATCH
        then names none either.) With `keep_fds`, each ring's descriptor is kept
        (ring_fds) until RING_CLOSE or the session's end."""
        r = conn.request("loader_open", fields, context="DataLoader")
        fds = list(r["_fds"])
        kept = None
        ctl = None
        try:
            want = 2 if fields.get("ctlring") and "ctlring" in r else 1
            if len(fds) != want:
                raise proto_error(f"a LOADER_OPEN reply with {len(fds)} descriptors "
                                  f"({want} expected)")
            if want == 2:
                c = r["ctlring"]
                try:
                    ctl = _ctlring.CtlRing(fds.pop(), int(c["bytes"]), int(c["entries"]))
                except (ValueError, KeyError, TypeError, OSError) as e:
                    raise proto_error(f"a LOADER_OPEN reply's control memory: {e}") from None
            if keep_fds:
                kept = os.dup(fds[0])
            mapped = _shm.MappedBuffer(fds.pop(), int(r["ring_bytes"]))   # closes the fd
        except BaseException:
            for fd in fds + ([kept] if kept is not None else []):
                os.close(fd)
            if ctl is not None:
                ctl.close()
            try:
                conn.request("loader_close", {"loader": r["loader"]})
            except ZrecordError:
                pass
            conn.drop_events(r["loader"])
            raise
        s = cls(conn, r["loader"], r.get("ring", 0), mapped, int(r["slots"]),
                int(r["slot_bytes"]), layout, int(fields["start_step"]),
                int(fields.get("step_stride", 1)))
        s.keep_fds = keep_fds
        s.ctl = ctl
        s.ctl_streams = [{}] * len(layout.names) if layout is not None else []
        s.ctl_spans = {}                  # (ring, slot) -> its streams' spans
        if kept is not None:
            s.ring_fds[s.own] = kept
        s.regions = [(int(st["offset"]), int(st["capacity"])) for st in r["streams"]]
        for i, pk in enumerate(layout.packed if layout is not None else ()):
            st = r["streams"][i]
            if pk is not None and (int(st.get("segments", -1)), int(st.get("positions", -1))) \
                    != (pk[1], pk[2]):
                s.close()
                raise proto_error(f"a LOADER_OPEN reply lays packed stream {i} out at "
                                  f"{st.get('segments')}/{st.get('positions')}, not "
                                  f"{pk[1]}/{pk[2]}")
        s.has_images = any("shape" in st for st in r["streams"])
        if layout is not None:
            # an image stream's batch is (B, H, W, C) uint8: the daemon says which
            for name, st, (_, item_shape, _) in zip(layout.names, r["streams"], layout.kinds):
                if "shape" in st and tuple(int(x) for x in st["shape"]) != tuple(item_shape or ()):
                    s.close()
                    raise proto_error(f"stream {name!r}: the daemon serves images of shape "
                                      f"{tuple(st['shape'])}, this side expects {item_shape}")
        s.length = int(r["length"])
        s.fingerprint = int(r["fingerprint"]) if "fingerprint" in r else None
        s.source_lengths = [int(src["length"]) for src in r.get("sources", ())]
        if layout is not None and len(s.source_lengths) != layout.sources:
            s.close()
            raise proto_error(f"a LOADER_OPEN reply of {len(s.source_lengths)} sources for a "
                              f"mixture of {layout.sources}")
        return s

    # ---------------------------------------------------------- closing
    keep_fds = False

    def detach(self):
        """Stops releases and forgets the rings, without a word to the daemon (it
        went away, or this is a forked child). Views keep their rings mapped."""
        self.closed = True
        self.rings = {}
        self.mapped = None
        ctl, self.ctl = self.ctl, None
        if ctl is not None:
            with ctl.lock:
                ctl.close()
        fds, self.ring_fds = self.ring_fds, {}
        for fd in fds.values():
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self):
        """LOADER_CLOSE, waiting for the reply; batches still referenced stay
        readable."""
        self.detach()
        if self.conn.pid == os.getpid() and not self.conn.closed:
            try:
                self.conn.request("loader_close", {"loader": self.loader})
            except ZrecordError:
                pass
            self.conn.drop_events(self.loader)

    def abandon(self):
        """close() for finalizers: never blocks (one may run inside this thread's
        own request)."""
        self.detach()
        self.conn.mark_dead(self.loader)
        self.conn.request_nowait("loader_close", {"loader": self.loader})

    # ---------------------------------------------------------- group rings
    def add_ring(self, msg, fds):
        """A RING event: maps another member's ring read-only and closes its fd."""
        try:
            if len(fds) != 1:
                raise proto_error(f"a RING event with {len(fds)} descriptors (1 expected)")
            try:
                rid, slots = int(msg["ring"]), int(msg["slots"])
                slot_bytes, ring_bytes = int(msg["slot_bytes"]), int(msg["ring_bytes"])
            except (KeyError, TypeError, ValueError):
                raise proto_error(f"a RING event without ring, slots, slot_bytes and "
                                  f"ring_bytes: {msg!r}") from None
            if rid in self.rings:
                raise proto_error(f"RING {rid} was already passed to loader {self.loader}")
            if slots < 1 or slot_bytes != self.slot_bytes or ring_bytes != slots * slot_bytes:
                raise proto_error(
                    f"RING {rid}: {slots} slots of {slot_bytes} bytes in {ring_bytes} bytes "
                    f"(the loader's slots are {self.slot_bytes} bytes)")
            size = os.fstat(fds[0]).st_size
            if size < ring_bytes:
                raise proto_error(f"RING {rid}: the memfd holds {size} bytes, "
                                  f"ring_bytes is {ring_bytes}")
            fd = fds[0]
            fds = ()
            kept = os.dup(fd) if self.keep_fds else None
            try:
                mapped = _shm.MappedBuffer(fd, ring_bytes)     # closes fd
            except BaseException:
                if kept is not None:
                    os.close(kept)
                raise
        finally:
            for fd in fds:
                os.close(fd)
        self.rings[rid] = (mapped, slots)
        if kept is not None:
            self.ring_fds[rid] = kept

    def close_ring(self, msg):
        """A RING_CLOSE event: forgets the ring. Arrays that still view it keep the
        mapping alive through their base; it is unmapped with the last of them."""
        rid = msg.get("ring")
        if rid == self.own or rid not in self.rings:
            raise proto_error(f"RING_CLOSE of ring {rid}, which is not a ring passed by "
                              f"RING to loader {self.loader}")
        del self.rings[rid]
        if self.ctl is not None:
            self.ctl_spans = {k: v for k, v in self.ctl_spans.items() if k[0] != rid}
        fd = self.ring_fds.pop(rid, None)
        if fd is not None:
            os.close(fd)

    # ---------------------------------------------------------- releases
    def set_lazy_release(self, on):
        """Holds freed slots back until half the slots are free (at least two), or
        until flush(): for a caller that flushes before it waits for a batch and
        never waits for anything else (the DataLoader without worker processes),
        and only for small slots (LAZY_RELEASE_MAX)."""
        self.release_batch = (max(2, self.slots // 2)
                              if on and self.slots >= 3 and self.slot_bytes <= LAZY_RELEASE_MAX
                              else 1)

    def slot_free(self, key):
        """Called when the last view of a (ring, slot) is gone (any thread, any time)."""
        if self.closed or _conn.current_pid() != self.pid:
            return
        self.pending.append(key)
        if self.ctl is not None:
            self.ctl_flush(blocking=False)
        elif len(self.pending) >= self.release_batch:
            self.flush(blocking=False)

    def flush_due(self):
        """flush(), if the releases held back are due (set_lazy_release())."""
        if self.ctl is not None:
            if self.pending:
                self.ctl_flush()
        elif len(self.pending) >= self.release_batch:
            self.flush()

    def ctl_flush(self, blocking=True, force=False, always=False):
        """Writes the freed slots into the control memory's release queue, and
        sends DOORBELL if the daemon stopped for lack of a slot and, unless
        `force` (before a wait), the releases it has not taken are at least
        release_batch; with `always`, whenever the daemon has not taken them all
        (after a wait that saw no WAKE: a lost one costs a wait, never a hang).
        Without `blocking`, leaves the work to the next call if another thread
        writes the queue now."""
        ctl = self.ctl
        if ctl is None or not ctl.lock.acquire(blocking):
            return
        ring = False
        try:
            if self.ctl is not ctl:      # detached meanwhile
                return
            wrote = False
            while self.pending:
                key = self.pending.popleft()
                # no longer held once written: the daemon may announce it again
                self.held.discard(key)
                try:
                    wait = self.waits.popleft()
                except IndexError:
                    wait = _ctlring.NO_WAIT
                ctl.release(key[0], key[1], self.taken.pop(key, 0), wait)
                wrote = True
            if wrote or force:
                ctl.fence()
                ring = ctl.doorbell_due(0 if force else self.release_batch, always)
        finally:
            ctl.lock.release()
        if ring and self.conn.pid == os.getpid():
            released = ctl.released
            try:
                if self.conn.send_notifications(iter(({"kind": "doorbell",
                                                        "loader": self.loader}, None)).__next__,
                                                blocking):
                    ctl.rung = released
            except OSError:
                self.closed = True

    def _next_release(self):
        if not self.pending or self.closed:
            return None
        key = self.pending.popleft()
        # no longer held once sent: the daemon may announce it again at once
        self.held.discard(key)
        msg = {"kind": "release", "loader": self.loader, "ring": key[0], "slot": key[1]}
        taken = self.taken.pop(key, None)
        if taken is not None:
            msg["taken_ns"] = taken
        try:
            msg["wait_ns"] = self.waits.popleft()
        except IndexError:
            pass
        return msg

    def flush(self, blocking=True):
        """Sends RELEASE for every freed slot. Non-blocking from finalizers: if the
        send lock is busy (maybe held by this very thread), the release waits for the
        next flush. With control memory: ctl_flush(), forced."""
        if self.ctl is not None:
            if not self.closed and _conn.current_pid() == self.pid:
                self.ctl_flush(blocking, force=blocking)
            return
        if not self.pending or self.closed or _conn.current_pid() != self.pid:
            return
        try:
            self.conn.send_notifications(self._next_release, blocking)
        except OSError:
            self.closed = True

    # ---------------------------------------------------------- batches
    def take(self, msg):
        """Checks a BATCH event and takes the (ring, slot) it names: a Taken, whose
        owner gives the slot back when it is garbage."""
        lay = self.layout
        rid = msg.get("ring", self.own)
        slot, step = int(msg["slot"]), int(msg["step"])
        if rid not in self.rings:
            raise proto_error(
                f"BATCH of step {step} names ring {rid}, which loader {self.loader} does "
                "not know (neither its own nor passed by a RING event)")
        mapped, nslots = self.rings[rid]
        if slot >= nslots:
            raise proto_error(f"BATCH of step {step} names slot {slot} of ring {rid}, "
                              f"which has {nslots}")
        key = (rid, slot)
        if key in self.held:
            raise proto_error(f"BATCH of step {step} names slot {slot} of ring {rid}, "
                              "which this loader holds")
        if step != self.next_step:
            raise ZrecordRuntimeError(
                f"the daemon announced step {step}, expected {self.next_step}")
        streams = msg["streams"]
        if self.has_images:
            for st in streams:         # image records served as zeros (on_error='skip')
                self.images_skipped += int(st.get("skipped", 0))
        spans = []                     # (lo, hi) ring bytes each stream's views cover
        if self.all_dense:
            end = mapped.nbytes
            for st, nb in zip(streams, self.dense_bytes):
                lo = int(st["offset"])
                if not 0 <= lo <= lo + nb <= end:
                    raise proto_error(f"BATCH of step {step}: a stream lies past the end of "
                                      f"ring {rid}")
                spans.append((lo, lo + nb))
        else:
            self._spans(streams, mapped, step, rid, spans)
        sources = None
        if lay.with_sources:
            src = msg.get("source")
            if not isinstance(src, bytes) or len(src) != lay.batch_size or \
                    (src and max(src) >= lay.sources):
                raise proto_error(f"BATCH of step {step}: its records' sources are missing or "
                                  f"name no source of {lay.sources}")
            sources = np.frombuffer(src, dtype=np.uint8).copy()
        self.next_step += self.stride
        self.held.add(key)
        self.taken[key] = time.monotonic_ns()
        return Taken(rid, slot, step, streams, spans,
                     msg.get("indices") if lay.with_indices else None, sources,
                     _shm.Owner(self.slot_free, key))

    def ctl_ready(self):
        """True if take_ctl() would take a batch now (one is announced in a ring
        this side knows; one in a ring whose RING is still on the socket is not)."""
        a = self.ctl.peek()
        return a is not None and a[1] in self.rings

    def take_ctl(self):
        """The batch the control memory announces next, taken as take() takes a
        BATCH: a Taken, or None if none is published yet or it lies in a ring whose
        RING event this side has not read yet."""
        a = self.ctl.peek()
        if a is None:
            return None
        step, rid, slot = a
        if rid not in self.rings:
            return None
        mapped, nslots = self.rings[rid]
        key = (rid, slot)
        if slot >= nslots or key in self.held:
            raise proto_error(f"the control memory announces slot {slot} of ring {rid} "
                              f"for step {step}: not a free slot of that ring")
        if step != self.next_step:
            raise ZrecordRuntimeError(
                f"the daemon announced step {step}, expected {self.next_step}")
        self.ctl.head += 1
        spans = self.ctl_spans.get(key)
        if spans is None:              # where each stream lies in that slot, made once
            base = slot * self.slot_bytes
            spans = []
            lay = self.layout
            for (off, _), nb, pk in zip(self.regions, self.dense_bytes,
                                        lay.packed or (None,) * len(lay.names)):
                lo = base + off
                hi = lo + (nb if nb is not None else pk[2] + lay.batch_size * pk[0] * 4)
                if hi > mapped.nbytes:
                    raise proto_error(f"step {step}: a stream lies past the end of ring {rid}")
                spans.append((lo, hi))
            self.ctl_spans[key] = spans
        self.next_step += self.stride
        self.held.add(key)
        self.taken[key] = time.monotonic_ns()
        return Taken(rid, slot, step, self.ctl_streams, spans, None, None,
                     _shm.Owner(self.slot_free, key))

    def _spans(self, streams, mapped, step, rid, spans):
        lay = self.layout
        packed = lay.packed or (None,) * len(lay.names)
        for name, st, (dt, item_shape, _), pk, nb in zip(lay.names, streams, lay.kinds, packed,
                                                          self.dense_bytes):
            if nb is not None:
                lo = int(st["offset"])
                hi = lo + nb
            elif pk is not None:
                lo = int(st["offset"])
                hi = lo + pk[2] + lay.batch_size * pk[0] * 4
            else:
                offs = _wire.from_u64s(st.get("offsets"))
                lens = _wire.from_u64s(st.get("lengths"))
                lo = int(offs.min()) if len(offs) else int(st["offset"])
                hi = int((offs + lens).max()) if len(offs) else lo
            if not 0 <= lo <= hi <= mapped.nbytes:
                raise proto_error(f"BATCH of step {step}: stream {name!r} lies past the "
                                  f"end of ring {rid}")
            spans.append((lo, hi))

    def batch(self, msg):
        """The batch a BATCH event announces: views into the (ring, slot) it names."""
        t = self.take(msg)
        mapped = self.rings[t.ring][0]
        return build_batch(self.layout, t, mapped.mm, mapped.address, t.owner, self.templates)


def view_templates(lay):
    """Per stream of layout `lay`: the _shm.ViewTemplate of a dense stream's
    batch, the _shm.PackedTemplate of a packed one's, or None."""
    packed = lay.packed or (None,) * len(lay.names)
    return [_shm.PackedTemplate((lay.batch_size, pk[0]), dt, pk[1], pk[2]) if pk is not None
            else None if item_shape is None else
            _shm.ViewTemplate((lay.batch_size,) + tuple(item_shape), dt)
            for (dt, item_shape, _), pk in zip(lay.kinds, packed)]


def build_batch(lay, t, mm, base, owner, templates=None):
    """The batch of Taken `t` as read-only views of a ring mapped at `base`
    (_shm.View: `mm` keeps the mapping alive after RING_CLOSE or the session's
    close; `owner` rides in every view's base, so the slot stays held).
    `templates`: view_templates(lay), made once by the caller, or None."""
    batch = {}
    packed = lay.packed or (None,) * len(lay.names)
    if templates is None:
        templates = (None,) * len(lay.names)
    for name, st, (dt, item_shape, ndim), (lo, hi), pk, tp in zip(
            lay.names, t.streams, lay.kinds, t.spans, packed, templates):
        if pk is not None and tp is not None:
            (batch[name], batch[name + SEGMENTS_SUFFIX],
             batch[name + POSITIONS_SUFFIX]) = tp.views(owner, mm, base + lo)
        elif tp is not None:
            batch[name] = np.asarray(tp.view(owner, mm, base + lo))
        elif pk is not None:
            shape = (lay.batch_size, pk[0])
            batch[name] = np.asarray(_shm.View(owner, mm, base + lo, shape, dt.str))
            batch[name + SEGMENTS_SUFFIX] = np.asarray(
                _shm.View(owner, mm, base + lo + pk[1], shape, "<i4"))
            batch[name + POSITIONS_SUFFIX] = np.asarray(
                _shm.View(owner, mm, base + lo + pk[2], shape, "<i4"))
        elif item_shape is not None:
            batch[name] = np.asarray(_shm.View(owner, mm, base + lo,
                                           (lay.batch_size,) + tuple(item_shape), dt.str))
        else:
            offs = _wire.from_u64s(st.get("offsets"))
            lens = _wire.from_u64s(st.get("lengths"))
            shapes = _store.shape_list(_wire.from_u64s(st.get("shapes")), len(offs), ndim)
            region = np.asarray(_shm.View(owner, mm, base + lo, (hi - lo,), "|u1"))
            recs = []
            for j in range(len(offs)):
                o = int(offs[j]) - lo
                recs.append(region[o:o + int(lens[j])].view(dt).reshape(shapes[j]))
            batch[name] = recs
    if lay.with_indices:
        batch[INDEX_KEY] = _wire.from_u64s(t.indices).copy()
    if lay.with_sources:
        batch[SOURCE_KEY] = t.sources.copy()
    return batch
