"""The optimizer's pipeline, through what users call: the settings its passes read key the cached graphs;
exact algebraic identities vanish; deep expressions (time stepping without ``accelerate``) become kernels
of bounded size that compute every value once, the outputs computed together coming from one kernel."""
from __future__ import annotations

from typing import Any

import dask
from dask._expr import Expr
import numpy as np
import pytest
from conftest import BACKEND, assert_eq

import dask_gpunumeric as gnp
from dask_gpunumeric.api.explain import plan
from dask_gpunumeric.expr import Bundle, Elemwise, FusedOutput, Reduction
from dask_gpunumeric.optimize import PASSES, optimize, settings_key
from dask_gpunumeric.optimize.pipeline import TRACE_SETTINGS
from dask_gpunumeric.optimize.dag import DAG, rebuild, sharing
from dask_gpunumeric.optimize.simplify import _identity_operand, simplify


def _fused_tasks(*arrays: gnp.Array) -> int:
    """The kernel tasks of the graph Dask gets for these arrays, computed together."""
    from dask.base import collections_to_expr

    graph = collections_to_expr(list(arrays)).optimize().__dask_graph__()
    return sum(1 for key in graph if isinstance(key, tuple) and key[0].startswith("fused-")
               and not key[0].split("-")[-2] == "out")


# --- the pipeline ---------------------------------------------------------------------------------------


def test_settings_key_names_what_every_pass_reads() -> None:
    assert [name for name, _ in settings_key()] == list(dict.fromkeys([*(s for p in PASSES for s in p.settings),
                                                                         *TRACE_SETTINGS]))
    with gnp.config.set(kernel_size=7, stencil_sweeps=2):
        assert {("kernel-size", 7), ("stencil-sweeps", 2)} <= set(settings_key())


def test_a_pass_setting_changes_the_cached_graph() -> None:
    """The same expression, rebuilt (its graph then comes from the cache), under another value of a setting
    a pass reads: another graph (``kernel-size``: more, smaller kernels), then the first one again."""
    xn = np.linspace(0.0, 1.0, 50)

    def steps(xp: Any, x: Any) -> Any:
        for _ in range(6):
            x = xp.sin(x) * 1.5 + 0.25
        return x

    expected = steps(np, xn)
    kernels = []
    for size in (256, 4, 256, 4):
        with gnp.config.set(kernel_size=size):
            y = steps(gnp, gnp.asarray(xn, chunks=25))
            assert_eq(y, expected)
            kernels.append(_fused_tasks(y, y + 1))
    assert kernels[0] == kernels[2] < kernels[1] == kernels[3]


def test_bad_kernel_size_says_what_to_do() -> None:
    x = gnp.asarray(np.arange(4.0))
    with gnp.config.set(kernel_size=0), pytest.raises(ValueError, match="kernel-size must be a positive int"):
        gnp.fetch(gnp.exp(x) + 1)


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
    signed = ~np.isnan(expected)  # the sign of a NaN is not kept by GPU arithmetic (canonical NaNs)
    assert (np.signbit(gnp.fetch(y))[signed] == np.signbit(expected)[signed]).all()


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


@pytest.mark.parametrize("build, ops", [
    (lambda xp, x, y: xp.sin(xp.abs(-x)), ["absolute", "sin"]),
    (lambda xp, x, y: xp.sin(-(-x)), ["sin"]),
    (lambda xp, x, y: xp.sin((-x) * y), ["multiply", "negative", "sin"]),
    (lambda xp, x, y: xp.sin(x * -y), ["multiply", "negative", "sin"]),
    (lambda xp, x, y: xp.sin((-x) * (-y)), ["multiply", "sin"]),
    (lambda xp, x, y: xp.sin((-x) / y), ["negative", "sin", "true_divide"]),
    (lambda xp, x, y: xp.sin(xp.abs((-x) * 0.5)), ["absolute", "multiply", "sin"]),
    (lambda xp, x, y: xp.sin(xp.abs(x / -y)), ["absolute", "sin", "true_divide"]),
])
def test_negations_move_out_exactly(build: Any, ops: list[str]) -> None:
    """Float negations move out of products, quotients and ``abs`` (round-to-nearest is symmetric in sign):
    NumPy's values bit for bit, zeros' and infinities' signs included."""
    xn = np.repeat(FLOATS, len(FLOATS))
    yn = np.tile(np.array([-0.0, 0.0, 1.5, -2.0, np.inf, -np.inf, 3.0], dtype="float32"), len(FLOATS))
    got = build(gnp, gnp.asarray(xn, chunks=16), gnp.asarray(yn, chunks=16))
    assert _elemwise_ops(got) == ops
    with np.errstate(all="ignore"):
        expected = build(np, xn, yn)
    assert_eq(got, expected)
    signed = ~np.isnan(expected)
    assert (np.signbit(gnp.fetch(got))[signed] == np.signbit(expected)[signed]).all()


