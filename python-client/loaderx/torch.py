"""A ``torch.utils.data.IterableDataset`` over a loaderx DataLoader.

Importable only when torch is installed::

    from loaderx.torch import LoaderDataset
    ds = LoaderDataset({'x': DenseDataset('train_data'), 'y': DenseDataset('train_label')},
                       batch_size=256, sampler='cyclic', seed=0)
    dl = torch.utils.data.DataLoader(ds, batch_size=None)   # batches come whole
    for step, batch in enumerate(dl):                      # {name: tensor}
        ...
        checkpoint = {'model': model.state_dict(), 'data': ds.state_dict(batch)}

    ds.load_state_dict(checkpoint['data'])                  # the next batch is the next step

**torch's worker processes.** With ``torch.utils.data.DataLoader(ds,
batch_size=None, num_workers=k)``, worker w of k reads steps ``start + w``,
``start + w + k``, ... (a loader with a step stride of k, its own connection to
the daemon), and torch takes one batch from each worker in turn: the loop gets
every step once, in order, as with ``num_workers=0``. Prefer it when the
transform should run beside torch's own machinery (``pin_memory``, a
``worker_init_fn``, code written for torch's workers); otherwise give the
transform to the DataLoader (``transform=``, worker processes of its own that
read the ring in place and hand results back without pickling the arrays),
which copies less: torch moves every batch through shared memory it makes per
batch.

**State.** A batch that is a dict comes as a ``Batch`` (a dict) whose ``step``
is its step. ``ds.state_dict(batch)`` is the state after ``batch``: exact
whatever the workers. Without a batch it counts the batches this process took
from ``ds`` itself, which is exact with ``num_workers=0``; with torch's workers
the training process sees no batch pass through ``ds`` (torch calls nothing of
the dataset there per batch, and gets batches out of order before it hands
them over in order), so ``state_dict()`` without a batch refuses once batches
came from workers. torchdata's ``StatefulDataLoader`` keeps each worker's own
``state_dict()`` and restores each worker exactly. The state holds what
``DataLoader.state_dict()`` holds, and ``load_state_dict`` refuses what
``DataLoader.load_state_dict`` refuses (another seed, sampler, global batch or
sources; other stores), at once when this process made a loader, else at
``iter()``.

Tensors are copies by default (``copy=True``): a batch's ring memory is mapped
read-only, and torch tensors do not honour numpy's read-only flag, so an in-place
operation on a zero-copy tensor would fault. ``copy=False`` gives zero-copy tensors
that must not be written to (a device copy, ``.to('cuda')``, is fine).
"""

import os
import uuid
import warnings
from typing import Any

import numpy as np

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError(f"loaderx.torch needs torch ({_e}); install it (pip install torch) "
                      "or use loaderx.dataloader.DataLoader directly") from _e

from ._errors import ZrecordValueError
from .dataloader import DataLoader, check_resume

__all__ = ["Batch", "LoaderDataset"]

# datasets of this process whose batches came from torch's worker processes
_from_workers: set = set()


def _to_tensor(v, copy):
    if isinstance(v, list):
        return [_to_tensor(x, copy) for x in v]
    if isinstance(v, np.ndarray):
        if copy:
            return torch.from_numpy(np.array(v))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(v)
    return v


def _arrived(items, step, token, pid, params=None):
    """A Batch unpickled (or copied): one made in another process came from a
    torch worker."""
    if pid != os.getpid():
        _from_workers.add(token)
    return Batch(items, step, token, params)


class Batch(dict):
    """A batch of a LoaderDataset: a dict that knows its ``step`` (and the rest
    of its loader's state_dict(), which comes along from a torch worker)."""

    def __init__(self, items=(), step=None, token=None, params=None):
        super().__init__(items)
        self.step = step
        self._token = token
        self._params = params

    def __reduce__(self):
        return _arrived, (dict(self), self.step, self._token, os.getpid(), self._params)


class _Iter:
    """The batches of one __iter__: an iterator, not a generator, so that a
    transform's exception in a torch worker does not end the worker's share of
    the steps (torch hands the exception over and asks for the next batch)."""

    def __init__(self, ds, loader):
        self.ds = ds
        self.loader = loader

    def __iter__(self):
        return self

    def __next__(self):
        loader = self.loader
        if loader is None:
            raise StopIteration
        try:
            batch = next(loader)
        finally:
            step = loader.step - loader.step_stride
            self.ds._step = loader.step
        if self.ds.to_tensors and isinstance(batch, dict):
            batch = {k: _to_tensor(v, self.ds.copy) for k, v in batch.items()}
        if isinstance(batch, dict):
            batch = Batch(batch, step, self.ds._token, self.ds._params)
        return batch

    def close(self):
        loader, self.loader = self.loader, None
        if loader is not None:
            loader.close()
            if self.ds._loader is loader:
                self.ds._loader = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _params_of(state):
    """A state_dict() without what is the step's or a torch worker's own."""
    return {k: v for k, v in state.items() if k not in ("step", "worker", "workers")}


