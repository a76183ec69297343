"""``apply_gufunc``: generalized ufuncs block by block (loop dimensions broadcast and keep their blocks, core
dimensions one block each), against the same function on the whole NumPy arrays."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dask_gpunumeric as gnp
from dask_gpunumeric.backend import namespace
from conftest import assert_eq

RNG = np.random.default_rng(0)
X = RNG.random((6, 8, 5))
Y = RNG.random((8, 5))
V = RNG.random(5)


def inner(a: Any, b: Any) -> Any:
    return (a * b).sum(axis=-1)


def powers(a: Any) -> Any:
    return a[..., None] ** namespace(a).arange(1, 4)


def mean_and_spread(a: Any) -> tuple[Any, Any]:
    return a.mean(axis=-1), a.max(axis=-1) - a.min(axis=-1)


def swap_core(a: Any) -> Any:
    return a.swapaxes(-1, -2)


def matvec(m: Any, v: Any) -> Any:
    return m @ v


@pytest.mark.parametrize("func, signature, arrays, options", [
    (inner, "(i),(i)->()", [(X, (2, 3, 5)), (Y, (4, 5))], {"output_dtypes": [np.float64]}),
    (np.sin, "()->()", [(X, (2, 3, 2))], {}),
    (powers, "()->(k)", [(X, (3, 8, 5))], {"output_sizes": {"k": 3}}),
    (swap_core, "(i,j)->(j,i)", [(X, (2, 4, 5))], {"allow_rechunk": True}),
    (matvec, "(m,n),(n)->(m)", [(X, (3, 8, 5)), (V, 2)], {"allow_rechunk": True}),
], ids=["two-inputs-broadcast", "elementwise", "new-core-dim", "transposed-core", "matvec"])
def test_apply_gufunc_like_numpy(func: Any, signature: str, arrays: list, options: dict) -> None:
    inputs = [gnp.from_array(x, chunks=c) for x, c in arrays]
    out = gnp.apply_gufunc(func, signature, *inputs, **options)
    expected = func(*(x for x, _ in arrays))
    assert_eq(out, expected)
    assert out.chunks[0] == inputs[0].chunks[0]  # loop dimensions keep their blocks


def test_several_outputs_and_inferred_dtypes() -> None:
    mean, spread = gnp.apply_gufunc(mean_and_spread, "(i)->(),()", gnp.from_array(X, chunks=(2, 3, 5)))
    assert_eq(mean, X.mean(axis=-1))
    assert_eq(spread, X.max(axis=-1) - X.min(axis=-1))


def test_vectorize_on_numpy_blocks() -> None:
    x = gnp.from_array(X, chunks=(2, 4, 5), backend="numpy")
    out = gnp.apply_gufunc(lambda row: np.sum(row), "(i)->()", x, vectorize=True, output_dtypes=[np.float64])
    assert_eq(out, X.sum(axis=-1))


def test_bad_input() -> None:
    x = gnp.from_array(X, chunks=(2, 3, 2))
    with pytest.raises(ValueError, match="multiple chunks"):
        gnp.apply_gufunc(inner, "(i),(i)->()", x, x)
    with pytest.raises(ValueError, match="not a valid gufunc signature"):
        gnp.apply_gufunc(inner, "(i),(i)", x, x)
    with pytest.raises(ValueError, match="takes 2 inputs"):
        gnp.apply_gufunc(inner, "(i),(i)->()", x)
    with pytest.raises(ValueError, match="output_sizes"):
        gnp.apply_gufunc(powers, "()->(k)", x)
    with pytest.raises(ValueError, match="lengths 5 and 8"):
        gnp.apply_gufunc(inner, "(i),(i)->()", x, gnp.ones(8), allow_rechunk=True)
