"""Type aliases of the public API's annotations (PEP 561: the package ships
``py.typed``). Annotations only: nothing here runs at a call."""

import os
from typing import Any, Dict, Mapping, Union

import numpy as np
import numpy.typing as npt

#: a store's path: a directory name, as ``open()`` takes one
StorePath = Union[str, "os.PathLike[str]"]
#: a numpy dtype, or anything ``np.dtype()`` takes
DTypeLike = npt.DTypeLike
#: records to write: an array, or a sequence of arrays or byte strings
Records = Any
#: what a batch is: one array (or list of arrays, ragged) per stream name
Batch = Dict[str, Any]
#: a loader's resumable state (:meth:`loaderx.dataloader.DataLoader.state_dict`)
State = Mapping[str, Any]
#: an index: an int, a slice, a sequence or array of ints, a boolean mask
Index = Union[int, slice, "npt.ArrayLike"]

__all__ = ["StorePath", "DTypeLike", "Records", "Batch", "State", "Index", "np"]
