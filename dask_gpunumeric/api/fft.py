"""``gnp.fft``: the array API ``fft`` extension (plus NumPy's ``fft2``/``ifft2``/``rfft2``/``irfft2``), with
NumPy's arguments (``n``/``s``, ``axis``/``axes``, ``norm``), dtypes and errors.

A transform runs per block with the backend's own FFT (``numpy.fft`` or ``cupy.fft``) through
``map_blocks``: the transformed axes are made one block each first (a rechunk only where an axis is split),
the other axes keep their blocks, so a batch of transforms is as parallel as the array's blocks.
``fftfreq``/``rfftfreq`` are lazy creations; ``fftshift``/``ifftshift`` are rolls (one ``Gather``).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .array import Array, ArrayLike
from ..backend import namespace
from .blockwise import map_blocks
from .creation import arange, as_array, operator_index
from .elementwise import where
from .manipulation import normalize_axis, rechunk, roll
from .reductions import store_output

__all__ = [
    "fft", "fft2", "fftfreq", "fftn", "fftshift", "hfft", "ifft", "ifft2", "ifftn", "ifftshift", "ihfft",
    "irfft", "irfft2", "irfftn", "rfft", "rfft2", "rfftfreq", "rfftn",
]

_NORMS = (None, "backward", "ortho", "forward")
# complex-to-complex, real-to-complex (half spectrum out) and complex-to-real (the real length given by n)
_KIND = {
    "fft": "c2c", "ifft": "c2c", "fftn": "c2c", "ifftn": "c2c", "rfft": "r2c", "rfftn": "r2c", "ihfft": "r2c",
    "irfft": "c2r", "irfftn": "c2r", "hfft": "c2r",
}
# the 1-d transform whose dtype rules an n-d transform follows (its last step)
_ONE_D = {"fftn": "fft", "ifftn": "ifft", "rfftn": "rfft", "irfftn": "irfft"}


@functools.lru_cache(maxsize=256)
def _result_dtype(func: str, dtype: np.dtype) -> np.dtype:
    """The dtype NumPy's transform gives for input of ``dtype`` (NumPy's TypeError where it has none)."""
    return getattr(np.fft, _ONE_D.get(func, func))(np.zeros(4, dtype=dtype)).dtype


def _fft_block(block: Any, *, transform: str, s: tuple[int, ...], axes: tuple[int, ...], norm: str | None,
               lengths: tuple[int, ...], out_dtype: np.dtype) -> Any:
    xp = namespace(block)
    if block.size == 0:  # nothing to transform, or zero padding only: zeros (cuFFT takes no empty batches)
        shape = list(block.shape)
        for d, length in zip(reversed(axes), reversed(lengths)):
            shape[d] = length
        return xp.zeros(tuple(shape), dtype=out_dtype)
    if _KIND[transform] == "c2r" and s[-1] == 1 and axes.count(axes[-1]) == 1:
        # cuFFT's complex-to-real transform of length 1 over several axes is wrong (CuPy 14); at length 1 it keeps
        # the real part of the axis' first entry, every norm's factor 1: the rest is a complex inverse transform
        first = block[(slice(None),) * axes[-1] + (slice(0, 1),)]
        if len(axes) > 1:
            first = xp.fft.ifftn(first, s=s[:-1], axes=axes[:-1], norm=norm)
        return xp.real(first).astype(out_dtype, copy=False)
    func = getattr(xp.fft, transform)
    if transform in _ONE_D:
        return func(block, s=s, axes=axes, norm=norm)
    return func(block, n=s[0], axis=axes[0], norm=norm)


def _transform(func: str, x: ArrayLike, s: Sequence[Any] | None, axes: Sequence[Any] | None, norm: str | None,
               out: Any) -> Array:
    """``func`` of NumPy's ``fft`` module along ``axes`` with lengths ``s`` (None entries, or ``s`` None: the
    default of each axis), run per block on the transformed axes made whole."""
    a = as_array(x)
    if norm not in _NORMS:
        raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or "forward".')
    nd = func in _ONE_D
    if axes is None:  # n-d only (NumPy: the last len(s) axes)
        axes = range(a.ndim) if s is None else range(a.ndim - len(s), a.ndim)
    axes = tuple(normalize_axis(d, a.ndim) for d in axes)
    if s is None:
        s = [None] * len(axes)
    elif len(s) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    if not axes:
        if _KIND[func] != "c2c":
            raise IndexError(f"{func} needs at least one axis to transform")
        return store_output(func, a, out)  # as NumPy: no axes, no transform
    kind = _KIND[func]
    sizes = []
    for i, (n, d) in enumerate(zip(s, axes)):
        if n is None:
            n = 2 * (a.shape[d] - 1) if kind == "c2r" and i == len(axes) - 1 else a.shape[d]
        elif nd and n == -1:
            n = a.shape[d]
        sizes.append(operator_index(n))
    # checked in the order of NumPy's 1-d steps; the first step fails on a dtype it has no loop for
    for step, i in enumerate(range(len(axes)) if kind == "c2r" else reversed(range(len(axes)))):
        if sizes[i] < 1:
            raise ValueError(f"Invalid number of FFT data points ({sizes[i]}) specified.")
        if step == 0:
            dtype = _result_dtype(func, a.dtype)
    lengths = list(sizes)
    if kind == "r2c":
        lengths[-1] = sizes[-1] // 2 + 1
    whole = rechunk(a, dict.fromkeys(axes, -1))
    chunks = list(whole.chunks)
    for d, length in zip(reversed(axes), reversed(lengths)):  # a repeated axis ends with its first length
        chunks[d] = (length,)
    result = map_blocks(_fft_block, whole, dtype=dtype, chunks=chunks, name=func, transform=func, s=tuple(sizes),
                        axes=axes, norm=norm, lengths=tuple(lengths), out_dtype=dtype)
    return store_output(func, result, out)


# --- one-dimensional ----------------------------------------------------------------------------------


def fft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None, out: Any = None) -> Array:
    """The 1-d discrete Fourier transform along ``axis`` (cropped or zero-padded to ``n``), as
    ``numpy.fft.fft``."""
    return _transform("fft", a, (n,), (axis,), norm, out)


def ifft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None, out: Any = None) -> Array:
    """The 1-d inverse discrete Fourier transform along ``axis``, as ``numpy.fft.ifft``."""
    return _transform("ifft", a, (n,), (axis,), norm, out)


def rfft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None, out: Any = None) -> Array:
    """The 1-d transform of real input along ``axis``: the ``n // 2 + 1`` non-negative frequencies, as
    ``numpy.fft.rfft``."""
    return _transform("rfft", a, (n,), (axis,), norm, out)


def irfft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None, out: Any = None) -> Array:
    """The inverse of ``rfft``: ``n`` real values (default ``2 * (m - 1)``) along ``axis``, as
    ``numpy.fft.irfft``."""
    return _transform("irfft", a, (n,), (axis,), norm, out)


def hfft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None, out: Any = None) -> Array:
    """The transform of a Hermitian-symmetric signal given by its first half: ``n`` real values (default
    ``2 * (m - 1)``), as ``numpy.fft.hfft``."""
    return _transform("hfft", a, (n,), (axis,), norm, out)


def ihfft(a: ArrayLike, n: int | None = None, axis: int = -1, norm: str | None = None, out: Any = None) -> Array:
    """The inverse of ``hfft`` for real input: ``n // 2 + 1`` complex values, as ``numpy.fft.ihfft``."""
    return _transform("ihfft", a, (n,), (axis,), norm, out)


