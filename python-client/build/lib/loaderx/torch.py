"""A ``torch.utils.data.IterableDataset`` over a loaderx DataLoader.

Importable only when torch is installed::

    from loaderx.torch import LoaderDataset
    ds = LoaderDataset({'x': DenseDataset('train_data'), 'y': DenseDataset('train_label')},
                       batch_size=256, sampler='cyclic', seed=0)
    dl = torch.utils.data.DataLoader(ds, batch_size=None)   # batches come whole
    for step, batch in enumerate(dl):                      # {name: tensor}
        ...
        checkpoint = {'model': model.state_dict(), 'data': ds.state_dict()}

    ds.load_state_dict(checkpoint['data'])                  # the next batch is the next step

The daemon is the worker pool, so the adapter runs in the training process
(``num_workers=0``, the default of torch's DataLoader); ``state_dict()`` then counts
exactly the batches the training loop has received. Worker processes would each
gather ahead of the loop and make the count meaningless, so they are refused.

Tensors are copies by default (``copy=True``): a batch's ring memory is mapped
read-only, and torch tensors do not honour numpy's read-only flag, so an in-place
operation on a zero-copy tensor would fault. ``copy=False`` gives zero-copy tensors
that must not be written to (a device copy, ``.to('cuda')``, is fine).
"""

import warnings

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .dataloader import DataLoader

__all__ = ["LoaderDataset"]


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


class LoaderDataset(IterableDataset):
    """Endless batches ``{name: tensor}`` (ragged streams: lists of tensors).

    Takes the DataLoader's arguments (``streams``, ``batch_size``, ``sampler``,
    ``seed``, ``start_step``, ``rank``, ``world_size``, ``prefetch``, ...);
    ``transform`` runs on the numpy batch before the conversion to tensors
    (``to_tensors=False`` skips the conversion).
    """

    def __init__(self, streams, copy=True, to_tensors=True, **loader_kwargs):
        super().__init__()
        self.streams = streams
        self.copy = copy
        self.to_tensors = to_tensors
        self.kwargs = dict(loader_kwargs)
        self._step = int(self.kwargs.pop("start_step", 0))
        self._length = None
        self._loader = None

    def __iter__(self):
        if get_worker_info() is not None:
            raise RuntimeError(
                "loaderx.torch.LoaderDataset runs in the training process: use "
                "torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0); zrecordd "
                "already gathers in parallel, ahead of the loop")
        if self._loader is not None:
            self._loader.close()
        loader = DataLoader(self.streams, start_step=self._step, **self.kwargs)
        if self._length is not None:
            loader.load_state_dict({"step": self._step, "length": self._length})
        self._length = loader.length
        self._loader = loader
        try:
            while True:
                batch = next(loader)
                if self.to_tensors:
                    batch = {k: _to_tensor(v, self.copy) for k, v in batch.items()} \
                        if isinstance(batch, dict) else batch
                self._step = loader.step
                yield batch
        finally:
            loader.close()
            if self._loader is loader:
                self._loader = None

    @property
    def step(self):
        """The step of the next batch."""
        return self._step

    def state_dict(self):
        return {"step": self._step, "length": self._length}

    def load_state_dict(self, state, allow_length_change=False):
        self._step = int(state["step"])
        self._length = None if allow_length_change else state.get("length")
