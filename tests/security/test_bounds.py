"""Issue 32, cases 1 to 6: work and memory that one request makes the daemon
spend, sized by numbers the client chooses, tried as the attacker (zrsec-attacker)
against the victim (zrsec-victim) on a daemon run as the service user.

- Case 1: STEPS_OF over iid with batch_size 2^50 of n = 2^60, steps [0, 1): one
  step of 2^50 positions, which the daemon scanned for days (no cut below a
  step, no scan limit) while every other user waited with --threads=1 and
  SIGTERM did not stop it. Now refused at once (ZR_E_LIMIT); the victim is
  served, and the daemon stops on SIGTERM (the fixture asserts exit 0).
- Case 2: STEPS_OF over a mixture of one sequential source of n = 1, batch 2^40,
  steps [0, 1): the step's hits were collected without bound (OOM in seconds).
  Now refused at max_hits (ZR_E_LIMIT); the daemon's RSS stays near its baseline.
- Case 3: LOADER_OPEN of a mixture of 256 sources, batch 2^30: the fill's
  working memory was charged to nothing (the machine's OOM killer took the
  daemon). Now refused before any of it is allocated, naming
  max-work-mem-per-uid.
- Case 4: the same loader with batch 2^27, then a disconnect at once: the event
  loop waited for the fill (another user's READ took 234 s). Now the batch's
  working memory is refused, and a loader that is accepted and closed while its
  gather runs is left to the engine: the victim's reads meanwhile are served
  within a bound, and the attacker's working memory is back to 0 after.
- Case 5: a FIFO (and a socket, and a device) as each file of the attacker's own
  store: DATASET_OPEN blocked a worker in open() and held the uid's job slot.
  Now every one is refused at once and the attacker's next request is served.
- Case 6: the metrics endpoint: a peer held all 8 places with unfinished heads
  and reconnected as they timed out; every scrape of another user failed. Now
  a peer holds 4 places at most, a new connection is never refused for room,
  and every scrape of the victim's succeeds during the attack: on the Unix
  socket a peer is a uid, on loopback TCP an address (127.0.0.1 against a
  scraper at 127.0.0.2).

Each failed against the daemon of before this work (run it with ZRECORDD=<old
binary>, cases 2 to 4 inside a memory cgroup: /work/shared/tools/memcg-run).
"""

import json
import os
import time

from .conftest import read_line
from .stores import make_store

BOUND = 10.0        # seconds: a request answered or refused, a victim's READ
GONE = 60.0         # seconds: a closed loader's gather stopped, its memory given back
MIB = 1 << 20


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def stores(secdir, run_as, service, users):
    """The victim's store (10 records of 4 floats), and the attacker's: 16 records
    of one byte, as the issue's (a ring of 2^30 of them fits the shared-memory
    budget; its working memory did not)."""
    vhome = secdir.mkdir("victim", users.victim, 0o700)
    ahome = secdir.mkdir("attacker", users.attacker, 0o700)
    victim_store = os.path.join(vhome, "store")
    attacker_store = os.path.join(ahome, "store")
    make_store(run_as, service, users.victim, victim_store)
    own = service(user=users.attacker)
    r = run_as(users.attacker, """
        import os
        import numpy as np
        from loaderx.dataset import DenseDataset
        ds = DenseDataset(os.environ["STORE"], dtype="|u1", item_shape=(), codec="raw")
        ds.append(np.arange(16, dtype="u1"))
        ds.close()
        """, env=own.env(STORE=attacker_store))
    assert r.rc == 0, r
    assert own.stop() == 0
    return victim_store, attacker_store


# The victim: opens its store and a buffer, says so, then reads 4 records (and
# every tenth time opens the store again) until told to stop; reports the
# slowest round trip. Runs beside an attack.
VICTIM_READS = """
    import os, select, sys, time
    from loaderx import _wire
    from secframes import Raw, emit, store_fds
    raw = Raw(os.environ["ZRECORD_SOCKET"], timeout=120)
    d, m = store_fds(os.environ["STORE"])
    h = raw.call("dataset_open", {}, fds=[d, m])[0]["handle"]
    b = raw.call("buffer_open", {"bytes": 65536})[0]["buffer"]
    print("ready", flush=True)
    worst, n = 0.0, 0
    while not select.select([sys.stdin], [], [], 0)[0]:
        t0 = time.monotonic()
        raw.call("read", {"handle": h, "buffer": b, "indices": _wire.u64s([0, 3, 5, 9])})
        if n % 10 == 9:
            d, m = store_fds(os.environ["STORE"])
            h2 = raw.call("dataset_open", {}, fds=[d, m])[0]["handle"]
            raw.call("close", {"handle": h2})
        worst = max(worst, time.monotonic() - t0)
        n += 1
        time.sleep(0.02)
    emit({"worst": worst, "reads": n})
    """


