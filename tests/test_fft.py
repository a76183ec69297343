"""``gnp.fft`` against ``numpy.fft`` on random shapes (zero-size included), chunkings (transformed
axes split or not), lengths, axes and normalizations; dtypes as NumPy 2 gives them; NumPy's exceptions."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from conftest import assert_eq, axis_chunks, check_like_numpy
from hypothesis import given
from hypothesis import strategies as st

import dask_gpunumeric as gnp
from dask_gpunumeric.api import fft as _fft

DTYPES = [np.float32, np.float64, np.complex64, np.complex128, np.int64]
ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
N_D = ["fftn", "ifftn", "rfftn", "irfftn", "fft2", "ifft2", "rfft2", "irfft2"]
NORMS = [None, "backward", "ortho", "forward"]


@st.composite
def arrays(draw: st.DrawFn, min_dims: int = 1, max_dims: int = 3, max_side: int = 6) -> tuple[np.ndarray, gnp.Array]:
    """Random values (complex ones for complex dtypes) and the same data randomly chunked."""
    ndim = draw(st.integers(min_dims, max_dims))
    shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=ndim, max_size=ndim)))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.integers(-5, 6, size=shape) if dtype.kind == "i" else rng.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    x = x.astype(dtype)
    return x, gnp.from_array(x, chunks=tuple(draw(axis_chunks(n)) for n in shape))


def tolerance(x: np.ndarray) -> dict[str, float]:
    single = x.dtype in (np.float32, np.complex64)
    scale = math.sqrt(max(x.size, 1)) * 10
    return {"rtol": 1e-4, "atol": 1e-4 * scale} if single else {"rtol": 1e-9, "atol": 1e-10 * scale}


def numpy_transform(name: str, x: np.ndarray, **kwargs: Any) -> np.ndarray:
    """NumPy's transform; of empty input, zeros of its shape and dtype (the transform of zero padding: NumPy's
    irfft and hfft leave such output uninitialized)."""
    out = getattr(np.fft, name)(x, **kwargs)
    return np.zeros_like(out) if x.size == 0 else out


@given(st.data(), st.sampled_from(ONE_D))
def test_one_dimensional(data: st.DataObject, name: str) -> None:
    x, a = data.draw(arrays())
    kwargs: dict[str, Any] = {"axis": data.draw(st.integers(-x.ndim, x.ndim - 1)), "norm": data.draw(st.sampled_from(NORMS))}
    if data.draw(st.booleans()):
        kwargs["n"] = data.draw(st.integers(1, 8))
    check_like_numpy(lambda: getattr(gnp.fft, name)(a, **kwargs), lambda: numpy_transform(name, x, **kwargs),
                     **tolerance(x))


@given(st.data(), st.sampled_from(N_D))
def test_n_dimensional(data: st.DataObject, name: str) -> None:
    x, a = data.draw(arrays())
    kwargs: dict[str, Any] = {"norm": data.draw(st.sampled_from(NORMS))}
    axes = None
    if data.draw(st.booleans()) or name.endswith("2"):
        k = data.draw(st.integers(1, x.ndim)) if not name.endswith("2") else min(2, x.ndim)
        axes = data.draw(st.permutations(range(x.ndim)))[:k]
        kwargs["axes"] = tuple(d - x.ndim if data.draw(st.booleans()) else d for d in axes)
    if axes is not None and data.draw(st.booleans()):
        kwargs["s"] = tuple(data.draw(st.sampled_from([-1, 1, 2, 3, 5, 8])) for _ in axes)
    if name.endswith("2") and x.ndim < 2:
        kwargs.pop("axes")  # the default (-2, -1): NumPy's error for 1-d input
    check_like_numpy(lambda: getattr(gnp.fft, name)(a, **kwargs), lambda: numpy_transform(name, x, **kwargs),
                     **tolerance(x))


def test_dtypes_as_numpy_2() -> None:
    for dtype, expected in [(np.float64, np.complex128), (np.float32, np.complex64), (np.int32, np.complex128),
                            (np.complex64, np.complex64), (np.bool_, np.complex128)]:
        a = gnp.ones((4, 3), dtype=dtype, chunks=2)
        assert gnp.fft.fft(a).dtype == expected
        assert gnp.fft.fftn(a).dtype == expected
    assert gnp.fft.irfft(gnp.ones(4, dtype=np.complex64)).dtype == np.float32
    assert gnp.fft.rfft(gnp.ones(4, dtype=np.float32)).dtype == np.complex64


def test_split_axes_are_made_whole_others_kept() -> None:
    x = np.random.default_rng(1).standard_normal((8, 9, 4))
    a = gnp.from_array(x, chunks=(3, 4, 2))
    out = gnp.fft.fftn(a, axes=(0, 2))
    assert out.chunks == ((8,), (4, 4, 1), (4,))
    assert_eq(out, np.fft.fftn(x, axes=(0, 2)))
    assert gnp.fft.rfft(a, axis=1).chunks == ((3, 3, 2), (5,), (2, 2))


def test_round_trips() -> None:
    x = np.random.default_rng(2).standard_normal((6, 10))
    a = gnp.from_array(x, chunks=(4, 3))
    assert_eq(gnp.fft.ifft(gnp.fft.fft(a)), x.astype(complex))
    assert_eq(gnp.fft.irfft(gnp.fft.rfft(a), n=10), x)
    assert_eq(gnp.fft.irfftn(gnp.fft.rfftn(a), s=x.shape), x)
    assert_eq(gnp.fft.hfft(gnp.fft.ihfft(a), n=10), x)


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_complex_to_real_of_length_one(dtype: Any, norm: str | None) -> None:
    """A last length of 1 (where cuFFT's complex-to-real transform over several axes is wrong), with NumPy's
    positional arguments: 1-d, 2-d and n-d, the other lengths padded and cut."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 2)).astype(dtype)
    if x.dtype.kind == "c":
        x += 1j * rng.standard_normal(x.shape)
    a = gnp.from_array(x, chunks=(1, 2, 2))
    tolerance = {"rtol": 1e-5, "atol": 1e-6}
    assert_eq(gnp.fft.irfft(a, 1, 1, norm), np.fft.irfft(x, 1, 1, norm), **tolerance)
    assert_eq(gnp.fft.hfft(a, 1, -1, norm), np.fft.hfft(x, 1, -1, norm), **tolerance)
    assert_eq(gnp.fft.irfft2(a[0], (3, 1), (0, 1), norm), np.fft.irfft2(x[0], (3, 1), (0, 1), norm), **tolerance)
    assert_eq(gnp.fft.irfftn(a, (1, 4, 1), (2, 0, 1), norm), np.fft.irfftn(x, (1, 4, 1), (2, 0, 1), norm),
              **tolerance)


def test_empty_axes() -> None:
    x = np.arange(6.0).reshape(2, 3)
    a = gnp.from_array(x, chunks=2)
    assert_eq(gnp.fft.fftn(a, axes=()), np.fft.fftn(x, axes=()))
    with pytest.raises(IndexError):
        gnp.fft.rfftn(a, axes=())


def test_errors() -> None:
    a = gnp.ones((4, 3), chunks=2)
    with pytest.raises(ValueError, match="Invalid number of FFT data points"):
        gnp.fft.fft(a, n=0)
    with pytest.raises(ValueError, match="Invalid number of FFT data points"):
        gnp.fft.irfft(gnp.ones(1))
    with pytest.raises(ValueError, match="Invalid number of FFT data points"):
        gnp.fft.fft(gnp.ones((0,)))
    with pytest.raises(ValueError, match="Invalid norm value"):
        gnp.fft.fft(a, norm="unitary")
    with pytest.raises(np.exceptions.AxisError):
        gnp.fft.fft(a, axis=2)
    with pytest.raises(IndexError):
        gnp.fft.fftn(a, axes=(0, 5))
    with pytest.raises(ValueError, match="different lengths"):
        gnp.fft.fftn(a, s=(2, 2), axes=(0,))
    with pytest.raises(TypeError):
        gnp.fft.rfft(gnp.ones(4, dtype=np.complex128))
    with pytest.raises(TypeError):
        gnp.fft.fft(a, n=2.5)
    out = np.empty((4, 3), dtype=complex)  # NumPy's out=: written at once, a fetch (guarded)
    with gnp.config.set(guards="error"), pytest.raises(gnp.FetchError, match="out="):
        gnp.fft.fft(a, out=out)
    with gnp.allowfetch():
        assert gnp.fft.fft(a, out=out) is out
    np.testing.assert_allclose(out, np.fft.fft(np.ones((4, 3))))


# --- frequencies and shifts ---------------------------------------------------------------------------


@given(st.integers(1, 12), st.sampled_from([1.0, 0.1, 3, np.float32(0.5)]), st.integers(1, 5))
def test_fftfreq_rfftfreq(n: int, d: Any, size: int) -> None:
    assert_eq(gnp.fft.fftfreq(n, d, chunks=size), np.fft.fftfreq(n, d))
    assert_eq(gnp.fft.rfftfreq(n, d=d, chunks=size), np.fft.rfftfreq(n, d=d))


def test_fftfreq_options_and_errors() -> None:
    out = gnp.fft.fftfreq(8, 0.5, dtype=np.float32)
    assert_eq(out, np.fft.fftfreq(8, 0.5).astype(np.float32))
    assert gnp.fft.rfftfreq(np.int64(6), device="cpu").backend == "numpy"
    with pytest.raises(ValueError, match="n should be an integer"):
        gnp.fft.fftfreq(4.0)
    with pytest.raises(ValueError, match="n should be an integer"):
        gnp.fft.rfftfreq(4.0)
    with pytest.raises(ZeroDivisionError):
        gnp.fft.fftfreq(0)


@given(st.data())
def test_fftshift_ifftshift(data: st.DataObject) -> None:
    x, a = data.draw(arrays())  # (NumPy fails on 0-d input, in np.roll; ours returns it unchanged)
    axes = None
    if data.draw(st.booleans()):
        axes = data.draw(st.integers(-x.ndim, x.ndim - 1) | st.lists(st.integers(-x.ndim, x.ndim - 1), max_size=3))
    check_like_numpy(lambda: gnp.fft.fftshift(a, axes=axes), lambda: np.fft.fftshift(x, axes=axes))
    check_like_numpy(lambda: gnp.fft.ifftshift(a, axes), lambda: np.fft.ifftshift(x, axes))


def test_all_exported() -> None:
    assert sorted(_fft.__all__) == sorted(
        name for name, f in vars(_fft).items() if callable(f) and not name.startswith("_")
        and getattr(f, "__module__", None) == _fft.__name__
    )
