"""``map_blocks``: run a function on every block, for what the other primitives don't express."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._array import Array, ArrayLike
from ._expr import MapBlocks


def map_blocks(func: Callable[..., Any], *arrays: ArrayLike, dtype: Any = None, chunks: Any = None,
               name: str | None = None, offsets: bool = False, **kwargs: Any) -> Array:
    """Apply ``func`` block by block: output block ``i`` is ``func(*(a's block i for a in arrays),
    **kwargs)``. The arrays must share the output's block grid along every axis they have (one block along
    an axis broadcasts); ``chunks`` gives the output's chunks when they differ from the first array's,
    ``dtype`` its dtype (default: the first array's). With ``offsets=True``, ``func`` also receives
    ``block_offset`` (the block's position in the output) and ``global_shape``. ``func`` must be a
    picklable top-level function that works on NumPy and CuPy blocks (see ``_backend.namespace``)."""
    from ._elementwise import as_array

    if not arrays:
        raise TypeError("map_blocks needs at least one array")
    arrs = [as_array(a) for a in arrays]
    first = arrs[0]
    out_chunks = first.chunks if chunks is None else tuple(tuple(int(c) for c in axis) for axis in chunks)
    numblocks = tuple(len(c) for c in out_chunks)
    for a in arrs:
        lead = len(numblocks) - a.ndim
        if lead < 0 or any(n not in (1, numblocks[lead + d]) for d, n in enumerate(a.numblocks)):
            raise ValueError(
                f"map_blocks: an input with blocks {a.numblocks} does not match the output's block grid "
                f"{numblocks}; rechunk it first"
            )
    label = name or getattr(func, "__name__", "map-blocks").strip("_").replace("_", "-") or "map-blocks"
    return Array(MapBlocks(func, label, out_chunks, np.dtype(dtype or first.dtype), kwargs, offsets,
                           *[a.expr for a in arrs]))
