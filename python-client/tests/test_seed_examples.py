"""Every code example of the loaderx README (the seed), as written, with small
arrays standing in for its files."""

import numpy as np
import pytest

from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, MSDataset, RaggedDataset
from loaderx.utils import from_iterator, from_numpy, train_dict


@pytest.fixture
def npy_files(workdir):
    rng = np.random.default_rng(0)
    np.save("data.npy", rng.standard_normal((600, 3, 8), dtype=np.float32))
    np.save("label.npy", rng.integers(0, 10, 600))


def test_quick_start(npy_files, loader_feature, capsys):
    from_numpy('train_data', np.load('data.npy', mmap_mode='r'))
    from_numpy('train_label', np.load('label.npy', mmap_mode='r'))

    loader = DataLoader({'data': DenseDataset('train_data'), 'label': DenseDataset('train_label')},
                        transform=lambda batch: batch)

    for i, batch in enumerate(loader):
        if i >= 256:
            break

    print(batch['data'].shape)
    print(batch['label'].shape)
    out = capsys.readouterr().out.split("\n")
    assert out[0] == "(256, 3, 8)" and out[1] == "(256,)"
    # record i lines up across the streams
    data, label = np.load('data.npy'), np.load('label.npy')
    loader2 = DataLoader({'data': DenseDataset('train_data'), 'label': DenseDataset('train_label'),
                          'idx': DenseDataset('train_label')}, batch_size=16, with_indices=True)
    b = next(loader2)
    np.testing.assert_array_equal(b['data'], data[b['__index__']])
    np.testing.assert_array_equal(b['label'], label[b['__index__']])
    loader.close()
    loader2.close()


def test_converting(npy_files):
    images = np.tile(np.arange(256, dtype=np.uint8), (400, 4)).reshape(400, 32, 32)
    images[:, 0, :] = np.arange(400, dtype=np.uint8)[:, None]

    from_numpy('train_data', np.load('data.npy', mmap_mode='r'))
    from_numpy('train_label', np.load('label.npy', mmap_mode='r'))

    # The README's third call names train_data again, with other records: as in
    # loaderx 1.5.7, a store of another schema is refused, never replaced (nor
    # appended to), so it runs here on a path of its own.
    with pytest.raises(ValueError, match="train_data holds"):
        from_numpy('train_data', images, codec='zstd_dict')
    assert len(DenseDataset('train_data')) == 600
    import os
    os.makedirs('images', exist_ok=True)
    os.chdir('images')

    # many small, similar records compress far better against a trained dictionary:
    from_numpy('train_data', images, codec='zstd_dict')

    ds = DenseDataset('train_data')
    assert len(ds) == 400 and ds.item_shape == (32, 32) and ds.dtype == np.uint8
    assert ds.codec == "zstd_dict" and ds.has_dict()
    np.testing.assert_array_equal(ds[:], images)
    os.chdir('..')
    lab = DenseDataset('train_label')
    assert lab.item_shape == () and len(lab) == 600          # 1-D: a dataset of scalars
    np.testing.assert_array_equal(lab[:], np.load('label.npy'))


def test_records_dense():
    from_numpy('data', np.arange(64, dtype=np.float32).reshape(8, 2, 4))
    ds = DenseDataset('data')
    r = ds[0, 5, 2]                          # (3, 2, 4) — a record set, shape straight from the schema
    assert r.shape == (3, 2, 4)
    np.testing.assert_array_equal(r, np.arange(64, dtype=np.float32).reshape(8, 2, 4)[[0, 5, 2]])
    np.testing.assert_array_equal(ds[-1], np.arange(56, 64, dtype=np.float32).reshape(2, 4))


def test_records_ragged():
    seqs = [np.arange(L, dtype=np.int32) for L in (3, 1, 4, 1, 5)]
    from_iterator('tokens', seqs, np.int32)   # dtype explicit; each record keeps its shape
    rs = RaggedDataset('tokens')

    records = rs[0, 2, 4]                # list of ndarray — one per record, exact shapes
    lengths = np.array([len(r) for r in records])
    padded = np.zeros((len(records), lengths.max()), dtype=records[0].dtype)
    for i, r in enumerate(records):
        padded[i, :len(r)] = r             # (B, max_len) — your policy, your loop

    assert isinstance(records, list) and [r.shape for r in records] == [(3,), (4,), (5,)]
    np.testing.assert_array_equal(padded, [[0, 1, 2, 0, 0], [0, 1, 2, 3, 0], [0, 1, 2, 3, 4]])
    assert padded.dtype == np.int32


