"""Random arrays: counter-based Philox4x32-10 streams, identical on NumPy and CUDA (``kernels.philox``).

``gnp.random.default_rng(seed)`` gives a ``Generator`` whose draws are lazy Arrays. Each element is a
function of (seed, draw number, flat index) only, so the numbers are the same for any chunking, any
number of workers, and on NumPy or CuPy blocks.
"""
from __future__ import annotations

import itertools
import operator
from typing import Any

import numpy as np

from .array import Array, host_value
from .creation import _creation, _shape
from .elementwise import as_array, minimum, where
from .manipulation import moveaxis, reshape
from .sorting import argsort, searchsorted
from .selection import take_along_axis
from ..kernels import philox as _philox

__all__ = [
    "Generator", "choice", "default_rng", "normal", "permutation", "rand", "randint", "randn", "random",
    "random_sample", "ranf", "sample", "seed", "shuffle", "standard_normal", "uniform",
]

_TRIES = 64  # draws per element for integers over spans wider than 2**63


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
        _philox.check_params(kind, dt, params)  # fail at the call, not at compute time
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
        """Random integers in [low, high) (or [low, high] with ``endpoint``); ``high=None`` means [0, low).

        One 64-bit draw modulo the span per element; a span wider than 2**63 (where the modulo would make the
        lowest values twice as likely) takes the first of up to 64 draws that falls in the span instead,
        each accepted with probability above 1/2: the bias left is below 2**-64."""
        if high is None:
            low, high = 0, low
        high = high + 1 if endpoint else high
        span = operator.index(high) - operator.index(low)
        if span <= 2**63:
            return self._draw("integers", size, dtype, (low, high), chunks, backend)
        _philox.check_params("integers", _philox.resolve_dtype("integers", dtype), (low, high))  # bounds
        draws = [self._draw("integers", size, np.uint64, (0, 2**64), chunks, backend) for _ in range(_TRIES)]
        value = draws[-1] % np.uint64(span % 2**64) if span < 2**64 else draws[-1]
        for draw in reversed(draws[:-1]):
            value = where(draw < span, draw, value) if span < 2**64 else draw
        return (value + np.uint64(low % 2**64)).astype(dtype)

    def choice(self, a: Any, size: Any = None, replace: bool = True, p: Any = None, axis: int = 0,
               shuffle: bool = True, *, chunks: Any = "auto", backend: str | None = None) -> Array:
        """Random samples of ``a`` (an Array, or ``arange(a)`` for an int) along ``axis``: uniformly, with the
        probabilities ``p`` (by inverse CDF), or without replacement (a prefix of a permutation)."""
        population = None if isinstance(a, (int, np.integer)) else as_array(a)
        n = operator.index(a) if population is None else population.shape[axis] if population.ndim else 0
        if population is not None and population.ndim == 0:
            raise ValueError("a must be a sequence or an integer, not a 0-d array")
        shape = () if size is None else _shape(size)
        count = int(np.prod(shape))
        if n <= 0 and count:
            raise ValueError("a cannot be empty unless no samples are taken")
        if not replace:
            if count > n:
                raise ValueError("Cannot take a larger sample than population when replace is False")
            if p is not None:
                raise NotImplementedError("choice(replace=False, p=...) is not supported")
            picks = reshape(self.permutation(n, chunks=chunks, backend=backend)[:count], shape)
        elif p is None:
            picks = self.integers(0, n, shape, chunks=chunks, backend=backend)
        else:
            weights = np.asarray(host_value(p), dtype=np.float64)
            if weights.ndim != 1 or weights.size != n:
                raise ValueError("a and p must have same size")
            if (weights < 0).any() or not np.isclose(weights.sum(), 1.0, rtol=0, atol=np.sqrt(np.finfo(np.float64).eps)):
                raise ValueError("probabilities are not non-negative or do not sum to 1")
            cdf = np.cumsum(weights)
            cdf /= cdf[-1]
            picks = searchsorted(cdf, self.random(shape, chunks=chunks, backend=backend), side="right")
            picks = minimum(picks, n - 1)
        if population is None:
            return picks
        flat = reshape(picks, (count,) + (1,) * (population.ndim - 1))
        taken = take_along_axis(moveaxis(population, axis, 0), flat, axis=0)
        return moveaxis(reshape(taken, shape + taken.shape[1:]), 0, axis) if shape else \
            moveaxis(taken, 0, axis)[(slice(None),) * axis + (0,)]

    def permutation(self, x: Any, axis: int = 0, *, chunks: Any = "auto", backend: str | None = None) -> Array:
        """A random permutation of ``arange(x)`` (an int), or of ``x``'s slices along ``axis`` (lazy: the
        order is the argsort of one random key per position)."""
        if isinstance(x, (int, np.integer)):
            keys = self.integers(0, 2**63, (operator.index(x),), chunks=chunks, backend=backend)
            return argsort(keys)
        array = as_array(x)
        if array.ndim == 0:
            raise np.exceptions.AxisError("x must be an integer or at least 1-dimensional")
        order = self.permutation(array.shape[axis], backend=array.backend)
        shape = [1] * array.ndim
        shape[axis] = array.shape[axis]
        return take_along_axis(array, reshape(order, tuple(shape)), axis=axis)

    def shuffle(self, x: Array, axis: int = 0) -> None:
        """Shuffle the Array ``x`` along ``axis`` in place (it is rebound to its lazy permutation)."""
        if not isinstance(x, Array):
            raise TypeError("gnp shuffle works on gnp Arrays (use numpy's Generator for other objects)")
        x._rebind(self.permutation(x, axis).expr)


