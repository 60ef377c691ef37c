"""Issue 32, item 8: a hostile-parameter sweep. The attacker sends every request
kind with every integer field at 0, 1, 2^31, 2^32, 2^53, 2^63 and 2^64 - 1 (one
field at a time, the others those of a valid request), and every list at its
longest (what a frame holds, or the protocol's maximum); meanwhile the victim reads
its own store. Each request must be answered (or refused) within BOUND seconds,
the victim's reads likewise, and once the attacker is gone the daemon's RSS is
back near its baseline and nothing stays charged to the attacker.

The requests run in one process as the attacker, a fresh connection per request
kind (and again after the daemon closes one: a RELEASE or a frame it faults), so
that the whole sweep takes well under two minutes.
"""

import json
import os

from .conftest import read_line
from .stores import make_store
from .test_bounds import BOUND, MIB, Victim, account, rss

SWEEP = r'''
import copy, json, os, socket, time
from loaderx import _wire
from secframes import Raw, RawError, emit, store_fds

SOCK, STORE, RAGGED = os.environ["ZRECORD_SOCKET"], os.environ["STORE"], os.environ["RAGGED"]
BOUND = float(os.environ["BOUND"])
VALUES = [0, 1, 1 << 31, 1 << 32, 1 << 53, 1 << 63, (1 << 64) - 1]
slow, results, closed, times = [], {}, 0, []


def connect():
    raw = Raw(SOCK, timeout=BOUND)
    fmax = int(raw.hello["limits"]["frame_max"])
    return raw, fmax


def sealed(data):
    fd = os.memfd_create("sweep", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    import fcntl
    fcntl.fcntl(fd, 1033, 1 | 2 | 4 | 8)   # F_ADD_SEALS: seal, shrink, grow, write
    return fd


class Conn:
    def __init__(self):
        self.raw, self.fmax = connect()
        d, m = store_fds(STORE, os.O_RDWR)
        self.h = self.raw.call("dataset_open", {"writable": True}, fds=[d, m])[0]["handle"]
        self.buf = self.raw.call("buffer_open", {"bytes": 1 << 16})[0]["buffer"]

    def close(self):
        try:
            self.raw.close()
        except OSError:
            pass


conn = None


def one(label, kind, fields, fds=()):
    """Sends one request; records how it ended and how long it took."""
    global conn, closed
    if conn is None:
        conn = Conn()
    t0 = time.monotonic()
    fds = list(fds() if callable(fds) else fds)
    try:
        rid = conn.raw.send(kind, fields, fds, request=kind != "release")
        if kind == "release":   # no reply: a STATUS after it says the loop took it
            rid = conn.raw.send("status", {})
        msg, rfds = conn.raw.reply(rid)
        for fd in rfds:
            os.close(fd)
        how = "ok"
        # give back what a success holds, so the budgets do not fill up
        if kind == "buffer_open":
            conn.raw.call("close", {"handle": msg["buffer"]})
        elif kind == "loader_open":
            conn.raw.call("loader_close", {"loader": msg["loader"]})
        elif kind == "dataset_open" and msg.get("handle") not in (None, conn.h):
            conn.raw.call("close", {"handle": msg["handle"]})
    except RawError as e:
        how = e.name
    except socket.timeout:
        how = "no answer"
        conn.close()
        conn = None
    except (OSError, EOFError, ValueError) as e:   # closed by the daemon (a fault)
        how = "closed"
        closed += 1
        conn.close()
        conn = None
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
    took = time.monotonic() - t0
    times.append((round(took, 3), label, how))
    results[how] = results.get(how, 0) + 1
    if how == "no answer" or took > BOUND:
        slow.append([label, how, round(took, 3)])


def variants(label, kind, base, paths, fds=()):
    """base with each integer field at path set to each value in turn."""
    for path in paths:
        for v in VALUES:
            f = copy.deepcopy(base)
            at = f
            for p in path[:-1]:
                at = at[p]
            at[path[-1]] = v
            one(f"{label} {'.'.join(map(str, path))}={v}", kind, f, fds)


def u64s_max(fmax, v=0):
    """A u64s list as long as a frame holds."""
    return _wire.u64s([v] * ((fmax - 4096) // 8))


conn = Conn()
H, B, FMAX = conn.h, conn.buf, conn.fmax
dfds = lambda: store_fds(STORE)
schema = {"kind": "dense", "dtype": "<f4", "item_shape": [4], "codec": "raw"}

variants("hello", "hello", {"min_version": 1, "max_version": 1},
         [("min_version",), ("max_version",)])
one("hello features max", "hello", {"min_version": 1, "max_version": 1,
                                     "features": ["x" * 16] * 4000})
conn = None
variants("create", "dataset_create", {"schema": schema, "dict_bytes": 0},
         [("dict_bytes",), ("schema", "item_shape", 0)],
         fds=lambda: [os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)])
variants("open", "dataset_open", {}, [], fds=dfds)
one("open", "dataset_open", {}, dfds)
one("msset max", "msset_open", {"streams": ["s%d" % i for i in range(32)]}, dfds)
variants("info", "info", {"handle": H}, [("handle",)])
variants("buffer", "buffer_open", {"bytes": 4096}, [("bytes",)])
conn = None
conn = Conn()
H, B = conn.h, conn.buf   # a new connection's handles are numbered alike
variants("read", "read", {"handle": H, "buffer": B, "offset": 0,
                          "indices": _wire.u64s([0, 1])}, [("handle",), ("buffer",), ("offset",)])
for v in VALUES:
    one(f"read indices[0]={v}", "read", {"handle": H, "buffer": B, "indices": _wire.u64s([v])})
    one(f"read indices max of {v}", "read", {"handle": H, "buffer": B,
                                             "indices": u64s_max(FMAX, v)})
data = bytes(16 * 4)
variants("append", "append", {"handle": H, "offset": 0, "count": 4, "record_bytes": 16,
                              "dtype": "<f4", "item_shape": [4]},
         [("handle",), ("offset",), ("count",), ("record_bytes",), ("item_shape", 0)],
         fds=lambda: [sealed(data)])
one("append sizes max", "append", {"handle": H, "sizes": u64s_max(FMAX, 1), "dtype": "<f4"},
    lambda: [sealed(data)])
for v in VALUES:
    one(f"delete indices[0]={v}", "delete", {"handle": H, "indices": _wire.u64s([v])})
    one(f"delete indices max of {v}", "delete", {"handle": H, "indices": u64s_max(FMAX, v)})
variants("delete", "delete", {"handle": H, "indices": _wire.u64s([])}, [("handle",)])
for kind in ("stats", "sync", "verify", "compact", "close"):
    variants(kind, kind, {"handle": H}, [("handle",)])
conn = None
conn = Conn()
H = conn.h
variants("train_dict", "train_dict", {"tier": "small", "offset": 0,
                                      "sizes": _wire.u64s([16] * 4)},
         [("offset",), ("sizes", )], fds=lambda: [sealed(data)])
one("train_dict sizes max", "train_dict", {"tier": "small", "sizes": u64s_max(FMAX, 1)},
    lambda: [sealed(data)])
variants("train_dict handle", "train_dict", {"tier": "small", "handle": H}, [("handle",)])
variants("install_dict", "install_dict", {"handle": H, "dict_bytes": 64},
         [("handle",), ("dict_bytes",)], fds=lambda: [sealed(bytes(64))])
one("convert", "convert", {"to": "zrecord"},
    lambda: [*store_fds(STORE), os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)])
one("convert ragged", "convert", {"to": "loaderx-1.5.7"},
    lambda: [*store_fds(RAGGED), os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)])
variants("status", "status", {"loader": 1}, [("loader",)])
one("metrics", "metrics", {})
lbase = {"streams": [{"handle": H, "capacity": 0}], "sampler": "iid", "batch_size": 2,
         "seed": 1, "start_step": 0, "rank": 0, "world_size": 1, "prefetch": 2, "length": 10,
         "fingerprint": 0}
variants("loader", "loader_open", lbase,
         [("batch_size",), ("seed",), ("start_step",), ("rank",), ("world_size",), ("prefetch",),
          ("length",), ("fingerprint",), ("streams", 0, "handle"), ("streams", 0, "capacity")])
lbase.pop("fingerprint"), lbase.pop("length")
one("loader streams max", "loader_open", dict(lbase, streams=[{"handle": H}] * 32))
mix = dict(lbase, sources=[{"streams": [{"handle": H}], "weight": 1}] * 256)
del mix["streams"]
variants("mixture", "loader_open", mix,
         [("batch_size",), ("start_step",), ("sources", 0, "weight"), ("sources", 0, "length")])
variants("release", "release", {"loader": 1, "ring": 1, "slot": 0, "wait_ns": 0, "taken_ns": 0},
         [("loader",), ("ring",), ("slot",), ("wait_ns",), ("taken_ns",)])
variants("loader_close", "loader_close", {"loader": 1}, [("loader",)])
for sampler in ("iid", "cyclic", "sequential", "cyclic-lx157"):
    sbase = {"sampler": sampler, "n": 1000, "batch_size": 10, "seed": 1, "world_size": 1,
             "record": 3, "start": 0, "stop": 1 << 20, "max_hits": 100}
    variants(f"steps_of {sampler}", "steps_of", sbase,
             [("n",), ("batch_size",), ("seed",), ("world_size",), ("record",), ("start",),
              ("stop",), ("max_hits",)])
    mbase = {"sampler": sampler, "sources": [{"n": 1000, "weight": 1}] * 256, "source": 0,
             "batch_size": 10, "seed": 1, "record": 3, "start": 0, "stop": 1 << 20}
    variants(f"steps_of mixture {sampler}", "steps_of", mbase,
             [("sources", 0, "n"), ("sources", 0, "weight"), ("source",), ("batch_size",),
              ("record",), ("start",), ("stop",)])
if conn is not None:
    conn.close()
emit({"slow": slow, "results": results, "closed": closed, "slowest": sorted(times)[-5:]})
'''


