"""Encoded images: stores of JPEG and PNG files, decoded by the daemon.

``from_images(dst, sources)`` writes encoded JPEG and PNG files into an image
store at ``dst``, each file one record of its own bytes, never re-encoded; every
record's header is checked first and one that is not an image is refused with
its name (``_imghead.py``). ``ImageDataset(path, size=..., crop=..., flip=...)``
is that store as a stream of a :class:`~loaderx.dataloader.DataLoader`: the
daemon's workers decode, crop, resize and flip every record straight into the
ring, so the stream's batch is a ``uint8`` array ``(batch_size, H, W, C)``.
docs/IMAGES.md is the reference: the store, the decode, the crop function, the
bounds.

An image store is a byte store (loaderx 1.5.7's raw ``Zrecord`` layout: each
record the file's bytes, no header) with a ``schema.msgpack`` of its facts:
``{"kind": "ragged", "dtype": "|u1", "ndim": 1, "codec": ..., "layout": "bytes",
"image": {"formats": [...], "channels": c, "height": h, "width": w,
"max_pixels": p}}``, where channels, height and width are 0 when records
differ. Facts only widen as records are appended (a format added, a size no
longer shared, a larger maximum), so facts written for an append that was then
undone still hold for what the store keeps. loaderx 1.5.7's ``Zrecord`` reads the same records (it reads no
schema); ``ds[i]`` here gives a record's bytes as a ``uint8`` array, which
``PIL.Image.open(io.BytesIO(ds[i]))`` opens.
"""

import io
import os
import stat
import tarfile

import msgpack
import numpy as np

from . import _conversion, _imghead, _store
from ._conversion import conversion
from ._errors import ZrecordTypeError, ZrecordValueError
from .dataset import RaggedDataset

__all__ = ["ImageDataset", "from_images", "IMAGE_EXTENSIONS", "CROPS"]

#: the file names whose members of a tar (a WebDataset shard) or a directory
#: are images: the part after the last dot, any case
IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png"})
#: ImageDataset's crops
CROPS = ("random_resized", "center", None)
_CHUNK_BYTES = 32 << 20
_CHUNK_RECORDS = 32768
_MAX_PIXELS = 1 << 26       # the daemon's ZR_IMAGE_PIXELS_MAX (image/image.h)
_SIDE_MAX = 32768           # an output's side at most (ZR_IMAGE_OUT_SIDE_MAX)


def _is_image_name(name):
    base = os.path.basename(name)
    return "." in base and base.rsplit(".", 1)[1].lower() in IMAGE_EXTENSIONS


def _tar_items(path):
    with tarfile.open(path, "r:*") as tf:
        for m in tf:
            if m.isfile() and _is_image_name(m.name):
                f = tf.extractfile(m)
                yield f"{path}:{m.name}", f.read()


def _dir_items(path):
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for f in sorted(files):
            if _is_image_name(f):
                p = os.path.join(root, f)
                with open(p, "rb") as fh:
                    yield p, fh.read()


def _path_items(p):
    p = os.fspath(p)
    st = os.stat(p)
    if stat.S_ISDIR(st.st_mode):
        yield from _dir_items(p)
    elif tarfile.is_tarfile(p) and not _is_image_name(p):
        yield from _tar_items(p)
    else:
        with open(p, "rb") as fh:
            yield p, fh.read()


def _items(sources):
    """(name, bytes) of every record, in order."""
    if isinstance(sources, (str, os.PathLike)):
        yield from _path_items(sources)
        return
    if isinstance(sources, (bytes, bytearray, memoryview)):
        yield "record 0", bytes(sources)
        return
    try:
        it = iter(sources)
    except TypeError:
        raise ZrecordTypeError("from_images takes a path (a file, a directory, a tar), bytes, "
                               f"or an iterable of those, not {type(sources).__name__}") from None
    for k, x in enumerate(it):
        if isinstance(x, (str, os.PathLike)):
            yield from _path_items(x)
        elif isinstance(x, (bytes, bytearray, memoryview)):
            yield f"item {k}", bytes(x)
        elif isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.ndim == 1:
            yield f"item {k}", x.tobytes()
        else:
            raise ZrecordTypeError(f"from_images: item {k} is a {type(x).__name__}, not a path "
                                   "or bytes")


class _Facts:
    """The store-wide facts of the records written (docs/IMAGES.md)."""

    def __init__(self, old=None):
        self.formats = set(old.get("formats", ())) if old else set()
        self.channels = int(old.get("channels", 0)) if old else None
        self.size = (int(old.get("height", 0)), int(old.get("width", 0))) if old else None
        self.max_pixels = int(old.get("max_pixels", 0)) if old else 0

    def add(self, h):
        self.formats.add(h.format)
        self.channels = h.channels if self.channels in (None, h.channels) else 0
        self.size = (h.height, h.width) if self.size in (None, (h.height, h.width)) else (0, 0)
        self.max_pixels = max(self.max_pixels, h.height * h.width)

    def as_map(self):
        h, w = self.size or (0, 0)
        return {"formats": sorted(self.formats), "channels": self.channels or 0,
                "height": h, "width": w, "max_pixels": self.max_pixels}