def test_collate(loader_feature):
    from_numpy('tok', np.arange(100 * 16, dtype=np.int32).reshape(100, 16))
    from_numpy('lab', np.arange(100))
    dense_tokens, labelset = DenseDataset('tok'), DenseDataset('lab')

    def collate(batch):
        return {'input_ids': batch['tokens'], 'label': batch['label']}

    loader = DataLoader({'tokens': dense_tokens, 'label': labelset}, batch_size=32,
                        transform=collate)
    b = next(loader)
    assert set(b) == {'input_ids', 'label'}
    assert b['input_ids'].shape == (32, 16) and b['label'].shape == (32,)
    np.testing.assert_array_equal(b['input_ids'][:, 0], b['label'] * 16)
    loader.close()


def test_writable_datasets():
    rng = np.random.default_rng(1)
    images = rng.integers(0, 255, (2048, 28, 28), dtype=np.uint8)
    single_image = images[5]
    seq_a, seq_b, seq_c = (np.arange(n, dtype=np.int32) for n in (3, 7, 2))
    i = 1024

    ds = DenseDataset('mnist/x', dtype=np.uint8, item_shape=(28, 28))  # schema written now
    assert ds.append(images[i:i + 1024]) == 0        # (B, 28, 28) → one batch, returns first index
    assert ds.append(single_image[None]) == 1024     # one sample is batch_size 1 — add the axis yourself
    np.testing.assert_array_equal(ds[:4], images[i:i + 4])   # read path is unchanged

    tok = RaggedDataset('tokens', dtype=np.int32)     # each record keeps its own shape
    tok.append([seq_a, seq_b, seq_c])    # list in, list out — `tok[0, 2]` returns a list
    out = tok[0, 2]
    assert isinstance(out, list)
    np.testing.assert_array_equal(out[0], seq_a)
    np.testing.assert_array_equal(out[1], seq_c)
    import os
    assert os.path.isfile('mnist/x/schema.msgpack')


def test_maintenance():
    data = np.arange(40 * 6, dtype=np.int16).reshape(40, 6)
    from_numpy('m', data)
    ds = DenseDataset('m')
    before = ds.stats()
    assert set(before) == {'records', 'live_bytes', 'chunk_bytes', 'reclaimable'}

    ds.delete(np.arange(0, len(ds), 2))   # swap-last: index space stays dense, survivors reindex
    s = ds.stats()                        # {'records', 'live_bytes', 'chunk_bytes', 'reclaimable'}
    ds.compact()                          # reclaim the deleted bytes, in place — offline only

    assert len(ds) == 20 and s['records'] == 20 and s['reclaimable'] > 0
    after = ds.stats()
    assert after['reclaimable'] == 0 and after['records'] == 20
    # the live records are exactly the odd rows, in some order
    got = ds[:]
    assert sorted(map(tuple, got)) == sorted(map(tuple, data[1::2]))


def test_train_dict_then_write():
    rng = np.random.default_rng(2)
    base = rng.integers(0, 50, 64, dtype=np.int32)
    settled_array = np.stack([np.roll(base, k) for k in range(600)])

    def token_generator_fn():
        for k in range(300):
            yield np.roll(base, k)[: 16 + k % 40]
    token_generator = token_generator_fn()
    data = settled_array[:200]

    # train once on the settled data — a standalone, reusable artifact
    d = train_dict(settled_array, tier="balanced")

    # then any store can write zstd_dict with it, including a stream
    from_iterator('tokens', token_generator, np.int32, codec='zstd_dict', dict_bytes=d)
    from_numpy('data', data, codec='zstd_dict', dict_bytes=d)

    assert isinstance(d, bytes) and len(d) > 0
    t = RaggedDataset('tokens')
    assert len(t) == 300 and t.has_dict() and t.codec == 'zstd_dict'
    np.testing.assert_array_equal(t[7], np.roll(base, 7)[:16 + 7])
    np.testing.assert_array_equal(DenseDataset('data')[:], data)


