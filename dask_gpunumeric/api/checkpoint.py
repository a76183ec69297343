"""``gnp.checkpoint``: persist Arrays and forget how they were computed, so that a long loop on a cluster
keeps the scheduler's memory flat.

A persisted block on a cluster keeps its history: the scheduler remembers the tasks that made it (and
those that made their inputs, back to the loop's start) so that it can recompute the block if a worker
dies. In a time-stepping loop that persists every few steps, that history grows with every step (Dask
has no way to drop it: dask/distributed#809). A checkpoint keeps the blocks where they are, each under a
new key that the scheduler knows as data without a history (as if scattered), so the old tasks are
forgotten once nothing else needs them. The price: a block lost with its worker cannot be recomputed (the
computations that need it fail with ``FutureCancelledError``), so checkpoint every few hundred steps, not
every step, and replicate what you cannot lose (``client.replicate``).

On the local scheduler persisted blocks have no history anyway: ``checkpoint`` is ``persist`` there.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dask
from dask.tokenize import tokenize

from .array import Array
from ..expr import FromGraph


def checkpoint(*arrays: Array) -> Any:
    """Compute ``arrays`` (persisted together, as ``dask.persist``) and keep their blocks in memory without
    the history of how they were computed. Returns one Array per argument (the Array itself for one)."""
    if not arrays or not all(isinstance(a, Array) for a in arrays):
        raise TypeError("gnp.checkpoint takes gnp Arrays; persist other collections with dask.persist")
    persisted = dask.persist(*arrays)
    out = tuple(_forget_history(p) for p in persisted)
    return out[0] if len(out) == 1 else out


def _forget_history(persisted: Array) -> Array:
    layer = persisted.expr.operand("layer")
    futures = [v for v in layer.values() if type(v).__name__ == "Future"]
    if not futures:  # computed locally: the blocks are plain data already
        return persisted
    import distributed

    client = futures[0].client
    distributed.wait(futures)
    for future in futures:  # an error in the computation surfaces here, as persist().compute() would
        if future.status == "error":
            future.result()
    name = f"checkpoint-{tokenize(persisted.name, 'checkpoint')}"
    renamed = {key: (name, *key[1:]) for key in layer}
    held = client.run(_adopt_blocks, renamed)  # each worker keeps its blocks under the new keys too
    who_has: dict = {}
    nbytes: dict = {}
    for worker, sizes in held.items():
        for key, size in sizes.items():
            who_has.setdefault(key, []).append(worker)
            nbytes[key] = size
    client.sync(client.scheduler.update_data, who_has=who_has, nbytes=nbytes, client=client.id)
    new_layer = {}
    for key in renamed.values():  # as Client.scatter makes its futures
        new_layer[key] = distributed.Future(key, client)
        client.futures[key].finish()
    return Array(FromGraph(new_layer, name, persisted.chunks, persisted.dtype, persisted.backend))


def _adopt_blocks(renamed: Mapping, dask_worker: Any) -> dict:
    """On a worker: the blocks it holds, also under their new keys (the same objects: nothing is copied) as
    data of unknown origin; returns their sizes by new key."""
    data = {new: dask_worker.data[old] for old, new in renamed.items() if old in dask_worker.data}
    return dask_worker.update_data(data=data)["nbytes"] if data else {}
