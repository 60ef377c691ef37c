"""loaderx: the Python client of zrecordd.

Modules, as in the loaderx README: ``loaderx.utils`` (from_numpy, from_iterator,
train_dict), ``loaderx.dataset`` (DenseDataset, RaggedDataset, MSDataset,
DICT_TIERS), ``loaderx.dataloader`` (DataLoader), ``loaderx.zrecord`` (Zrecord) and
``loaderx.torch`` (a torch IterableDataset adapter, when torch is installed).
"""

from ._errors import StaleError, ZrecordError

__version__ = "0.1.0"
__all__ = ["ZrecordError", "StaleError", "connect", "__version__"]


def connect(socket_path=None):
    """A new connection to zrecordd (normally the per-process default is used)."""
    from ._conn import Connection
    return Connection(socket_path)
