"""A memory cgroup for one contender of the beyond-memory layer, and the
page-cache drop before it.

    cg, why = MemCgroup.create(limit_bytes, device)   # None and a reason if it cannot
    proc = subprocess.Popen(cg.wrap(argv), ...)         # the child starts inside it
    ...
    cg.remove()                                         # kills what is left, rmdir

A cgroup is made under this process's own cgroup, as root only: cgroup v1
(`memory.limit_in_bytes`, and a `blkio` group beside it for the read
accounting) where the memory controller is mounted as v1, else v2
(`memory.max`, and `io.stat` when the io controller is enabled). The child
joins it before it execs (`wrap()`), so everything it starts (a daemon,
loader workers) is inside from its first page on.

Bytes read from the device, by the best source there is:
  - v1: `blkio.throttle.io_service_bytes_recursive` of the blkio group; v1
    counts bios there only while a throttle rule exists for the device, so the
    group gets a read limit of 1 PiB/s on the data's device (never reached);
  - v2: `rbytes` of `io.stat`;
  - else the caller falls back to /proc/PID/io or the block device's counters
    (device_read_bytes()).

Names are `zrecord-beyond.<pid>.<n>`; create() first removes such groups left
by a run that died (their pid gone, no process inside).
"""

import errno
import os
import signal
import time

PREFIX = "zrecord-beyond."
HUGE_BPS = 1 << 50


def _mounts():
    """{controller or 'cgroup2': mount point} from /proc/self/mountinfo."""
    out = {}
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                rfields = right.split()
                if len(fields) < 5 or not rfields:
                    continue
                mnt, fstype = fields[4], rfields[0]
                if fstype == "cgroup2":
                    out.setdefault("cgroup2", mnt)
                elif fstype == "cgroup" and len(rfields) >= 3:
                    for opt in rfields[2].split(","):
                        out.setdefault(opt, mnt)
    except OSError:
        pass
    return out


def _self_paths():
    """{controller: path} from /proc/self/cgroup ('' for the v2 line)."""
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, ctrls, path = line.rstrip("\n").split(":", 2)
            if hid == "0" and ctrls == "":
                out[""] = path
            for c in ctrls.split(","):
                if c:
                    out[c] = path
    return out


def _read(path, default=None):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def _write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _sweep(parent):
    """Removes groups of this layer left under `parent` by a run that died."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(PREFIX):
            continue
        try:
            pid = int(name[len(PREFIX):].split(".")[0])
        except ValueError:
            continue
        p = os.path.join(parent, name)
        if pid == os.getpid() or _alive(pid) or (_read(os.path.join(p, "cgroup.procs"), "") or "").strip():
            continue
        try:
            os.rmdir(p)
        except OSError:
            pass


def device_of(path):
    """'major:minor' of the block device holding `path`, or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def device_read_bytes(dev):
    """Bytes read so far from block device 'major:minor' (its sysfs stat: the
    whole machine's reads, not only the contender's); None if unknown."""
    if not dev:
        return None
    s = _read(f"/sys/dev/block/{dev}/stat")
    if not s:
        return None
    return int(s.split()[2]) * 512


def drop_caches():
    """sync, then drop clean page cache, dentries and inodes (root only).
    Returns None, or why it could not."""
    os.sync()
    try:
        _write("/proc/sys/vm/drop_caches", 3)
    except OSError as e:
        return f"cannot write /proc/sys/vm/drop_caches: {e.strerror}"
    return None


_seq = [0]


