"""A user's code against loaderx's public API, checked by mypy in CI
(scripts/test.sh) and never run (its name is not test_*). pyproject.toml holds it
to ``disallow_untyped_calls``: a call of a public function without annotations is
an error. Every ``type: ignore`` below marks a call mypy must refuse, and
``warn_unused_ignores`` fails the check when it no longer does: the types are
there and they are the right ones."""

from typing import Any, Dict, List

import numpy as np

from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, MSDataset, RaggedDataset
from loaderx.utils import convert, from_iterator, from_numpy, train_dict
from loaderx.zrecord import Zrecord


def writes() -> None:
    n: int = from_numpy("images", np.zeros((8, 4, 4), np.uint8), codec="zstd_dict", level=9)
    m: int = from_iterator("tokens", [np.arange(3), np.arange(5)], np.int32, level=3)
    d: bytes = train_dict(np.zeros((64, 16), np.uint8), "fast")
    first: int = DenseDataset("images").append(np.zeros((1, 4, 4), np.uint8), level=19)
    more: int = RaggedDataset("tokens").append([np.arange(2)])
    both: int = MSDataset("set").append({"x": np.zeros((1, 2))})
    z: int = Zrecord("bytes", codec="zstd", level=5).append([b"abc"])
    convert("tokens", "tokens-lx157", to="loaderx-1.5.7")
    del n, m, d, first, more, both, z


def refused() -> None:
    name: str = from_numpy("a", np.zeros(2))  # type: ignore[assignment]
    DenseDataset("a").append(np.zeros((1, 2)), level="3")  # type: ignore[arg-type]
    from_iterator("b", [b"x"], np.uint8, codec=1)  # type: ignore[arg-type]
    DataLoader({"a": DenseDataset("a")}, batch_size="8")  # type: ignore[arg-type]
    DataLoader({"a": DenseDataset("a")}).load_state_dict(3)  # type: ignore[arg-type]


def loads() -> None:
    loader = DataLoader({"a": DenseDataset("a")}, batch_size=8, sampler="iid", seed=1,
                        start_step=0, rank=0, world_size=1)
    state: Dict[str, Any] = loader.state_dict()
    loader.load_state_dict(state)
    stats: Dict[str, Any] = loader.stats()
    loader.close()
    names: List[str] = list(state)
    del stats, names
