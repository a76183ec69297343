"""The fusion pass and its kernels: random expression DAGs give the same values fused and unfused (and as
NumPy), the optimized plan has the expected fused groups, scalar values are kernel arguments, ``gnp.accelerate``
traces once per signature, generated CUDA sources compile with nvcc (no GPU needed), and bad input still
raises NumPy's exceptions."""
from __future__ import annotations

import functools
import re
import shutil
import warnings
from typing import Any

import dask
import _cuda_emulator
import numpy as np
import pytest
from conftest import BACKEND, assert_eq, axis_chunks, compile_check, to_host
from hypothesis import event, given, settings
from hypothesis import strategies as st

import dask_gpunumeric as gnp
from dask_gpunumeric.codegen import program as _codegen
from dask_gpunumeric.codegen import types as _types
from dask_gpunumeric.kernels import fused as _fused
from dask_gpunumeric.kernels import cuda as _cuda
from dask_gpunumeric.api.explain import plan
from dask_gpunumeric.expr import Bundle, Materialized
from dask_gpunumeric.optimize import explain_groups

try:
    from distributed.utils import key_split
except ImportError:  # pragma: no cover
    from dask.utils import key_split

FLOAT_RTOL = {np.dtype("float64"): 1e-9, np.dtype("float32"): 1e-4}


# --- random expression DAGs ---------------------------------------------------------------------------
#
# A DAG is a list of node specs evaluated in order; a spec refers to earlier nodes by position, so any node
# can be used several times (shared subexpressions). The same specs are evaluated with ``xp = gnp`` (fused
# and unfused) and with ``xp = np`` (random leaves take the values gnp drew).


# name -> function of (xp, *operands); operands are node values or scalars
BINARY = {
    "add": lambda xp, a, b: a + b,
    "subtract": lambda xp, a, b: a - b,
    "multiply": lambda xp, a, b: a * b,
    "divide": lambda xp, a, b: a / (xp.abs(b) + 1),  # a denominator >= 1
    "maximum": lambda xp, a, b: xp.maximum(a, b),
    "minimum": lambda xp, a, b: xp.minimum(a, b),
    "less": lambda xp, a, b: a < b,
    "greater_equal": lambda xp, a, b: a >= b,
    "equal": lambda xp, a, b: a == b,
    "not_equal": lambda xp, a, b: a != b,
    "logical_and": lambda xp, a, b: xp.logical_and(a, b),
    "logical_or": lambda xp, a, b: xp.logical_or(a, b),
    "hypot": lambda xp, a, b: xp.hypot(a, b),
}
UNARY = {
    "negative": lambda xp, a: -a,
    "abs": lambda xp, a: xp.abs(a),
    "sin": lambda xp, a: xp.sin(a),
    "cos": lambda xp, a: xp.cos(a),
    "tanh": lambda xp, a: xp.tanh(a),
    "exp_tanh": lambda xp, a: xp.exp(xp.tanh(a)),  # bounded: no overflow
    "sqrt_abs": lambda xp, a: xp.sqrt(xp.abs(a)),
    "log1p_abs": lambda xp, a: xp.log1p(xp.abs(a)),
    "square": lambda xp, a: a**2,
    "isnan": lambda xp, a: xp.isnan(a),
    "logical_not": lambda xp, a: xp.logical_not(a),
    "floor": lambda xp, a: xp.floor(a),
    "sign": lambda xp, a: xp.sign(a),
    # not fused (integer remainder, scans, a reordering gather): group boundaries inside a chain, where a
    # careless merge would make a cycle between kernels (``a + flip(a)``)
    "mod3": lambda xp, a: a % 3,
    "cumsum": lambda xp, a: xp.cumsum(a, axis=0),
    "flip": lambda xp, a: xp.flip(a, axis=-1),
}
CASTS = ["float64", "float32", "int64", "int32", "bool"]
REDUCTIONS = ["sum", "prod", "min", "max", "mean", "all", "any"]
OK_DTYPES = {np.dtype(d) for d in ("bool", "int32", "int64", "float32", "float64")}


def _scalars() -> st.SearchStrategy:
    return st.one_of(
        st.sampled_from([0.5, -1.25, 2.0, 3, -2, 0, 1, True, False]),
        st.sampled_from([np.float64(1.5), np.float32(-0.75), np.int32(3), np.int64(-1), np.bool_(True)]),
    )


def _probe(op: tuple, operands: list[Any]) -> np.ndarray | None:
    """A stand-in (zeros of the right shape and dtype) of a node spec's value given stand-ins of its
    operands (None: NumPy refuses it, or gives a dtype the tests leave out, such as float16)."""
    try:
        with np.errstate(all="ignore"):
            out = _apply(op, operands, np)
    except (TypeError, ValueError):
        return None
    out = np.asarray(out)
    return np.zeros(out.shape, out.dtype) if out.dtype in OK_DTYPES else None


def _apply(spec: tuple, values: list[Any], xp: Any) -> Any:
    kind, name = spec[0], spec[1]
    if kind == "unary":
        return UNARY[name](xp, *values)
    if kind == "binary":
        return BINARY[name](xp, *values)
    if kind == "where":
        return xp.where(*values)
    if kind == "astype":
        return values[0].astype(name)
    raise AssertionError(spec)


@st.composite
def dags(draw: Any) -> dict:
    """A random DAG: leaves (inputs, maybe broadcasting and differently chunked; random draws), 2-12
    operation nodes over earlier nodes and scalars, an optional final reduction and an optional second
    output computed together with the first."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 7) if draw(st.integers(0, 9)) else st.integers(0, 7),
                                min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(axis_chunks(n, empty=True)) for n in shape)
    leaves: list[dict] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["input", "input", "input", "random", "full"]))
        if kind == "input":
            lead = draw(st.integers(0, ndim - 1))
            lshape = tuple(1 if draw(st.integers(0, 3)) == 0 else n for n in shape[lead:])
            same = all(a == b for a, b in zip(lshape, shape[lead:])) and draw(st.booleans())
            lchunks = chunks[lead:] if same else tuple(draw(axis_chunks(n, empty=True)) for n in lshape)
            dtype = np.dtype(draw(st.sampled_from(["float64", "float64", "int64", "int32", "bool", "float32"])))
            leaves.append({"kind": "input", "shape": lshape, "chunks": lchunks, "dtype": dtype,
                           "seed": draw(st.integers(0, 2**16))})
        elif kind == "full":
            value = draw(st.sampled_from([2.5, -1, 0, True, np.float32(0.25), np.int32(4)]))
            dtype = np.dtype(draw(st.sampled_from([None, "float64", "int32"])) or np.asarray(value).dtype)
            leaves.append({"kind": "full", "value": value, "shape": shape, "chunks": chunks, "dtype": dtype})
        else:
            method, dtype = draw(st.sampled_from([
                ("random", "float64"), ("random", "float32"), ("normal", "float64"), ("standard_normal", "float32"),
                ("uniform", "float64"), ("integers", "int64"), ("integers", "int32"),
            ]))
            dtype = np.dtype(dtype)
            leaves.append({"kind": "random", "method": method, "shape": shape, "chunks": chunks, "dtype": dtype,
                           "seed": draw(st.integers(0, 2**63))})
    probes: list[np.ndarray] = [np.zeros(leaf["shape"], leaf["dtype"]) for leaf in leaves]
    ops: list[tuple] = []
    n_ops = draw(st.integers(2, 12))
    while len(ops) < n_ops:
        # later nodes prefer recent ones (chains), but any earlier node may be reused
        def operand(allow_scalar: bool = True) -> Any:
            if allow_scalar and draw(st.integers(0, 4)) == 0:
                return ("s", draw(_scalars()))
            n = len(probes)
            i = draw(st.integers(0, n - 1))
            return ("n", max(i, n - 3) if draw(st.booleans()) else i)

        kind = draw(st.sampled_from(["unary", "binary", "binary", "where", "astype"]))
        if kind == "unary":
            spec = ("unary", draw(st.sampled_from(sorted(UNARY))), [operand(False)])
        elif kind == "binary":
            a, b = operand(), operand()
            if a[0] == "s" and b[0] == "s":
                a = operand(False)
            spec = ("binary", draw(st.sampled_from(sorted(BINARY))), [a, b])
        elif kind == "where":
            spec = ("where", "where", [operand(False), operand(), operand()])
        else:
            spec = ("astype", draw(st.sampled_from(CASTS)), [operand(False)])
        args = [probes[o[1]] if o[0] == "n" else o[1] for o in spec[2]]
        if spec[0] == "where" and args[0].dtype != np.bool_:
            continue  # where's condition: a boolean node
        if spec[0] == "astype" and spec[1] in ("int64", "int32") and args[0].dtype.kind == "f":
            continue  # float -> int of inf/nan is platform-defined
        out = _probe(spec, args)
        if out is None:
            continue
        ops.append(spec)
        probes.append(out)
    final = None
    if draw(st.booleans()):
        kind = draw(st.sampled_from(REDUCTIONS))
        last = probes[-1]
        axis = None if draw(st.booleans()) else tuple(sorted(draw(st.sets(st.integers(0, last.ndim - 1), min_size=1))))
        if kind in ("min", "max") and 0 in [last.shape[d] for d in (axis or range(last.ndim))]:
            kind = "sum"  # no identity: NumPy's ValueError (tested elsewhere)
        # then maybe elementwise work on the reduced (maybe 0-d) result: a group on the reduced grid
        boolean = kind in ("all", "any") or kind in ("min", "max") and last.dtype == np.bool_
        post = None if boolean else draw(st.sampled_from([None, "sqrt_abs", "tanh"]))  # (no float16 of bools)
        final = (kind, axis, draw(st.booleans()), post)
    second = None
    if draw(st.booleans()):
        # a second output over an earlier node (a member with consumers outside the group)
        node = draw(st.integers(len(leaves), len(probes) - 1))
        kind = draw(st.sampled_from(["sum", "max", "none"]))
        second = (node, "sum" if kind == "max" and probes[node].shape[0] == 0 else kind)
    return {"ndim": ndim, "shape": shape, "chunks": chunks, "leaves": leaves, "ops": ops, "final": final,
            "second": second}


def _leaf_data(leaf: dict) -> np.ndarray:
    rng = np.random.default_rng(leaf["seed"])
    if leaf["dtype"].kind == "f":
        return rng.uniform(-2, 2, leaf["shape"]).astype(leaf["dtype"])
    if leaf["dtype"].kind == "b":
        return rng.random(leaf["shape"]) < 0.5
    return rng.integers(-5, 6, leaf["shape"]).astype(leaf["dtype"])


def _gnp_leaf(leaf: dict) -> gnp.Array:
    if leaf["kind"] == "input":
        return gnp.asarray(_leaf_data(leaf), chunks=leaf["chunks"])
    if leaf["kind"] == "full":
        return gnp.full(leaf["shape"], leaf["value"], dtype=leaf["dtype"], chunks=leaf["chunks"])
    rng = gnp.random.default_rng(leaf["seed"])
    args = {"normal": (0.5, 2.0), "uniform": (-1.0, 3.0), "integers": (-3, 9)}.get(leaf["method"], ())
    return getattr(rng, leaf["method"])(*args, size=leaf["shape"], dtype=leaf["dtype"], chunks=leaf["chunks"])


def _evaluate(dag: dict, leaves: list[Any], xp: Any, scale: list[float] | None = None) -> list[Any]:
    """The outputs of a DAG with the given leaf values, under the array module ``xp`` (gnp or np). With
    NumPy values, ``scale`` gets the largest finite magnitude of any float value in the DAG times the
    largest number of elements (what rounding errors are relative to)."""
    values = list(leaves)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's mean of an empty array
        for spec in dag["ops"]:
            args = [values[o[1]] if o[0] == "n" else o[1] for o in spec[2]]
            values.append(_apply(spec, args, xp))
        if scale is not None:
            floats = [np.abs(v[np.isfinite(v)]) for v in map(np.asarray, values) if v.dtype.kind == "f"]
            largest = max([float(f.max()) for f in floats if f.size] + [1.0])
            scale.append(largest * max([np.size(v) for v in values] + [1]))
        out = values[-1]
        results = []
        if dag["final"] is not None:
            kind, axis, keepdims, post = dag["final"]
            out = getattr(xp, kind)(out, axis=axis, keepdims=keepdims)
            if post is not None:
                out = UNARY[post](xp, out) * 2 + 1
        results.append(out)
        if dag["second"] is not None:
            node, red = dag["second"]
            results.append(values[node] if red == "none" else getattr(xp, red)(values[node], axis=0))
    return results


def _assert_same(actual: Any, expected: Any, exact: bool, scale: float = 1.0, rtol: float = 0.0) -> None:
    """Equal dtype, shape and values: exactly, or (floats) to the rounding of the result's dtype, or of
    ``rtol`` where the values went through a less precise dtype, relative to the values and to ``scale``
    (the magnitudes that went into them)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (actual.dtype, expected.dtype)
    if exact or expected.dtype.kind != "f":
        np.testing.assert_array_equal(actual, expected)
    else:
        finite = np.abs(expected[np.isfinite(expected)])
        scale = max(float(finite.max()) if finite.size else 1.0, scale, 1.0)
        rtol = max(FLOAT_RTOL[expected.dtype], rtol)
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale, equal_nan=True)


