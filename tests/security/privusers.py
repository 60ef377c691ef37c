"""Runs a command as a user inside a user namespace that maps only root and that
user (and root's and the user's group), as systemd's PrivateUsers=yes does: every
other uid and gid appears as the overflow id (65534) inside.

    python3 privusers.py UID GID GROUPS -- COMMAND [ARG...]

GROUPS: the supplementary gids, comma-separated (set before the namespace exists,
so they keep granting access while they show as 65534 inside). Run as root. The
command replaces this process (its pid is this pid). A helper child, still in the
parent namespace, writes the maps: a process cannot map ids of the parent
namespace into its own new namespace by itself.
"""

import ctypes
import os
import sys

CLONE_NEWUSER = 0x10000000


def main(argv):
    if len(argv) < 5 or argv[4] != "--":
        sys.stderr.write(__doc__)
        return 2
    uid, gid = int(argv[1]), int(argv[2])
    groups = [int(g) for g in argv[3].split(",") if g]
    cmd = argv[5:]
    libc = ctypes.CDLL(None, use_errno=True)

    os.setgroups(groups)
    ready_r, ready_w = os.pipe()
    helper = os.fork()
    if helper == 0:
        os.close(ready_w)
        os.read(ready_r, 1)               # the parent is in its namespace now
        target = os.getppid()
        with open(f"/proc/{target}/uid_map", "w") as f:
            f.write(f"0 0 1\n{uid} {uid} 1\n")
        with open(f"/proc/{target}/gid_map", "w") as f:
            f.write(f"0 0 1\n{gid} {gid} 1\n")
        os._exit(0)
    os.close(ready_r)
    if libc.unshare(CLONE_NEWUSER) != 0:
        e = ctypes.get_errno()
        sys.stderr.write(f"privusers: unshare(CLONE_NEWUSER): {os.strerror(e)}\n")
        return 1
    os.write(ready_w, b"x")
    _, status = os.waitpid(helper, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.stderr.write("privusers: writing the uid and gid maps failed\n")
        return 1
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
