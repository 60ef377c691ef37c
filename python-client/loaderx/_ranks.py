"""A DataLoader's rank and world size when the loop runs under distributed data
parallelism.

A loader given neither ``rank`` nor ``world_size`` shards each global batch as the
job does: by the initialised ``torch.distributed`` process group's rank and size
when there is one, else by the ``RANK`` and ``WORLD_SIZE`` environment variables
(torchrun, ``torch.distributed.launch`` and most launchers set them), else as one
process (rank 0 of 1). Without this every rank of a DDP job would read the same
batches. An explicit value that disagrees with the group is an error, except both
values of a data-parallel group inside it (model parallelism: ``world_size`` a
proper divisor of the group's, ``rank`` below it). ``stats()['ranks']`` says where
the values came from.

torch is never imported here: a group can be initialised only where the training
script imported ``torch.distributed`` itself.
"""

import os
import sys

from ._errors import ZrecordValueError

__all__ = ["resolve"]


def _group():
    """(rank, world_size) of the initialised default process group, or None."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:           # a torch without the calls: no group to follow
        return None


def _environment():
    """(rank, world_size) from RANK and WORLD_SIZE when both are set, or None."""
    rank, size = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None or size is None:
        return None
    try:
        r, n = int(rank), int(size)
    except ValueError:
        r = n = -1
    if n < 1 or not 0 <= r < n:
        raise ZrecordValueError(
            f"the environment has RANK={rank!r} and WORLD_SIZE={size!r}: expected integers, "
            "0 <= RANK < WORLD_SIZE; fix them or give the DataLoader rank= and world_size=",
            name="ZR_E_SAMPLER")
    return r, n


def resolve(rank, world_size):
    """(rank, world_size, source) for a DataLoader given `rank` and `world_size`
    (each None when not given); source says where they came from: ``'given'``,
    ``'torch.distributed'``, ``'environment'`` (RANK, WORLD_SIZE) or ``'default'``
    (one process)."""
    group, source = _group(), "torch.distributed"
    if group is None:
        group, source = _environment(), "environment"
    if rank is None and world_size is None:
        if group is None:
            return 0, 1, "default"
        return group[0], group[1], source
    if group is None:
        return (0 if rank is None else rank), (1 if world_size is None else world_size), "given"
    if rank is not None and world_size is not None and world_size < group[1] and \
            group[1] % world_size == 0 and rank < world_size:
        return rank, world_size, "given"        # a data-parallel group inside the job's
    where = ("the torch.distributed process group" if source == "torch.distributed" else
             "the environment (RANK, WORLD_SIZE)")
    for what, mine, theirs in (("rank", rank, group[0]), ("world_size", world_size, group[1])):
        if mine is not None and mine != theirs:
            raise ZrecordValueError(
                f"DataLoader: {what}={mine}, but {where} has {what} {theirs} (rank {group[0]} "
                f"of {group[1]}); leave rank and world_size out to follow it, or give both for "
                "a data-parallel group inside it (world_size dividing the job's)",
                name="ZR_E_SAMPLER")
    both = rank is not None and world_size is not None
    return group[0], group[1], "given" if both else source