def _write_schema(path, codec, facts):
    """schema.msgpack of an image store at path: a temporary file, fsync, rename,
    the directory fsynced."""
    from .utils import _write_file     # utils imports this module
    _write_file(os.path.join(path, _store.SCHEMA_FILE),
                msgpack.packb({"kind": "ragged", "dtype": "|u1", "ndim": 1, "codec": codec,
                               "layout": "bytes", "image": facts.as_map()}))
    _conversion._fsync_dir(path)


def from_images(dst, sources, codec="raw"):
    """Writes encoded images into the image store at ``dst``; returns the number of
    records written.

    ``sources``: a path (an image file; a directory, whose ``.jpg``, ``.jpeg`` and
    ``.png`` files are taken in sorted order, subdirectories too; a tar, such as a
    WebDataset shard, whose image members are taken in the archive's order, other
    members skipped), bytes, or an iterable of those (and of 1-D ``uint8``
    arrays). Each file is one record of its own bytes, not re-encoded. Every
    record's header is checked first: one that is not a JPEG or PNG (or a CMYK
    JPEG, which the daemon does not decode) is refused with its name and nothing
    is written (:class:`ValueError`). An existing image store at ``dst`` is
    appended to, its facts merged. ``codec``: ``'raw'`` (the default: JPEG and
    PNG are compressed already) or ``'zstd'``. All or nothing, Ctrl-C included
    (:func:`loaderx.utils.conversion`).
    """
    if codec not in ("raw", "zstd"):
        raise ZrecordValueError(f"from_images: codec {codec!r}: 'raw' or 'zstd' (JPEG and PNG "
                                "are compressed already)", name="ZR_E_BAD_CODEC")
    count = 0
    with conversion(dst) as c:
        if c.new:
            ds = RaggedDataset(c.path, dtype="|u1", codec=codec, ndim=1, _layout="bytes")
            facts = _Facts()
        else:
            ds = RaggedDataset(c.path)
            s = ds.schema
            if s.get("layout") != "bytes" or s.get("dtype") != "|u1" or \
                    (len(ds) and "image" not in s):
                ds.close()
                raise ZrecordValueError(
                    f"{c.target} holds a store that from_images did not write (layout "
                    f"{s.get('layout', 'zrecord')!r}, dtype {s.get('dtype')!r}): write the images "
                    "to a new store", name="ZR_E_SCHEMA")
            if ds.codec != codec:
                ds.close()
                raise ZrecordValueError(f"{c.target} holds codec {ds.codec!r}, not {codec!r}",
                                        name="ZR_E_SCHEMA")
            facts = _Facts(s.get("image") if len(ds) else None)
        c.add(ds)
        buf, nbytes = [], 0
        for k, (name, data) in enumerate(_items(sources)):
            try:
                h = _imghead.read_header(data)
            except _imghead.NotAnImage as e:
                raise ZrecordValueError(f"from_images: {name} (record {count + len(buf)} of "
                                        f"this call) is {e}", name="ZR_E_DECODE") from None
            if h.height * h.width > _MAX_PIXELS:
                raise ZrecordValueError(
                    f"from_images: {name} is {h.width} × {h.height}, over the daemon's limit of "
                    f"{_MAX_PIXELS} pixels", name="ZR_E_LIMIT")
            facts.add(h)
            buf.append(np.frombuffer(data, dtype=np.uint8))
            nbytes += len(data)
            if nbytes >= _CHUNK_BYTES or len(buf) >= _CHUNK_RECORDS:
                ds.append(buf)
                count += len(buf)
                buf, nbytes = [], 0
        if buf:
            ds.append(buf)
            count += len(buf)
        ds._store.sync()
        _write_schema(c.path, codec, facts)
    return count


def _pair(v, what):
    try:
        a, b = (float(x) for x in v)
    except (TypeError, ValueError):
        raise ZrecordTypeError(f"ImageDataset: {what} must be a pair of numbers, got {v!r}") \
            from None
    return [a, b]


