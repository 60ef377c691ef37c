"""zrecord push and zrecord pull against a real S3 server (SeaweedFS on loopback):
a store and a set go up and come back the same, only the bytes in use travel, a
push or a pull cut off resumes, and faults (503, resets, cut and damaged bodies)
are retried or refused, never turned into a wrong store."""

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import tool_binary
from loaderx.dataset import DenseDataset, MSDataset, RaggedDataset

HEADER = 32


def zrecord(*args, env, check=True):
    tool = tool_binary()
    if not tool:
        pytest.skip("no zrecord tool: set ZR_BUILD")
    r = subprocess.run([tool, *args], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **env))
    if check:
        assert r.returncode == 0, r.stderr
    return r


def used_bytes_equal(a, b, name, n):
    with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
        return fa.read(n) == fb.read(n)


def make_dense(path, n=3000, codec="zstd", seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 255, (n, 96), dtype=np.uint8)
    d = DenseDataset(str(path), dtype="u1", item_shape=(96,), codec=codec)
    d.append(a)
    d.close()
    return a


@pytest.fixture
def bucket(s3, request):
    """The session's bucket, under a prefix of the test's own (every bucket is a
    collection of volumes to the server: few of them keep it small)."""
    s3.make_bucket("zr-test")
    return "zr-test/" + request.node.name.replace("_", "-").lower()[:40]


def test_push_pull_round_trip(s3, bucket, tmp_path):
    env = s3.env()
    a = make_dense(tmp_path / "d")
    r = RaggedDataset(str(tmp_path / "r"), dtype="<f4", ndim=1, codec="raw")
    rec = [np.arange(i, dtype=np.float32) for i in range(1, 200)]
    r.append(rec)
    r.close()
    for name in ("d", "r"):
        out = json.loads(zrecord("push", str(tmp_path / name), f"s3://{bucket}/s/{name}", "--json",
                                 env=env).stdout)
        assert out["records"] == (3000 if name == "d" else 199)
        assert out["uploaded_bytes"] > 0 and out["skipped_bytes"] == 0
        pulled = zrecord("pull", f"s3://{bucket}/s/{name}", str(tmp_path / f"p{name}"), "--json",
                         env=env)
        assert json.loads(pulled.stdout)["records"] == out["records"]
        assert "pull" in pulled.stderr   # progress
    # the same bytes: header, schema, table entries, each chunk's used bytes
    for name, n in (("d", 3000), ("r", 199)):
        src, dst = tmp_path / name, tmp_path / f"p{name}"
        for f in ("meta.zr", "schema.msgpack"):
            assert (src / f).read_bytes() == (dst / f).read_bytes()
        assert used_bytes_equal(src, dst, "0.loc", n * 16)
        tail = int.from_bytes((src / "meta.zr").read_bytes()[10:14], "little")
        # no sparse tail: each file the size of its bytes in use
        assert os.path.getsize(dst / "0.chunk") == tail
        assert os.path.getsize(dst / "0.loc") == n * 16
        assert used_bytes_equal(src, dst, "0.chunk", tail)
    assert np.array_equal(DenseDataset(str(tmp_path / "pd"))[:], a)
    got = RaggedDataset(str(tmp_path / "pr"))[np.arange(199)]
    assert all(np.array_equal(x, y) for x, y in zip(got, rec))
    v = zrecord("verify", str(tmp_path / "pd"), env=env)
    assert "0 bad" in v.stdout
    # the objects hold only the bytes in use
    tail = int.from_bytes((tmp_path / "d" / "meta.zr").read_bytes()[10:14], "little")
    pre = bucket.split("/", 1)[1]
    _, h, _ = s3.request("HEAD", "zr-test", pre + "/s/d/0.chunk")
    assert int(h["content-length"]) == tail
    _, h, _ = s3.request("HEAD", "zr-test", pre + "/s/d/0.loc")
    assert int(h["content-length"]) == 3000 * 16
    _, h, _ = s3.request("HEAD", "zr-test", pre + "/s/d/0.sum")
    assert int(h["content-length"]) == 3000 * 8


def test_push_again_sends_what_changed(s3, bucket, tmp_path):
    env = s3.env()
    make_dense(tmp_path / "d", codec="raw")
    url = f"s3://{bucket}/grow"
    first = json.loads(zrecord("push", str(tmp_path / "d"), url, "--json", env=env).stdout)
    again = json.loads(zrecord("push", str(tmp_path / "d"), url, "--json", env=env).stdout)
    assert again["uploaded_bytes"] == 0
    assert again["skipped_bytes"] == first["uploaded_bytes"]
    assert again["id"] != first["id"]          # a new manifest at every push
    d = DenseDataset(str(tmp_path / "d"))
    d.append(np.full((10, 96), 7, np.uint8))
    d.close()
    grown = json.loads(zrecord("push", str(tmp_path / "d"), url, "--json", env=env).stdout)
    # meta.zr, the table, the checksums and the chunk changed; schema.msgpack did not
    assert 0 < grown["uploaded_bytes"] < first["uploaded_bytes"] + 2000
    assert grown["skipped_bytes"] > 0
    zrecord("pull", url, str(tmp_path / "p"), env=env)
    assert len(DenseDataset(str(tmp_path / "p"))) == 3010
    # a pulled store is a store: it grows, and reopens grown
    p = DenseDataset(str(tmp_path / "p"))
    p.append(np.full((5, 96), 9, np.uint8))
    p.close()
    assert len(DenseDataset(str(tmp_path / "p"))) == 3015


