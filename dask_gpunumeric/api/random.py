"""Random arrays: counter-based Philox4x32-10 streams, identical on NumPy and CUDA (see ``_philox``).

``gnp.random.default_rng(seed)`` gives a ``Generator`` whose draws are lazy Arrays. Each element is a
function of (seed, draw number, flat index) only, so the numbers are the same for any chunking, any
number of workers, and on NumPy or CuPy blocks.
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from .array import Array
from .creation import _creation, _shape
from ..kernels import philox as _philox

__all__ = ["Generator", "default_rng"]


class Generator:
    """A source of lazy random Arrays, in the shape of ``numpy.random.Generator``."""

    def __init__(self, seed: int | np.random.SeedSequence | None = None) -> None:
        self._key = _philox.seed_to_key(seed)
        self._streams = itertools.count()

    def __repr__(self) -> str:
        return f"gnp.random.Generator(Philox4x32-10, key={self._key})"

    def _draw(self, kind: str, size: Any, dtype: Any, params: tuple, chunks: Any, backend: str | None) -> Array:
        shape = () if size is None else _shape(size)
        dt = _philox.resolve_dtype(kind, dtype)
        _philox._check_params(kind, dt, params)  # fail at the call, not at compute time
        return _creation(f"random-{kind}", shape, dt, chunks, backend, (self._key, next(self._streams), params))

    def random(self, size: Any = None, dtype: Any = np.float64, *, chunks: Any = "auto",
               backend: str | None = None) -> Array:
        """Uniform floats in [0, 1) (float32 or float64)."""
        return self._draw("random", size, dtype, (), chunks, backend)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None, dtype: Any = np.float64, *,
                chunks: Any = "auto", backend: str | None = None) -> Array:
        """Uniform floats in [low, high) (``high == low`` gives ``low``; ``high < low`` is a ValueError)."""
        if high < low:
            raise ValueError("high - low < 0")
        return self._draw("uniform", size, dtype, (low, high), chunks, backend)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64, *, chunks: Any = "auto",
                        backend: str | None = None) -> Array:
        """Normally distributed floats with mean 0 and standard deviation 1."""
        return self._draw("standard_normal", size, dtype, (), chunks, backend)

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: Any = None, dtype: Any = np.float64, *,
               chunks: Any = "auto", backend: str | None = None) -> Array:
        """Normally distributed floats with mean ``loc`` and standard deviation ``scale``."""
        return self._draw("normal", size, dtype, (loc, scale), chunks, backend)

    def integers(self, low: int, high: int | None = None, size: Any = None, dtype: Any = np.int64,
                 endpoint: bool = False, *, chunks: Any = "auto", backend: str | None = None) -> Array:
        """Random integers in [low, high) (or [low, high] with ``endpoint``); ``high=None`` means [0, low)."""
        if high is None:
            low, high = 0, low
        return self._draw("integers", size, dtype, (low, high + 1 if endpoint else high), chunks, backend)


def default_rng(seed: int | np.random.SeedSequence | Generator | None = None) -> Generator:
    """A new ``Generator`` (Philox4x32-10) seeded with ``seed`` (an int, a SeedSequence, or None)."""
    if isinstance(seed, Generator):
        return seed
    return Generator(seed)
