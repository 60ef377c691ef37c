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
import collections.abc
import concurrent.futures
import decimal
import fractions
import gc
import math
import os
import threading
import time
import warnings
from typing import Any, Callable, Deque, Dict, Mapping, Optional, Sequence, Union

import numpy as np

from . import _conn, _ctlring, _errors, _procworker, _ranks, _store, _wire, _xform
from ._errors import (StaleError, ZrecordConnectionError, ZrecordRuntimeError, ZrecordTypeError,
                      ZrecordValueError)
from ._session import (INDEX_KEY, SOURCE_KEY, Layout, LoaderSession, build_batch,
                       packed_offsets)
from .dataset import DenseDataset, MSDataset, RaggedDataset, _Dataset
from .images import ImageDataset

__all__ = ["DataLoader", "INDEX_KEY", "LoaderStallWarning", "SOURCE_KEY", "SAMPLERS", "MODES"]

SAMPLERS = ("sequential", "iid", "cyclic", "cyclic-lx157")
#: loaderx 1.5.7's ``mode`` numbers (``Sampler.Mode``) as zrecord's samplers: its
#: cyclic is ``cyclic-lx157`` bit for bit; its iid is not reproduced (zrecord's
#: seeks in O(1)).
MODES = {0: "sequential", 1: "iid", 2: "cyclic-lx157"}
_STATE_VERSION = 1
_NOTHING = object()     # _next_event(block=False): no event yet
_AGAIN = object()       # _next_event(): look at the control memory again
# A loader with control memory (PROTOCOL.md, "Control memory") that finds no
# batch announced looks again for this long before it tells the daemon it
# waits and blocks on its socket: a small warm batch is filled in tens of
# microseconds, and a wake-up over the socket costs about as much on each side.
# It blocks at most _CTL_WAIT_S at a time, then looks again (a lost wake-up
# would cost that much, never a hang). LOADERX_CTLRING=0 keeps the socket path.
# Only a slot of at most _CTL_SPIN_MAX bytes (a bigger one takes longer to fill,
# and the look would take a core from the daemon's copy).
_CTL_SPIN_NS = int(os.environ.get("LOADERX_CTL_SPIN_US", "30")) * 1000
_CTL_SPIN_MAX = 256 << 10
_CTL_WAIT_S = 0.05
# warn_stalls: the share of time the consumer may wait before it is told (the
# daemon's own data-bound rule), how often this process looks, and how often
# it may say so.
_STALL_RATIO = 0.05
_STALL_CHECK_S = 10.0
_STALL_WARN_S = 60.0


class LoaderStallWarning(UserWarning):
    """The training loop waits for data: the loader is its bottleneck
    (``DataLoader(..., warn_stalls=True)``)."""


# A mixture's sources at most (PROTOCOL.md, LOADER_OPEN `sources`), and its
# weights: integers up to 2^32 - 1 on the wire.
SOURCES_MAX = 256
_WEIGHT_MAX = 2 ** 32 - 1