def test_multipart_and_set(s3, bucket, tmp_path):
    """A chunk of 20 MiB goes up in 16 MiB parts; a set goes up stream by stream."""
    env = s3.env()
    root = tmp_path / "set"
    root.mkdir()
    rng = np.random.default_rng(1)
    x = rng.integers(0, 255, (80, 256 * 1024), dtype=np.uint8)
    d = DenseDataset(str(root / "x"), dtype="u1", item_shape=(256 * 1024,), codec="raw")
    d.append(x)
    d.close()
    y = DenseDataset(str(root / "y"), dtype="<i8", item_shape=(), codec="zstd")
    y.append(np.arange(80, dtype=np.int64))
    y.close()
    zrecord("push", str(root), f"s3://{bucket}/set", env=env)
    s3.get("zr-test", bucket.split("/", 1)[1] + "/set/zrecord.set")
    zrecord("pull", f"s3://{bucket}/set", str(tmp_path / "back"), env=env)
    back = MSDataset(str(tmp_path / "back"))
    assert back.names == ["x", "y"]
    assert np.array_equal(back["x"][:], x)
    assert np.array_equal(back["y"][:], np.arange(80))


def test_pull_resumes_and_checks(s3, bucket, tmp_path):
    env = s3.env()
    make_dense(tmp_path / "d")
    url = f"s3://{bucket}/r"
    zrecord("push", str(tmp_path / "d"), url, env=env)
    zrecord("pull", url, str(tmp_path / "p"), env=env)
    # a pull cut off before meta.zr, with a damaged chunk: fetched again, whole
    os.unlink(tmp_path / "p" / "meta.zr")
    with open(tmp_path / "p" / "0.chunk", "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xfe")
    out = json.loads(zrecord("pull", url, str(tmp_path / "p"), "--json", env=env).stdout)
    assert out["downloaded_bytes"] > 0
    assert "0 bad" in zrecord("verify", str(tmp_path / "p"), env=env).stdout
    # a pull into a store is refused
    r = zrecord("pull", url, str(tmp_path / "p"), env=env, check=False)
    assert r.returncode == 1 and "holds a store already" in r.stderr


def test_refusals(s3, bucket, tmp_path):
    make_dense(tmp_path / "d", n=10)
    bad = dict(s3.env(), AWS_SECRET_ACCESS_KEY="wrong")
    r = zrecord("push", str(tmp_path / "d"), f"s3://{bucket}/x", env=bad, check=False)
    assert r.returncode == 1 and "403" in r.stderr
    r = zrecord("pull", f"s3://{bucket}/x", str(tmp_path / "p"), env=bad, check=False)
    assert r.returncode == 1 and "SignatureDoesNotMatch" in r.stderr
    r = zrecord("pull", "s3://zr-no-such-bucket/x", str(tmp_path / "p"), env=s3.env(),
                check=False)
    assert r.returncode == 1 and "NoSuchBucket" in r.stderr
    r = zrecord("pull", f"s3://{bucket}/nothing", str(tmp_path / "p"), env=s3.env(), check=False)
    assert r.returncode == 1 and "NoSuchKey" in r.stderr
    r = zrecord("push", str(tmp_path / "d"), "s3://Bad_Name/x", env=s3.env(), check=False)
    assert r.returncode == 1 and "not a bucket name" in r.stderr
    r = zrecord("push", str(tmp_path / "d"), str(tmp_path / "e"), env=s3.env(), check=False)
    assert r.returncode == 2
    # alice may not write bob's buckets
    s3.make_bucket("bob-data")
    r = zrecord("push", str(tmp_path / "d"), "s3://bob-data/x", env=s3.env("alice"), check=False)
    assert r.returncode == 1 and "403" in r.stderr


def test_faults_retried_or_refused(s3, bucket, tmp_path, s3proxy):
    make_dense(tmp_path / "d")
    url = f"s3://{bucket}/f"
    env = s3.env(endpoint=s3proxy.endpoint)
    s3proxy.inject("503", 2, match=lambda m, p, h: m == "PUT")
    s3proxy.inject("reset", 1, match=lambda m, p, h: m == "PUT")
    zrecord("push", str(tmp_path / "d"), url, env=env)
    assert s3proxy.faults_done == {"503": 2, "reset": 1}
    s3proxy.inject("truncate", 1)
    s3proxy.inject("503", 1)
    zrecord("pull", url, str(tmp_path / "p"), env=env)
    assert "0 bad" in zrecord("verify", str(tmp_path / "p"), env=env).stdout
    # a damaged body is never written as a store
    s3proxy.inject("corrupt", 1, match=lambda m, p, h: m == "GET" and p.endswith("0.chunk"))
    r = zrecord("pull", url, str(tmp_path / "q"), env=env, check=False)
    assert r.returncode == 1 and "does not match its checksum" in r.stderr
    assert not (tmp_path / "q" / "meta.zr").exists()