class MemCgroup:
    """One memory cgroup (and, on v1, a blkio group beside it)."""

    def __init__(self, version, mem, limit, io=None, io_file=None):
        self.version, self.mem, self.limit = version, mem, limit
        self.io, self.io_file = io, io_file
        self.removed = False

    # ---------------------------------------------------------------- make
    @classmethod
    def create(cls, limit, device=None):
        """(MemCgroup, None), or (None, why it cannot)."""
        if os.geteuid() != 0:
            return None, "not root (a memory cgroup and dropping the page cache need root)"
        mounts = _mounts()
        try:
            paths = _self_paths()
        except OSError as e:
            return None, f"cannot read /proc/self/cgroup: {e.strerror}"
        _seq[0] += 1
        name = f"{PREFIX}{os.getpid()}.{_seq[0]}"
        if "memory" in mounts and "memory" in paths:
            return cls._create_v1(mounts, paths, name, limit, device)
        if "cgroup2" in mounts and "" in paths:
            return cls._create_v2(mounts["cgroup2"], paths[""], name, limit)
        return None, "no memory controller mounted (neither cgroup v1 'memory' nor cgroup v2)"

    @classmethod
    def _create_v1(cls, mounts, paths, name, limit, device):
        parent = os.path.join(mounts["memory"], paths["memory"].lstrip("/"))
        _sweep(parent)
        mem = os.path.join(parent, name)
        try:
            os.mkdir(mem)
        except OSError as e:
            return None, f"cannot make a memory cgroup in {parent}: {e.strerror}"
        cg = cls("v1", mem, limit)
        try:
            _write(os.path.join(mem, "memory.limit_in_bytes"), limit)
        except OSError as e:
            cg.remove()
            return None, f"cannot set {mem}/memory.limit_in_bytes: {e.strerror}"
        if "blkio" in mounts and "blkio" in paths and device:
            bparent = os.path.join(mounts["blkio"], paths["blkio"].lstrip("/"))
            _sweep(bparent)
            io = os.path.join(bparent, name)
            try:
                os.mkdir(io)
                cg.io = io
                _write(os.path.join(io, "blkio.throttle.read_bps_device"), f"{device} {HUGE_BPS}")
                cg.io_file = "blkio.throttle.io_service_bytes_recursive"
            except OSError:
                cg.io_file = None
        return cg, None

    @classmethod
    def _create_v2(cls, mnt, path, name, limit):
        parent = os.path.join(mnt, path.lstrip("/"))
        if "memory" not in (_read(os.path.join(parent, "cgroup.controllers"), "") or "").split():
            return None, f"cgroup v2 at {parent} has no memory controller"
        ctl = os.path.join(parent, "cgroup.subtree_control")
        on = (_read(ctl, "") or "").split()
        for c in ("memory", "io"):
            if c not in on:
                try:
                    _write(ctl, f"+{c}")
                except OSError as e:
                    if c == "memory":
                        return None, (f"cannot enable the memory controller for children of "
                                      f"{parent}: {e.strerror} (a v2 cgroup with processes of its "
                                      "own cannot)")
        _sweep(parent)
        mem = os.path.join(parent, name)
        try:
            os.mkdir(mem)
        except OSError as e:
            return None, f"cannot make a cgroup in {parent}: {e.strerror}"
        cg = cls("v2", mem, limit)
        try:
            _write(os.path.join(mem, "memory.max"), limit)
            if os.path.exists(os.path.join(mem, "memory.swap.max")):
                _write(os.path.join(mem, "memory.swap.max"), 0)   # as v1 without swap here
        except OSError as e:
            cg.remove()
            return None, f"cannot set {mem}/memory.max: {e.strerror}"
        if os.path.exists(os.path.join(mem, "io.stat")):
            cg.io, cg.io_file = mem, "io.stat"
        return cg, None

    # ---------------------------------------------------------------- use
    def wrap(self, argv):
        """`argv` behind a shell that moves itself into the group(s) and then
        execs it: the command starts inside, and so does everything it starts.
        (A shell rather than a preexec_fn, which is unsafe in a process with
        threads.)"""
        procs = " ".join(os.path.join(d, "cgroup.procs") for d in (self.mem, self.io) if d)
        return ["/bin/sh", "-c", 'for f in ' + procs + '; do echo $$ > "$f" || exit 97; done; '
                'exec "$@"', "cgroup-join"] + list(argv)

    def pids(self):
        s = _read(os.path.join(self.mem, "cgroup.procs"), "") or ""
        return [int(x) for x in s.split()]

    def io_source(self):
        """How io_read_bytes() counts, or None when it cannot."""
        if not self.io_file:
            return None
        return f"cgroup {self.version} {self.io_file}"

    def io_read_bytes(self, device=None):
        """Bytes the group's processes read from block devices (only `device`
        if given), or None when the cgroup does not count them."""
        if not self.io_file:
            return None
        s = _read(os.path.join(self.io, self.io_file))
        if s is None:
            return None
        total = 0
        for line in s.splitlines():
            f = line.split()
            if self.version == "v1":
                if len(f) == 3 and f[1] == "Read" and (device is None or f[0] == device):
                    total += int(f[2])
            elif f and (device is None or f[0] == device):
                for kv in f[1:]:
                    if kv.startswith("rbytes="):
                        total += int(kv[7:])
        return total

    def memory(self):
        """{'peak': bytes, 'limit': bytes, 'oom_kills': n, 'failcnt': n} as far as known."""
        out = {"limit": self.limit}
        if self.version == "v1":
            pk = _read(os.path.join(self.mem, "memory.max_usage_in_bytes"))
            fc = _read(os.path.join(self.mem, "memory.failcnt"))
            oc = _read(os.path.join(self.mem, "memory.oom_control"), "") or ""
            out["peak"] = int(pk) if pk else None
            out["failcnt"] = int(fc) if fc else None
            for line in oc.splitlines():
                if line.startswith("oom_kill "):
                    out["oom_kills"] = int(line.split()[1])
        else:
            pk = _read(os.path.join(self.mem, "memory.peak"))
            out["peak"] = int(pk) if pk else None
            ev = _read(os.path.join(self.mem, "memory.events"), "") or ""
            for line in ev.splitlines():
                k, _, v = line.partition(" ")
                if k == "oom_kill":
                    out["oom_kills"] = int(v)
                elif k == "max":
                    out["failcnt"] = int(v)
        return out

    # ---------------------------------------------------------------- end
    def kill_all(self, timeout=10.0):
        """SIGKILLs every process in the group until it is empty."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                return True
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def remove(self):
        """Kills what is left inside and removes the group(s); safe to call
        twice. Returns None, or what could not be removed."""
        if self.removed:
            return None
        self.kill_all()
        left = []
        for d in (self.mem, self.io):
            if not d:
                continue
            for _ in range(100):          # a killed process leaves the group a moment later
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY:
                        left.append(f"{d}: {e.strerror}")
                        break
                    time.sleep(0.02)
            else:
                left.append(f"{d}: busy")
        self.removed = True
        return "; ".join(left) or None

    def exists(self):
        return any(d and os.path.isdir(d) for d in (self.mem, self.io))


def leftovers():
    """Groups of this process (by name) still present in any hierarchy."""
    mounts = _mounts()
    try:
        paths = _self_paths()
    except OSError:
        return []
    parents = set()
    for ctl, mkey in (("memory", "memory"), ("blkio", "blkio"), ("", "cgroup2")):
        if ctl in paths and mkey in mounts:
            parents.add(os.path.join(mounts[mkey], paths[ctl].lstrip("/")))
    out = []
    mine = f"{PREFIX}{os.getpid()}."
    for parent in parents:
        try:
            out += [os.path.join(parent, n) for n in os.listdir(parent) if n.startswith(mine)]
        except OSError:
            pass
    return out