# --- n-dimensional ------------------------------------------------------------------------------------


def fftn(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str | None = None,
         out: Any = None) -> Array:
    """The n-d discrete Fourier transform over ``axes`` (all by default) with lengths ``s`` (-1: the input's),
    as ``numpy.fft.fftn``."""
    return _transform("fftn", a, s, axes, norm, out)


def ifftn(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str | None = None,
          out: Any = None) -> Array:
    """The n-d inverse discrete Fourier transform, as ``numpy.fft.ifftn``."""
    return _transform("ifftn", a, s, axes, norm, out)


def rfftn(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str | None = None,
          out: Any = None) -> Array:
    """The n-d transform of real input (the last axis halved to ``s[-1] // 2 + 1``), as ``numpy.fft.rfftn``."""
    return _transform("rfftn", a, s, axes, norm, out)


def irfftn(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str | None = None,
           out: Any = None) -> Array:
    """The inverse of ``rfftn`` (real output; the last length defaults to ``2 * (m - 1)``), as
    ``numpy.fft.irfftn``."""
    return _transform("irfftn", a, s, axes, norm, out)


def _over_last_two(transform: str, numpy_name: str) -> Callable[..., Array]:
    """NumPy's 2-d variant of an n-d transform: the same with ``axes=(-2, -1)`` by default."""

    def two_d(a: ArrayLike, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1), norm: str | None = None,
              out: Any = None) -> Array:
        return _transform(transform, a, s, axes, norm, out)

    two_d.__name__ = two_d.__qualname__ = numpy_name
    two_d.__doc__ = f"``{transform}`` over the last two axes by default, as ``numpy.fft.{numpy_name}``."
    return two_d