@pytest.mark.slow
@given(dag=dags())
@settings(max_examples=5 * settings.default.max_examples)
def test_random_dags_fused_equal_unfused_and_numpy(dag: dict) -> None:
    """Fused and unfused results agree (bit for bit on NumPy blocks, where the fused interpreter calls the
    same block functions; to rounding on CuPy blocks) and agree with NumPy on the same leaf values."""
    with gnp.allowpromotion():
        leaves = [_gnp_leaf(leaf) for leaf in dag["leaves"]]
        outs = _evaluate(dag, leaves, gnp)
    event(f"fused groups: {len(plan(Bundle(*[o.expr for o in outs]))['groups'])}")
    with gnp.config.set(fusion=True):
        fused = [to_host(v) for v in dask.compute(*outs)]
    with gnp.config.set(fusion=False):
        unfused = [to_host(v) for v in dask.compute(*outs)]
        host_leaves = [to_host(leaf.compute()) for leaf in leaves]
    for spec, value in zip(dag["leaves"], host_leaves):
        if spec["kind"] == "full":
            assert_eq(value, np.full(spec["shape"], spec["value"], dtype=spec["dtype"]))
    scale: list[float] = []
    expected = _evaluate(dag, host_leaves, np, scale)
    for out, f, u, e in zip(outs, fused, unfused, expected):
        assert out.shape == np.shape(e) and out.dtype == np.asarray(e).dtype
        _assert_same(f, u, exact=BACKEND == "numpy", scale=scale[0])
        # blocked scans round in another order than NumPy's sequential one: allow the least precise
        # float dtype of the DAG's leaves
        leaf_rtol = max([FLOAT_RTOL.get(np.dtype(spec["dtype"]), 0.0) for spec in dag["leaves"]] + [0.0])
        _assert_same(f, e, exact=False, scale=scale[0], rtol=leaf_rtol)


# --- structure of the optimized plan ------------------------------------------------------------------


def _data(seed: int, shape: tuple[int, ...] = (40,)) -> np.ndarray:
    """Test data unique to a test (so that its expressions and graphs are too)."""
    return np.random.default_rng(seed).uniform(-1, 1, shape)


def _graph_prefixes(*arrays: gnp.Array) -> dict[str, int]:
    """Task counts by key prefix of the graph Dask gets for these arrays (computed together)."""
    from dask.base import collections_to_expr

    expr = collections_to_expr(list(arrays)).optimize() if len(arrays) > 1 else Materialized((arrays[0].expr,))
    graph = expr.__dask_graph__() if len(arrays) > 1 else expr._graph
    counts: dict[str, int] = {}
    for key in graph:
        counts[key_split(key)] = counts.get(key_split(key), 0) + 1
    return counts


def _fused_tasks(prefixes: dict[str, int]) -> dict[str, int]:
    """The kernel tasks (not the output pickers) among task prefixes."""
    return {p: n for p, n in prefixes.items() if p.startswith("fused-") and not p.endswith("-out")}


def test_chain_with_reduction_is_one_group_one_task_per_block() -> None:
    xn = _data(1)
    x = gnp.asarray(xn, chunks=10)
    y = gnp.sum(gnp.exp(-x**2) * 3 + 1)
    info = plan(y)
    assert len(info["groups"]) == 1
    (g,) = info["groups"]
    assert g["outputs"] == ["sum-partial"]  # the reduction's partial comes from the kernel
    assert g["ops"] == ["square", "negative", "exp", "multiply", "add"]
    assert g["blocks"] == 4 and g["inputs"] == 1
    assert g["bytes_read_per_block"] == 10 * 8 and g["bytes_written_per_block"] == 0
    prefixes = _graph_prefixes(y)
    assert _fused_tasks(prefixes) == {"fused-square-negative-exp-multiply": 4}
    assert not any(p in prefixes for p in ("exp", "square", "multiply", "add", "negative"))
    text = gnp.explain(y)
    assert "fused kernel square-negative-exp-multiply: 1 kernel per block, 4 block(s)" in text
    assert "outputs: sum-partial" in text
    with_source = y.explain(source=True)
    assert with_source.startswith(text) and 'extern "C" __global__' in with_source
    assert_eq(y, np.sum(np.exp(-xn**2) * 3 + 1))
    with gnp.config.set(fusion=False):
        assert plan(y)["groups"] == []
        assert "no fused kernels" in y.explain()
        prefixes = _graph_prefixes(y)
        assert not any(p.startswith("fused") for p in prefixes) and prefixes["exp"] == 4
        assert_eq(y, np.sum(np.exp(-xn**2) * 3 + 1))


def test_member_used_outside_group_gives_multi_output_kernel() -> None:
    xn = _data(2, (12, 10))
    x = gnp.asarray(xn, chunks=(4, 5))
    y = gnp.exp(x)
    a, b = y + 1, y.sum(axis=0)
    info = plan(Bundle(a.expr, b.expr))  # as dask.compute(a, b) optimizes them: together
    (g,) = [g for g in info["groups"] if "exp" in g["ops"]]
    assert sorted(g["outputs"]) == ["store", "sum-partial"]
    assert g["ops"].count("exp") == 1  # y computed once, for both of its uses
    out_a, out_b = dask.compute(a, b)
    assert_eq(out_a, np.exp(xn) + 1)
    assert_eq(out_b, np.exp(xn).sum(axis=0))
    prefixes = _graph_prefixes(a, b)
    assert list(_fused_tasks(prefixes).values()) == [6]  # one kernel per block serves both
    assert any(p.endswith("-out") for p in prefixes)


def test_common_subexpressions_appear_once_in_the_program() -> None:
    xn = _data(3)
    x = gnp.asarray(xn, chunks=20)
    s = gnp.sin(x)
    t = s * s + s
    y = t * t - gnp.cos(s)
    (g,) = plan(y)["groups"]
    _, _, instrs, outputs = g["program"]
    ops = [ins[1] for ins in instrs if ins[0] == "op"]
    assert ops.count("sin") == 1 and ops.count("cos") == 1 and len(ops) == 6
    assert [ins[0] for ins in instrs].count("load") == 1  # x is read once
    assert outputs == (("store", len(instrs) - 1),)
    sn = np.sin(xn)
    assert_eq(y, (sn * sn + sn) ** 2 - np.cos(sn))


def test_compute_and_persist_together_fuse_into_one_group(monkeypatch: pytest.MonkeyPatch) -> None:
    xn = _data(4, (30,))
    x = gnp.asarray(xn, chunks=10)
    y = gnp.exp(-x)
    a, b = y + 1, gnp.sum(y * 2)
    prefixes = _graph_prefixes(a, b)
    assert _fused_tasks(prefixes) == {"fused-negative-exp-multiply-add": 3}
    separately = {**_fused_tasks(_graph_prefixes(a)), **_fused_tasks(_graph_prefixes(b))}
    assert len(separately) == 2 and sum(separately.values()) == 6

    calls = []
    original = _fused.run

    def counting_run(*args: Any) -> Any:
        calls.append(args[2])  # the block offset
        return original(*args)

    monkeypatch.setattr(_fused, "run", counting_run)
    x = gnp.asarray(xn * 2, chunks=10)  # new expressions (no graph made before the patch)
    y = gnp.exp(-x)
    ra, rb = dask.compute(y + 1, gnp.sum(y * 2))
    assert sorted(calls) == [(0,), (10,), (20,)]  # one kernel per block for both outputs
    assert_eq(ra, np.exp(-xn * 2) + 1)
    assert_eq(rb, np.sum(np.exp(-xn * 2) * 2))
    calls.clear()
    z = gnp.asarray(xn + 1, chunks=10)
    w = gnp.tanh(z)
    pa, pb = dask.persist(w * 3, gnp.max(w))
    assert len(calls) == 3
    assert_eq(pa, np.tanh(xn + 1) * 3)
    assert_eq(pb, np.max(np.tanh(xn + 1)))
    calls.clear()
    assert_eq(pa + pb, np.tanh(xn + 1) * 3 + np.max(np.tanh(xn + 1)))  # persisted: nothing rerun
    assert calls == []