def _sampler_name(value, what):
    """A sampler given by name or by loaderx 1.5.7's mode number."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value in MODES:
        return MODES[int(value)]
    if value not in SAMPLERS:
        raise ZrecordValueError(
            f"{what}: unknown sampler {value!r}: expected one of {', '.join(SAMPLERS)} or a "
            "mode 0, 1, 2", name="ZR_E_SAMPLER")
    return value


def _weights(values):
    """Integer weights in exactly the ratio of `values`: integers as they are, floats
    as written in decimal (0.7, 0.2, 0.1 -> 7, 2, 1), fractions and decimals exactly;
    divided by their greatest common divisor."""
    fracs = []
    for i, w in enumerate(values):
        try:
            if isinstance(w, bool) or not isinstance(
                    w, (int, float, np.integer, np.floating, fractions.Fraction, decimal.Decimal)):
                raise TypeError
            f = fractions.Fraction(str(w)) if isinstance(w, (float, np.floating)) \
                else fractions.Fraction(w)
        except (TypeError, ValueError, OverflowError, decimal.InvalidOperation):
            raise ZrecordTypeError(f"source {i}: the weight must be a positive number, got "
                                   f"{w!r}") from None
        if f <= 0:
            raise ZrecordValueError(f"source {i}: the weight must be positive, got {w!r}",
                                    name="ZR_E_SAMPLER")
        fracs.append(f)
    den = 1
    for f in fracs:
        den = den * f.denominator // math.gcd(den, f.denominator)
    ints = [int(f * den) for f in fracs]
    g = 0
    for v in ints:
        g = math.gcd(g, v)
    ints = [v // g for v in ints]
    if max(ints) > _WEIGHT_MAX:
        raise ZrecordValueError(
            f"the weights {list(values)!r} need integers above 2^32 - 1 to keep their ratio "
            "exactly; round them (the daemon takes integer weights)", name="ZR_E_SAMPLER")
    return ints


class _StreamTypeError(ZrecordTypeError):
    """A stream of the mapping is no dataset (not the mapping itself)."""


def _stream_dict(streams, what):
    """{name: dataset} of a mapping or an MSDataset (a Zrecord's dataset inside)."""
    from .zrecord import Zrecord
    if isinstance(streams, MSDataset):
        streams = streams.streams
    try:
        streams = dict(streams)
    except (TypeError, ValueError):
        raise ZrecordTypeError(f"{what}: expected a mapping {{name: dataset}} or an MSDataset, "
                               f"not {type(streams).__name__}") from None
    if not streams:
        raise ZrecordValueError(f"{what}: need at least one stream")
    streams = {k: (v._ds if isinstance(v, Zrecord) else v) for k, v in streams.items()}
    for name, ds in streams.items():
        if isinstance(ds, (str, bytes, os.PathLike)):
            raise _StreamTypeError(
                f"{what}: stream {name!r} is the path {os.fsdecode(ds)!r}, not a dataset: "
                f"open it first, {{{name!r}: DenseDataset({os.fsdecode(ds)!r})}} (or "
                "RaggedDataset for a store of variable-length records)")
        if not isinstance(ds, _Dataset):
            raise _StreamTypeError(
                f"{what}: stream {name!r}: expected a DenseDataset or RaggedDataset, got "
                f"{type(ds).__name__}")
    return streams


def _is_mixture(streams):
    """A list or tuple of (streams, weight[, sampler]) sources, each a mapping or an
    MSDataset: a mixture. (A plain loader's streams may be a list of (name, dataset)
    pairs, which dict() takes.)"""
    return isinstance(streams, (list, tuple)) and len(streams) > 0 and all(
        isinstance(s, (list, tuple)) and len(s) in (2, 3) and
        isinstance(s[0], (collections.abc.Mapping, MSDataset)) for s in streams)


def _pick(what, lx_name, lx_value, name, value, default):
    """The value of a parameter given by loaderx 1.5.7's keyword or zrecord's, or
    both when they agree."""
    if lx_value is not None and value is not None and lx_value != value:
        raise ZrecordValueError(
            f"DataLoader: {lx_name}={lx_value!r} and {name}={value!r} disagree; give one "
            f"(they are the same {what})")
    return value if value is not None else (lx_value if lx_value is not None else default)


def _check_fingerprint(fp):
    """The fingerprint `fp` as an int (or None): a loader's :attr:`fingerprint`, an
    int of 64 bits, or the 16 hexadecimal digits state_dict() keeps (a string, so
    that JSON readers whose numbers are doubles keep every bit)."""
    if isinstance(fp, str) and len(fp) == 16:
        try:
            return int(fp, 16)
        except ValueError:
            pass
    if fp is not None and (isinstance(fp, bool) or not isinstance(fp, (int, np.integer))
                           or not 0 <= fp < 2**64):
        raise ZrecordValueError(f"fingerprint must be an int of 64 bits (a loader's "
                                f"fingerprint) or its 16 hexadecimal digits, got {fp!r}")
    return None if fp is None else int(fp)


def check_resume(state, mine):
    """Refuses to resume from ``state`` (a state_dict()) a loader whose own
    state_dict() is ``mine`` when the two differ in sampler, seed, global batch or
    sources (ZrecordValueError naming the difference): the batches would differ."""
    for k in ("sampler", "seed"):
        if k in state and state[k] != mine[k]:
            raise ZrecordValueError(
                f"load_state_dict: the state has {k}={state[k]!r}, this loader "
                f"{k}={mine[k]!r}; build the DataLoader with the same parameters")
    if "batch_size" in state:
        theirs = int(state["batch_size"]) * int(state.get("world_size", 1))
        ours = mine["batch_size"] * mine["world_size"]
        if theirs != ours:
            raise ZrecordValueError(
                f"load_state_dict: the state's global batch is {theirs} (batch_size "
                f"{state['batch_size']} x world_size {state.get('world_size', 1)}), this "
                f"loader's {ours} ({mine['batch_size']} x {mine['world_size']}); keep "
                "batch_size x world_size to resume the same sequence")
    ours = [(src["weight"], src["sampler"]) for src in mine.get("sources", ())]
    theirs = [(src.get("weight"), src.get("sampler")) for src in state.get("sources", ())]
    if ("sources" in state or "sources" in mine) and ours != theirs:
        raise ZrecordValueError(
            f"load_state_dict: the state's sources (weight, sampler) are {theirs}, this "
            f"loader's {ours}; build the DataLoader with the same sources")


_PACK_MODES = ("concat", "best_fit")


def _pack_spec(pack, mode, eos_id, pad_id, window, streams, sources, sampler):
    """LOADER_OPEN's `pack` maps by stream name, from DataLoader's keywords, or None."""
    if pack is None:
        for what, v in (("eos_id", eos_id), ("pad_id", pad_id), ("pack_window", window)):
            if v is not None:
                raise ZrecordValueError(f"{what} is for packed streams: give pack={{name: "
                                        "seq_len}} too")
        return None
    if not isinstance(pack, collections.abc.Mapping) or not pack:
        raise ZrecordTypeError("pack must be a mapping {stream name: seq_len}, e.g. "
                               "pack={'tokens': 2048}")
    if mode not in _PACK_MODES:
        raise ZrecordValueError(f"pack_mode must be one of {', '.join(_PACK_MODES)}, got {mode!r}")
    if sampler == "iid" and sources is None:
        raise ZrecordValueError("pack: the iid sampler draws no cycles (a document may come "
                                "twice or never); use 'sequential', 'cyclic' or 'cyclic-lx157'",
                                name="ZR_E_SAMPLER")
    out = {}
    for name, seq_len in pack.items():
        if name not in streams:
            raise ZrecordValueError(f"pack: {name!r} is no stream of this loader "
                                    f"({', '.join(map(repr, streams))})")
        for src in sources or [streams]:
            if not isinstance(src[name], RaggedDataset):
                raise ZrecordValueError(f"pack: stream {name!r} is not a RaggedDataset of "
                                        "documents")
        if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len < 1:
            raise ZrecordValueError(f"pack: seq_len of {name!r} must be an integer >= 1, got "
                                    f"{seq_len!r}")
        spec = {"seq_len": int(seq_len), "mode": mode}
        for key, v in (("eos_id", eos_id), ("pad_id", pad_id), ("window", window)):
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ZrecordValueError(f"{'pack_window' if key == 'window' else key} must be an "
                                        f"integer >= 0, got {v!r}")
            spec[key] = int(v)
        if mode == "concat" and ("pad_id" in spec or "window" in spec):
            raise ZrecordValueError("pad_id and pack_window are best_fit's: concat never pads")
        out[name] = spec
    if len(streams) != 1:
        raise ZrecordValueError("pack: a packed loader has one stream (the documents; a "
                                f"mixture's: one a source); this one has {len(streams)}")
    return out


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
    of the first batch; ``rank`` / ``world_size`` shard each global batch
    (given neither, the loader takes them from the initialised
    ``torch.distributed`` group, else from ``RANK`` / ``WORLD_SIZE``, else 0 of
    1; an explicit value that disagrees with the group is an error;
    ``stats()['ranks']`` says which);
    ``prefetch_size`` or ``prefetch``: ring slots the daemon fills ahead
    (default 4; with worker processes at least 2 × ``num_workers``: a batch's
    slot is held until its worker is done with it);
    ``transform`` a function batch -> anything, run by ``num_workers`` workers so
    it overlaps the next gathers (results still come in step order);
    ``num_workers=0`` runs it inline in ``next()`` (cheaper for trivial
    transforms). ``workers``: ``'process'`` runs it in worker processes, each
    reading the batch where the daemon gathered it (no copy, no pickle) and
    writing the arrays it returns once into shared memory the loader owns
    (within ``arena_bytes``, default an eighth of memory, ``$LOADERX_ARENA``);
    ``'thread'`` on threads of this process; None (the default) chooses
    processes when the transform can be pickled (a module-level function, a
    picklable object) and the interpreter has a GIL, threads otherwise (a lambda,
    a closure, free-threaded Python); :attr:`workers` and ``stats()`` say which
    and why. A transform that names a parameter ``rng`` gets a
    ``numpy.random.Generator`` keyed by (seed, step, rank); one that names
    ``rngs``, one generator per record, keyed by (seed, step, the record's place
    in the step's global batch): the same after a resume, on threads or in
    processes, and (``rngs``) at any world size with the same global batch.
    ``step_stride``: serve steps ``start_step``, ``start_step + step_stride``, ...
    (worker w of k consumers that take turns: ``start_step + w``, stride k).
    ``capacity``: ``{name: bytes}`` per-slot room for ragged streams (the daemon
    picks a default; a batch that does not fit reopens with twice the room).
    ``with_indices``: add the batch's record indices as ``batch['__index__']``.
    ``fingerprint``: the streams' fingerprint this loader expects (an int, another
    loader's :attr:`fingerprint`, e.g. rank 0's on another node, or the string of
    16 hexadecimal digits a state_dict() keeps): a daemon whose
    stores hold other records refuses the open (:class:`StaleError`). Without it the
    loader takes the fingerprint of its first open, and a reopen (after a daemon
    restart) over other records is refused the same way.
    ``warn_stalls``: warn (:class:`LoaderStallWarning`, at most once a minute)
    when the daemon finds the loop data-bound, naming the stage to blame.
    Where loaderx 1.5.7's keyword and zrecord's both name a parameter, either may
    be given, or both if they agree.

    :meth:`stats` tells whether the loop waits for data and why (the daemon's
    telemetry: docs/TELEMETRY.md).

    **Mixtures.** ``streams`` may instead be a list of weighted sources, each
    ``(streams, weight)`` or ``(streams, weight, sampler)``: every source is a set of
    index-aligned streams (a mapping or an MSDataset) with the same names, dtypes
    and shapes as the others. Each batch draws ``weight / sum(weights)`` of its
    records from each source, exactly (a deterministic apportionment, not on
    average), each source through its own sampler (``sampler`` / ``mode`` where it
    names none), so a small source repeats and a large one needs no full pass.
    Weights may be integers or decimals (``0.7, 0.2, 0.1``, taken as written). With
    ``with_sources=True`` the batch holds each record's source number (its place in
    the list) as ``batch['__source__']``; ``__index__`` is then each record's index
    in its source. See :meth:`steps_of` for which steps read a record.
    """

    def __init__(self, streams: Union[Mapping[str, Any], Sequence[Any]], num_workers: int = 4, batch_size: int = 256,
                 prefetch_size: Optional[int] = None, mode: Optional[int] = None,
                 seed: int = 42, transform: Optional[Callable[..., Any]] = None, *,
                 sampler: Union[str, int, None] = None, prefetch: Optional[int] = None,
                 start_step: int = 0, rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 capacity: Optional[Mapping[str, int]] = None,
                 with_indices: bool = False, with_sources: bool = False,
                 fingerprint: Union[int, str, None] = None, warn_stalls: bool = False,
                 workers: Optional[str] = None, arena_bytes: Optional[int] = None,
                 step_stride: int = 1, pack: Optional[Mapping[str, int]] = None, pack_mode: str = "concat",
                 eos_id: Optional[int] = None, pad_id: Optional[int] = None,
                 pack_window: Optional[int] = None, weight_by: Optional[str] = None) -> None:
        if _procworker.IMPORTING_MAIN:
            raise ZrecordRuntimeError(
                "a DataLoader was made while a loaderx worker process imported the training "
                "script (its transform is defined there): the script is running again. Put "
                "the code that trains under \"if __name__ == '__main__':\", or define the "
                "transform in a module the script imports")
        if mode is not None and (isinstance(mode, bool) or mode not in MODES):
            raise ZrecordValueError(
                f"unknown mode {mode!r}: expected 0 (sequential), 1 (iid) or 2 (cyclic)",
                name="ZR_E_SAMPLER")
        if mode is not None and sampler is not None and MODES[mode] != sampler:
            raise ZrecordValueError(
                f"DataLoader: mode={mode} ({MODES[mode]}) and sampler={sampler!r} disagree; "
                "give one (they name the same sampler)", name="ZR_E_SAMPLER")
        sampler = sampler or MODES[2 if mode is None else mode]
        prefetch = _pick("prefetch depth", "prefetch_size", prefetch_size, "prefetch", prefetch,
                         None)
        self.sources = None                 # a mixture's: [{name: dataset}] per source
        self.weights = None                 # its integer weights
        self.source_samplers = None         # each source's sampler
        self.source_lengths = None          # each source's length, once open
        if _is_mixture(streams):
            if len(streams) > SOURCES_MAX:
                raise ZrecordValueError(f"a mixture of {len(streams)} sources: at most "
                                        f"{SOURCES_MAX}")
            self.sources = [_stream_dict(src[0], f"source {k}") for k, src in enumerate(streams)]
            names = list(self.sources[0])
            for k, src in enumerate(self.sources):
                if set(src) != set(names):
                    raise ZrecordValueError(
                        f"source {k} has the streams {sorted(src)}, source 0 {sorted(names)}: "
                        "every source of a mixture holds the same streams",
                        name="ZR_E_MISALIGNED")
            self.sources = [{n: src[n] for n in names} for src in self.sources]
            self.weights = _weights([src[1] for src in streams])
            self.source_samplers = [
                None if len(src) < 3 or src[2] is None else _sampler_name(src[2], f"source {k}")
                for k, src in enumerate(streams)]
            streams = self.sources[0]
        else:
            if isinstance(streams, (list, tuple)) and streams and all(
                    isinstance(src, (list, tuple)) and len(src) in (2, 3) and
                    not isinstance(src[0], str) for src in streams):
                raise ZrecordTypeError(
                    "DataLoader: a mixture is a list of (streams, weight[, sampler]) sources, "
                    "each streams a mapping {name: dataset} or an MSDataset")
            try:
                streams = _stream_dict(streams, "DataLoader")
            except _StreamTypeError:
                raise
            except ZrecordTypeError:
                raise ZrecordTypeError("DataLoader takes a mapping {name: dataset}, an MSDataset "
                                       "or a list of weighted sources, not "
                                       f"{type(streams).__name__}") from None
        if with_sources and self.sources is None:
            raise ZrecordValueError("with_sources=True is a mixture's: this loader has one set "
                                    "of streams")
        if sampler not in SAMPLERS:
            raise ZrecordValueError(
                f"unknown sampler {sampler!r}: expected one of {', '.join(SAMPLERS)}",
                name="ZR_E_SAMPLER")
        for what, v in (("batch_size", batch_size), ("seed", seed), ("start_step", start_step),
                        ("rank", rank), ("world_size", world_size),
                        ("prefetch", 4 if prefetch is None else prefetch),
                        ("step_stride", step_stride)):
            if v is None and what in ("rank", "world_size"):
                continue                # from the job (_ranks)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ZrecordTypeError(f"{what} must be an integer, got {type(v).__name__}")
            if v < 0:
                raise ZrecordValueError(f"{what} must be >= 0, got {v}")
            if v >= 2 ** 64:            # the protocol's widest integer (PROTOCOL.md)
                raise ZrecordValueError(f"{what} must be below 2**64, got {v}")
        if batch_size < 1:
            raise ZrecordValueError("batch_size must be >= 1", name="ZR_E_SAMPLER")
        rank, world_size, self._ranks_from = _ranks.resolve(rank, world_size)
        if world_size < 1 or rank >= world_size:
            raise ZrecordValueError(
                f"rank must be in 0..world_size-1: rank {rank}, world_size {world_size}",
                name="ZR_E_SAMPLER")
        if prefetch is not None and prefetch < 1:
            raise ZrecordValueError("prefetch must be >= 1")
        if not 1 <= step_stride < 2 ** 32:
            raise ZrecordValueError(f"step_stride must be in 1..2^32 - 1, got {step_stride}")
        fingerprint = _check_fingerprint(fingerprint)
        if weight_by not in (None, "records", "tokens"):
            raise ZrecordValueError(f"weight_by must be 'records' or 'tokens', not {weight_by!r}")
        if weight_by == "tokens" and (pack is None or self.sources is None):
            raise ZrecordValueError("weight_by='tokens' weighs a mixture of packed sources: give "
                                    "a list of sources and pack={name: seq_len}")
        if weight_by == "records" and pack is not None and self.sources is not None:
            raise ZrecordValueError("a mixture of packed sources is weighted by tokens (each "
                                    "batch's rows, all of seq_len tokens, apportioned by weight): "
                                    "weight_by='tokens'")
        self.weight_by = weight_by or ("tokens" if pack is not None and self.sources is not None
                                       else "records")
        self.pack = _pack_spec(pack, pack_mode, eos_id, pad_id, pack_window, streams,
                               self.sources, sampler)
        self.streams = dict(streams)
        self.names = list(streams)
        self.batch_size = int(batch_size)
        self.sampler = sampler
        self.seed = int(seed)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.step_stride = int(step_stride)
        self.transform = transform
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) \
                or num_workers < 0:
            raise ZrecordTypeError(f"num_workers must be an integer >= 0, got {num_workers!r}")
        self.num_workers = int(num_workers) if transform is not None else 0
        self._choice = _xform.choose(transform, self.num_workers, workers)
        self._wants = _xform.rng_params(transform) if transform is not None else frozenset()
        if arena_bytes is not None and (isinstance(arena_bytes, bool) or
                                        not isinstance(arena_bytes, (int, np.integer)) or
                                        arena_bytes < 0):
            raise ZrecordTypeError(f"arena_bytes must be an integer >= 0, got {arena_bytes!r}")
        self._arena_bytes = arena_bytes
        if prefetch is None:
            # with processes, each task holds its slot until its worker is done
            prefetch = max(4, 2 * self.num_workers) if self._choice.kind == "process" else 4
        self.prefetch = int(prefetch)
        self.with_indices = bool(with_indices)
        self.with_sources = bool(with_sources)
        self._capacity = {k: int(v) for k, v in (capacity or {}).items()}
        self._fingerprint = None if fingerprint is None else int(fingerprint)
        self._session = None
        self._skipped_before = 0    # image records served as zeros by closed sessions
        self._pool = None           # transform threads
        self._procs = None          # transform processes (_procpool)
        self._end = None            # (step, exception): the loader ended there (processes)
        self._fetched_step = None   # the step of the batch _fetch() returned last
        self._futures: Deque[Any] = collections.deque()
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
        if self._choice.kind == "process":
            self._start_procs()

    def __len__(self):
        raise TypeError("Eternal loader has no length.")

    def __bool__(self):             # an endless loader is never empty (not len() == 0)
        return True

    # ------------------------------------------------------------ open/close
    def _specs(self, streams, conn):
        """LOADER_OPEN's stream maps of one source, reopening its datasets on `conn`
        where they were opened on another connection; returns (specs, conn)."""
        specs = []
        for name in self.names:
            ds = streams[name]
            h = ds._h.h()
            if ds._h.conn is not conn:     # opened on another connection: reopen here
                ds._h = _store.Handle(ds.path)
                h = ds._h.h()
                conn = ds._h.conn
            spec = {"handle": h, "name": name}
            if self.pack is not None and name in self.pack:
                spec["pack"] = dict(self.pack[name])
            if isinstance(ds, RaggedDataset) and name in self._capacity:
                spec["capacity"] = self._capacity[name]
            if isinstance(ds, ImageDataset):
                spec["image"] = dict(ds._spec)      # decoded by the daemon (docs/IMAGES.md)
            specs.append(spec)
        return specs, conn

    def _open(self, step, length):
        """Opens the loader at `step`; `length` (a mixture's: a list per source) is
        the length a resume expects, or None."""
        conn = _conn.default()
        kinds = []
        for name in self.names:
            ds = self.streams[name]
            if isinstance(ds, ImageDataset):      # a dense (B, H, W, C) uint8 block
                kinds.append((np.dtype(np.uint8), ds.image_shape, None))
                continue
            kinds.append((ds.dtype, ds.item_shape if isinstance(ds, DenseDataset) else None,
                          getattr(ds, "_ndim", None)))
        if self.sources is None:
            specs, conn = self._specs(self.streams, conn)
            fields = {"streams": specs}
        else:
            sources = []
            for k, src in enumerate(self.sources):
                specs, conn = self._specs(src, conn)
                source = {"streams": specs, "weight": self.weights[k]}
                if self.source_samplers[k] is not None:
                    source["sampler"] = self.source_samplers[k]
                if length is not None:
                    source["length"] = int(length[k])
                sources.append(source)
            fields = {"sources": sources}
        if any(isinstance(ds, ImageDataset) for ds in self.streams.values()) and \
                not conn.has_feature("image"):
            raise ZrecordRuntimeError(
                f"this zrecordd ({conn.daemon}) does not decode images (no \"image\" feature "
                "in its HELLO reply); update the daemon")
        if not conn.has_feature("loader"):
            raise ZrecordRuntimeError(
                f"this zrecordd ({conn.daemon}) does not serve loaders (no \"loader\" feature "
                "in its HELLO reply); update the daemon")
        if self.pack is not None and not conn.has_feature("pack"):
            raise ZrecordRuntimeError(
                f"this zrecordd ({conn.daemon}) does not pack token sequences (no \"pack\" "
                "feature in its HELLO reply); update the daemon")
        if self.sources is not None and not conn.has_feature("mixture"):
            raise ZrecordRuntimeError(
                f"this zrecordd ({conn.daemon}) does not serve mixtures (no \"mixture\" "
                "feature in its HELLO reply); update the daemon")
        fields.update({"sampler": self.sampler, "batch_size": self.batch_size,
                       "seed": self.seed, "start_step": int(step), "rank": self.rank,
                       "world_size": self.world_size, "prefetch": self.prefetch})
        if length is not None and self.sources is None:
            fields["length"] = int(length)
        if self.with_indices:
            fields["indices"] = True
        if self.with_sources:
            fields["provenance"] = True
        if self._fingerprint is not None:
            fields["fingerprint"] = self._fingerprint
        if self._wants_ctl(conn):
            fields["ctlring"] = True
        if self.step_stride != 1:
            if not conn.has_feature("stride"):
                raise ZrecordRuntimeError(
                    f"this zrecordd ({conn.daemon}) cannot serve every k-th step (no \"stride\" "
                    "feature in its HELLO reply); update the daemon")
            fields["step_stride"] = self.step_stride
        packed = tuple(
            None if self.pack is None or name not in self.pack else
            (self.pack[name]["seq_len"],) + packed_offsets(
                self.batch_size, self.pack[name]["seq_len"], self.streams[name].dtype.itemsize)[:2]
            for name in self.names)
        layout = Layout(tuple(self.names), tuple(kinds), self.batch_size, self.with_indices,
                        len(self.sources or ()), self.with_sources, packed)
        self._session = LoaderSession.open(conn, fields, layout,
                                           keep_fds=self._choice.kind == "process")
        # releases held back while batches are ready: _next_event() flushes them
        # before it waits; worker processes wait elsewhere, so not with them
        self._session.set_lazy_release(self._choice.kind != "process")
        self.length = self._session.length
        if self._fingerprint is None:
            self._fingerprint = self._session.fingerprint
        if self.sources is not None:
            self.source_lengths = list(self._session.source_lengths)

    def _wants_ctl(self, conn):
        """Whether to ask for control memory: dense or packed streams whose batch
        says nothing but where it lies (no indices, no sources, no images), read
        in this process (worker processes keep the socket path)."""
        if not conn.has_feature("ctlring") or not _ctlring.usable() or \
                os.environ.get("LOADERX_CTLRING", "1") == "0":
            return False
        if self._choice.kind == "process" or self.with_indices or self.with_sources:
            return False
        for src in (self.sources or [self.streams]):
            for name, ds in src.items():
                if isinstance(ds, ImageDataset):
                    return False
                if not isinstance(ds, DenseDataset) and (self.pack is None or
                                                         name not in self.pack):
                    return False
        return True

    def _expected_length(self):
        """What a reopen expects: the length, or a mixture's lengths per source."""
        return self.length if self.sources is None else self.source_lengths

    def _close_session(self):
        session, self._session = self._session, None
        if session is None:
            return
        self._skipped_before += session.images_skipped
        if self._procs is not None and not self._procs.closed:
            # no worker may read the session's slots after it: stop them (they
            # start again on the next batch)
            self._procs.reset()
        self._end = None
        session.detach()
        for f in self._futures:
            f.cancel()
        self._futures.clear()
        session.close()

    def _start_procs(self):
        from . import _arena, _procpool
        budget = _arena.default_budget() if self._arena_bytes is None else self._arena_bytes
        self._procs = _procpool.ProcessPool(self._choice, self.num_workers, self._session.layout,
                                            self.seed, self.rank, budget)

    @property
    def workers(self):
        """Where the transform runs: ``'process'``, ``'thread'`` or ``'inline'``
        (``stats()['workers']`` says why)."""
        return self._choice.kind

    def close(self) -> None:
        """Closes the loader and stops its workers; batches still referenced stay
        readable."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._procs is not None:
                self._procs.close()
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
            if self._procs is not None:
                self._procs.abandon()
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

    def state_dict(self) -> Dict[str, Any]:
        """What resumes this loader exactly (a small dict of ints and strings; a
        mixture's also its sources' weights, samplers and lengths). The
        fingerprint is its 16 hexadecimal digits, a string, so that the state
        survives JSON read where numbers are doubles (it is a 64-bit value)."""
        state = {"version": _STATE_VERSION, "step": self._step, "sampler": self.sampler,
                 "seed": self.seed, "batch_size": self.batch_size, "rank": self.rank,
                 "world_size": self.world_size, "length": self.length,
                 "fingerprint": None if self._fingerprint is None else f"{self._fingerprint:016x}",
                 "streams": list(self.names)}
        if self.sources is not None:
            state["sources"] = [{"weight": w, "sampler": s, "length": n} for w, s, n in
                                zip(self.weights, self.source_samplers,  # type: ignore[call-overload]
                                    self.source_lengths)]       # (all lists with sources)
        return state

    def load_state_dict(self, state: Mapping[str, Any], allow_length_change: bool = False) -> None:
        """Continues from a state_dict(): the next batch is that of state['step'].

        The state may come from another rank, and from a run of another world size
        with the same global batch (``batch_size × world_size``): the steps' global
        batches do not depend on how they are sharded, so a run resumed on another
        number of nodes goes on with the same sequence. Refuses (StaleError) when the
        stores' length or fingerprint differs from the state's, since the batches
        would differ; ``allow_length_change=True`` resumes anyway.
        """
        check_resume(state, self.state_dict())
        with self._lock:
            if self._closed:
                raise ZrecordValueError("load_state_dict on a closed DataLoader")
            self._close_session()
            if allow_length_change:
                length = None
            elif self.sources is not None:
                length = [src.get("length") for src in state["sources"]]
                length = None if None in length else length
            else:
                length = state.get("length")
            fingerprint = _check_fingerprint(None if allow_length_change else
                                             state.get("fingerprint"))
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

    # ------------------------------------------------------------ provenance
    def _source_of(self, stream):
        """The source a steps_of() record belongs to (a mixture's), from `stream`."""
        if self.sources is None:
            if stream is not None and stream not in self.names and \
                    not any(stream is ds for ds in self.streams.values()):
                raise ZrecordValueError(f"steps_of: {stream!r} is no stream of this loader "
                                        f"({', '.join(map(repr, self.names))})")
            return None
        if stream is None:
            if len(self.sources) == 1:
                return 0
            raise ZrecordValueError(
                "steps_of: a record of a mixture is a record of one source: give stream= its "
                f"number (0..{len(self.sources) - 1}) or one of its datasets")
        if isinstance(stream, (int, np.integer)) and not isinstance(stream, bool):
            if not 0 <= stream < len(self.sources):
                raise ZrecordValueError(f"steps_of: source {stream} of a mixture of "
                                        f"{len(self.sources)}")
            return int(stream)
        for k, src in enumerate(self.sources):
            if any(stream is ds for ds in src.values()):
                return k
        raise ZrecordValueError(f"steps_of: {stream!r} is no source's dataset of this mixture")

    def steps_of(self, record, stream=None, start=0, stop=None, *, progress=None):
        """Which steps of this run read record ``record``, on which rank and where:
        a list of ``(step, rank, position)`` tuples, ascending, for every step of
        ``[start, stop)`` (``stop`` defaults to :attr:`step`, the steps this loader
        has returned so far counting from 0), every rank of ``world_size`` (the
        record is at ``position`` in that rank's batch). A mixture's record is a
        record of one source: ``stream`` is its number or one of its datasets.

        The daemon answers (it is the one implementation of the samplers): a
        cyclic sampler is run backwards in O(1) per cycle and sequential by
        arithmetic, but iid has no inverse, so its range is scanned, every
        position of every step. The daemon answers in pieces of bounded work;
        ``progress(done, total)`` (steps), if given, is called after each.

        On a packed loader the record is a document of the packed stream, and
        a hit is a row that holds a piece of it (``position``: the row in that
        rank's batch); a document that spans rows is a hit in each. The daemon
        walks its cycles' indexes (loaded from disk, or built and kept).
        """
        if isinstance(record, bool) or not isinstance(record, (int, np.integer)) or record < 0:
            raise ZrecordTypeError(f"steps_of: the record must be an index >= 0, got {record!r}")
        source = self._source_of(stream)
        start = int(start)
        stop = self._step if stop is None else int(stop)
        session = self._session
        if session is None or session.pid != os.getpid() or session.conn.closed:
            raise ZrecordValueError("steps_of needs an open DataLoader (its lengths and its "
                                    "connection)")
        conn = session.conn
        if not conn.has_feature("steps_of"):
            raise ZrecordRuntimeError(
                f"this zrecordd ({conn.daemon}) cannot say which steps saw a record (no "
                "\"steps_of\" feature in its HELLO reply); update the daemon")
        q = {"sampler": self.sampler, "batch_size": self.batch_size, "seed": self.seed,
             "world_size": self.world_size, "record": int(record), "stop": stop}
        if source is None:
            q["n"] = self.length
        else:
            q["sources"] = [dict({"n": n, "weight": w}, **({"sampler": smp} if smp else {}))
                            for n, w, smp in zip(self.source_lengths, self.weights,
                                                 self.source_samplers)]
            q["source"] = source
        if self.pack is not None:
            # the rows that hold a piece of the document: the daemon walks its
            # cycles' indexes, over the dataset of the packed stream (a mixture's:
            # of the record's source)
            name = next(iter(self.pack))
            ds = (self.streams if source is None else self.sources[source])[name]
            q["pack"] = dict(self.pack[name])
            q["handle"] = ds._h.h()
            conn = ds._h.conn
        out = []
        at = start
        while at < stop:
            r = conn.request("steps_of", dict(q, start=at), context="steps_of")
            nxt = int(r["next"])
            hits = _wire.from_u64s(r["hits"])
            if len(hits) % 3 or not at < nxt <= stop:
                raise ZrecordRuntimeError(
                    f"zrecordd broke the protocol: a STEPS_OF reply of {len(hits)} values and "
                    f"next {nxt} after asking for steps [{at}, {stop})", name="ZR_E_PROTO")
            cols = hits.reshape(-1, 3).T
            out.extend(zip(cols[0].tolist(), cols[1].tolist(), cols[2].tolist()))
            at = nxt
            if progress is not None:
                progress(at - start, stop - start)
        return out

    # ------------------------------------------------------------ batches
    def __iter__(self) -> "DataLoader":
        return self

    def _fetch(self, raw=False, block=True):
        """The next batch from the ring, as views (raw: as the session's Taken),
        waiting until the daemon announces it; with block=False, None when it
        has not yet. A raw fetch that finds the loader's end keeps it for its
        step (self._end) and returns None."""
        session = self._session
        if session is None:
            raise ZrecordValueError(
                "the DataLoader is closed" if self._closed else
                "the DataLoader has no open loader (a load_state_dict() failed): call "
                "load_state_dict() again, e.g. with allow_length_change=True")
        if session.pid != _conn.current_pid() or session.conn.closed:   # forked child: reconnect
            self._reopen_after_fork()
            session = self._session
        ctl = session.ctl
        while True:
            if ctl is not None:
                t = session.take_ctl()
                if t is not None:
                    self._fetched_step = t.step
                    if raw:
                        return t
                    mapped = session.rings[t.ring][0]
                    return build_batch(session.layout, t, mapped.mm, mapped.address, t.owner,
                                       session.templates)
            ev = self._next_event(session, block)
            if ev is _AGAIN:
                continue
            if ev is _NOTHING:
                return None
            if ev is None:
                return self._after_disconnect(raw, block)
            msg, fds = ev
            kind = msg.get("kind")
            if kind == "ring":
                session.add_ring(msg, fds)
                continue
            for fd in fds:
                os.close(fd)
            if kind == "wake":
                continue
            if ctl is not None and kind in ("loader_end", "batch") and session.ctl_ready():
                # announced in the control memory before this event was sent
                session.conn.unpoll_event(session.loader, (msg, []))
                continue
            if kind == "ring_close":
                session.close_ring(msg)
            elif kind == "loader_end":
                if _errors.is_code(msg, "ZR_E_SHUTDOWN"):
                    return self._after_disconnect(raw, block)
                if not raw:
                    return self._loader_end(msg, raw, block)
                try:
                    return self._loader_end(msg, raw, block)
                except _errors.ZrecordError as e:
                    self._end = (int(msg.get("step", session.next_step)), e)
                    return None
            elif kind == "batch":
                t = session.take(msg)
                self._fetched_step = t.step
                if raw:
                    return t
                mapped = session.rings[t.ring][0]
                return build_batch(session.layout, t, mapped.mm, mapped.address, t.owner,
                                   session.templates)

    def _next_event(self, session, block=True):
        """The loader's next event, waiting for it (block=False: _NOTHING if none
        has come); None if the connection is gone; _AGAIN if the control memory
        may announce the next batch now."""
        if session.ctl is not None:
            return self._next_event_ctl(session, block)
        session.flush_due()
        ev = session.conn.poll_event(session.loader)
        if ev is not None:
            return ev
        session.conn.dispatch_buffered()
        ev = session.conn.poll_event(session.loader)
        if ev is not None:
            return ev
        session.flush()     # what was held back, before any wait
        if session.closed or session.conn.broken is not None:
            return None
        if not block:
            session.conn.pump()
            ev = session.conn.poll_event(session.loader)
            if ev is not None:
                return ev
            return None if session.conn.broken is not None else _NOTHING
        if not self._may_wait(session):
            return None
        t0 = time.monotonic_ns()
        try:
            return session.conn.wait_event(session.loader)
        except ZrecordConnectionError:
            return None
        finally:
            self._blocked_ns += time.monotonic_ns() - t0

    def _may_wait(self, session):
        """Before blocking for the next batch: False if the session is gone; raises if
        every slot is held by a batch still referenced (waiting would deadlock)."""
        if len(session.held) >= session.slots:
            gc.collect()
            session.flush()
            if session.closed or session.conn.broken is not None:
                return False
            if len(session.held) >= session.slots:
                raise ZrecordRuntimeError(
                    f"every ring slot of this DataLoader ({session.slots}, "
                    f"prefetch={self.prefetch}) is held by a batch that is still referenced, so "
                    "the daemon cannot deliver the next one (waiting would deadlock). Drop "
                    "references to old batches (copy what you keep: np.array(v)), or create "
                    "the DataLoader with a larger prefetch=")
        return True

    def _next_event_ctl(self, session, block):
        """_next_event() of a loader with control memory: the socket's events
        first, then a short look at the control memory, then (the releases
        written and the daemon rung if it wants them) the flag `waiting` and a
        bounded wait on the socket for a WAKE or any other event."""
        ctl = session.ctl
        conn = session.conn
        session.flush_due()
        ev = conn.poll_event(session.loader)
        if ev is not None:
            return ev
        conn.dispatch_buffered()
        ev = conn.poll_event(session.loader)
        if ev is not None:
            return ev
        if session.ctl_ready():
            return _AGAIN
        session.flush()     # and DOORBELL if the daemon waits for a slot
        if session.closed or conn.broken is not None:
            return None
        if block and _CTL_SPIN_NS > 0 and session.slot_bytes <= _CTL_SPIN_MAX:
            end = time.perf_counter_ns() + _CTL_SPIN_NS
            while time.perf_counter_ns() < end:
                if session.ctl_ready():
                    return _AGAIN
        if not block:
            conn.pump()
            ev = conn.poll_event(session.loader)
            if ev is not None:
                return ev
            if session.ctl_ready():
                return _AGAIN
            return None if conn.broken is not None else _NOTHING
        if not self._may_wait(session):
            return None
        t0 = time.monotonic_ns()
        ctl.set_waiting(True)
        try:
            if session.ctl_ready():
                return _AGAIN
            ev = conn.wait_event(session.loader, timeout=_CTL_WAIT_S)
            if ev is None:
                session.ctl_flush(force=True, always=True)
                return _AGAIN
            return ev
        except ZrecordConnectionError:
            return None
        finally:
            if session.ctl is ctl:
                ctl.set_waiting(False)
            self._blocked_ns += time.monotonic_ns() - t0

    def _after_disconnect(self, raw=False, block=True):
        """The daemon went away (a restart): reconnect and reopen at the next step.
        Batches are a pure function of the step, so the run goes on exactly; a store
        whose length changed meanwhile is refused (StaleError). (Worker processes
        still reading the old rings keep them mapped: nobody writes them again.)"""
        session, self._session = self._session, None
        session.detach()
        conn = session.conn
        if not conn.closed and conn.pid == os.getpid():
            conn.drop_events(session.loader)    # a RING's descriptor among them is closed
        if conn is _conn._default:
            # a drain announced by LOADER_END: the connection closes next
            conn.mark_broken("the daemon is shutting down")
        _conn.reconnect()
        self._open(session.next_step, self._expected_length())
        return self._fetch(raw, block)

    def _loader_end(self, msg, raw=False, block=True):
        session = self._session
        step = int(msg.get("step", session.next_step))
        text = msg.get("message", "")
        if _errors.is_code(msg, "ZR_E_BUFFER"):
            # a ragged batch outgrew its region: reopen at that step with twice the room
            for name, (_, cap), (_, item_shape, _) in zip(self.names, session.regions,
                                                          session.layout.kinds):
                if item_shape is None:
                    self._capacity[name] = max(self._capacity.get(name, 0), cap) * 2
            if self._procs is not None:
                self._procs.drain()    # the steps before it, still read by workers
            session, self._session = self._session, None
            session.detach()
            session.close()
            self._open(step, self._expected_length())
            return self._fetch(raw, block)
        if _errors.is_code(msg, "ZR_E_STALE"):
            raise StaleError(
                f"a store of this DataLoader was appended to, deleted from or compacted; the "
                f"loader stopped before step {step} ({text}). To go on over the changed data: "
                "loader.load_state_dict(loader.state_dict(), allow_length_change=True)",
                name="ZR_E_STALE")
        raise _errors.from_reply(msg, context=f"the DataLoader stopped at step {step}")

    def _reopen_after_fork(self):
        # The parent's ring, pool threads, worker processes and pipeline are not
        # this process's: open a loader of our own on the child's connection, at
        # the step not yet returned (the workers start again on first use).
        session, self._session = self._session, None
        if session is not None:
            session.detach()
        if self._procs is not None:
            self._procs.abandon()
            self._procs = None
        self._end = None
        self._futures = collections.deque()
        self._pool = None
        self._lock = threading.RLock()
        self._open(self._step, None)

    def __next__(self) -> Any:               # a batch, or what the transform made of it
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
            f"time ({st['batches_per_s']['10s']:.1f} batches/s over the last "
            f"{st['window_s']:.3g} s); the loader's time "
            f"goes mostly to {st['stage']} (loader.stats() has the figures; "
            "docs/TELEMETRY.md says what helps)"), stacklevel=3)

    def stats(self) -> Dict[str, Any]:
        """Is the loop waiting for data, and why: the daemon's telemetry of this
        loader (docs/TELEMETRY.md), as a dict.

        ``verdict``: ``'data-bound'`` (the loop waited more than 5 % of the last
        10 s), ``'consumer-bound'``, ``'balanced'``, ``'idle'`` or ``'unknown'``
        (also under a second past the wait for the first batch: too soon to judge);
        ``stage``: where the loader's batch time went (``'lookup'`` locating
        records, ``'io'`` reading them, ``'decode'``, ``'copy'``, ``'contention'``
        with other loaders, ``'remote'``, or ``'none'``);
        ``wait_fraction``, ``batches_per_s``, ``mib_per_s``: over ``'1s'``,
        ``'10s'`` and ``'60s'``; ``wait_p50_s``/``wait_p99_s`` (the loop's wait
        per batch), ``ready_p50_s``/``ready_p99_s`` (how long a ready batch
        waited for the loop), ``gather_p50_s``/``gather_p99_s``; ``stages_s``:
        seconds of the last 10 s by stage (lookup, read, decode, copy, io_wait,
        queue); ``waited_s``: the waits the daemon was told of since open;
        ``cache_hit_ratio`` (None without lookups), ``device_bytes``,
        ``prefetch_depth``, ``step``, ``batches``; ``images_skipped``: records of
        image streams with ``on_error='skip'`` that did not decode and were served
        as zeros (docs/IMAGES.md); ``local``: what this process
        measured itself (``wait_s``: blocked on the daemon within ``next()``, as
        told to the daemon; ``next_s``: all the time in ``next()``, transforms and
        building the arrays included; ``elapsed_s``; ``batches``); ``workers``:
        where the transform runs and why (``kind``: ``'process'``, ``'thread'`` or
        ``'inline'``; ``why``; ``count``), and with processes their ``pids``,
        ``restarts``, per batch the hop between processes (``hop_s``: handing the
        batch over and the result back, the one write of its arrays apart; its
        medians by part in ``hop_parts_s``: ``send`` (all of the loader's work for
        the task: the arena's buffer, the arrays of the answer expected), the worker's ``wake`` when it
        waited for the task, ``intake``, ``encode``, ``back`` (the loader's wake-up
        when it waited for the answer), ``recv``, ``decode``), that
        write (``write_s``) and the transform (``transform_s``), the bytes pickled
        into messages (``pickled_bytes``) and the ``arena``: its ``budget``,
        ``bytes`` and ``peak_bytes`` of buffers, ``buffers`` (``free``, ``live``),
        ``results`` written there, ``over_budget`` results that found no room and
        came pickled, ``written_bytes``; ``ranks``: this
        loader's ``rank`` and ``world_size`` and where they came ``from``
        (``'given'``, ``'torch.distributed'``, ``'environment'`` or ``'default'``).
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
        out = _stats_of(entries[0], self)
        out["images_skipped"] = self._skipped_before + session.images_skipped
        return out

    def _workers_stats(self):
        out = {"kind": self._choice.kind, "why": self._choice.why,
               "count": 0 if self._choice.kind == "inline" else self.num_workers}
        if self._procs is not None:
            out.update(self._procs.stats())
        return out

    def _next_batch(self):
        if self._session is not None and self._session.pid != _conn.current_pid():
            self._reopen_after_fork()
        with self._lock:
            if self._closed:
                raise StopIteration
            if self._choice.kind == "process":
                return self._next_processed()
            if self._choice.kind == "inline":
                b = self._fetch()
                step = self._fetched_step
                self._step += self.step_stride
                if self.transform is not None:      # num_workers=0: inline
                    b = self._call(b, step)
                return b
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.num_workers, thread_name_prefix="loaderx-transform")
            if not self._futures:
                b = self._fetch()
                self._futures.append(self._pool.submit(self._call, b, self._fetched_step))
            fut = self._futures.popleft()
            self._fill()
            try:
                return fut.result()
            finally:
                self._step += self.step_stride

    def _call(self, batch, step):
        return _xform.call(self.transform, self._wants, batch, self.seed, step, self.rank,
                           self.batch_size)

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
            self._futures.append(self._pool.submit(self._call, raw, self._fetched_step))
            session = self._session

    # ------------------------------------------------------------ processes
    def _next_processed(self):
        """The next batch with the transform in worker processes (_procpool)."""
        procs = self._procs
        if procs is None or procs.closed:
            self._start_procs()
            procs = self._procs
        try:
            procs.start()               # workers stopped by a Ctrl-C come back
            while True:
                r = procs.take(self._step)
                if r is not None:
                    break
                if procs.broken is not None:
                    raise procs.broken
                if self._end is not None and self._end[0] <= self._step:
                    raise self._end[1]
                self._feed(block=False)
                r = procs.take(self._step)
                if r is not None:
                    break
                if procs.inflight() == 0:
                    if self._end is not None:
                        raise self._end[1]
                    if procs.broken is None:
                        self._feed(block=True)       # nothing in flight: wait for the daemon
                    continue
                session = self._session
                also = [session.conn.fileno()] if (
                    self._can_feed() and session.conn.usable and not session.conn.reading) else []
                t0 = time.monotonic_ns()
                procs.poll(None, also)
                self._blocked_ns += time.monotonic_ns() - t0
        except BaseException as e:
            if not isinstance(e, Exception):    # Ctrl-C (KeyboardInterrupt), SystemExit
                procs.kill()
            raise
        self._step += self.step_stride
        if r[0] == "ok":
            return r[1]
        if r[0] == "error":
            raise r[1]
        return self._unshippable(r[1], r[2])

    def _feed(self, block):
        """Sends the workers the steps they can take now: those of dead workers,
        then batches the daemon has announced (block: waits for one)."""
        procs = self._procs
        procs.resend()
        while self._can_feed():
            t = self._fetch(raw=True, block=block)
            if t is None:
                return
            procs.note_rings(self._session)
            procs.submit(t, self._session.serial)
            block = False

    def _can_feed(self):
        """True if a worker can take the next step now: one has room, the steps
        sent and not yet returned are fewer than the window, a slot is free (each
        task holds one), and the loader has not ended."""
        procs, session = self._procs, self._session
        if session is None or self._end is not None or not procs.room():
            return False
        if (session.next_step - self._step) // self.step_stride >= procs.window:
            return False
        session.flush()
        return len(session.held) < session.slots

    def _unshippable(self, why, task):
        """A result that must not leave its worker (a tensor on a device): an
        error with workers='process'; else the loader moves to threads, and the
        steps in flight are run again here (their slots are still held)."""
        procs = self._procs
        text = (f"the transform's output holds {why}, which must stay in the process that "
                "made it (a copy to a device belongs in the training process, or in "
                "workers='thread')")
        if self._choice.why == "workers='process'":
            task.taken = None
            raise ZrecordValueError(f"workers='process' at step {task.step}: {text}")
        procs.drain()
        done = {task.step: ("run", task)}
        done.update(procs.results)
        procs.results = {}
        maps = {}
        for r in done.values():
            if r[0] != "ok" and r[0] != "error":
                t = task if r[0] == "run" else r[2]
                if t.key not in maps:
                    maps[t.key] = procs.ring_view(t.key)
        procs.close()
        self._procs = None
        self._choice = _xform.Choice("thread", text + ": moved to threads")
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.num_workers, thread_name_prefix="loaderx-transform")
        first = None
        for step in sorted(done):
            r = done[step]
            if r[0] in ("run", "unshippable"):
                t = task if r[0] == "run" else r[2]
                mapped = maps[t.key]
                b = build_batch(self._session.layout, t.taken, mapped.mm, mapped.address,
                                t.taken.owner)
                f = self._pool.submit(self._call, b, step)
            else:
                f = concurrent.futures.Future()
                if r[0] == "ok":
                    f.set_result(r[1])
                else:
                    f.set_exception(r[1])
            if first is None:
                first = f
            else:
                self._futures.append(f)
        return first.result()

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
        "workers": loader._workers_stats(),
        "ranks": {"rank": loader.rank, "world_size": loader.world_size,
                  "from": loader._ranks_from},
        "local": {"wait_s": loader._wait_ns / 1e9,
                  "next_s": loader._next_ns / 1e9,
                  "elapsed_s": (now - loader._opened_ns) / 1e9,
                  "batches": loader._returned},
    }