class Victim:
    def __init__(self, start_as, users, svc, store):
        self.p = start_as(users.victim, VICTIM_READS, env=svc.env(STORE=store))
        assert read_line(self.p, 60) == "ready"

    def result(self):
        self.p.stdin.write("\n")
        self.p.stdin.flush()
        return json.loads(read_line(self.p, 180))


def attack(run_as, users, svc, code, timeout=120, **env):
    r = run_as(users.attacker, code, env=svc.env(**{k: str(v) for k, v in env.items()}),
               timeout=timeout)
    assert r.rc == 0, r
    return r.json()


def account(svc, uid):
    """The uid's account in STATUS, as root (who sees every uid's)."""
    from secframes import Raw
    raw = Raw(svc.socket)
    try:
        st = raw.call("status")[0]
    finally:
        raw.close()
    for u in st.get("users") or []:
        if u["uid"] == uid:
            return u
    return {}


# A request as the attacker: its answer (or error) and how long it took; a
# request the daemon does not answer within the bound is reported as such.
ONE_REQUEST = """
    import json, os, socket, time
    from secframes import Raw, RawError, emit
    raw = Raw(os.environ["ZRECORD_SOCKET"], timeout=float(os.environ["BOUND"]))
    t0 = time.monotonic()
    try:
        msg, _ = raw.call(os.environ["KIND"], json.loads(os.environ["FIELDS"]))
        out = {"ok": {"next": msg.get("next"), "hits": len(msg.get("hits", b"")) // 8}}
    except RawError as e:
        out = {"error": e.name, "message": e.message}
    except socket.timeout:
        out = {"error": "no answer within the bound"}
    out["elapsed"] = time.monotonic() - t0
    emit(out)
    """


def test_case1_steps_of_iid_one_huge_step(users, service, secdir, run_as, start_as):
    svc = service(threads=1)
    victim_store, _ = stores(secdir, run_as, service, users)
    victim = Victim(start_as, users, svc, victim_store)
    fields = {"sampler": "iid", "n": 1 << 60, "batch_size": 1 << 50, "seed": 1, "record": 0,
              "start": 0, "stop": 1}
    got = attack(run_as, users, svc, ONE_REQUEST, KIND="steps_of", FIELDS=json.dumps(fields),
                 BOUND=BOUND)
    assert got.get("error") == "ZR_E_LIMIT", got
    assert "STEPS_OF" in got["message"], got
    # a legal walk of a long range still answers in pieces, each within the bound
    fields.update(batch_size=1 << 12, stop=1 << 40)
    got = attack(run_as, users, svc, ONE_REQUEST, KIND="steps_of", FIELDS=json.dumps(fields),
                 BOUND=BOUND)
    assert "ok" in got and 0 < got["ok"]["next"] < 1 << 40, got
    seen = victim.result()
    assert seen["reads"] > 0 and seen["worst"] < BOUND, seen
    # and the fixture's SIGTERM stops it (exit 0 within its bound)


def test_case2_steps_of_mixture_step_hits(users, service, secdir, run_as):
    svc = service()
    base = rss(svc.pid)
    fields = {"sampler": "sequential", "sources": [{"n": 1, "weight": 1}], "batch_size": 1 << 40,
              "seed": 1, "record": 0, "start": 0, "stop": 1}
    got = attack(run_as, users, svc, ONE_REQUEST, KIND="steps_of", FIELDS=json.dumps(fields),
                 BOUND=BOUND)
    assert got.get("error") == "ZR_E_LIMIT", got
    assert "max_hits" in got["message"], got
    assert rss(svc.pid) < base + 64 * MIB, (base, rss(svc.pid))
    assert account(svc, users.attacker.uid).get("work_bytes", 0) == 0


# LOADER_OPEN of a mixture of 256 sources over the attacker's store, its
# connection closed right after the reply, ROUNDS times over; after each close,
# how long until the uid's working memory is given back (STATUS round trips
# for at most GONE seconds: each waits on the daemon's answer).
MIXTURE_LOADER = """
    import os, time
    from secframes import Raw, RawError, emit, store_fds
    out = []
    status = Raw(os.environ["ZRECORD_SOCKET"], timeout=float(os.environ["BOUND"]))
    def work_bytes():
        st = status.call("status")[0]
        return sum(u.get("work_bytes", 0) for u in st.get("users") or [])
    for _ in range(int(os.environ.get("ROUNDS", "1"))):
        raw = Raw(os.environ["ZRECORD_SOCKET"], timeout=float(os.environ["BOUND"]))
        d, m = store_fds(os.environ["STORE"])
        h = raw.call("dataset_open", {}, fds=[d, m])[0]["handle"]
        t0 = time.monotonic()
        try:
            reply, fds = raw.call("loader_open", {
                "sources": [{"streams": [{"handle": h}], "weight": 1}] * 256,
                "sampler": "iid", "batch_size": int(os.environ["BATCH"]), "seed": 7,
                "start_step": 0, "prefetch": 1})
            got = {"ok": reply["slots"], "elapsed": time.monotonic() - t0}
        except RawError as e:
            got = {"error": e.name, "message": e.message}
        raw.close()
        t0 = time.monotonic()
        while work_bytes() != 0 and time.monotonic() - t0 < float(os.environ["GONE"]):
            pass
        got["given_back"] = work_bytes() == 0
        got["gone_after"] = time.monotonic() - t0
        out.append(got)
    emit(out)
    """