def test_fused_key_names_are_readable() -> None:
    x = gnp.asarray(_data(5), chunks=10)
    y = gnp.exp(x) * 2
    keys = list(Materialized((y.expr,))._graph)
    fused = {key_split(k) for k in keys if key_split(k).startswith("fused")}
    assert fused == {"fused-exp-multiply"}
    assert all(isinstance(k, tuple) for k in keys if key_split(k).startswith("fused"))
    assert "fused-exp-multiply" in gnp.explain(y)
    # keys of the root stay the root's own (persist rebuilds collections from them)
    root_keys = {k for k in keys if isinstance(k, tuple) and k[0] == y.name}
    assert len(root_keys) == 4


def test_group_boundaries_and_cycles() -> None:
    """``y - y.mean()`` and ``a + flip(a)``: a consumer that depends on a member through a node outside the
    group cannot join it (that would be a cycle between kernels); the values are still right."""
    xn = _data(6, (8, 6))
    x = gnp.asarray(xn, chunks=(4, 3))
    y = gnp.exp(x)
    z = gnp.sqrt(gnp.abs(y - y.mean())) + 1
    info = plan(z)
    assert len(info["groups"]) == 2
    outputs = sorted(tuple(g["outputs"]) for g in info["groups"])
    assert outputs == [("store",), ("store", "mean-partial")]
    assert_eq(z, np.sqrt(np.abs(np.exp(xn) - np.exp(xn).mean())) + 1)
    a = gnp.sin(x) * 2
    w = gnp.exp(a + gnp.flip(a, axis=1))
    info = plan(w)
    assert sorted((g["ops"], g["outputs"]) for g in info["groups"]) == [
        (["add", "exp"], ["store"]), (["sin", "multiply"], ["store"])]
    assert info["tasks_by_prefix"]["getitem"] == 4
    an = np.sin(xn) * 2
    assert_eq(w, np.exp(an + np.flip(an, axis=1)))


# --- totals and epilogues: one-block reductions finished in their kernel --------------------------------


def test_monte_carlo_is_one_kernel_one_task() -> None:
    """The Monte-Carlo estimate on one block: the sum is finished in the kernel (a total) and the scaling
    of it computed there (the epilogue): one task, whose value and dtype are the unfused path's and NumPy's
    (NEP 50: a Python float times a float32 sum is float32)."""
    n, omega = 1000, 20.0
    u = gnp.random.default_rng(42).random(n, dtype=np.float32)
    estimate = (omega / n) * gnp.sum(gnp.exp(-(omega * u - 10.0) ** 2))
    graph = Materialized((estimate.expr,))._graph
    assert sorted(type(task).__name__ for task in graph.values()) == ["Alias", "Task"]  # the root's key: an alias
    (g,) = plan(estimate)["groups"]
    assert g["ops"][-2:] == ["sum-total", "multiply"] and g["outputs"] == ["store"] and g["blocks"] == 1
    assert g["bytes_written_per_block"] == 4
    host = to_host(u.compute())
    expected = (omega / n) * np.sum(np.exp(-(omega * host - 10.0) ** 2))
    value = gnp.fetch(estimate)
    with gnp.config.set(fusion=False):
        unfused = gnp.fetch(estimate)
    assert estimate.dtype == np.float32 == expected.dtype and estimate.shape == ()
    assert value == unfused if BACKEND == "numpy" else value == pytest.approx(unfused, rel=1e-5)
    assert value == pytest.approx(float(expected), rel=1e-5)
    # several blocks: the tree tasks finish the sum, and the scaling is a task of its own
    v = gnp.random.default_rng(42).random(n, dtype=np.float32, chunks=300)
    blocked = (omega / n) * gnp.sum(gnp.exp(-(omega * v - 10.0) ** 2))
    (g,) = plan(blocked)["groups"]
    assert g["outputs"] == ["sum-partial"] and g["blocks"] == 4
    assert gnp.fetch(blocked) == pytest.approx(value, rel=1e-5)


EPILOGUES = {
    "mean": lambda xp, x: xp.mean(xp.exp(x)) * 2,
    "keepdims, axes in any order": lambda xp, x: xp.sqrt(xp.sum(x * x, axis=(1, 0), keepdims=True)) + 1,
    "two totals of one kernel": lambda xp, x: xp.sum(xp.sin(x)) / (xp.max(xp.sin(x)) + 3),
    "integer mean": lambda xp, x: xp.mean(x.astype(np.int32) * 3) - 1,
    "boolean": lambda xp, x: xp.logical_not(xp.any(x > 0.5)),
    "float32 by a Python float": lambda xp, x: 0.5 * xp.prod(x.astype(np.float32) * 0.5 + 1) - 0.25,
    "min, epilogue chain": lambda xp, x: xp.abs(xp.tanh(xp.min(xp.cos(x)) * 2) - 1),
}


@pytest.mark.parametrize("case", sorted(EPILOGUES))
def test_epilogues_equal_unfused_and_numpy(case: str) -> None:
    """Each total and its epilogue in one kernel of one block: the unfused path's values bit for bit on
    NumPy blocks (the same block functions), NumPy's to the dtype's rounding, NumPy's dtype and shape."""
    f = EPILOGUES[case]
    host = _data(40, (6, 5)) * 2
    y = f(gnp, gnp.asarray(host))
    (g,) = plan(y)["groups"]
    assert g["outputs"] == ["store"] and any(op.endswith("-total") for op in g["ops"]), g["ops"]
    assert len(Materialized((y.expr,))._graph) == 3  # the input's block, the kernel, the root's alias
    fused = to_host(y.compute())
    with gnp.config.set(fusion=False):
        unfused = to_host(y.compute())
    expected = np.asarray(f(np, host))
    _assert_same(fused, unfused, exact=BACKEND == "numpy")
    _assert_same(fused, expected, exact=False)


def test_total_used_outside_and_by_its_epilogue() -> None:
    """A total that is also an output, next to the epilogue's value and a block output of the same kernel."""
    host = _data(41, (30,))
    x = gnp.asarray(host)
    y = gnp.exp(x)
    s = gnp.sum(y)
    outs = (s, s * 2 - 1, y + 1)
    info = plan(Bundle(*(o.expr for o in outs)))
    (g,) = info["groups"]
    assert g["outputs"] == ["store", "store", "store"] and g["blocks"] == 1
    assert _fused_tasks(_graph_prefixes(*outs)) == {"fused-exp-add-sum-multiply": 1}
    got = dask.compute(*outs)
    expected = (np.exp(host).sum(), np.exp(host).sum() * 2 - 1, np.exp(host) + 1)
    for a, e in zip(got, expected):
        _assert_same(to_host(a), e, exact=False)


# --- scalars are kernel arguments ---------------------------------------------------------------------


def test_scalar_values_are_arguments_not_program() -> None:
    xn = _data(7)
    x = gnp.asarray(xn, chunks=10)
    a = gnp.sum(gnp.where(x > 0.25, x * 2.5, -1.5) + 7)
    b = gnp.sum(gnp.where(x > -0.5, x * 1234.5, 9.75) + 3)
    pa, pb = plan(a)["groups"][0]["program"], plan(b)["groups"][0]["program"]
    assert pa == pb
    for mode, group in (("flat", 1), ("strided", 1)):
        assert _codegen.kernel_source(pa, mode, group) == _codegen.kernel_source(pb, mode, group)
    assert a.name != b.name and plan(a)["groups"][0]["name"] != plan(b)["groups"][0]["name"]
    ra, rb = dask.compute(a, b)  # together: no cache or key mixes them up
    assert_eq(ra, np.sum(np.where(xn > 0.25, xn * 2.5, -1.5) + 7))
    assert_eq(rb, np.sum(np.where(xn > -0.5, xn * 1234.5, 9.75) + 3))
    assert not np.allclose(to_host(ra), to_host(rb))
    # NumPy scalars too (their dtype is part of the program, their value is not)
    c, d = x * np.float32(0.5) + np.int32(3), x * np.float32(4.0) + np.int32(-8)
    assert plan(c)["groups"][0]["program"] == plan(d)["groups"][0]["program"]
    assert_eq(c, xn * np.float32(0.5) + np.int32(3))
    assert_eq(d, xn * np.float32(4.0) + np.int32(-8))


def test_one_over_x_is_a_reciprocal() -> None:
    """``1 / x`` of a float array is NumPy's ``reciprocal`` (one rounding of 1/x either way: bit for bit), so
    kernels take the reciprocal's path; of an integer array it stays a true division (float64)."""
    for dtype in (np.float32, np.float64):
        host = (_data(42, (50,)) * 4).astype(dtype)
        host[:3] = [0.0, -0.0, np.inf]
        x = gnp.asarray(host)
        for y in (1 / x, 1.0 / x):
            assert y.expr.operand("op") == "reciprocal"
            with np.errstate(divide="ignore"):
                np.testing.assert_array_equal(to_host(y.compute()), 1 / host)
                np.testing.assert_array_equal(to_host(y.compute()), np.reciprocal(host))
            assert y.dtype == dtype
    xi = gnp.asarray(np.arange(1, 6))
    assert (1 / xi).dtype == np.float64 and (1 / xi).expr.operand("op") == "true_divide"
    assert_eq(1 / xi, 1 / np.arange(1, 6))


# --- gnp.accelerate -----------------------------------------------------------------------------------

A = (0.31938153, -0.356563782, 1.781477937, -1.821255978, 1.330274429)


