"""``map_overlap``: stencils on blocks with halos, every boundary, against NumPy on the padded array; and
``sliding_window_view`` (forward halos viewed as windows) against NumPy's."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dask_gpunumeric as gnp
from conftest import assert_eq, axis_chunks


def laplacian(block: Any) -> Any:
    """A 5-point stencil on the interior; the outermost ring of the block is left as it is."""
    out = block.copy()
    out[1:-1, 1:-1] = (block[:-2, 1:-1] + block[2:, 1:-1] + block[1:-1, :-2] + block[1:-1, 2:]
                       - 4 * block[1:-1, 1:-1])
    return out


def smooth(block: Any) -> Any:
    """A 3-point average along axis 0 (wider halos in 1-d tests)."""
    out = block.copy()
    out[1:-1] = (block[:-2] + block[1:-1] + block[2:]) / 3
    return out


NUMPY_MODES = {"periodic": "wrap", "nearest": "edge", "reflect": "reflect", "symmetric": "symmetric"}


def reference(func: Any, x: np.ndarray, depth: int, boundary: Any) -> np.ndarray:
    if isinstance(boundary, str):
        padded = np.pad(x, depth, mode=NUMPY_MODES[boundary])
    else:
        padded = np.pad(x, depth, mode="constant", constant_values=boundary)
    inner = tuple(slice(depth, depth + n) for n in x.shape)
    return func(padded)[inner]


@st.composite
def grids(draw: Any, ndim: int) -> tuple[np.ndarray, tuple]:
    shape = tuple(draw(st.lists(st.integers(3, 12), min_size=ndim, max_size=ndim)))
    x = np.random.default_rng(draw(st.integers(0, 9))).random(shape)
    return x, tuple(draw(axis_chunks(n)) for n in shape)


@given(data=grids(2), boundary=st.sampled_from(["periodic", "nearest", "reflect", "symmetric", 0.5]))
def test_laplacian_every_boundary(data: tuple, boundary: Any) -> None:
    x, chunks = data
    out = gnp.map_overlap(laplacian, gnp.from_array(x, chunks=chunks), depth=1, boundary=boundary)
    assert out.chunks == chunks
    assert_eq(out, reference(laplacian, x, 1, boundary))


@given(data=grids(1), depth=st.integers(1, 2), boundary=st.sampled_from(["periodic", "nearest", "reflect"]))
def test_depth_larger_than_some_blocks(data: tuple, depth: int, boundary: str) -> None:
    x, chunks = data
    out = gnp.map_overlap(smooth, gnp.from_array(x, chunks=chunks), depth=depth, boundary=boundary)
    # a depth-d halo holds the stencil's 1-wide reach: the trimmed result equals the whole-array stencil
    assert_eq(out, reference(smooth, x, depth, boundary))


def test_no_boundary_and_untrimmed_blocks() -> None:
    x = np.arange(20.0).reshape(4, 5)
    a = gnp.from_array(x, chunks=(2, (2, 3)))
    untrimmed = gnp.map_overlap(lambda b: b, a, depth=1, boundary="none", trim=False)
    assert untrimmed.chunks == ((3, 3), (3, 4))  # edge blocks get a halo on their inner side only
    assert_eq(gnp.map_overlap(lambda b: b, a, depth=1, boundary="none"), x)
    interior = gnp.map_overlap(laplacian, a, depth=1, boundary="none")
    assert_eq(interior[1:-1, 1:-1], laplacian(x)[1:-1, 1:-1])


def test_several_arrays_and_per_axis_settings() -> None:
    x, y = np.random.default_rng(0).random((6, 7)), np.random.default_rng(1).random((6, 7))

    def add_shifted(a: Any, b: Any) -> Any:
        out = a + b
        out[1:] = a[1:] + b[:-1]
        return out

    out = gnp.map_overlap(add_shifted, gnp.from_array(x, chunks=(2, 3)), gnp.from_array(y, chunks=3),
                          depth={0: 1, 1: 0}, boundary={0: "periodic"})
    assert_eq(out, x + np.roll(y, 1, axis=0))


def test_bad_input() -> None:
    a = gnp.from_array(np.ones((4, 4)), chunks=2)
    with pytest.raises(ValueError, match="unknown boundary"):
        gnp.map_overlap(laplacian, a, depth=1, boundary="bogus")
    with pytest.raises(ValueError, match="same shape"):
        gnp.map_overlap(lambda p, q: p, a, gnp.ones((4, 5)))
    with pytest.raises(ValueError, match="non-negative"):
        gnp.map_overlap(laplacian, a, depth=-1)
    with pytest.raises(ValueError, match="exceeds"):
        gnp.map_overlap(laplacian, a, depth=5, boundary="periodic")
    with pytest.raises(TypeError):
        gnp.map_overlap(laplacian)


@st.composite
def windowed(draw: Any) -> tuple[np.ndarray, tuple, Any, Any]:
    """Data, chunks, and a window shape with its axes (one or two windows, axes possibly repeated)."""
    x, chunks = draw(grids(draw(st.integers(1, 3))))
    axes = tuple(draw(st.lists(st.integers(0, x.ndim - 1), min_size=1, max_size=2)))
    windows, left = [], list(x.shape)
    for ax in axes:
        windows.append(draw(st.integers(1, left[ax])))
        left[ax] -= windows[-1] - 1
    return x, chunks, tuple(windows), axes


@given(data=windowed())
def test_sliding_window_view(data: tuple) -> None:
    x, chunks, windows, axes = data
    expected = np.lib.stride_tricks.sliding_window_view(x, windows, axis=axes)
    out = gnp.lib.stride_tricks.sliding_window_view(gnp.from_array(x, chunks=chunks), windows, axis=axes)
    assert_eq(out, expected)
    assert_eq(out.sum(axis=-1), expected.sum(axis=-1))  # a reduction over the windows (xarray's rolling)


def test_sliding_window_view_whole_array_and_numpy_dispatch() -> None:
    x = np.arange(24.0).reshape(4, 6)
    a = gnp.from_array(x, chunks=(3, 2))
    assert_eq(gnp.lib.stride_tricks.sliding_window_view(a, (2, 3)), np.lib.stride_tricks.sliding_window_view(x, (2, 3)))
    out = np.lib.stride_tricks.sliding_window_view(a, 3, axis=1)
    assert isinstance(out, gnp.Array)
    assert_eq(out, np.lib.stride_tricks.sliding_window_view(x, 3, axis=1))


@pytest.mark.parametrize("window, axis, message", [
    (7, 1, "larger than input"), (-1, 1, "negative"), ((2, 2, 2), None, "for all dimensions"),
    ((2, 2), 1, "matching length"),
])
def test_sliding_window_view_bad_input(window: Any, axis: Any, message: str) -> None:
    x = np.ones((4, 6))
    with pytest.raises(ValueError, match=message):
        np.lib.stride_tricks.sliding_window_view(x, window, axis=axis)
    with pytest.raises(ValueError, match=message):
        gnp.lib.stride_tricks.sliding_window_view(gnp.from_array(x, chunks=2), window, axis=axis)


def test_sliding_window_view_of_length_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="length 0"):
        gnp.lib.stride_tricks.sliding_window_view(gnp.ones((4, 6), chunks=2), 0, axis=1)
