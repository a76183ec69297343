"""Array API details: ``device=`` on creation functions and ``astype``, ``unstack``, DLPack, the inspection
and dtype functions, and tokens that tell apart values whose ``repr`` is the same."""
from __future__ import annotations

import math

import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import BACKEND, assert_eq, to_host


@pytest.mark.parametrize("make", [
    lambda d: gnp.zeros(3, device=d), lambda d: gnp.ones((2, 2), device=d), lambda d: gnp.empty(4, device=d),
    lambda d: gnp.full(3, 7.0, device=d), lambda d: gnp.arange(5, device=d), lambda d: gnp.eye(3, device=d),
    lambda d: gnp.linspace(0, 1, 5, device=d), lambda d: gnp.zeros_like(gnp.ones(3), device=d),
    lambda d: gnp.full_like(gnp.ones(3), 2, device=d), lambda d: gnp.astype(gnp.ones(3), np.float32, device=d),
])
def test_device_keyword_selects_the_backend(make) -> None:
    assert make("cpu").backend == "numpy"
    assert make(None).backend == BACKEND
    with pytest.raises(ValueError, match="unknown device"):
        make("tpu")


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unstack_is_the_inverse_of_stack(axis: int) -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    parts = gnp.unstack(gnp.from_array(x, chunks=(1, 2, 3)), axis=axis)
    expected = [np.take(x, i, axis=axis) for i in range(x.shape[axis])]
    assert isinstance(parts, tuple) and len(parts) == len(expected)
    for got, want in zip(parts, expected):
        assert_eq(got, want)
    with pytest.raises(ValueError):
        gnp.unstack(gnp.asarray(1.0))


def test_dlpack_round_trip() -> None:
    x = np.arange(6.0).reshape(2, 3)
    a = gnp.from_array(x, chunks=1)
    assert a.__dlpack_device__()[0] == (2 if BACKEND == "cupy" else 1)
    if BACKEND == "numpy":
        np.testing.assert_array_equal(np.from_dlpack(a), x)
    assert_eq(gnp.from_dlpack(x), x)


def test_inspection_and_dtype_functions_use_dtypes_only() -> None:
    x = gnp.ones(3, dtype=np.float32)
    with gnp.allowfetch(enabled=False):  # nothing here may compute x
        assert gnp.result_type(x, 2.0) == np.float32
        assert gnp.result_type(x, np.float64) == np.float64
        assert gnp.can_cast(x, np.float64) and not gnp.can_cast(x, np.int8)
        assert gnp.finfo(x).eps == np.finfo(np.float32).eps
        assert gnp.iinfo(np.int16).max == 32767
        assert gnp.isdtype(np.float32, "real floating") and not gnp.isdtype(np.int8, "real floating")
    info = gnp.__array_namespace_info__()
    assert set(info.dtypes(kind="integral")) == {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                                 "uint64"}
    assert info.default_dtypes()["real floating"] == np.float64
    assert info.default_device() in info.devices()
    assert info.capabilities()["boolean indexing"] is True


def test_nans_of_either_sign_are_different_inputs() -> None:
    negative, positive = gnp.asarray(-math.nan), gnp.asarray(math.nan)
    assert negative.name != positive.name
    assert gnp.fetch(gnp.signbit(negative)) is True and gnp.fetch(gnp.signbit(positive)) is False
    x = gnp.ones(3)
    assert (x * -math.nan).name != (x * math.nan).name
    np.testing.assert_array_equal(np.signbit(to_host((x * -math.nan).compute())), [True] * 3)
