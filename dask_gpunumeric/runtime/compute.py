"""``gnp.compute`` and ``gnp.persist``: ``dask.compute``/``dask.persist`` of gnp Arrays without Dask's collection
machinery (unpacking the arguments, choosing a scheduler, wrapping, tokenizing and optimizing Dask's expressions,
repacking the results), which costs more than a small run on the device: the Arrays' jointly compiled graph (cached)
straight to the local scheduler, or sent to a distributed client as one graph (``submit``). Any other call is
Dask's own."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dask
import numpy as np

from .fetch import compute_many_now, persist_many_now
from .submit import is_array

# arguments that ``dask.compute``/``dask.persist`` hand back as they are (no collection, nothing to traverse)
_PASSED_THROUGH = frozenset({int, float, complex, bool, str, bytes, type(None), np.ndarray, *np.sctypeDict.values()})


def compute(*args: Any, **kwargs: Any) -> tuple:
    """Compute several Arrays at once, as ``dask.compute(*args, **kwargs)``: a tuple of the results, one per
    argument (NumPy or CuPy arrays, left where their blocks are), arguments that hold no collection passed through.

    The Arrays are computed together: work they share runs once, in one compiled graph (cached for the next call
    of the same structure), on the local scheduler straight from that graph, on a distributed client sent as one
    graph. Other arguments (lists, dicts, other Dask collections) or keywords (``scheduler=``, ...) make it
    ``dask.compute`` itself."""
    arrays = _arrays(args, kwargs)
    values = None if arrays is None else compute_many_now(arrays, call="gnp.compute")
    if values is None:
        return dask.compute(*args, **kwargs)
    return _in_place_of_arrays(args, values)


def persist(*args: Any, **kwargs: Any) -> tuple:
    """Persist several Arrays at once, as ``dask.persist(*args, **kwargs)``: a tuple of Arrays whose blocks are
    computed and held in memory (on the device for CuPy blocks; futures on a distributed client), one per argument,
    arguments that hold no collection passed through.

    The Arrays are computed together, as ``gnp.compute`` computes them; other arguments or keywords make it
    ``dask.persist`` itself."""
    arrays = _arrays(args, kwargs)
    persisted = None if arrays is None else persist_many_now(arrays)
    if persisted is None:
        return dask.persist(*args, **kwargs)
    return _in_place_of_arrays(args, persisted)


def _arrays(args: Sequence[Any], kwargs: dict) -> list | None:
    """The gnp Arrays among ``args`` when gnp computes the call itself: no keywords, at least one Array, all of one
    backend, and every other argument one that Dask hands back as it is; else None (Dask's call)."""
    if kwargs:
        return None
    arrays = [a for a in args if is_array(a)]
    if not arrays or len({a.backend for a in arrays}) != 1:
        return None
    if len(arrays) < len(args) and not all(is_array(a) or type(a) in _PASSED_THROUGH for a in args):
        return None
    return arrays


def _in_place_of_arrays(args: Sequence[Any], values: list) -> tuple:
    """``args`` with each Array replaced by its value, in order."""
    if len(values) == len(args):
        return tuple(values)
    it = iter(values)
    return tuple(next(it) if is_array(a) else a for a in args)
