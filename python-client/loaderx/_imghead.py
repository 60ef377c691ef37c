"""The header of an encoded image, read without decoding it: format, size, channels.

``from_images`` checks every record with it before a byte is written (a record
that is not a JPEG or PNG is refused, naming it), and the store-wide facts it
writes into the schema (docs/IMAGES.md) come from it. The daemon reads each
record's header again, with libjpeg-turbo and libspng, when it decodes it: what
is checked here is a writer's courtesy, never the daemon's trust.

JPEG: the markers from SOI up to the first frame header (SOF0..SOF15 but DHT,
JPG and DAC), whose height, width and component count it takes; a stream
that reaches SOS or its end first, a zero height (DNL) or a component count
other than 1 or 3 (CMYK JPEGs are refused: the daemon does not decode them) is
not an image here. PNG: the signature and an IHDR chunk (its CRC checked) with
a valid bit depth for its colour type.
"""

import struct
import zlib

__all__ = ["ImageHeader", "NotAnImage", "read_header", "JPEG", "PNG"]

JPEG = "jpeg"
PNG = "png"
_PNG_SIG = b"\x89PNG\r\n\x1a\n"
# frame headers: C0-CF but C4 (DHT), C8 (JPG) and CC (DAC)
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
# channels served for each PNG colour type (alpha is dropped, a palette expands)
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 1, 6: 3}


class NotAnImage(ValueError):
    """The bytes are not a JPEG or PNG this reader accepts; the text says why."""


class ImageHeader(tuple):
    """(format, height, width, channels)."""
    __slots__ = ()

    def __new__(cls, fmt, height, width, channels):
        return tuple.__new__(cls, (fmt, height, width, channels))

    format = property(lambda s: s[0])
    height = property(lambda s: s[1])
    width = property(lambda s: s[2])
    channels = property(lambda s: s[3])


def _jpeg(b):
    n = len(b)
    i = 2
    while True:
        while i < n and b[i] != 0xFF:     # bytes between segments: tolerated, as libjpeg does
            i += 1
        while i < n and b[i] == 0xFF:     # fill bytes
            i += 1
        if i >= n:
            raise NotAnImage("a JPEG that ends before its frame header")
        m = b[i]
        i += 1
        if m == 0x01 or 0xD0 <= m <= 0xD7:
            continue                        # no length
        if m in (0xD9, 0xDA):
            raise NotAnImage("a JPEG whose frame header is missing (scan or end first)")
        if i + 2 > n:
            raise NotAnImage("a JPEG cut short in a marker segment")
        seg = struct.unpack_from(">H", b, i)[0]
        if seg < 2 or i + seg > n:
            raise NotAnImage("a JPEG marker segment of a bad length")
        if m in _SOF:
            if seg < 8:
                raise NotAnImage("a JPEG frame header too short")
            _, h, w, comps = struct.unpack_from(">BHHB", b, i + 2)
            if h == 0 or w == 0:
                raise NotAnImage(f"a JPEG of size {w} × {h} (a height set later by DNL is "
                                 "not read)")
            if comps not in (1, 3):
                raise NotAnImage(f"a JPEG of {comps} components ({'CMYK' if comps == 4 else 'not gray or colour'}): "
                                 "store it as RGB")
            return ImageHeader(JPEG, h, w, 1 if comps == 1 else 3)
        i += seg


def _png(b):
    if len(b) < 33:
        raise NotAnImage("a PNG cut short before the end of its IHDR chunk")
    length, ctype = struct.unpack_from(">I4s", b, 8)
    if ctype != b"IHDR" or length != 13:
        raise NotAnImage("a PNG whose first chunk is not a 13-byte IHDR")
    if zlib.crc32(b[12:29]) != struct.unpack_from(">I", b, 29)[0]:
        raise NotAnImage("a PNG whose IHDR fails its CRC")
    w, h, depth, color, comp, filt, lace = struct.unpack_from(">IIBBBBB", b, 16)
    if w == 0 or h == 0 or w >= 2 ** 31 or h >= 2 ** 31:
        raise NotAnImage(f"a PNG of size {w} × {h}")
    if depth not in _PNG_DEPTHS.get(color, ()):
        raise NotAnImage(f"a PNG of colour type {color} and bit depth {depth}")
    if comp or filt or lace > 1:
        raise NotAnImage("a PNG of an unknown compression, filter or interlace method")
    return ImageHeader(PNG, h, w, _PNG_CHANNELS[color])


def read_header(data):
    """The ImageHeader of encoded bytes (bytes, bytearray, memoryview or a uint8
    array), or NotAnImage."""
    b = memoryview(data).cast("B").tobytes() if not isinstance(data, bytes) else data
    if b[:3] == b"\xff\xd8\xff":
        return _jpeg(b)
    if b[:8] == _PNG_SIG:
        return _png(b)
    head = " ".join(f"{x:02x}" for x in b[:4])
    raise NotAnImage(f"not a JPEG or PNG ({len(b)} bytes, starting {head or 'with nothing'})")