@pytest.mark.parametrize("build", [
    lambda x: x * 2.5 + (-x) * 2.5,  # the negation moved out meets ``x * 2.5``, placed after it in the order
    lambda x: (-x) * 2.5 - x * 2.5,
    lambda x: x * 3.0 - (-x) * (-3.0),
])
def test_negation_moved_out_onto_a_node_met_later(build: Any) -> None:
    """A negation moved out of a product that becomes a node the tree holds further on (a common
    subexpression) is computed after it: NumPy's values through every entry point."""
    xn = np.linspace(-2.0, 2.0, 8)
    expected = build(xn)
    got = build(gnp.asarray(xn, chunks=4))
    atol = 1e-14  # a GPU kernel may contract a product and a sum into one fused multiply-add (x*3 - x*3 != 0)
    assert_eq(gnp.fetch(got), expected, atol=atol)
    assert_eq(np.asarray(gnp.fetch(got)), expected, atol=atol)
    assert_eq(got.compute(), expected, atol=atol)
    assert_eq(dask.compute(got)[0], expected, atol=atol)


def test_negations_kept_on_integers_and_where_promoted() -> None:
    """Integer negation wraps (``-x`` of the minimum is the minimum): left as written, as is a negation whose
    product promotes."""
    i = gnp.asarray(np.array([-128, -1, 0, 5], dtype="int8"))
    assert _elemwise_ops(gnp.abs(-i) * 2) == ["absolute", "multiply", "negative"]
    with np.errstate(over="ignore"):
        assert_eq(gnp.abs(-i) * 2, np.abs(-np.array([-128, -1, 0, 5], dtype="int8")) * 2)
    f = gnp.asarray(np.array([1.5, -2.0], dtype="float32"))
    with gnp.allowpromotion():
        assert _elemwise_ops(gnp.sin((-f) * np.float64(3.0))) == ["multiply", "negative", "sin"]


@pytest.mark.parametrize("dtype, divisor, ops", [
    ("float32", 2.0, ["multiply", "sin"]),
    ("float32", -0.25, ["multiply", "sin"]),
    ("float64", 2.0**-1000, ["multiply", "sin"]),
    ("float32", 3.0, ["sin", "true_divide"]),  # 1/3 is not exact
    ("float32", 2.0**-140, ["sin", "true_divide"]),  # its reciprocal overflows float32
    ("float16", 2.0**20, ["sin", "true_divide"]),  # not a float16
    ("float32", np.float32(2.0), ["multiply", "sin"]),
])
def test_division_by_a_power_of_two_becomes_a_product(dtype: str, divisor: Any, ops: list[str]) -> None:
    """``x / 2**k`` is ``x * 2**-k`` bit for bit (subnormal results included) where ``2**-k`` is a normal
    number of the dtype; other divisors stay divisions."""
    tiny = np.finfo(dtype).smallest_subnormal
    xn = np.array([0.0, -0.0, 1.0, -3.5, tiny, 7 * tiny, np.finfo(dtype).max, np.inf, np.nan], dtype=dtype)
    with gnp.allowpromotion(), np.errstate(all="ignore"):
        got = gnp.sin(gnp.asarray(xn, chunks=4) / divisor)
        expected = np.sin(xn / divisor)
    assert _elemwise_ops(got) == ops
    if BACKEND != "numpy" and abs(float(divisor)) < np.finfo(dtype).tiny:
        return  # the GPU's kernels flush a float32 subnormal divisor to zero (x / 0): not NumPy's values
    # bit for bit on NumPy blocks; the GPU's kernels flush float32 subnormal results to zero
    flushed = 0.0 if BACKEND == "numpy" else float(np.finfo(dtype).tiny)
    assert_eq(got, expected, atol=flushed)
    quotient = (gnp.asarray(xn, chunks=4) / divisor) * 1.5  # the division's own values, through a product
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(gnp.fetch(quotient), (xn / divisor) * 1.5, rtol=0.0, atol=flushed)