def black_scholes(xp: Any, S: Any, K: Any, T: Any, r: float = 0.02, v: float = 0.3) -> tuple[Any, Any]:
    def cnd(d: Any) -> Any:
        k = 1.0 / (1.0 + 0.2316419 * xp.abs(d))
        w = 0.3989422804014327 * xp.exp(-0.5 * d * d) * (k * (A[0] + k * (A[1] + k * (A[2] + k * (A[3] + k * A[4])))))
        return xp.where(d > 0, 1.0 - w, w)

    sqrt_t = xp.sqrt(T)
    d1 = (xp.log(S / K) + (r + 0.5 * v * v) * T) / (v * sqrt_t)
    d2 = d1 - v * sqrt_t
    discount = K * xp.exp(-r * T)
    return S * cnd(d1) - discount * cnd(d2), discount * (1.0 - cnd(d2)) - S * (1.0 - cnd(d1))


def _options(seed: int, n: int = 500) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(5, 30, n), rng.uniform(1, 100, n), rng.uniform(0.25, 10, n)


def test_accelerate_black_scholes() -> None:
    traced = []

    @gnp.accelerate
    def price(S: gnp.Array, K: gnp.Array, T: gnp.Array, r: float, v: float) -> tuple:
        traced.append(1)
        return black_scholes(gnp, S, K, T, r, v)

    host = _options(8)
    S, K, T = (gnp.asarray(h, chunks=125) for h in host)
    call, put = price(S, K, T, 0.02, 0.3)
    plain_call, plain_put = black_scholes(gnp, S, K, T, 0.02, 0.3)
    np_call, np_put = black_scholes(np, *host, 0.02, 0.3)
    # prices near 0 lose relative precision to cancellation: compare to 1e-9 of prices up to 100 as well
    assert_eq(call, np_call, atol=1e-9)
    assert_eq(put, np_put, atol=1e-9)
    assert_eq(call, to_host(plain_call.compute()), atol=1e-9)
    assert_eq(put, to_host(plain_put.compute()), atol=1e-9)
    assert len(traced) == 1 and len(price.plans) == 1
    # both outputs from one kernel per block, reading each input once (seen on lazy outputs: with in-memory
    # arguments a call runs at once)
    with gnp.config.set(dispatch="lazy"):
        lazy_call, lazy_put = price(S, K, T, 0.02, 0.3)
    info = plan(lazy_call)
    (g,) = info["groups"]
    # (the arrays, and the rate and volatility as the kernel takes them: 0-d values given at each call)
    assert g["outputs"] == ["store", "store"] and g["inputs"] == 6 and g["blocks"] == 4
    assert "fused kernel" in gnp.explain(lazy_put)
    # same signature: no new trace, new values
    host2 = _options(9)
    call2, put2 = price(*(gnp.asarray(h, chunks=125) for h in host2), 0.02, 0.3)
    assert len(traced) == 1 and len(price.plans) == 1
    np_call2, np_put2 = black_scholes(np, *host2, 0.02, 0.3)
    r1, r2 = dask.compute(call, call2)  # two calls' outputs together keep apart
    assert_eq(r1, np_call, atol=1e-9)
    assert_eq(r2, np_call2, atol=1e-9)
    assert_eq(put2, np_put2, atol=1e-9)
    # another scalar value (a Python float selects the plan by type: tests/test_scalars.py): the same plan
    assert_eq(price(S, K, T, 0.05, 0.3)[0], black_scholes(np, *host, 0.05, 0.3)[0], atol=1e-9)
    assert len(traced) == 1
    # other chunks, another shape: traced
    price(*(gnp.asarray(h, chunks=100) for h in host), 0.02, 0.3)
    assert len(traced) == 2
    small = [h[:50] for h in host]
    assert_eq(price(*(gnp.asarray(h, chunks=125) for h in small), 0.02, 0.3)[1], black_scholes(np, *small)[1],
              atol=1e-9)
    assert len(traced) == 3 and len(price.plans) == 3


def test_accelerate_dispatch() -> None:
    """With arguments in memory a call runs at once and returns persisted blocks; with lazy arguments, or
    the setting dispatch="lazy", its outputs stay lazy; the values are the same either way."""
    from dask_gpunumeric.runtime.regions.plan import RegionOutput
    from dask_gpunumeric.expr import FromGraph

    @gnp.accelerate
    def step(x: gnp.Array, y: gnp.Array) -> tuple:
        return gnp.sqrt(x * x + y), (x - y).sum()

    hx, hy = _data(30), _data(31) ** 2
    x, y = gnp.asarray(hx, chunks=7), gnp.asarray(hy, chunks=7)
    expected = (np.sqrt(hx * hx + hy), (hx - hy).sum())
    eager = step(x, y)
    assert all(isinstance(o.expr, FromGraph) for o in eager)
    with gnp.config.set(dispatch="lazy"):
        lazy = step(x, y)
    from_lazy_args = step(x + 0, *dask.persist(y))
    for outputs in (eager, lazy, from_lazy_args):
        assert_eq(outputs[0], expected[0])
        assert_eq(outputs[1], expected[1])
    assert all(isinstance(o.expr, RegionOutput) for o in (*lazy, *from_lazy_args))
    # a call run at once names its outputs as its lazy Region would (so do the Region's own tasks, run
    # while Dask callbacks watch), and an argument returned as it is keeps its name
    from dask.callbacks import Callback

    with Callback(pretask=lambda key, dsk, state: None):
        watched = step(x, y)
    assert [o.name for o in eager] == [o.name for o in lazy] == [o.name for o in watched]
    assert_eq(watched[0], expected[0])
    assert gnp.accelerate(lambda a, b: (b, a + 1))(x, y)[0].name == y.name
    # persisted arguments count as in memory; the outputs persist and compute as any array
    eager2 = step(*dask.persist(x, y))
    assert isinstance(eager2[0].expr, FromGraph)
    assert_eq(dask.persist(*eager2)[0], expected[0])


def test_accelerate_loop_and_dict() -> None:
    traced = []

    def body(x: Any, y: Any, steps: int, xp: Any = gnp) -> dict:
        traced.append(1)
        out = x
        for i in range(steps):
            out = xp.sin(out) * y + i
            out = xp.where(out > 0.5, out, -out)
            out = out / (1 + xp.abs(out))
        return {"field": out, "energy": xp.sum(out * out), "peak": xp.max(out, axis=0)}

    f = gnp.accelerate(body)
    xn, yn = _data(10, (12, 10)), _data(11, (10,))
    x, y = gnp.asarray(xn, chunks=(4, 5)), gnp.asarray(yn, chunks=5)
    r = f(x, y, 4)
    assert isinstance(r, dict) and list(r) == ["field", "energy", "peak"]
    expected = body(xn, yn, 4, np)
    plain = body(x, y, 4)
    for k in expected:
        assert_eq(r[k], expected[k], atol=1e-12)
        assert_eq(r[k], to_host(plain[k].compute()), atol=1e-12)
    n = len(traced)
    r2 = f(gnp.asarray(xn * 2, chunks=(4, 5)), y, 4)
    assert len(traced) == n and len(f.plans) == 1
    assert_eq(r2["energy"], body(xn * 2, yn, 4, np)["energy"])
    # outputs in further lazy ops and in dask.persist
    assert_eq(r["field"] - r["peak"], expected["field"] - expected["peak"], atol=1e-12)
    field, energy = dask.persist(r["field"] * 2, r["energy"])
    assert_eq(field, expected["field"] * 2)
    assert_eq(energy, expected["energy"])
    # the loop unrolled into one kernel: all statements, three outputs (seen on a lazy call)
    with gnp.config.set(dispatch="lazy"):
        lazy = f(x, y, 4)
    groups = plan(lazy["energy"])["groups"]
    assert len(groups) == 1 and groups[0]["ops"].count("sin") == 4
    assert sorted(groups[0]["outputs"]) == ["max-partial", "store", "sum-partial"]
    text = gnp.explain(lazy["field"])
    assert "fused kernel sin-multiply-add-negative" in text and "outputs: store, max-partial, sum-partial" in text


def test_accelerate_signature() -> None:
    """Arrays may be keyword arguments; non-array arguments select the plan by value *and type* (``1``,
    ``1.0`` and ``True`` are equal in Python but give different dtypes); fusion off is a plan of its own."""
    traced = []

    @gnp.accelerate
    def f(a: gnp.Array, k: Any, *, b: gnp.Array | None = None, shift: Any = 0) -> gnp.Array:
        traced.append(1)
        return a * k + (b if b is not None else 0) + shift

    xn = np.arange(12)
    xi = gnp.asarray(xn, chunks=4)
    for k in (1, 1.0, True, np.float32(1), 1):
        assert_eq(f(xi, k), xn * k)
    assert len(f.plans) == 4 and len(traced) == 4
    bn = np.linspace(0, 1, 12)
    assert_eq(f(xi, 2, b=gnp.asarray(bn, chunks=4)), xn * 2 + bn)
    assert_eq(f(xi, 2, b=gnp.asarray(bn * 3, chunks=4)), xn * 2 + bn * 3)  # same plan, other array
    assert_eq(f(xi, 2, b=xi, shift=0.5), xn * 2 + xn + 0.5)
    assert len(f.plans) == 6 and len(traced) == 6
    n = len(traced)
    with gnp.config.set(fusion=False, dispatch="lazy"):
        y = f(xi, 3, shift=1)
        assert plan(y)["groups"] == []
        assert_eq(y, xn * 3 + 1)
    assert len(traced) == n + 1
    with gnp.config.set(dispatch="lazy"):
        assert plan(f(xi, 3, shift=1))["groups"]


def test_accelerate_errors() -> None:
    @gnp.accelerate
    def scale(x: gnp.Array, factors: Any) -> gnp.Array:
        return x * factors[0]

    x = gnp.asarray(_data(12), chunks=10)
    with pytest.raises(TypeError, match="hashable"):
        scale(x, [2.0])
    assert_eq(scale(x, (2.0,)), _data(12) * 2.0)

    @gnp.accelerate
    def not_an_array(x: gnp.Array) -> Any:
        return 3

    with pytest.raises(TypeError, match="must return Arrays"):
        not_an_array(x)

    @gnp.accelerate
    def mixed(x: gnp.Array) -> Any:
        return x + 1, "label"

    with pytest.raises(TypeError, match="must return Arrays"):
        mixed(x)


