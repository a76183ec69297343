"""The optimizer's pipeline, through what users call: the settings its passes read key the cached graphs;
exact algebraic identities vanish."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import assert_eq

import dask_gpunumeric as gnp
from dask_gpunumeric.api.explain import plan
from dask_gpunumeric.expr.nodes import Elemwise
from dask_gpunumeric.optimize import PASSES, optimize, settings_key
from dask_gpunumeric.optimize.dag import DAG


# --- the pipeline ---------------------------------------------------------------------------------------


def test_settings_key_names_what_every_pass_reads() -> None:
    assert [name for name, _ in settings_key()] == list(dict.fromkeys(s for p in PASSES for s in p.settings))
    with gnp.config.set(stencil_sweeps=2):
        assert ("stencil-sweeps", 2) in settings_key()


# --- algebraic simplification ---------------------------------------------------------------------------


def _elemwise_ops(y: gnp.Array) -> list[str]:
    """The elementwise operations left in the optimized expression, with fusion off (each a node)."""
    with gnp.config.set(fusion=False):
        return sorted(n.operand("op") for n in DAG(optimize(y.expr)).order if isinstance(n, Elemwise))


FLOATS = np.array([-0.0, 0.0, 1.5, -2.0, np.inf, -np.inf, np.nan], dtype="float32")


@pytest.mark.parametrize("build, kept", [
    (lambda x: x * 1, []),
    (lambda x: 1.0 * x, []),
    (lambda x: x + -0.0, []),  # exact for every float, -0.0 included
    (lambda x: -0.0 + (x * 1) * 1.0, []),
    (lambda x: x + 0.0, ["add"]),  # -0.0 + 0.0 is 0.0: kept
    (lambda x: x + 0, ["add"]),
    (lambda x: x * np.float64(1), ["multiply"]),  # a float64 result: kept
    (lambda x: x * 2.0, ["multiply"]),
])
def test_float_identities(build: Any, kept: list[str]) -> None:
    x = gnp.asarray(FLOATS, chunks=4)
    with gnp.allowpromotion():
        y = gnp.negative(build(x))
    assert _elemwise_ops(y) == sorted(["negative", *kept])
    expected = np.negative(build(FLOATS))
    assert_eq(y, expected)
    assert (np.signbit(gnp.fetch(y)) == np.signbit(expected)).all()


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint32", "bool"])
def test_integer_and_boolean_identities(dtype: str) -> None:
    xn = np.array([0, 1, 1, 0, 1], dtype=dtype) if dtype == "bool" else np.arange(-2, 3).astype(dtype)
    x = gnp.asarray(xn, chunks=2)
    unit, zero = (True, False) if dtype == "bool" else (1, 0)
    for build in (lambda a: a * unit, lambda a: unit * a, lambda a: a + zero, lambda a: zero + a):
        y = build(x) == build(x)[::-1]
        assert _elemwise_ops(y) == ["equal"]
        assert_eq(y, build(xn) == build(xn)[::-1])


def test_identities_kept_where_not_exact() -> None:
    """Complex x * 1 is not x where a part is infinite (NumPy multiplies by 1+0j); integer x * 1.0 is
    float; a root stays (its keys are the output)."""
    zn = np.array([complex(np.inf, 1.0), complex(1.0, -2.0)])
    z = gnp.asarray(zn)
    assert _elemwise_ops(gnp.negative(z * 1)) == ["multiply", "negative"]
    with np.errstate(invalid="ignore"):
        assert_eq(gnp.negative(z * 1), np.negative(zn * 1))
    i = gnp.asarray(np.arange(3))
    with gnp.allowpromotion():
        assert _elemwise_ops(gnp.negative(i * 1.0)) == ["multiply", "negative"]
        assert_eq(gnp.negative(i * 1.0), np.negative(np.arange(3) * 1.0))
    assert _elemwise_ops(i * 1) == ["multiply"]
    assert_eq(i * 1, np.arange(3))


def test_identities_inside_fused_kernels() -> None:
    """Under the default settings the identities leave the fused kernel too."""
    xn = np.linspace(-1.0, 1.0, 30)
    x = gnp.asarray(xn, chunks=10)
    y = gnp.sin(x * 1 + -0.0) * 1 + 2.0
    (group,) = plan(y)["groups"]
    assert group["ops"] == ["sin", "add"]
    assert_eq(y, np.sin(xn) + 2.0)