def test_erf_of_negated_argument_shares_its_polynomial() -> None:
    """``norm_cdf(x)`` and ``norm_cdf(-x)`` written with an erf polynomial (sign, abs, exp, Horner) as users
    write it: one ``exp`` and one reciprocal in the fused kernel, not two; NumPy's values bit for bit."""
    def erf(xp: Any, v: Any) -> Any:
        a = xp.abs(v)
        t = 1.0 / (1.0 + 0.3275911 * a)
        return xp.sign(v) * (1.0 - (((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t
                                   * xp.exp(-a * a))

    xn = np.linspace(-3.0, 3.0, 101, dtype="float32")
    x = gnp.asarray(xn)
    up, down = erf(gnp, x * 0.7071067811865476), erf(gnp, -x * 0.7071067811865476)
    (group,) = plan(Bundle(up.expr, down.expr))["groups"]
    assert group["ops"].count("exp") == 1 and group["ops"].count("reciprocal") == 1
    for got, expected in zip(dask.compute(up, down), (erf(np, xn * 0.7071067811865476), erf(np, -xn * 0.7071067811865476))):
        assert_eq(got, expected)


# --- deep expressions -------------------------------------------------------------------------------------


def _rk4(xp: Any, u: Any, v: Any, steps: int, dt: float = 0.01) -> tuple[Any, Any]:
    """Runge-Kutta-4 steps of a Van der Pol-like pair of fields, with Python float coefficients."""

    def f(a: Any, b: Any) -> tuple[Any, Any]:
        return b, (1.0 - a * a) * b - a

    for _ in range(steps):
        slopes = [f(u, v)]
        for c in (0.5, 0.5, 1.0):
            ku, kv = slopes[-1]
            slopes.append(f(u + c * dt * ku, v + c * dt * kv))
        (k1u, k1v), (k2u, k2v), (k3u, k3v), (k4u, k4v) = slopes
        u, v = u + dt / 6.0 * (k1u + 2.0 * k2u + 2.0 * k3u + k4u), v + dt / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)
    return u, v


def _fields() -> tuple[np.ndarray, np.ndarray]:
    return np.linspace(-1.0, 1.0, 40, dtype="float32"), np.linspace(0.5, -0.5, 40, dtype="float32")


@pytest.mark.parametrize("kernel_size", [None, 64])
def test_deep_loop_gives_bounded_kernels_computing_each_value_once(kernel_size: int | None) -> None:
    un, vn = _fields()
    settings = {} if kernel_size is None else {"kernel_size": kernel_size}
    limit = kernel_size or gnp.config.get("kernel-size")
    with gnp.config.set(**settings):
        u, v = _rk4(gnp, gnp.asarray(un, chunks=20), gnp.asarray(vn, chunks=20), 20)
        got_u, got_v = gnp.fetch((u, v))
        groups = plan(Bundle(u.expr, v.expr))["groups"]
    expected_u, expected_v = _rk4(np, un, vn, 20)
    np.testing.assert_allclose(got_u, expected_u, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_v, expected_v, rtol=1e-5, atol=1e-6)
    operations = sum(isinstance(n, Elemwise) for n in DAG(Bundle(u.expr, v.expr)).order)
    assert len(groups) >= operations // limit > 1
    assert all(len(g["ops"]) <= limit for g in groups)
    assert sum(len(g["ops"]) for g in groups) == operations  # every value once, shared ones stored
    # cut where the fewest values cross: between steps (the two fields, and 1 - u * u of the next step,
    # computed with them in the expression's order), the last kernel storing both fields
    assert all(g["inputs"] <= 3 for g in groups[1:])
    assert groups[-1]["outputs"] == ["store", "store"]


def test_outputs_computed_together_come_from_one_kernel() -> None:
    un, vn = _fields()
    u, v = _rk4(gnp, gnp.asarray(un, chunks=20), gnp.asarray(vn, chunks=20), 3)
    together = _fused_tasks(u, v)
    assert together == len(plan(Bundle(u.expr, v.expr))["groups"]) * 2  # each kernel once per block
    assert together < _fused_tasks(u, u + 1) + _fused_tasks(v, v + 1)
    results = gnp.fetch((u, v))
    expected = _rk4(np, un, vn, 3)
    for got, want in zip(results, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_deep_expression_optimizes_without_recursion() -> None:
    """Tens of thousands of nodes deep: every pass and the rebuild are iterative."""
    x = gnp.asarray(np.linspace(0.0, 1.0, 8))
    y = x
    for k in range(10_000):
        y = y * 0.5 + float(k % 7)
    groups = plan(y)["groups"]
    assert len(groups) == -(-20_000 // gnp.config.get("kernel-size"))


# --- shared work between passes -----------------------------------------------------------------------------


def _normalized_steps(xp: Any, steps: int) -> Any:
    """A loop dividing a field by its norm each step: a kernel per step, reading the last one's reduction."""
    u = np.linspace(0.0, 1.0, 64)
    u = gnp.asarray(u, chunks=16) if xp is gnp else u
    for _ in range(steps):
        u = xp.tanh(u * 1.5 + 0.25) - 0.5 * u
        u = u / xp.sqrt(xp.sum(u * u))
    return u


def _wide_sum(xp: Any, terms: int) -> Any:
    """A sum of independent terms, one of them simplified (``x * 1.0``)."""
    x, y = xp.linspace(0.0, 1.0, 64), xp.linspace(1.0, 2.0, 64)
    return sum((xp.sin(x * float(k)) * xp.cos(y + float(k)) for k in range(terms)), xp.zeros(64))


def test_simplify_rebuilds_what_is_above_and_derives_the_dag() -> None:
    """Only the nodes above a simplified one are rebuilt, as a full rebuild would; the next pass's DAG,
    derived from the first, is the one a walk of the new expression gives."""
    x, y = gnp.linspace(0.0, 1.0, 8), gnp.linspace(1.0, 2.0, 8)
    for roots in (Bundle(_wide_sum(gnp, 6).expr, _normalized_steps(gnp, 2).expr),
                  Bundle(gnp.sin(x * 1 + y).expr, gnp.cos(x + y).expr)):  # one becomes the other: the same node
        with sharing():
            new = simplify(roots, {})
            derived = DAG.of(new)
        replaced = {n._name: x for n in DAG(roots).order if (x := _identity_operand(n)) is not None}
        assert replaced and new._name == rebuild(roots, replaced)._name
        walked = DAG(new)
        assert [n._name for n in derived.order] == [n._name for n in walked.order]
        assert derived.inputs == walked.inputs
        assert derived.position == walked.position
        assert ([[d._name for d in n.operands if isinstance(d, Expr)] for n in walked.order]
                == [[walked.order[j]._name for j in deps] for deps in walked.inputs])


@pytest.mark.parametrize("kernel_size", [None, 4])
def test_nodes_rebuilt_above_kernels_keep_the_names_their_operands_give(kernel_size: int | None) -> None:
    """The outputs of a kernel, the reductions of its partials and what reads only those keep their names
    when the kernel's inputs are rebuilt: the names a node made afresh on the same operands has."""
    y = _normalized_steps(gnp, 5)
    with gnp.config.set(kernel_size=kernel_size or gnp.config.get("kernel-size")):
        optimized = DAG(optimize(y.expr)).order
        checked = [n for n in optimized if type(n) in (FusedOutput, Reduction, Elemwise)]
        assert {FusedOutput, Reduction} <= {type(n) for n in checked}
        for node in checked:
            assert type(node)(*node.operands)._name == node._name
        assert_eq(y, _normalized_steps(np, 5))
