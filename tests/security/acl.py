"""POSIX ACLs read and written as the kernel's xattr blobs, for tests/security (the
test machine need not have setfacl): ``grant(path, uid, "rwx")`` adds a named-user
entry, ``entries(path)`` reads one back. The format is the kernel's
(``system.posix_acl_access`` / ``_default``: a version word 2, then {tag u16,
perm u16, id u32} little-endian entries sorted by tag and id), the one
daemon/store/newfile.c writes.
"""

import os
import struct

ACCESS, DEFAULT = "system.posix_acl_access", "system.posix_acl_default"
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
NO_ID = 0xFFFFFFFF
TAGS = {USER_OBJ: "user::", USER: "user:", GROUP_OBJ: "group::", GROUP: "group:",
        MASK: "mask::", OTHER: "other::"}


def perm_bits(text):
    return (4 if "r" in text else 0) | (2 if "w" in text else 0) | (1 if "x" in text else 0)


def perm_text(bits):
    return ("r" if bits & 4 else "-") + ("w" if bits & 2 else "-") + ("x" if bits & 1 else "-")


def _decode(blob):
    version, = struct.unpack_from("<I", blob)
    assert version == 2, version
    return [struct.unpack_from("<HHI", blob, 4 + 8 * i) for i in range((len(blob) - 4) // 8)]


def _encode(ents):
    ents = sorted(ents, key=lambda e: (e[0], e[2]))
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in ents)


def read(path, which=ACCESS):
    """[(tag, perm, id)], or None without an ACL."""
    try:
        return _decode(os.getxattr(path, which, follow_symlinks=False))
    except OSError:
        return None


def entries(path):
    """The ACL as getfacl prints it ("user:1001:rw-", ...), from the mode when there
    is none."""
    ents = read(path)
    if ents is None:
        m = os.stat(path).st_mode
        ents = [(USER_OBJ, (m >> 6) & 7, NO_ID), (GROUP_OBJ, (m >> 3) & 7, NO_ID),
                (OTHER, m & 7, NO_ID)]
    return sorted(TAGS[t] + ("" if i == NO_ID else str(i)) + (":" if t in (USER, GROUP) else "")
                  + perm_text(p) for t, p, i in ents)


def grant(path, uid, perms, default=False, group=False):
    """Adds (or replaces) user:uid:perms (group:gid with group=True) to path's access
    ACL, or to its default ACL (a directory's, for the files made in it), keeping the
    rest, with the mask the union of the group class."""
    which = DEFAULT if default else ACCESS
    ents = read(path, which)
    if ents is None:
        m = os.stat(path).st_mode
        ents = [(USER_OBJ, (m >> 6) & 7, NO_ID), (GROUP_OBJ, (m >> 3) & 7, NO_ID),
                (OTHER, m & 7, NO_ID)]
    tag = GROUP if group else USER
    ents = [e for e in ents if e[0] != MASK and not (e[0] == tag and e[2] == uid)]
    ents.append((tag, perm_bits(perms), uid))
    mask = 0
    for t, p, _ in ents:
        if t in (USER, GROUP_OBJ, GROUP):
            mask |= p
    ents.append((MASK, mask, NO_ID))
    os.setxattr(path, which, _encode(ents), follow_symlinks=False)