def test_case3_loader_working_memory(users, service, secdir, run_as):
    svc = service()
    _, attacker_store = stores(secdir, run_as, service, users)
    base = rss(svc.pid)
    got = attack(run_as, users, svc, MIXTURE_LOADER, STORE=attacker_store, BATCH=1 << 30,
                 BOUND=60, GONE=GONE)
    assert got[0].get("error") == "ZR_E_LIMIT", got
    assert "max-work-mem-per-uid" in got[0]["message"], got
    assert rss(svc.pid) < base + 256 * MIB, (base, rss(svc.pid))
    assert account(svc, users.attacker.uid).get("work_bytes", 0) == 0


def test_case4_loader_close_never_waits(users, service, secdir, run_as, start_as):
    svc = service()
    victim_store, attacker_store = stores(secdir, run_as, service, users)
    victim = Victim(start_as, users, svc, victim_store)
    # the loader: its working memory is refused
    got = attack(run_as, users, svc, MIXTURE_LOADER, STORE=attacker_store, BATCH=1 << 27,
                 BOUND=60, ROUNDS=1, GONE=GONE)
    assert got[0].get("error") == "ZR_E_LIMIT", got
    # the largest batch this daemon accepts (found by halving), then a quarter
    # of it: opened and closed at once, again and again, its first gather
    # running each time (a quarter: on a loaded box the largest one's gather
    # takes seconds to stop, and the next open would find its working memory
    # still held)
    batch = 1 << 24
    while True:
        got = attack(run_as, users, svc, MIXTURE_LOADER, STORE=attacker_store, BATCH=batch,
                     BOUND=60, GONE=GONE)
        if "ok" in got[0] or batch < 1024:
            break
        batch //= 2
    assert "ok" in got[0], got
    got = attack(run_as, users, svc, MIXTURE_LOADER, STORE=attacker_store, BATCH=batch // 4,
                 BOUND=BOUND, ROUNDS=6, GONE=GONE)
    # each accepted, and gone (its working memory given back) once its gather
    # stopped: the close never waited for it
    assert all("ok" in g and g["given_back"] for g in got), got
    seen = victim.result()
    assert seen["reads"] > 0 and seen["worst"] < BOUND, seen
    assert account(svc, users.attacker.uid).get("work_bytes", 0) == 0


# DATASET_OPEN of the attacker's own store with one file replaced: the answer
# and how long it took, then a request that needs the uid's job slot.
OPEN_PLANTED = """
    import os, socket, time
    from secframes import Raw, RawError, emit
    raw = Raw(os.environ["ZRECORD_SOCKET"], timeout=float(os.environ["BOUND"]))
    path = os.environ["STORE"]
    d = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        m = os.open(os.path.join(path, "meta.zr"), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # a socket: no proof to give but another file
        m = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    out = {}
    t0 = time.monotonic()
    try:
        raw.call("dataset_open", {}, fds=[d, m])
        out["open"] = "ok"
    except RawError as e:
        out["open"] = e.name
        out["message"] = e.message
    except socket.timeout:
        out["open"] = "no answer within the bound"
    out["elapsed"] = time.monotonic() - t0
    if out["open"] != "no answer within the bound":
        d = os.open(os.environ["GOOD"], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        m = os.open(os.path.join(os.environ["GOOD"], "meta.zr"), os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw.call("dataset_open", {}, fds=[d, m])
            out["next"] = "ok"
        except (RawError, socket.timeout) as e:
            out["next"] = str(e)
    emit(out)
    """


def plant(path, name, kind, owner):
    import socket as so
    p = os.path.join(path, name)
    if os.path.exists(p):
        os.unlink(p)
    if kind == "fifo":
        os.mkfifo(p, 0o644)
    elif kind == "socket":
        s = so.socket(so.AF_UNIX, so.SOCK_STREAM)
        s.bind(p)
        s.close()
    else:  # a character device: /dev/zero's numbers (root plants it)
        os.mknod(p, 0o644 | 0o020000, os.makedev(1, 5))
    os.lchown(p, owner.uid, owner.gid)