class LoaderDataset(IterableDataset):
    """Endless batches ``{name: tensor}`` (ragged streams: lists of tensors).

    Takes the DataLoader's arguments (``streams``, ``batch_size``, ``sampler``,
    ``seed``, ``start_step``, ``rank``, ``world_size``, ``prefetch``, ...);
    ``transform`` runs on the numpy batch before the conversion to tensors
    (``to_tensors=False`` skips the conversion). In a torch worker process the
    transform runs on threads of that worker.
    """

    def __init__(self, streams: Any, copy: bool = True, to_tensors: bool = True,
                 **loader_kwargs: Any) -> None:
        super().__init__()
        self.streams = streams
        self.copy = copy
        self.to_tensors = to_tensors
        self.kwargs = dict(loader_kwargs)
        if "step_stride" in self.kwargs:
            raise ZrecordValueError("LoaderDataset sets the step stride itself (torch's "
                                    "num_workers)")
        self._step = int(self.kwargs.pop("start_step", 0))
        # what state_dict() keeps beside the step: the DataLoader's state_dict()
        # (sampler, seed, batch size, ranks, length, fingerprint, ...), of the
        # loader made last or of the state loaded, which the next loader resumes
        # from (and so refuses as DataLoader.load_state_dict does)
        self._params = None
        self._own = None            # the state_dict() of the loader made last here
        self._allow_length_change = False
        self._loader = None
        self._worker = None         # (worker, workers): a state restored in a torch worker
        self._token = uuid.uuid4().hex

    def __iter__(self):
        info = get_worker_info()
        start, stride = self._step, 1
        if info is not None:
            stride = info.num_workers
            if self._worker == (info.id, info.num_workers):
                start = self._step          # this worker's own next step (its state)
            else:
                start = self._step + info.id
            self._worker = (info.id, info.num_workers)
        if self._loader is not None:
            self._loader.close()
        loader = DataLoader(self.streams, start_step=start, step_stride=stride, **self.kwargs)
        try:
            if self._params is not None:
                loader.load_state_dict(dict(self._params, step=start),
                                       allow_length_change=self._allow_length_change)
        except BaseException:
            loader.close()
            raise
        self._own = loader.state_dict()
        self._params = _params_of(self._own)
        self._allow_length_change = False
        self._loader = loader
        return _Iter(self, loader)

    @property
    def step(self):
        """The step of the next batch this process takes from the dataset."""
        return self._step

    def state_dict(self, batch=None):
        """What resumes the run: the state after `batch` (a batch of this
        dataset, from any worker), or after the last batch this process took
        from the dataset itself. In a torch worker: that worker's own state
        (torchdata's StatefulDataLoader keeps it)."""
        if batch is not None:
            step = getattr(batch, "step", None)
            if step is None:
                raise ZrecordValueError(
                    "state_dict(batch): not a batch of a LoaderDataset (a dict whose .step "
                    "is its step); pass the batch the loop got from the DataLoader")
            return dict(getattr(batch, "_params", None) or self._params or {"length": None},
                        step=int(step) + 1)
        info = get_worker_info()
        if info is None and self._token in _from_workers:
            raise ZrecordValueError(
                "LoaderDataset.state_dict(): the batches came from torch's worker processes, "
                "so this process cannot tell how many the loop took; pass the last batch "
                "the loop got, ds.state_dict(batch), or use torchdata's StatefulDataLoader")
        state = dict(self._params or {"length": None}, step=self._step)
        if info is not None and self._worker is not None:
            state["worker"], state["workers"] = self._worker
        return state

    def load_state_dict(self, state, allow_length_change=False):
        """Resumes from a state_dict(): the next loader starts at its step. A state
        of another sampler, seed, global batch or sources is refused as
        DataLoader.load_state_dict refuses it (ZrecordValueError), here when this
        process made a loader to compare with, else by the next iter(); stores of
        another length or fingerprint (StaleError) unless ``allow_length_change``."""
        if self._own is not None:
            check_resume(state, self._own)
        self._step = int(state["step"])
        self._params = _params_of(state)
        self._allow_length_change = bool(allow_length_change)
        info = get_worker_info()
        if "worker" in state and info is not None:
            if (state["worker"], state["workers"]) != (info.id, info.num_workers):
                raise ZrecordValueError(
                    f"the state of worker {state['worker']} of {state['workers']} given to "
                    f"worker {info.id} of {info.num_workers}: resume with as many workers")
            self._worker = (info.id, info.num_workers)