def default_rng(seed: int | np.random.SeedSequence | Generator | None = None) -> Generator:
    """A new ``Generator`` (Philox4x32-10) seeded with ``seed`` (an int, a SeedSequence, or None)."""
    if isinstance(seed, Generator):
        return seed
    return Generator(seed)


# --- NumPy's legacy functions (numpy.random.seed, rand, ...), drawing from one module-level Generator: after
# ``seed(s)`` they give what ``default_rng(s)`` gives, call for call --------------------------------------------
_GLOBAL = [Generator()]


def seed(seed: int | np.random.SeedSequence | None = None) -> None:
    """Reseed the generator behind the legacy functions (``rand``, ``randn``, ``normal``, ...)."""
    _GLOBAL[0] = Generator(seed)


def random(size: Any = None) -> Array:
    """Uniform floats in [0, 1) (``numpy.random.random``)."""
    return _GLOBAL[0].random(size)


random_sample = sample = ranf = random


def rand(*shape: int) -> Array:
    """Uniform floats in [0, 1) of the given shape (``numpy.random.rand(2, 3)``)."""
    return _GLOBAL[0].random(shape or None)


def randn(*shape: int) -> Array:
    """Standard normal floats of the given shape (``numpy.random.randn(2, 3)``)."""
    return _GLOBAL[0].standard_normal(shape or None)


def standard_normal(size: Any = None) -> Array:
    """Standard normal floats."""
    return _GLOBAL[0].standard_normal(size)


def normal(loc: float = 0.0, scale: float = 1.0, size: Any = None) -> Array:
    """Normal floats with mean ``loc`` and standard deviation ``scale``."""
    return _GLOBAL[0].normal(loc, scale, size)


def uniform(low: float = 0.0, high: float = 1.0, size: Any = None) -> Array:
    """Uniform floats in [low, high)."""
    return _GLOBAL[0].uniform(low, high, size)


def randint(low: int, high: int | None = None, size: Any = None, dtype: Any = int) -> Array:
    """Integers in [low, high) (``high=None``: [0, low))."""
    return _GLOBAL[0].integers(low, high, size, dtype=dtype)


def choice(a: Any, size: Any = None, replace: bool = True, p: Any = None) -> Array:
    """Random samples of ``a`` (see ``Generator.choice``)."""
    return _GLOBAL[0].choice(a, size, replace, p)


def permutation(x: Any) -> Array:
    """A random permutation (see ``Generator.permutation``)."""
    return _GLOBAL[0].permutation(x)


def shuffle(x: Array) -> None:
    """Shuffle an Array in place along its first axis."""
    _GLOBAL[0].shuffle(x)