class ImageDataset(RaggedDataset):
    """An image store as a stream of a DataLoader, decoded by the daemon.

    ``size=(H, W)``: the output's size; ``None`` serves the images at their own
    size, which every record of the store must share (the schema says so) and
    then ``crop`` must be None. ``crop``: ``'random_resized'`` (torchvision's
    RandomResizedCrop box: an area of ``scale`` of the image's and a width over
    height of ``ratio``, log-uniform), ``'center'`` (the centred box of the
    output's aspect ratio, each side ``fraction`` of the largest such box: 0.875
    is the usual resize-256-crop-224), or ``None`` (the whole image, resized to
    ``size``). ``flip``: mirror left-right, each record with probability 1/2. The
    box and flip of a record are a pure function of (seed, step, its position in
    the global batch): the same after a resume and at any world size with the
    same global batch (proto/AUGMENT.md). ``channels``: 3 (RGB) or 1 (gray).
    ``max_pixels``: refuse larger images (default: the store's largest, or 2^24).
    ``on_error``: ``'raise'`` (a record that does not decode ends the loader with
    an error naming it) or ``'skip'`` (it is zeros, counted in
    ``DataLoader.stats()['images_skipped']``).

    Outside a DataLoader it is the store itself: ``len(ds)``, and ``ds[i]`` gives
    record i's encoded bytes (``uint8``).
    """

    def __init__(self, path, size=None, crop=None, flip=False, scale=(0.08, 1.0),
                 ratio=(3 / 4, 4 / 3), *, channels=3, fraction=0.875, max_pixels=None,
                 on_error="raise"):
        if crop not in CROPS:
            raise ZrecordValueError(f"ImageDataset: crop {crop!r}: one of {CROPS}")
        if on_error not in ("raise", "skip"):
            raise ZrecordValueError(f"ImageDataset: on_error {on_error!r}: 'raise' or 'skip'")
        if channels not in (1, 3):
            raise ZrecordValueError(f"ImageDataset: channels {channels!r}: 1 or 3")
        if size is not None:
            try:
                h, w = (int(x) for x in size)
            except (TypeError, ValueError):
                raise ZrecordTypeError(f"ImageDataset: size must be (height, width), got "
                                       f"{size!r}") from None
            if not (1 <= h <= _SIDE_MAX and 1 <= w <= _SIDE_MAX):
                raise ZrecordValueError(f"ImageDataset: size {size!r}: each side 1..{_SIDE_MAX}")
            size = (h, w)
        elif crop is not None:
            raise ZrecordValueError("ImageDataset: a crop needs a size")
        scale, ratio = _pair(scale, "scale"), _pair(ratio, "ratio")
        if crop == "random_resized" and not (0 < scale[0] <= scale[1] <= 1):
            raise ZrecordValueError(f"ImageDataset: scale {scale}: 0 < lo <= hi <= 1")
        if crop == "random_resized" and not (0 < ratio[0] <= ratio[1]):
            raise ZrecordValueError(f"ImageDataset: ratio {ratio}: 0 < lo <= hi")
        if crop == "center" and not 0 < float(fraction) <= 1:
            raise ZrecordValueError(f"ImageDataset: fraction {fraction}: in (0, 1]")
        if max_pixels is not None and not 1 <= int(max_pixels) <= _MAX_PIXELS:
            raise ZrecordValueError(f"ImageDataset: max_pixels {max_pixels}: 1..{_MAX_PIXELS}")
        super().__init__(path)
        s = self.schema
        if s.get("dtype") != "|u1" or self.ndim != 1:
            self.close()
            raise ZrecordValueError(f"{self.path} is a ragged {s.get('dtype')} store of ndim "
                                    f"{self.ndim}, not a store of encoded images",
                                    name="ZR_E_SCHEMA")
        facts = s.get("image") or {}
        if size is None:
            size = (int(facts.get("height", 0)), int(facts.get("width", 0)))
            if not all(size):
                self.close()
                raise ZrecordValueError(
                    f"ImageDataset({self.path}): size=None serves the images at their own size, "
                    "and this store's " + ("differ in size" if facts else
                                           "schema does not say their size (not written by "
                                           "from_images)") + ": give a size",
                    name="ZR_E_SCHEMA")
            self._native = True
        else:
            self._native = False
        self.size = size
        self.crop = crop
        self.flip = bool(flip)
        self.channels = int(channels)
        self.on_error = on_error
        self._spec = {"crop": crop or "none", "flip": self.flip, "channels": self.channels}
        if not self._native:
            self._spec["size"] = list(size)
        if crop == "random_resized":
            self._spec["scale"], self._spec["ratio"] = scale, ratio
        if crop == "center":
            self._spec["fraction"] = float(fraction)
        if max_pixels is not None:
            self._spec["max_pixels"] = int(max_pixels)
        if on_error == "skip":
            self._spec["on_error"] = "skip"

    @property
    def image_shape(self):
        """The shape of one decoded record in a batch: (H, W, C)."""
        return (self.size[0], self.size[1], self.channels)

    def __repr__(self):
        return (f"ImageDataset({str(self.path)!r}, size={self.size}, crop={self.crop!r}, "
                f"flip={self.flip}, records={len(self)})")
