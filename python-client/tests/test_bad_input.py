"""Bad input: a fitting Python exception that says what was expected, and the
store unchanged."""

import os

import numpy as np
import pytest

import loaderx
from loaderx import ZrecordError, StaleError
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, MSDataset, RaggedDataset
from loaderx.utils import from_iterator, from_numpy, train_dict

DATA = np.arange(10 * 6, dtype=np.float32).reshape(10, 2, 3)


@pytest.fixture
def dense():
    from_numpy("d", DATA)
    return DenseDataset("d")


@pytest.fixture
def ragged():
    from_iterator("r", [np.arange(k + 1, dtype=np.int32) for k in range(10)], np.int32)
    return RaggedDataset("r")


def unchanged(ds, n=10):
    assert len(ds) == n
    if isinstance(ds, DenseDataset):
        np.testing.assert_array_equal(ds[:], DATA)


def test_append_wrong_dtype(dense):
    with pytest.raises(ValueError, match=r"expected <f4.*got <f8"):   # loaderx 1.5.7's
        dense.append(DATA.astype(np.float64))
    unchanged(dense)


def test_append_wrong_shape(dense):
    with pytest.raises(ValueError, match=r"expected \(B, 2, 3\).*got \(4, 3, 2\)"):
        dense.append(np.zeros((4, 3, 2), np.float32))
    with pytest.raises(ValueError, match="add the axis"):
        dense.append(np.zeros((2, 3), np.float32))
    unchanged(dense)


def test_ragged_array_into_dense(dense):
    with pytest.raises(ValueError, match="ragged"):
        dense.append([np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32)])
    unchanged(dense)


def test_daemon_validates_too(dense):
    """The daemon is the authority: a request that skips the client's checks is
    refused with ZR_E_SCHEMA, a ValueError carrying the code and name."""
    from loaderx import _shm
    arr = np.zeros((1, 2, 3), np.float64)
    with _shm.SealedMemfd([arr]) as m:
        with pytest.raises(ValueError) as ei:
            dense._h.request("append", {"dtype": "<f8", "count": 1, "record_bytes": 48,
                                        "item_shape": [2, 3]}, fds=(m.fd,))
    e = ei.value
    assert isinstance(e, ZrecordError) and e.name == "ZR_E_SCHEMA" and e.code == 1011
    assert "24 bytes" in str(e) or "f4" in str(e)
    unchanged(dense)


@pytest.mark.no_daemon
def test_client_errors_carry_the_code_of_their_name():
    """An error the client finds itself names a daemon code: it carries that
    code's number too, as the daemon's own errors do (zr-errors.h), in zr_code;
    code is loaderx 1.5.7's where it has one (LX157_CODES)."""
    from loaderx import _errors, _store
    with pytest.raises(ValueError) as ei:
        _store.check_codec("lz4")
    assert ei.value.name == "ZR_E_BAD_CODEC" and ei.value.zr_code == 1003
    assert ei.value.code == -8
    assert ZrecordError("x", name="ZR_E_STALE").code == 1107
    assert ZrecordError("x").code is None and ZrecordError("x", name="EIO").code == -2
    assert ZrecordError("x", name="EIO").zr_code == 5
    e = ZrecordError(-3)                      # loaderx 1.5.7's form
    assert isinstance(e, RuntimeError) and e.code == -3 and e.name == "ZR_E_RANGE"
    assert e.message == "index out of range"
    assert ZrecordError(-42).message == "unknown zrecord error -42"
    assert _errors.is_code({"code": 1016}, "ZR_E_BUFFER")
    assert _errors.is_code({"name": "ZR_E_BUFFER"}, "ZR_E_BUFFER")
    assert not _errors.is_code({"name": "ZR_E_STALE", "code": 1107}, "ZR_E_BUFFER")


