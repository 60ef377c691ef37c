"""loaderx.torch: the IterableDataset adapter, on CPU torch (skipped without torch)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from loaderx.dataset import DenseDataset, RaggedDataset   # noqa: E402
from loaderx.utils import from_iterator, from_numpy        # noqa: E402
from loaderx.torch import LoaderDataset                     # noqa: E402

pytestmark = pytest.mark.usefixtures("loader_feature")


@pytest.fixture
def streams(workdir):
    from_numpy("x", np.arange(200 * 5, dtype=np.float32).reshape(200, 5))
    from_numpy("y", np.arange(200))
    from_iterator("t", [np.arange(k % 4 + 1, dtype=np.int64) for k in range(200)], np.int64)
    return {"x": DenseDataset("x"), "y": DenseDataset("y"), "t": RaggedDataset("t")}


def take(dl, n):
    out = []
    for i, b in enumerate(dl):
        out.append({k: (v.clone() if isinstance(v, torch.Tensor) else [t.clone() for t in v])
                    for k, v in b.items()})
        if len(out) == n:
            break
    return out


def test_adapter_batches_and_resume(streams):
    ds = LoaderDataset(streams, batch_size=16, sampler="cyclic", seed=3)
    dl = torch.utils.data.DataLoader(ds, batch_size=None)
    first = take(dl, 6)
    assert first[0]["x"].shape == (16, 5) and first[0]["x"].dtype == torch.float32
    assert isinstance(first[0]["t"], list) and isinstance(first[0]["t"][0], torch.Tensor)
    torch.testing.assert_close(first[0]["x"][:, 0], first[0]["y"].float() * 5)
    assert ds.step == 6
    ckpt = {"data": ds.state_dict()}
    more = take(dl, 3)                     # steps 6, 7, 8

    ds2 = LoaderDataset(streams, batch_size=16, sampler="cyclic", seed=3)
    ds2.load_state_dict(ckpt["data"])      # state rides in the checkpoint
    again = take(torch.utils.data.DataLoader(ds2, batch_size=None), 3)
    for a, b in zip(more, again):
        torch.testing.assert_close(a["x"], b["x"])
        torch.testing.assert_close(a["y"], b["y"])
    # copies by default: writable, in-place ops are safe
    first[0]["x"].add_(1)


def test_adapter_refuses_worker_processes(streams):
    ds = LoaderDataset(streams, batch_size=8)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)
    with pytest.raises(RuntimeError, match="num_workers=0"):
        next(iter(dl))


def test_seed_to_device_transform(streams):
    from loaderx.dataloader import DataLoader
    device = "cpu"

    def to_device(batch):
        return {k: torch.from_numpy(v).to(device, non_blocking=True)
                for k, v in batch.items() if k != "t"}

    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        loader = DataLoader(streams, batch_size=32, transform=to_device)
        for i, batch in enumerate(loader):
            torch.testing.assert_close(batch["x"][:, 0], batch["y"].float() * 5)
            if i == 10:
                break
    loader.close()