fft2 = _over_last_two("fftn", "fft2")
ifft2 = _over_last_two("ifftn", "ifft2")
rfft2 = _over_last_two("rfftn", "rfft2")
irfft2 = _over_last_two("irfftn", "irfft2")


# --- frequencies and shifts ---------------------------------------------------------------------------


def _frequencies(k: Array, n: int, d: Any, dtype: Any, device: Any) -> Array:
    out = k * (1.0 / (n * d))
    if dtype is not None:
        out = out.astype(dtype, copy=False)
    return out if device is None else out.to_device(device)


def _check_length(n: Any) -> None:
    if not isinstance(n, (int, np.integer)):
        raise ValueError("n should be an integer")


def fftfreq(n: int, d: Any = 1.0, device: Any = None, *, dtype: Any = None, chunks: Any = "auto",
            backend: str | None = None) -> Array:
    """The sample frequencies of an ``n``-point transform with sample spacing ``d``
    (``[0, 1, ..., -(n // 2), ..., -1] / (d * n)``), as ``numpy.fft.fftfreq``: a lazy Array (float64 unless
    ``dtype``), made block by block."""
    _check_length(n)
    k = arange(n, chunks=chunks, backend=backend)
    return _frequencies(where(k < (n - 1) // 2 + 1, k, k - n), n, d, dtype, device)


def rfftfreq(n: int, d: Any = 1.0, device: Any = None, *, dtype: Any = None, chunks: Any = "auto",
             backend: str | None = None) -> Array:
    """The non-negative sample frequencies of ``rfft`` (``[0, 1, ..., n // 2] / (d * n)``), as
    ``numpy.fft.rfftfreq``: a lazy Array (float64 unless ``dtype``)."""
    _check_length(n)
    return _frequencies(arange(n // 2 + 1, chunks=chunks, backend=backend), n, d, dtype, device)


def _shift(x: ArrayLike, axes: Any, sign: int) -> Array:
    a = as_array(x)
    axes = tuple(range(a.ndim)) if axes is None else (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
    shifts = tuple(sign * (a.shape[normalize_axis(d, a.ndim)] // 2) for d in axes)
    return roll(a, shifts, axis=axes)


def fftshift(x: ArrayLike, axes: Any = None) -> Array:
    """The zero frequency moved to the centre of ``axes`` (all by default), as ``numpy.fft.fftshift``."""
    return _shift(x, axes, 1)


def ifftshift(x: ArrayLike, axes: Any = None) -> Array:
    """The inverse of ``fftshift``, as ``numpy.fft.ifftshift``."""
    return _shift(x, axes, -1)