def ragged_store(run_as, service, user, path):
    own = service(user=user)
    r = run_as(user, """
        import os
        import numpy as np
        from loaderx.dataset import RaggedDataset
        ds = RaggedDataset(os.environ["STORE"], dtype="<f4", ndim=1, codec="raw")
        ds.append([np.arange(n, dtype="<f4") for n in range(1, 9)])
        ds.close()
        """, env=own.env(STORE=path))
    assert r.rc == 0, r
    assert own.stop() == 0


def test_hostile_parameter_sweep(users, service, secdir, run_as, start_as):
    svc = service()
    vhome = secdir.mkdir("victim", users.victim, 0o700)
    ahome = secdir.mkdir("attacker", users.attacker, 0o700)
    victim_store = os.path.join(vhome, "store")
    attacker_store = os.path.join(ahome, "store")
    ragged = os.path.join(ahome, "ragged")
    make_store(run_as, service, users.victim, victim_store)
    make_store(run_as, service, users.attacker, attacker_store)
    ragged_store(run_as, service, users.attacker, ragged)
    victim = Victim(start_as, users, svc, victim_store)
    base = rss(svc.pid)
    r = run_as(users.attacker, SWEEP, env=svc.env(STORE=attacker_store, RAGGED=ragged,
                                                  BOUND=str(BOUND)), timeout=600)
    assert r.rc == 0, r
    got = r.json()
    seen = victim.result()
    print(json.dumps({"sweep": got["results"], "closed": got["closed"], "victim": seen,
                      "slowest": got["slowest"]}))
    assert got["slow"] == [], got["slow"]
    assert sum(got["results"].values()) > 500, got
    assert seen["reads"] > 0 and seen["worst"] < BOUND, seen
    # the attacker is gone: nothing of it stays charged, and the memory it made
    # the daemon spend is given back (STATUS round trips as root, bounded)
    for _ in range(2000):
        acct = account(svc, users.attacker.uid)
        if not acct or (acct.get("work_bytes", 0) == 0 and acct.get("shm_bytes", 0) == 0):
            break
    assert not acct or (acct.get("work_bytes", 0) == 0 and acct.get("shm_bytes", 0) == 0), acct
    assert rss(svc.pid) < base + 64 * MIB, (base >> 20, rss(svc.pid) >> 20)