def test_ragged_bad_records(ragged):
    with pytest.raises(ValueError, match="expected <i4"):
        ragged.append([np.arange(3, dtype=np.int64)])
    with pytest.raises(TypeError, match="list of records"):
        ragged.append(np.arange(3, dtype=np.int32))
    with pytest.raises(ValueError, match="empty"):          # loaderx 1.5.7 stores none
        ragged.append([np.arange(3, dtype=np.int32), np.zeros((2, 0), np.int32)])
    with pytest.raises(ValueError, match="bytes records are uint8"):
        ragged.append([b"abcd"])
    with pytest.raises(ValueError, match="at least one record"):
        ragged.append([])
    unchanged(ragged)
    fixed = RaggedDataset("r1", dtype=np.int32, ndim=1)       # zrecord's: one ndim for all
    with pytest.raises(ValueError, match="expected 1 dimension"):
        fixed.append([np.zeros((2, 2), np.int32)])
    assert fixed.ndim == 1 and ragged.ndim is None


@pytest.mark.parametrize("call", [
    lambda: from_numpy("x", DATA, codec="lz4"),
    lambda: from_iterator("x", [np.arange(2)], np.int64, codec="gzip"),
    lambda: DenseDataset("x", dtype=np.float32, item_shape=(2,), codec="zstd19"),
    lambda: RaggedDataset("x", dtype=np.float32, codec="none"),
])
def test_unknown_codec(call):
    with pytest.raises(ValueError, match="unknown codec .*'raw', 'zstd', 'zstd_dict'"):
        call()
    assert not os.path.exists("x/meta.zr")


def test_zstd_dict_without_dictionary():
    with pytest.raises(ValueError, match="dict_bytes"):
        from_iterator("t", [np.arange(3, dtype=np.int32)], np.int32, codec="zstd_dict")
    assert not os.path.exists("t/meta.zr")
    ds = DenseDataset("z", dtype=np.float32, item_shape=(2, 3), codec="zstd_dict")
    with pytest.raises(ValueError) as ei:
        ds.append(DATA)
    assert ei.value.name == "ZR_E_NO_DICT"
    assert len(ds) == 0
    rs = RaggedDataset("zr", dtype=np.int32, codec="zstd_dict")
    with pytest.raises(ValueError, match="dictionary"):
        rs.append([np.arange(3, dtype=np.int32)])
    assert len(rs) == 0


@pytest.mark.parametrize("key,exc,text", [
    (10, IndexError, "out of range"), (-11, IndexError, "out of range"),
    ([0, 10], IndexError, "index 10"), (np.array([-11]), IndexError, "-11"),
    ((1, 99), IndexError, "99"),
    (1.0, TypeError, "integers"), (np.float32(2), TypeError, "integers"),
    ([0.5, 1.0], TypeError, "float"), ("a", TypeError, "integers"), (True, TypeError, "boolean"),
    (np.ones(9, bool), IndexError, "10 records"), (np.ones(11, bool), IndexError, "mask"),
    (np.zeros((2, 2), int), IndexError, "1-D"),
])
def test_bad_index(dense, ragged, key, exc, text):
    for ds in (dense, ragged):
        with pytest.raises(exc, match=text):
            ds[key]


def test_delete_bad_index(dense):
    with pytest.raises(IndexError):
        dense.delete([3, 10])
    with pytest.raises(TypeError):
        dense.delete(2.0)
    unchanged(dense)
    dense.delete([3, 3, 9])                   # a repeat is one record (loaderx 1.5.7)
    np.testing.assert_array_equal(dense[:], DATA[[0, 1, 2, 8, 4, 5, 6, 7]])   # swap-last


def test_no_store_there(workdir):
    with pytest.raises(FileNotFoundError, match="not a loaderx dataset"):
        DenseDataset("nowhere")
    os.mkdir("empty")
    with pytest.raises(FileNotFoundError, match="not a loaderx dataset"):
        RaggedDataset("empty")
    open("afile", "w").close()
    with pytest.raises(FileNotFoundError):
        DenseDataset("afile")
    with pytest.raises(FileNotFoundError):
        MSDataset("empty")


def test_store_of_another_kind(dense, ragged):
    with pytest.raises(ValueError, match="'dense' store, not 'ragged'; open it with DenseDataset"):
        RaggedDataset("d")
    with pytest.raises(ValueError, match="'ragged' store, not 'dense'; open it with RaggedDataset"):
        DenseDataset("r")
    from loaderx.zrecord import Zrecord
    with pytest.raises(ValueError, match="not raw byte records"):
        Zrecord("r")