def test_recode_copy_loop():
    src = np.arange(300 * 20, dtype=np.float32).reshape(300, 20) % 17
    from_numpy("src", src)

    CHUNK = 1 << 16
    with DenseDataset("src") as s, \
         DenseDataset("dst", dtype=s.dtype, item_shape=s.item_shape,
                      codec="zstd_dict") as d:
        if not d.has_dict():                       # zstd_dict needs a dictionary
            d._store.install_dict(train_dict(s))   # train one on the source store
        for start in range(0, len(s), CHUNK):
            d.append(s[start:start + CHUNK])       # records copied in index order

    dst = DenseDataset("dst")
    assert dst.codec == "zstd_dict" and dst.has_dict()
    np.testing.assert_array_equal(dst[:], src)


def test_recode_ragged():
    seqs = [np.arange(k % 13 + 1, dtype=np.int64) * 3 for k in range(400)]
    from_iterator("rsrc", seqs, np.int64)
    CHUNK = 1 << 16
    with RaggedDataset("rsrc") as s, RaggedDataset("rdst", dtype=s.dtype, codec="zstd_dict") as d:
        if not d.has_dict():
            d._store.install_dict(train_dict(s))
        for start in range(0, len(s), CHUNK):
            d.append(s[start:start + CHUNK])
    out = RaggedDataset("rdst")[:]
    assert len(out) == 400 and all(np.array_equal(a, b) for a, b in zip(out, seqs))


def test_msdataset(loader_feature):
    rng = np.random.default_rng(3)
    joint = rng.standard_normal((300, 3, 5, 2), dtype=np.float32)
    label = np.arange(300)
    seqs = [np.arange(k % 9 + 1, dtype=np.int32) for k in range(300)]
    b = rng.standard_normal((4, 3, 5, 2), dtype=np.float32)
    l = np.arange(300, 304)

    root = "xsub/train"
    from_numpy(root + "/joint", joint)     # the streams are ordinary zrecord stores
    from_numpy(root + "/label", label)
    from_iterator(root + "/token", iter(seqs), np.int32)

    ds = MSDataset(root)                   # wrap + verify they hold the same count
    r = ds["joint"][0, 5, 2]                 # the stream's own index forms apply
    np.testing.assert_array_equal(r, joint[[0, 5, 2]])
    # As written, the README's append names two of the three streams; alignment
    # forbids it, and the error names the missing stream (nothing is written).
    with pytest.raises(ValueError, match="token"):
        ds.append({"joint": b, "label": l})    # same batch size, all streams, once
    assert len(ds) == 300
    ds.append({"joint": b, "label": l, "token": [np.arange(2, dtype=np.int32)] * 4})
    assert len(ds) == 304 and len(ds["token"]) == 304
    ds.delete([0, 5])                      # same indices, all streams, still aligned
    assert len(ds) == 302

    loader = DataLoader(ds.streams, batch_size=256)   # hand the streams to a loader
    batch = next(loader)                      # {name: values}, index-aligned
    assert batch["joint"].shape == (256, 3, 5, 2)
    assert isinstance(batch["token"], list) and len(batch["token"]) == 256
    # aligned: label is the original row index, joint and token follow it
    lab = batch["label"]
    for k in range(0, 256, 37):
        if lab[k] < 300:
            np.testing.assert_array_equal(batch["joint"][k], joint[lab[k]])
            np.testing.assert_array_equal(batch["token"][k], seqs[lab[k]])
        else:
            np.testing.assert_array_equal(batch["joint"][k], b[lab[k] - 300])
    loader.close()
    ds.close()


def test_to_device_torch(loader_feature):
    torch = pytest.importorskip("torch")
    from_numpy('x', np.arange(300 * 4, dtype=np.float32).reshape(300, 4))
    streams = {'x': DenseDataset('x')}

    device = "cpu"   # the README says "cuda:0"; this machine has no GPU
    def to_device(batch):
        return {k: torch.from_numpy(v).to(device, non_blocking=True)
                for k, v in batch.items()}

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # torch: the ring view is read-only
        loader = DataLoader(streams, transform=to_device)
        for i, batch in enumerate(loader):
            assert isinstance(batch['x'], torch.Tensor) and batch['x'].shape == (256, 4)
            if i == 3:
                break
    loader.close()