# --- generated CUDA (no GPU needed) -------------------------------------------------------------------

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def _exprs() -> dict[str, tuple]:
    """Arrays whose fused kernels cover the code paths of the generator, by name."""
    x = gnp.asarray(_data(13, (20, 6)), chunks=(10, 3))
    xi = gnp.asarray(np.arange(120).reshape(20, 6), chunks=(10, 3))
    rng = gnp.random.default_rng(5)
    r = rng.normal(1.0, 2.0, (20, 6), chunks=(10, 6))
    u = rng.random((20, 6), dtype=np.float32, chunks=(10, 6))  # float32 draws: elements share a Philox block
    w = rng.random((20, 6), dtype=np.float32)  # one block
    y = gnp.exp(x)
    return {
        "random-reduction": (gnp.sum(gnp.exp(-r**2) * 1234.5 + rng.integers(-9, 9, (20, 6), chunks=(10, 6))),),
        "random32-reduction": (gnp.max(u * 1234.5 - rng.standard_normal((20, 6), np.float32, chunks=(10, 6))),),
        "where-compare-bool": (gnp.logical_and(gnp.where(x > 1234.5, x, -x) <= 0.5, gnp.isfinite(x / 3)),),
        "int": ((gnp.maximum(xi * 3 + 1234, 7) ^ 5).astype(np.int32) - gnp.abs(xi).astype(np.int32) * np.int32(1234),),
        # a store, a partial reduction over some axes and a full reduction from one kernel
        "multi-output": (y + 1234.5, y.max(axis=1), gnp.sum(y)),
        # one block: totals finished in the kernel, an epilogue on them, a total kept as it is
        "totals": (gnp.mean(w * 1234.5, keepdims=True) / gnp.max(w) - 1, gnp.any(w > 0.5), gnp.sum(gnp.exp(w))),
    }


def _groups() -> dict[str, dict]:
    """The largest fused group (``plan``'s entry) of each of ``_exprs``."""
    out = {}
    for name, arrays in _exprs().items():
        groups = plan(arrays[0] if len(arrays) == 1 else Bundle(*(a.expr for a in arrays)))["groups"]
        assert groups, name
        out[name] = max(groups, key=lambda g: len(g["ops"]))
    return out


def _programs() -> dict[str, tuple]:
    return {name: g["program"] for name, g in _groups().items()}


def test_programs_for_codegen() -> None:
    programs = _programs()
    _, _, instrs, outputs = programs["where-compare-bool"]
    assert instrs[outputs[0][1]][2] == "|b1" and outputs[0][0] == "store"
    assert any(ins[0] == "random" for ins in programs["random-reduction"][2])
    assert programs["random-reduction"][3][0][0] == "reduce"
    assert all(np.dtype(ins[2]).kind in "iu" for ins in programs["int"][2] if ins[0] == "op")
    assert [o[0] for o in programs["multi-output"][3]] == ["store", "reduce", "reduce"]
    assert {o.axes for o in programs["multi-output"][3][1:]} == {(1,), (0, 1)}
    _, _, instrs, outputs = programs["totals"]
    assert sorted(ins.kind for ins in instrs if ins.tag == "total") == ["any", "max", "mean", "sum"]
    assert [o[0] for o in outputs] == ["store", "store", "store"]
    assert sorted(_codegen.epilogue_values(instrs)[o[1]] for o in outputs) == [0, 0, 2]  # keepdims: 2 axes
    assert any(ins[0] == "scalar" and ins[2] == "<i4" for ins in programs["int"][2])


@needs_nvcc
@pytest.mark.parametrize("name", ["random-reduction", "random32-reduction", "where-compare-bool", "int",
                                  "multi-output", "totals"])
@pytest.mark.slow
def test_kernel_sources_compile(name: str) -> None:
    program = _programs()[name]
    randoms = [ins for ins in program.instrs if ins[0] == "random"]
    group = 4 // max(_codegen.philox_words(ins) for ins in randoms) if randoms else 1
    singles = tuple(range(len(program.inputs)))
    for mode, g, index, single in (("flat", group, "int", ()), ("flat", 1, "long long", singles),
                                   ("strided", 1, "int", ()), ("strided", 1, "long long", ())):
        source, kernel = _codegen.kernel_source(program, mode, g, index, single)
        assert f"void __launch_bounds__(256) {kernel}(" in source
        assert "1234.5" not in source and "1234" not in source.split(kernel)[1]  # values are arguments
        compile_check(source)


@needs_nvcc
@pytest.mark.parametrize("name", ["random-reduction", "random32-reduction", "where-compare-bool", "int",
                                  "multi-output", "totals"])
@pytest.mark.slow
def test_specialized_kernel_sources_compile(name: str) -> None:
    group = _groups()[name]
    program = group["program"]
    constants = tuple(_fused.scalar_args(program.instrs, group["scalars"]))
    source, kernel = _codegen.kernel_source(program, "flat", 1, "int", (), constants)
    params = source.split(f"{kernel}(")[1].split(")\n{")[0]
    assert [p.split()[-1] for p in params.split(",")][-2:] == ["n", "goff"]
    assert not any(name.startswith(("s", "c")) and name[1].isdigit() for name in (p.split()[-1] for p in params.split(",")))
    assert kernel != _codegen.kernel_source(program, "flat", 1, "int")[1]
    compile_check(source)


@given(st.sampled_from(sorted(_types.CTYPES)), st.integers(-2**64, 2**64), st.floats(width=64))
@settings(max_examples=200, deadline=None)
def test_c_literal_is_exact(dtype: str, integer: int, real: float) -> None:
    dt = np.dtype(dtype)
    ctype = _types.CTYPES[dtype]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # float64 to float32 overflows to inf
        value = dt.type(real) if dt.kind == "f" else dt.type(integer % 2**(8 * dt.itemsize) if dt.kind == "u" else
                                                              (integer % 2**(8 * dt.itemsize)) - 2**(8 * dt.itemsize - 1))
    if dt.kind == "b":
        value = np.bool_(integer % 2)
    text = _codegen.c_literal(ctype, value)
    if dt.kind == "b":
        assert text == ("true" if value else "false")
    elif dt.kind == "f" and np.isfinite(value):
        back = dt.type(float.fromhex(text.removesuffix("f")))
        assert back.tobytes() == value.tobytes() and text.endswith("f") == (ctype == "float")
    elif dt.kind == "f":
        bits = int(text.split("(")[1].rstrip("u)l"), 0)
        assert np.array(bits % 2**(8 * dt.itemsize), dtype=f"u{dt.itemsize}").view(dt).tobytes() == value.tobytes()
    else:
        assert text.startswith(f"({ctype})") and text.endswith("ull")
        bits = int(text[len(ctype) + 2:-3])
        assert 0 <= bits < 2**(8 * dt.itemsize)
        assert np.array(bits, dtype=f"u{dt.itemsize}").view(dt) == value


SPECIALIZED_BODY = re.compile(r"\n    const [a-z ]+ (s\d+|c\d+_\w+) = ")  # a scalar declared in a kernel's body


class _FakeFunction:
    def __init__(self, source: str) -> None:
        self.source = source