def test_open_existing_store_with_its_schema(dense):
    """loaderx 1.5.7: a dtype, shape or codec given for an existing store opens it
    when they are the store's, and is a ValueError when they are not."""
    same = DenseDataset("d", dtype=np.float32, item_shape=(2, 3), codec="zstd")
    assert len(same) == 10
    same.close()
    for kw in ({"dtype": np.float64, "item_shape": (2, 3)}, {"dtype": np.float32, "item_shape": (3, 2)},
               {"dtype": np.float32, "item_shape": (2, 3), "codec": "raw"}):
        with pytest.raises(ValueError, match="cannot open as"):
            DenseDataset("d", **kw)
    unchanged(dense)


def test_from_numpy_refuses_foreign_directory(workdir):
    os.mkdir("mine")
    open("mine/notes.txt", "w").write("keep me")
    with pytest.raises(FileExistsError):
        from_numpy("mine", DATA)
    assert open("mine/notes.txt").read() == "keep me"


def test_bad_dtypes():
    with pytest.raises(TypeError, match="cannot be stored"):
        from_numpy("s", np.array(["a", "b"]))
    with pytest.raises(TypeError, match="cannot be stored"):
        DenseDataset("o", dtype=object, item_shape=())


def test_unknown_tier():
    for bad in ("huge", "small", 1 << 20):
        with pytest.raises(ValueError, match="unknown dict tier"):
            train_dict(DATA, tier=bad)


def test_misaligned_set(workdir):
    from_numpy("set/a", np.arange(5))
    from_numpy("set/b", np.arange(6))
    with pytest.raises(ValueError, match=r"a=5.*b=6|b=6.*a=5"):
        MSDataset("set")


def test_set_append_counts_differ(workdir):
    from_numpy("set/a", np.arange(5))
    from_numpy("set/b", np.arange(5.0))
    ds = MSDataset("set")
    with pytest.raises(ValueError, match="a=2, b=3"):
        ds.append({"a": np.arange(2), "b": np.arange(3.0)})
    with pytest.raises(ValueError, match="unknown c"):
        ds.append({"a": np.arange(2), "b": np.arange(2.0), "c": np.arange(2)})
    assert len(ds) == 5


def test_loader_bad_parameters(dense, loader_feature):
    with pytest.raises(ValueError, match="unknown sampler"):
        DataLoader({"d": dense}, batch_size=2, sampler="shuffle")
    with pytest.raises(ValueError) as ei:
        DataLoader({"d": dense}, batch_size=11)
    assert ei.value.name == "ZR_E_SAMPLER"
    with pytest.raises(ValueError, match="rank"):
        DataLoader({"d": dense}, batch_size=2, rank=2, world_size=2)
    with pytest.raises(TypeError):
        DataLoader({"d": dense}, batch_size=2.0)
    with pytest.raises(TypeError):
        DataLoader([dense], batch_size=2)


def test_resume_after_length_change_refused(dense, loader_feature):
    loader = DataLoader({"d": dense}, batch_size=4, seed=3)
    for _ in range(3):
        next(loader)
    state = loader.state_dict()
    loader.close()
    dense.append(DATA[:2])
    loader = DataLoader({"d": dense}, batch_size=4, seed=3)
    with pytest.raises(StaleError, match="allow_length_change") as ei:
        loader.load_state_dict(state)
    assert isinstance(ei.value, ValueError) and ei.value.name == "ZR_E_STALE"
    loader2 = DataLoader({"d": dense}, batch_size=4, seed=3)
    loader2.load_state_dict(state, allow_length_change=True)
    assert loader2.step == 3 and loader2.length == 12
    next(loader2)
    loader2.close()
    loader.close()


def test_errors_pickle():
    import pickle
    e = loaderx._errors.from_reply({"code": 1007, "name": "ZR_E_RANGE", "message": "index 9"})
    e2 = pickle.loads(pickle.dumps(e))
    assert isinstance(e2, IndexError) and e2.name == "ZR_E_RANGE" and e2.zr_code == 1007
    assert e2.code == -3
