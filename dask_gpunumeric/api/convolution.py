"""``convolve``: the discrete linear convolution of 1-d arrays, window by window."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..expr import plan as _plan
from ..expr import Gather
from ..backend import namespace
from . import guards as _guards
from .array import Array, ArrayLike
from .blockwise import map_blocks
from .creation import as_array
from .manipulation import rechunk, reshape
from .padding import pad

__all__ = ["convolve"]


def _convolve_block(window: Any, kernel: Any) -> Any:
    return namespace(window, kernel).convolve(window, kernel, mode="valid")


def convolve(a: ArrayLike, v: ArrayLike, mode: str = "full") -> Array:
    """The discrete linear convolution of two 1-d arrays, as ``numpy.convolve``: ``mode`` "full" (length
    ``n + m - 1``), "same" (``max(n, m)``, centred) or "valid" (``max(n, m) - min(n, m) + 1``).

    The shorter array is made one block; the longer one, padded with zeros, is cut into overlapping windows
    (each output block's inputs plus a halo of ``min(n, m) - 1`` elements, one ``Gather``), and each window is
    convolved on its own ("valid"). The longer array is never gathered into one block."""
    x, w = as_array(a), as_array(v)
    if x.ndim == 0:
        x = reshape(x, (1,))
    if w.ndim == 0:
        w = reshape(w, (1,))
    if x.ndim != 1 or w.ndim != 1:
        raise ValueError(f"convolve: a and v must be 1-d, got shapes {x.shape} and {w.shape}")
    if x.size == 0:
        raise ValueError("a cannot be empty")
    if w.size == 0:
        raise ValueError("v cannot be empty")
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"mode must be one of 'valid', 'same', or 'full' (got {mode!r})")
    dtype = np.convolve(np.ones(1, x.dtype), np.ones(1, w.dtype)).dtype
    _guards.check_promotion("convolve", [x.dtype, w.dtype], dtype)
    long, short = (x, w) if x.size >= w.size else (w, x)
    n, m = long.size, short.size
    start, length = {"full": (0, n + m - 1), "same": ((m - 1) // 2, n), "valid": (m - 1, n - m + 1)}[mode]
    padded = pad(long, m - 1)  # output element i of "full" reads padded[i : i + m]
    out_chunks = _plan.split_even(length, max(long.chunks[0]))
    offsets = _plan.offsets(out_chunks)
    windows = [(0, start + o, 1, c + m - 1) for o, c in zip(offsets, out_chunks)]
    plan = (_plan.segments_plan([padded.chunks[0]], windows, tuple(c + m - 1 for c in out_chunks)),)
    haloed = Array(Gather(plan, (), padded.dtype, padded.expr))
    return map_blocks(_convolve_block, haloed, rechunk(short, -1), dtype=dtype, chunks=(out_chunks,),
                      name="convolve")