def test_kernel_specializes_repeated_scalar_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value set launched SPECIALIZE_AFTER times gets a kernel of its own with the values as constants (and
    no scalar arguments), compiled in the background and used from the launch after it is ready; new values
    keep the generic kernel; at most MAX_SPECIALIZED value sets are specialized; ``gpunumeric.specialize``
    off keeps the generic kernel; a specialized source that fails to compile warns and keeps the generic."""
    import concurrent.futures

    compiled: list[str] = []
    queued: list[concurrent.futures.Future] = []

    def compile_module(source: str) -> Any:
        compiled.append(source)
        return type("Module", (), {"get_function": lambda self, name: _FakeFunction(source)})()

    def compile_in_background(source: str, name: str, threads: int) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        queued.append(future)
        if "broken" in compiled:
            future.set_exception(RuntimeError("nvrtc: error"))
        else:
            future.set_result((compile_module(source).get_function(name), 7))
        return future

    monkeypatch.setattr(_cuda, "compile_module", compile_module)
    monkeypatch.setattr(_cuda, "compile_in_background", compile_in_background)
    monkeypatch.setattr(_cuda, "wave_blocks", lambda function, threads: 7)
    program = _programs()["random-reduction"]
    scalars = _groups()["random-reduction"]["scalars"]
    new_kernel = lambda: _fused._Kernel(program, _codegen.Variant("flat", 1, "int", frozenset()))  # noqa: E731
    kernel = new_kernel()
    first = kernel.launch(scalars)
    assert first.args == _fused.launch_args(program.instrs, _fused.scalar_args(program.instrs, scalars))
    assert len(compiled) == 1
    for _ in range(_fused._Kernel.SPECIALIZE_AFTER - 1):
        assert kernel.launch(scalars) == first  # the specialized kernel is being compiled
    assert len(queued) == 1 and len(compiled) == 2
    special = kernel.launch(scalars)
    assert special.args == () and special.function is not first.function
    assert _codegen.c_literal("double", 1234.5) in special.function.source
    assert kernel.launch(scalars) is special and len(queued) == 1  # compiled once
    other = [s if not isinstance(s, float) else s + 1.0 for s in scalars]
    assert kernel.launch(other).function is first.function
    for k in range(_fused._Kernel.MAX_SPECIALIZED + 3):
        values = [s if not isinstance(s, float) else s + 2.0 + k for s in scalars]
        for _ in range(_fused._Kernel.SPECIALIZE_AFTER + 1):
            kernel.launch(values)
    assert len(queued) == _fused._Kernel.MAX_SPECIALIZED
    with gnp.config.set(specialize=False):
        off = new_kernel()
        assert all(off.launch(scalars).args for _ in range(3))
    off.launch(scalars)  # turned back on: queued at the next launch, used at the one after
    assert off.launch(scalars).args == ()
    compiled.append("broken")
    broken = new_kernel()
    for _ in range(_fused._Kernel.SPECIALIZE_AFTER):
        broken.launch(scalars)
    with pytest.warns(RuntimeWarning, match="did not compile"):
        assert broken.launch(scalars).args
    assert broken.launch(scalars).args and len(queued) == _fused._Kernel.MAX_SPECIALIZED + 2  # not retried


def test_record_sources_writes_every_variant(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    groups = _groups()
    monkeypatch.setenv("GNP_KERNEL_DUMP_DIR", str(tmp_path / "a"))
    program, scalars = groups["random32-reduction"]["program"], groups["random32-reduction"]["scalars"]
    _fused.record_sources(program, scalars)
    files = sorted((tmp_path / "a").glob("*.cu"))
    # flat, strided and flat with elements sharing a Philox block; each with 32- and 64-bit positions; and
    # the grouped kernel specialized to the scalar values
    assert len(files) == 7
    sources = {f.read_text() for f in files}
    constants = tuple(_fused.scalar_args(program.instrs, scalars))
    assert sources == {_codegen.kernel_source(program, m, g, i)[0] for m, g in (("flat", 1), ("strided", 1), ("flat", 2))
                       for i in ("int", "long long")} | {_codegen.kernel_source(program, "flat", 2, "int", (), constants)[0]}
    # the fusion pass records what it generates
    monkeypatch.setenv("GNP_KERNEL_DUMP_DIR", str(tmp_path / "b"))
    x = gnp.asarray(_data(14), chunks=10)
    y = gnp.cosh(x) * 3
    (g,) = plan(y)["groups"]
    written = {f.read_text() for f in (tmp_path / "b").glob("*.cu")}
    assert {_codegen.kernel_source(g["program"], m, 1, i)[0] for m in ("flat", "strided") for i in ("int", "long long")} \
        | {_codegen.kernel_source(g["program"], "flat", 1, "int", (0,))[0]} <= written  # the input as one element too
    monkeypatch.delenv("GNP_KERNEL_DUMP_DIR")
    _fused.record_sources(groups["int"]["program"], groups["int"]["scalars"])
    assert len(list(tmp_path.rglob("*.cu"))) == len(files) + len(written)


def _kernel_global_indices(mode: str, geometry: list, ndim: int) -> np.ndarray:
    """The global flat index ``gi`` each element ``t`` of a block gets in a generated kernel (what random
    draws are keyed by), computed as the kernel source does from the launch geometry."""
    n, goff = int(geometry[0]), int(geometry[1])
    if mode in ("flat", "spread"):
        return goff + np.arange(n)
    shapes = [int(geometry[2 + 2 * d]) for d in range(ndim)]
    gstrides = [int(geometry[3 + 2 * d]) for d in range(ndim)]
    out = np.empty(n, np.int64)
    for t in range(n):
        rem, gi = t, goff
        for d in range(ndim - 1, -1, -1):
            c = rem % shapes[d]
            rem //= shapes[d]
            gi += c * gstrides[d]
        out[t] = gi
    return out


@pytest.mark.parametrize("chunks", [(3, 10), (3, 4), (7, (2, 3, 5))])
def test_launch_geometry_keys_random_draws_by_global_index(chunks: tuple) -> None:
    """Every block, wherever it lies, draws the random numbers of its own global elements: the kernel's
    element -> global index map equals NumPy's ravel_multi_index (a block that is not contiguous in the
    global array must not take the flat path)."""
    r = gnp.random.default_rng(3).random((7, 10), chunks=chunks)
    expr = r + 1.0
    (g,) = plan(expr)["groups"]
    program = g["program"]
    global_shape = expr.shape
    for index in expr.expr.block_indices():
        offset, shape = expr.expr.block_offset(index), expr.expr.block_shape(index)
        variant, geometry = _fused._launch_geometry(program, [], offset, shape, global_shape)
        mode, group = variant.mode, variant.group
        local = np.indices(shape).reshape(len(shape), -1)
        expected = np.ravel_multi_index(tuple(local[d] + offset[d] for d in range(len(shape))), global_shape)
        np.testing.assert_array_equal(_kernel_global_indices(mode, geometry, len(shape)), expected)
        if group > 1:
            assert mode == "flat" and shape[1:] == global_shape[1:]
    assert_eq(expr, to_host(r.compute()) + 1.0)


# --- the CUDA path on the CPU: generated kernels compiled by the emulator ---------------------------------

emulated = pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy",
                              reason="needs g++; CPU runs only")


def counted_launches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[int, ...], _codegen.Variant]]:
    """The fused kernels of NumPy blocks emulated (``_cuda_emulator.emulated_fused``), recording the shape and
    the kernel variant of each block launched."""
    _cuda_emulator.emulated_fused(monkeypatch)
    launched, geometry = [], _fused._launch_geometry

    def counted(program: tuple, inputs: Any, offset: tuple, shape: tuple, global_shape: tuple) -> tuple[Any, list]:
        """``_fused._launch_geometry``, recorded."""
        variant, arguments = geometry(program, inputs, offset, shape, global_shape)
        launched.append((tuple(shape), variant))
        return variant, arguments

    monkeypatch.setattr(_fused, "_launch_geometry", counted)
    return launched


def monte_carlo(n: int, dtype: str, chunks: int) -> tuple[gnp.Array, gnp.Array]:
    """The Monte-Carlo estimate of the integral of exp(-x**2) over [-10, 10] from ``n`` uniform draws, and the
    draws (stored by a fused kernel of their own)."""
    u = gnp.random.default_rng(42).random(n, dtype=dtype, chunks=chunks)
    return (20 / n) * gnp.sum(gnp.exp(-(20 * u - 10) ** 2)), u * 1


@emulated
@pytest.mark.parametrize("steps", [1, 2, 3])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_emulated_monte_carlo(dtype: str, steps: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Monte-Carlo estimate through its generated kernels (Philox groups, ``PHILOX_STEPS`` groups per
    thread per iteration), run on the CPU: on one block (the sum a total, the scaling its epilogue) and on
    blocks that start inside a Philox block, each taking several turns of the grid-stride loop of 4 thread
    blocks; alone, and with the draws stored by the same kernel. The draws are the unfused ones bit for bit,
    and the estimate theirs and NumPy's to rounding."""
    n = 30001
    chunkings = [n, 13001]  # blocks at 0, 13001 and 26002 (1 and 2 mod 4)
    with gnp.config.set(fusion=False):
        unfused = [dask.compute(*monte_carlo(n, dtype, chunks)) for chunks in chunkings]
    launched = counted_launches(monkeypatch)
    monkeypatch.setattr(_codegen, "PHILOX_STEPS", steps)
    rtol = 1e-5 if dtype == "float32" else 1e-12
    for chunks, (estimate, draws) in zip(chunkings, unfused):
        launched.clear()
        fused_estimate, fused_draws = monte_carlo(n, dtype, chunks)
        alone = fused_estimate.compute()
        together, stored = dask.compute(fused_estimate, fused_draws)
        # every block of both through a kernel of Philox groups
        assert len(launched) == 2 * -(-n // chunks)
        assert {variant.group for _, variant in launched} == {4 if dtype == "float32" else 2}
        np.testing.assert_array_equal(stored, draws)
        expected = (20 / n) * np.sum(np.exp(-(20 * draws - 10) ** 2))
        for value in (alone, together):
            assert_eq(value, estimate, rtol=rtol)
            assert_eq(value, expected, rtol=rtol)


@emulated
def test_emulated_black_scholes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Black-Scholes call and put prices of float32 options (three inputs, Python scalars, two outputs of one
    kernel per block) through the generated kernel run on the CPU, persisted and computed together: NumPy's
    float32 prices to rounding (and the unfused path's), blocks taking two turns of the grid-stride loop."""
    host = [h.astype(np.float32) for h in _options(10, 10003)]
    S, K, T = (gnp.asarray(h, chunks=4501) for h in host)
    expected = black_scholes(np, *host)
    with gnp.config.set(fusion=False):
        unfused = dask.compute(*black_scholes(gnp, S, K, T))
    launched = counted_launches(monkeypatch)
    call, put = dask.persist(*black_scholes(gnp, S, K, T))
    assert sorted(shape for shape, _ in launched) == [(1001,), (4501,), (4501,)]
    # the first block starts aligned (packs of 4 elements), the others 4 bytes off (spread): both loops
    assert {(variant.mode, variant.group) for _, variant in launched} == {("flat", 1), ("spread", 1)}
    for got in (dask.compute(call, put), (call.compute(), put.compute())):
        for value, numpy, plain in zip(got, expected, unfused):
            assert_eq(value, numpy, rtol=1e-4, atol=1e-4)
            assert_eq(value, plain, rtol=1e-4, atol=1e-4)
    assert len(launched) == 3  # the persisted blocks, not computed again


@emulated
def test_emulated_lone_elementwise_on_large_blocks_is_a_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone elementwise operation (nothing to fuse it with) whose blocks have at least
    ``LONE_KERNEL_ELEMENTS`` elements, on a GPU backend, runs as a generated kernel per block (faster than
    the library's ufunc there); with smaller blocks, through the ufunc. NumPy's values through every entry
    point, with a 0-d array operand, a Python scalar and NumPy's positional calling convention."""
    from dask_gpunumeric.optimize import fusion as _fusion

    launched = counted_launches(monkeypatch)
    monkeypatch.setattr(_fusion, "LONE_KERNEL_BACKENDS", _fusion.LONE_KERNEL_BACKENDS | {"numpy"})
    monkeypatch.setattr(_fusion, "LONE_KERNEL_ELEMENTS", 1000)
    host = _data(31, (40, 50)).astype(np.float32)
    salt = np.float32(0.25)
    x = gnp.asarray(host, chunks=(25, 50))  # blocks of 1,250 and 750 elements
    for lone, expected in ((x + gnp.asarray(salt), host + salt), (np.multiply(x, 3.0), np.multiply(host, 3.0))):
        assert [len(g["ops"]) for g in plan(lone)["groups"]] == [1]
        launched.clear()
        assert_eq(lone, expected, rtol=0)
        assert launched and {shape for shape, _ in launched} == {(25, 50), (15, 50)}
    small = gnp.asarray(host[:30], chunks=(15, 50)) + salt
    assert not plan(small)["groups"]
    launched.clear()
    assert_eq(small, host[:30] + salt, rtol=0)
    assert not launched


@emulated
def test_emulated_strided_and_single_element_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Generated kernels run on the CPU for transposed blocks and a row broadcast along them (the strided
    variant), with a reduction over one axis and a full one, and for ``exp`` of contiguous blocks less the
    array's mean (a 0-d input, read at 0 by the flat variant): NumPy's values."""
    xn, yn, rn = _data(15, (12, 20)), _data(16, (20, 12)), _data(17, (20,))
    x = gnp.asarray(xn, chunks=(4, 10))
    yt = gnp.asarray(yn, chunks=(10, 4)).T
    e = gnp.where(x > yt, gnp.exp(x) * gnp.asarray(rn, chunks=10), yt - 1.5)
    expected = np.where(xn > yn.T, np.exp(xn) * rn, yn.T - 1.5)
    launched = counted_launches(monkeypatch)
    values = dask.compute(e, gnp.sum(e, axis=0), gnp.max(e))
    for value, numpy in zip(values, (expected, expected.sum(axis=0), expected.max())):
        assert_eq(value, numpy)
    assert {variant.mode for _, variant in launched} == {"strided"}
    launched.clear()
    rows = gnp.asarray(xn, chunks=(4, 20))  # contiguous blocks
    assert_eq(gnp.exp(rows - gnp.mean(rows)), np.exp(xn - xn.mean()))
    assert {(variant.mode, variant.singles) for _, variant in launched} == {("flat", frozenset({1}))}


def _coupled_steps(xp: Any, u: Any, v: Any, steps: int = 2, dt: float = 0.05) -> tuple[Any, Any]:
    """Explicit steps of a predator-prey pair with a dozen distinct Python-float coefficients."""
    for _ in range(steps):
        eaten = u * v / (1.0 + 0.5 * u)
        du = 1.1 * u * (1.0 - u / 3.0) - 0.4 * eaten
        dv = 0.3 * eaten - 0.45 * v
        u, v = u + dt * du, v + (dt * 0.9) * dv
    return u, v


@emulated
def test_emulated_many_scalars_travel_as_one_struct(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program of more than ``PACKED_SCALARS`` scalars gathers them in one struct argument (a launch converts
    its arguments one by one): through its generated kernel run on the CPU, NumPy's values to rounding, the
    struct's bytes read as the kernel's fields; and the kernel specialized to the values (each a constant,
    no struct) gives the same bits."""
    _cuda_emulator.emulated_fused(monkeypatch)
    monkeypatch.setattr(_fused, "_kernel", functools.lru_cache(maxsize=None)(_fused._Kernel))
    compile_module = _cuda.compile_module
    monkeypatch.setattr(_cuda, "compile_in_background", lambda source, kernel, threads: _done(
        (compile_module(source).get_function(kernel), 4)))
    un, vn = np.linspace(0.5, 2.0, 37, dtype=np.float32), np.linspace(1.0, 0.2, 37, dtype=np.float32)
    u, v = gnp.asarray(un, chunks=20), gnp.asarray(vn, chunks=20)
    (group,) = explain_groups(Bundle(*(a.expr for a in _coupled_steps(gnp, u, v))))
    layout = _codegen.scalar_struct(group.operand("program").instrs)
    assert layout is not None and len(layout.names) > _codegen.PACKED_SCALARS
    source, name = _codegen.kernel_source(group.operand("program"), "flat", 1, "int")
    assert f"const gnp_scalars_{name[len('gnp_fused_'):]} sp" in source
    runs = [dask.compute(*_coupled_steps(gnp, u, v)) for _ in range(_fused._Kernel.SPECIALIZE_AFTER + 2)]
    for got, expected in zip(runs[0], _coupled_steps(np, un, vn)):
        assert_eq(got, expected, rtol=1e-6)
    for later in runs[1:]:  # the last ones from the specialized kernel
        for a, b in zip(runs[0], later):
            np.testing.assert_array_equal(a, b)


@emulated
@pytest.mark.parametrize("zeros", [(0.0, -0.0, 0.0, -0.0), (-0.0, 0.0, -0.0, 0.0)])
def test_emulated_kernel_tells_signed_zero_scalars_apart(zeros: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """One kernel launched with the scalar 0.0, then -0.0 (equal in Python, and of one hash), each often enough
    to get a kernel specialized to its values: each launch passes its own zero (a specialized kernel keeps
    zeros as parameters, also where the generic kernel takes its scalars in a struct), so the signs are NumPy's;
    the other constants are folded."""
    _cuda_emulator.emulated_fused(monkeypatch)
    monkeypatch.setattr(_fused, "_kernel", functools.lru_cache(maxsize=None)(_fused._Kernel))
    specialized: list[str] = []
    compiled: list[str] = []
    compile_module = _cuda.compile_module
    monkeypatch.setattr(_cuda, "compile_module", lambda source: compiled.append(source) or compile_module(source))

    def compile_now(source: str, kernel: str, threads: int) -> Any:
        specialized.append(source)
        return _done((compile_module(source).get_function(kernel), 4))

    monkeypatch.setattr(_cuda, "compile_in_background", compile_now)
    xn = np.array([1.5, -2.0, 0.0, 3.25, -0.0, 7.0, -0.0, 0.0, 0.5])
    x = gnp.asarray(xn, chunks=5)

    def horner(xp: Any, y: Any, zero: float) -> Any:  # (more scalars than a generic kernel passes one by one)
        value = xp.where(y > zero, y, zero)
        for k in range(_codegen.PACKED_SCALARS + 2):
            value = value * y + (0.25 * k if k % 3 else zero)
        return value

    for zero in zeros:
        for _ in range(_fused._Kernel.SPECIALIZE_AFTER + 1):
            for got, want in ((gnp.exp(x) * zero, np.exp(xn) * zero),
                              (gnp.where(x > zero, x * 1.5, zero), np.where(xn > zero, xn * 1.5, zero)),
                              (gnp.where(x < zero, x, zero), np.where(xn < zero, xn, zero)),
                              (horner(gnp, x, zero), horner(np, xn, zero))):
                assert gnp.fetch(got).tobytes() == want.tobytes(), zero
    assert any("= 0x1.8" in s for s in specialized) and not any("0x0.0p+0" in s for s in specialized)
    assert any("gnp_scalars_" in s for s in compiled)  # (horner's generic kernel takes a struct)


@pytest.mark.skipif(BACKEND == "numpy" and _cuda_emulator.HOST_COMPILER is None, reason="needs g++ or a GPU")
def test_one_element_results_kept_by_users_keep_their_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """A total finished in its kernel is a one-element array that a later launch writes again once nothing holds
    it (``kernels.fused.SmallOutputs``: on CuPy blocks, and NumPy blocks through the emulated kernels): totals
    persisted, computed or viewed by the user keep their values while the same kernel runs again on other data,
    each fetched total is NumPy's, and fetches one after another take one array between them."""
    if BACKEND == "numpy":
        _cuda_emulator.emulated_fused(monkeypatch)
    taken: list[int] = []
    take = _fused.SmallOutputs.take
    monkeypatch.setattr(_fused.SmallOutputs, "take", lambda self, *a: taken.append(id(out := take(self, *a))) or out)
    hosts = [np.linspace(-1.0, 1.0, 1000) * k for k in range(1, 5)]
    expected = [np.sum(np.exp(h)) for h in hosts]

    def total(h: np.ndarray) -> gnp.Array:
        return gnp.sum(gnp.exp(gnp.asarray(h, chunks=h.size)))

    persisted = total(hosts[0]).persist()
    (computed,) = dask.compute(total(hosts[1]))
    view = computed.reshape(1)
    fetched = [gnp.fetch(total(h)) for h in hosts for _ in range(3)]
    np.testing.assert_allclose(fetched, np.repeat(expected, 3), rtol=1e-12)
    np.testing.assert_allclose(gnp.fetch(persisted), expected[0], rtol=1e-12)
    np.testing.assert_allclose(to_host(view), [expected[1]], rtol=1e-12)
    np.testing.assert_allclose(to_host(computed), expected[1], rtol=1e-12)
    assert len(set(taken[2:])) == 1 and len(taken) == 14  # (the first two kept: the fetches' one array)


@emulated
def test_emulated_launch_plans_follow_each_block_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Launches remembered per block geometry and input layout (``_fused._launch_plan``, as on a GPU), run on the
    CPU: one program (an elementwise one and a row program) on blocks laid out differently from call to call
    (contiguous, reversed views, a broadcast row, another dtype) gives NumPy's results each time, and a repeated
    launch works nothing out anew."""
    launch_plan = _fused._launch_plan
    _cuda_emulator.emulated_fused(monkeypatch)
    monkeypatch.setattr(_fused, "_launch_plan", launch_plan)
    monkeypatch.setattr(_fused, "_kernel", functools.lru_cache(maxsize=None)(_fused._Kernel))
    _fused.forget_kernels()
    planned, new_plan = [], _fused._new_plan

    def counted(*args: Any) -> Any:
        """``_fused._new_plan``, counted."""
        planned.append(args)
        return new_plan(*args)

    monkeypatch.setattr(_fused, "_new_plan", counted)
    base = np.random.default_rng(5).random((12, 10))
    layouts = [base[:, :8].copy(), base[:, ::-1][:, :8], base[:, :8].copy(), base[:, :8].astype(np.float32)]
    counts = []
    with gnp.config.set(specialize=False):
        for _ in range(2):
            for xn in layouts:
                x = gnp.asarray(xn, chunks=(6, 8))
                total, softmax = gnp.fetch([(gnp.exp(-(x * 2.5 - 1.0) ** 2) + x[0]).sum(axis=1),
                                            gnp.exp(x) / gnp.exp(x).sum(-1, keepdims=True)])
                assert_eq(total, (np.exp(-(xn * 2.5 - 1.0) ** 2) + xn[0]).sum(axis=1), rtol=1e-5)
                assert_eq(softmax, np.exp(xn) / np.exp(xn).sum(-1, keepdims=True), rtol=1e-5)
            counts.append(len(planned))
    assert any(prepared.rows for prepared, *_ in planned) and 0 < counts[0] == counts[1]



@emulated
@pytest.mark.parametrize("n", [1, 7, 8, 45])
def test_emulated_packs_of_consecutive_elements(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flat kernels move four consecutive elements of each array as one pack, and run the elements past the last
    whole pack one by one; blocks with an input off the packs' alignment (views one element into an array)
    take the spread kernel instead, run on the CPU: bool, 1-, 2-, 4- and 8-byte inputs and outputs, a
    one-element input, blocks of every remainder, aligned copies and views, all NumPy's values."""
    _cuda_emulator.emulated_fused(monkeypatch)
    rng = np.random.default_rng(n)
    ints = rng.integers(-100, 100, n + 1)
    sources = [ints.astype(np.int8), ints.astype(np.int16), rng.random(n + 1).astype(np.float32),
               rng.random(n + 1), ints > 0]
    scale = np.array([3], dtype=np.int16)

    def compute(xp: Any, a: Any, b: Any, c: Any, d: Any, m: Any, s: Any) -> list[Any]:
        return [xp.where(m, a * s + b, b - a), c * 2.0 + d, (c > 0.5) ^ m]

    for offset in (0, 1):  # aligned copies, then views one element in
        host = [x[offset:offset + n] if offset else x[:n].copy() for x in sources]
        arrays = [gnp.asarray(x, chunks=n) for x in host]
        got = gnp.fetch(compute(gnp, *arrays, gnp.asarray(scale)))
        for g, expected in zip(got, compute(np, *host, scale)):
            assert g.dtype == expected.dtype
            np.testing.assert_array_equal(g, expected)

def _done(value: Any) -> Any:
    """A future holding ``value`` already."""
    import concurrent.futures

    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result(value)
    return future


@emulated
@pytest.mark.parametrize("name", ["random-reduction", "random32-reduction", "where-compare-bool", "int",
                                  "multi-output", "totals", "non-finite", "uniform-products"])
def test_emulated_specialized_kernels_give_the_same_bits(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels specialized to repeated scalar values (each an exact constant of the source), run on the CPU:
    the generic kernels' results bit for bit, and a specialized kernel compiled for every block kernel.
    "uniform-products": products of float32 draws and constants, computed from the draws' integers where
    the constant scaled by 2**-24 is exact and not a zero (and as they are where it is not)."""
    import concurrent.futures

    _cuda_emulator.emulated_fused(monkeypatch)
    monkeypatch.setattr(_fused, "_kernel", functools.lru_cache(maxsize=None)(_fused._Kernel))  # launches add up
    sources: list[str] = []
    compile_module = _cuda.compile_module

    def compile_now(source: str, kernel: str, threads: int) -> concurrent.futures.Future:
        """``_cuda.compile_in_background``, compiled at once."""
        sources.append(source)
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result((compile_module(source).get_function(kernel), 4))
        return future

    monkeypatch.setattr(_cuda, "compile_in_background", compile_now)
    if name == "non-finite":  # constants that are not finite, negative zero and the extremes of integers
        x = gnp.asarray(_data(3, (40,)), chunks=15)
        xi = gnp.asarray(np.arange(-20, 20), chunks=15)
        arrays = (gnp.where(x > 0.5, x * -0.0, -np.inf) + np.nan * (x > 9), gnp.maximum(x, np.inf),
                  (xi * np.int64(-2**63)) ^ np.int64(2**63 - 1), (xi.astype(np.int8) * np.int8(-128)))
    elif name == "uniform-products":
        u = gnp.random.default_rng(3).random(1001, dtype=np.float32, chunks=400)
        arrays = (gnp.sum(u * 1234.5 - 3.0), np.float32(-3.0) * u, u * np.float32(1e-38), u * np.float32(3e-39),
                  gnp.exp(-(20 * u - 10) ** 2), gnp.where(u > u * -0.0, u, u * -0.0))
        assert sum(len(_codegen._uniform_products(g["program"], 4, tuple(_fused.scalar_args(g["program"][2],
                                                                                             g["scalars"]))))
                   for g in plan(Bundle(*(a.expr for a in arrays)))["groups"]) == 3  # not 1e-38, 3e-39, -0.0
    else:
        arrays = _exprs()[name]
    with gnp.config.set(specialize=False):
        generic = [np.asarray(v) for v in dask.compute(*arrays)]
    runs = [[np.asarray(v) for v in dask.compute(*arrays)] for _ in range(3)]
    assert sources and all(SPECIALIZED_BODY.search(s) for s in sources)
    for run in runs:
        for got, want in zip(run, generic):
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


# --- GPU only -----------------------------------------------------------------------------------------

gpu_only = pytest.mark.skipif(BACKEND != "cupy", reason="CuPy blocks only (GNP_BACKEND=cupy)")


@gpu_only
@pytest.mark.parametrize("name", ["random-reduction", "random32-reduction", "where-compare-bool", "int",
                                  "multi-output", "totals"])
def test_gpu_specialized_kernels_give_the_same_bits(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernels specialized to repeated scalar values compute what the generic kernels do, bit for bit."""
    sources: list[str] = []
    compile_module = _cuda.compile_module
    monkeypatch.setattr(_cuda, "compile_module", lambda source: sources.append(source) or compile_module(source))
    _fused.forget_kernels()  # kernels count the launches of each value set from here
    arrays = _exprs()[name]
    with gnp.config.set(specialize=False):
        generic = [to_host(v) for v in dask.compute(*arrays)]
    runs = [[to_host(v) for v in dask.compute(*arrays)] for _ in range(_fused._Kernel.SPECIALIZE_AFTER)]
    _cuda.wait_for_background_compiles()
    runs += [[to_host(v) for v in dask.compute(*arrays)] for _ in range(2)]
    assert any(SPECIALIZED_BODY.search(s) for s in sources), "no kernel was specialized"
    for run in runs:
        for got, want in zip(run, generic):
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@gpu_only
def test_gpu_lone_elementwise_on_large_blocks_is_a_kernel() -> None:
    """On CuPy blocks of ``LONE_KERNEL_ELEMENTS`` elements a lone add of a 0-d array is one generated kernel
    per block, with NumPy's values."""
    from dask_gpunumeric.optimize.fusion import LONE_KERNEL_ELEMENTS

    host = _data(32, (LONE_KERNEL_ELEMENTS // 1024, 1024)).astype(np.float32)
    lone = gnp.asarray(host) + gnp.asarray(np.float32(0.5))
    assert [len(g["ops"]) for g in plan(lone)["groups"]] == [1]
    assert_eq(lone, host + np.float32(0.5), rtol=0)


@gpu_only
def test_gpu_strided_path_fused_equals_unfused() -> None:
    xn, yn = _data(15, (12, 20)), _data(16, (20, 12))
    x = gnp.asarray(xn, chunks=(4, 10))
    yt = gnp.asarray(yn, chunks=(10, 4)).T  # transposed blocks: the kernel takes the strided path
    row = gnp.asarray(_data(17, (20,)), chunks=10)  # broadcast along rows
    e = gnp.where(x > yt, gnp.exp(x) * row, yt - 1.5)
    outs = (e, gnp.sum(e, axis=0), gnp.max(e))
    with gnp.config.set(fusion=False):
        unfused = [to_host(v) for v in dask.compute(*outs)]
    assert plan(e)["groups"]
    fused = [to_host(v) for v in dask.compute(*outs)]
    for f, u in zip(fused, unfused):
        _assert_same(f, u, exact=False)
    expected = np.where(xn > yn.T, np.exp(xn) * _data(17, (20,)), yn.T - 1.5)
    assert_eq(e, expected)


@gpu_only
@pytest.mark.parametrize("method, args, dtype", [
    ("random", (), "float64"), ("random", (), "float32"), ("integers", (-5, 1000), "int64"),
    ("integers", (0, 200), "uint8"), ("normal", (1.0, 2.0), "float64"),
])
@pytest.mark.parametrize("chunks", [(9, 12), (4, 5), (9, (0, 5, 7))])
def test_gpu_random_draws_fused_equal_unfused(method: str, args: tuple, dtype: str, chunks: tuple) -> None:
    r = getattr(gnp.random.default_rng(11), method)(*args, size=(9, 12), dtype=dtype, chunks=chunks)
    fused = r + 0 if np.dtype(dtype).kind in "iu" else r * 1.0
    assert plan(fused)["groups"]
    with gnp.config.set(fusion=False):
        unfused = to_host(r.compute())
    got = to_host(fused.compute())
    if method == "normal":
        np.testing.assert_allclose(got, unfused, rtol=1e-12)
    else:
        np.testing.assert_array_equal(got, unfused)
    assert_eq(gnp.max(fused), unfused.max())  # a full reduction, zero-length blocks included


# --- errors -------------------------------------------------------------------------------------------


def test_bad_input_raises_numpy_exceptions() -> None:
    assert gnp.config.get("fusion")
    x = gnp.asarray(_data(18), chunks=10)
    xi = gnp.asarray(np.arange(40), chunks=10)
    with pytest.raises(ValueError):
        gnp.exp(x) + gnp.ones(7)
    with pytest.raises(ValueError):
        gnp.where(x > 0, gnp.ones((3, 40)), gnp.ones((2, 40)))
    with pytest.raises(TypeError):
        gnp.sin(x) & 1  # no bitwise ops on floats
    with pytest.raises(TypeError):
        gnp.exp(x).astype(np.int32, casting="safe")
    with pytest.raises(TypeError):
        y = xi * 2
        y += 1.5
    with pytest.raises(ValueError):
        gnp.max(gnp.exp(x)[:0])
    with pytest.raises(np.exceptions.AxisError):
        gnp.sum(gnp.exp(x), axis=1)

    @gnp.accelerate
    def bad(a: gnp.Array, b: gnp.Array) -> gnp.Array:
        return gnp.exp(a) * b

    with pytest.raises(ValueError):  # raised while tracing; no plan is kept
        bad(x, gnp.ones(7))
    assert len(bad.plans) == 0
    with pytest.raises(TypeError):
        bad(xi, x) & 1
    assert_eq(bad(x, x), np.exp(_data(18)) * _data(18))


# --- on a cluster -------------------------------------------------------------------------------------


def test_fused_and_accelerated_on_a_cluster(client: Any) -> None:
    """Fused kernels and accelerated plans run on a 2-worker cluster (programs and scalars pickled to the
    workers), with the values they have locally."""
    xn = _data(20, (30, 8))
    x = gnp.asarray(xn, chunks=(10, 4))
    y = gnp.exp(x * 0.5)

    @gnp.accelerate
    def f(a: gnp.Array) -> tuple:
        return gnp.tanh(a) * 2, gnp.sum(gnp.tanh(a))

    outs = (y + 1, gnp.max(y, axis=0), *f(x))
    local = [to_host(v) for v in dask.compute(*outs)]
    with client.as_current(), dask.config.set(scheduler="dask.distributed"):
        remote = [to_host(v) for v in dask.compute(*outs)]
    for r, lo in zip(remote, local):
        _assert_same(r, lo, exact=BACKEND == "numpy")
    assert_eq(local[0], np.exp(xn * 0.5) + 1)
    assert_eq(local[1], np.exp(xn * 0.5).max(axis=0))
    assert_eq(local[2], np.tanh(xn) * 2)
    assert_eq(local[3], np.tanh(xn).sum())
