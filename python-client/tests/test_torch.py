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
    assert ckpt["data"]["step"] == 6
    more = take(dl, 3)                     # steps 6, 7, 8

    ds2 = LoaderDataset(streams, batch_size=16, sampler="cyclic", seed=3)
    ds2.load_state_dict(ckpt["data"])      # state rides in the checkpoint
    again = take(torch.utils.data.DataLoader(ds2, batch_size=None), 3)
    for a, b in zip(more, again):
        torch.testing.assert_close(a["x"], b["x"])
        torch.testing.assert_close(a["y"], b["y"])
    # copies by default: writable, in-place ops are safe
    first[0]["x"].add_(1)


def test_torch_workers_take_turns_in_step_order(streams):
    ref = take(torch.utils.data.DataLoader(
        LoaderDataset(streams, batch_size=8, sampler="iid", seed=4), batch_size=None), 9)
    ds = LoaderDataset(streams, batch_size=8, sampler="iid", seed=4)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    got, steps = [], []
    for b in dl:
        steps.append(b.step)
        got.append({k: (v.clone() if isinstance(v, torch.Tensor) else [t.clone() for t in v])
                    for k, v in b.items()})
        if len(got) == 5:
            state = ds.state_dict(b)
            break
    assert steps == [0, 1, 2, 3, 4] and state["step"] == 5
    for a, b in zip(got, ref):
        torch.testing.assert_close(a["x"], b["x"])
    # the training process saw no batch pass through ds: state_dict() says so
    with pytest.raises(ValueError, match="ds.state_dict\\(batch\\)"):
        ds.state_dict()
    ds2 = LoaderDataset(streams, batch_size=8, sampler="iid", seed=4)
    ds2.load_state_dict(state)
    again = []
    for b in torch.utils.data.DataLoader(ds2, batch_size=None, num_workers=3):
        again.append(b)
        if len(again) == 4:
            break
    assert [b.step for b in again] == [5, 6, 7, 8]
    for a, b in zip(again, ref[5:]):
        torch.testing.assert_close(a["x"], b["x"])
        torch.testing.assert_close(a["y"], b["y"])


def test_torch_workers_pass_on_a_transform_error_and_go_on(streams):
    ds = LoaderDataset(streams, batch_size=8, sampler="sequential", transform=_odd_steps_only,
                       to_tensors=False)
    it = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
    with pytest.raises(ValueError, match="even step"):
        next(it)                      # step 0
    assert int(next(it)["y"][0]) == 8     # step 1
    with pytest.raises(ValueError, match="even step"):
        next(it)
    assert int(next(it)["y"][0]) == 24


def _odd_steps_only(b):
    if int(b["y"][0]) // 8 % 2 == 0:
        raise ValueError("an even step")
    return {"y": np.array(b["y"])}


def test_stateful_dataloader_restores_each_worker(streams):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    ds = LoaderDataset(streams, batch_size=8, sampler="cyclic", seed=2)
    dl = sdl.StatefulDataLoader(ds, batch_size=None, num_workers=2)
    it = iter(dl)
    for _ in range(5):
        next(it)
    state = dl.state_dict()
    want = [next(it) for _ in range(4)]
    assert [b.step for b in want] == [5, 6, 7, 8]
    del it, dl
    dl2 = sdl.StatefulDataLoader(LoaderDataset(streams, batch_size=8, sampler="cyclic", seed=2),
                                 batch_size=None, num_workers=2)
    dl2.load_state_dict(state)
    got = []
    for b in dl2:
        got.append(b)
        if len(got) == 4:
            break
    assert [b.step for b in got] == [5, 6, 7, 8]
    for a, b in zip(got, want):
        torch.testing.assert_close(a["x"], b["x"])


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


def test_state_keeps_what_the_dataloader_keeps(streams):
    """LoaderDataset.state_dict() holds DataLoader.state_dict()'s keys, and
    load_state_dict refuses another seed, sampler or global batch as the
    DataLoader does: at once where this process has a loader, else at iter()
    (issue 38 item 5; before, the state was step and length only and such a
    resume went on silently with other batches)."""
    from loaderx import ZrecordError
    from loaderx.dataloader import DataLoader
    kw = dict(batch_size=16, sampler="cyclic", seed=3)
    ds = LoaderDataset(streams, **kw)
    batch = None
    for batch in take(torch.utils.data.DataLoader(ds, batch_size=None), 1):
        pass
    with DataLoader(streams, **kw) as dl:
        want = dl.state_dict()
        next(dl)
        want_after = dl.state_dict()
    state = ds.state_dict()
    assert state.keys() == want.keys(), (state, want)
    assert state == want_after
    for other, what in ((dict(kw, seed=4), "seed=3"), (dict(kw, sampler="iid"), "sampler"),
                        (dict(kw, batch_size=8), "global batch is 16")):
        fresh = LoaderDataset(streams, **other)
        fresh.load_state_dict(state)                # no loader here yet: refused by iter()
        with pytest.raises(ZrecordError, match=what):
            iter(fresh)
        taken = LoaderDataset(streams, **other)
        take(torch.utils.data.DataLoader(taken, batch_size=None), 1)
        with pytest.raises(ZrecordError, match=what):   # a loader to compare with: at once
            taken.load_state_dict(state)
    # the same parameters resume, and a state after a batch from a torch worker
    # carries the loader's state too
    same = LoaderDataset(streams, **kw)
    same.load_state_dict(state)
    got = take(torch.utils.data.DataLoader(same, batch_size=None), 1)[0]
    with DataLoader(streams, **kw) as dl:
        next(dl)
        torch.testing.assert_close(got["x"], torch.from_numpy(np.array(next(dl)["x"])))
    wds = LoaderDataset(streams, **kw)
    for b in torch.utils.data.DataLoader(wds, batch_size=None, num_workers=1):
        after = wds.state_dict(b)
        break
    assert after.keys() == want.keys() and after == want_after, after