def test_case5_special_files_refused(users, service, secdir, run_as):
    svc = service()
    ahome = secdir.mkdir("attacker", users.attacker, 0o700)
    good = os.path.join(ahome, "good")
    make_store(run_as, service, users.attacker, good)
    for name in ("0.chunk", "0.loc", "meta.zr"):
        for kind in ("fifo", "socket", "device"):
            store = os.path.join(ahome, f"{name}-{kind}")
            make_store(run_as, service, users.attacker, store)
            plant(store, name, kind, users.attacker)
            got = attack(run_as, users, svc, OPEN_PLANTED, STORE=store, GOOD=good, BOUND=BOUND)
            assert got["open"] not in ("ok", "no answer within the bound"), (name, kind, got)
            assert got["elapsed"] < BOUND, (name, kind, got)
            assert got.get("next") == "ok", (name, kind, got)


# Holds the metrics endpoint's places with unfinished heads until told to stop,
# reconnecting each one the daemon closes.
# METRICS is a socket's path, or HOST:PORT with SRC the address to connect from.
CONNECT = """
    def connect():
        where = os.environ["METRICS"]
        if where.startswith("/"):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(where)
            return s
        host, port = where.rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((os.environ["SRC"], 0))
        s.connect((host, int(port)))
        return s
    """

HOLD_METRICS = """
    import os, select, socket, sys
    from secframes import emit
    path, held, made = os.environ["METRICS"], [], 0
    """ + CONNECT + """
    def one():
        s = None
        try:
            s = connect()
            s.sendall(b"GET /metrics HTTP/1.0\\r\\n")
        except OSError:  # closed at once: its place went to another
            pass
        return s if s is not None else socket.socket()
    while len(held) < 64:
        held.append(one())
        made += 1
    print("holding", flush=True)
    while not select.select([sys.stdin], [], [], 0)[0]:
        ready, _, _ = select.select(held, [], [], 0.05)
        for s in ready:
            try:
                gone = s.recv(100) == b""
            except OSError:
                gone = True
            if gone:
                held.remove(s)
                s.close()
                held.append(one())
                made += 1
    emit({"made": made})
    """

SCRAPE = """
    import os, socket, time
    from secframes import emit
    ok, bad = 0, []
    """ + CONNECT + """
    for _ in range(20):
        s = None
        socket.setdefaulttimeout(float(os.environ["BOUND"]))
        try:
            s = connect()
            s.sendall(b"GET /metrics HTTP/1.0\\r\\n\\r\\n")
            head = s.recv(64)
            if head.startswith(b"HTTP/1.0 200 OK"):
                ok += 1
            else:
                bad.append(repr(head))
        except OSError as e:
            bad.append(repr(e))
        finally:
            if s is not None:
                s.close()
        time.sleep(0.1)
    emit({"ok": ok, "bad": bad[:5]})
    """


def test_case6_metrics_slots_per_peer(users, service, secdir, run_as, start_as):
    metrics = os.path.join(secdir.mkdir("metrics", users.svc, 0o755), "metrics.sock")
    svc = service(metrics_listen=metrics)
    holder = start_as(users.attacker, HOLD_METRICS, env=svc.env(METRICS=metrics))
    assert read_line(holder, 60) == "holding"
    r = run_as(users.victim, SCRAPE, env=svc.env(METRICS=metrics, BOUND=str(BOUND)))
    assert r.rc == 0, r
    got = r.json()
    holder.stdin.write("\n")
    holder.stdin.flush()
    held = json.loads(read_line(holder, 60))
    assert got["ok"] == 20, (got, held)



def free_tcp_port():
    """A loopback port the kernel has just handed out and freed again."""
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_case6_metrics_slots_per_tcp_address(users, service, run_as, start_as):
    # On TCP a peer is its address: one at 127.0.0.1 holding every place it can
    # must not starve a scraper at 127.0.0.2 (the loopback answers for all of 127/8).
    where = f"127.0.0.1:{free_tcp_port()}"
    svc = service(metrics_listen=where)
    holder = start_as(users.attacker, HOLD_METRICS, env=svc.env(METRICS=where, SRC="127.0.0.1"))
    assert read_line(holder, 60) == "holding"
    r = run_as(users.victim, SCRAPE, env=svc.env(METRICS=where, SRC="127.0.0.2",
                                                 BOUND=str(BOUND)))
    assert r.rc == 0, r
    got = r.json()
    holder.stdin.write("\n")
    holder.stdin.flush()
    held = json.loads(read_line(holder, 60))
    assert got["ok"] == 20, (got, held)
    assert held["made"] >= 64, held
