"""Row programs (``optimize.rows``, ``codegen.rows``): reductions over the trailing axes of blocks holding them
whole, axes kept, with the elementwise work around them, as one kernel per block. Softmax, logsumexp, layer
norm and centring as users write them, against NumPy, through every entry point; the plan; the generated
kernels run by the CUDA emulator on the CPU and compiled by nvcc."""
from __future__ import annotations

import shutil
from typing import Any, Callable

import _cuda_emulator
import numpy as np
import pytest
from conftest import BACKEND, assert_eq, axis_chunks, compile_check
from hypothesis import given, settings
from hypothesis import strategies as st

import dask_gpunumeric as gnp
from dask_gpunumeric.api.explain import plan
from dask_gpunumeric.codegen import rows as _rows
from dask_gpunumeric.kernels import cuda as _cuda
from dask_gpunumeric.kernels import fused as _fused
from dask_gpunumeric.optimize import optimize
from dask_gpunumeric.optimize.dag import DAG


def softmax(xp: Any, x: Any, axis: Any = -1) -> Any:
    m = xp.max(x, axis=axis, keepdims=True)
    e = xp.exp(x - m)
    return e / xp.sum(e, axis=axis, keepdims=True)


def logsumexp(xp: Any, x: Any, axis: Any = -1) -> Any:
    m = xp.max(x, axis=axis, keepdims=True)
    return (m + xp.log(xp.sum(xp.exp(x - m), axis=axis, keepdims=True)))[..., 0]


def layer_norm(xp: Any, x: Any, axis: Any = -1) -> Any:
    """(x - mean) / sqrt(var + eps), scaled and shifted along the row (both broadcast from 1-d arrays)."""
    n = x.shape[-1]
    gamma = xp.asarray(np.linspace(0.5, 1.5, n, dtype=x.dtype))
    beta = xp.asarray(np.linspace(-1, 1, n, dtype=x.dtype))
    mean = xp.mean(x, axis=axis, keepdims=True)
    d = x - mean
    var = xp.mean(d * d, axis=axis, keepdims=True)
    return d / xp.sqrt(var + 1e-5) * gamma + beta


def centred(xp: Any, x: Any, axis: Any = -1) -> Any:
    return x - xp.mean(x, axis=axis, keepdims=True)


def standardized(xp: Any, x: Any, axis: Any = -1) -> Any:
    """As users write layer norm with ``var``; and each row over its sample standard deviation (``ddof=1``)."""
    y = (x - xp.mean(x, axis=axis, keepdims=True)) / xp.sqrt(xp.var(x, axis=axis, keepdims=True) + 1e-5)
    return y + x / xp.std(x, axis=axis, keepdims=True, ddof=1)


def row_logsumexp(xp: Any, x: Any, axis: Any = -1) -> Any:
    """logsumexp written with a sum that drops its axes."""
    m = xp.max(x, axis=axis, keepdims=True)
    s = xp.sum(xp.exp(x - m), axis=axis)
    return xp.log(s) + m.reshape(s.shape)


WORKLOADS = {"softmax": softmax, "logsumexp": logsumexp, "layer_norm": layer_norm, "centred": centred,
             "standardized": standardized, "row_logsumexp": row_logsumexp}

# (shape, chunks, reduced axes, whether the reduced axes lie whole in each block)
LAYOUTS = [
    ((48, 300), (48, 300), -1, True),
    ((48, 300), (16, 300), -1, True),
    ((48, 40), (10, 40), -1, True),
    ((48, 300), (48, 100), -1, False),
    ((6, 8, 40), (2, 8, 40), (1, 2), True),
    ((6, 8, 40), (6, 4, 40), (1, 2), False),
]


def data(shape: tuple[int, ...], dtype: str, seed: int = 7) -> np.ndarray:
    return (4 * np.random.default_rng(seed).standard_normal(shape)).astype(dtype)


def row_groups(y: gnp.Array) -> list[dict]:
    return [g for g in plan(y)["groups"] if g["row_inputs"] is not None]


def tolerance(dtype: str) -> float:
    return 2e-5 if dtype == "float32" else 1e-12


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: f"{layout[1]}-{layout[3]}")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_row_workloads_match_numpy(name: str, dtype: str, layout: tuple) -> None:
    """Each workload against NumPy, with the reduced axes whole in the blocks (one row program per block) or
    split across blocks (today's plan)."""
    shape, chunks, axis, whole = layout
    f = WORKLOADS[name]
    x = data(shape, dtype)
    if name == "layer_norm" and axis != -1:
        pytest.skip("layer norm normalizes the last axis")
    y = f(gnp, gnp.asarray(x, chunks=chunks), axis)
    assert bool(row_groups(y)) == whole
    assert_eq(y, f(np, x, axis), rtol=tolerance(dtype), atol=tolerance(dtype))


def test_softmax_and_logsumexp_are_one_kernel() -> None:
    """The benchmark's softmax and logsumexp, fetched together: one row program, its two outputs read by the
    tasks of the final getitem and of the array itself."""
    x = data((64, 256), "float32")
    xg = gnp.asarray(x)
    s, lse = softmax(gnp, xg), logsumexp(gnp, xg)
    joint = [node for node in DAG(optimize(gnp.stack([s[:, 0], lse]).expr)).order
             if type(node).__name__ in ("Fused", "Reduction")]
    assert [type(node).__name__ for node in joint] == ["Fused"]
    text = gnp.explain(s)
    assert "fused row kernel max-subtract-exp-sum: 1 kernel per block" in text
    assert "max-row" in text and "sum-row" in text
    assert 'extern "C" __global__ void __launch_bounds__(256) gnp_rows_' in gnp.explain(s, source=True)
    assert plan(s)["tasks_by_prefix"] == {"array": 1, "fused-max-subtract-exp-sum": 1}
    got = gnp.fetch((s, lse))
    np.testing.assert_allclose(got[0], softmax(np, x), rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(got[1], logsumexp(np, x), rtol=2e-6)


def test_layer_norm_is_one_kernel_of_two_passes() -> None:
    """Mean, then the variance of the deviations: two row reductions, one after the other, in one kernel."""
    y = layer_norm(gnp, gnp.asarray(data((32, 64), "float64"), chunks=(8, 64)))
    (group,) = row_groups(y)
    assert group["ops"].count("mean-row") == 2 and group["blocks"] == 4
    assert _rows.stages(group["program"].instrs)[-1] == 2


def test_variance_is_two_passes_of_one_kernel() -> None:
    """``var`` and ``std`` of rows: the mean, then the sum of squared deviations, in the row program."""
    (group,) = row_groups(standardized(gnp, gnp.asarray(data((16, 64), "float32"), chunks=(4, 64))))
    assert group["ops"].count("sum-row") == 2 and "sqrt" in group["ops"]
    assert max(_rows.stages(group["program"].instrs)) == 2


def test_a_row_reduction_dropping_its_axes_is_an_output() -> None:
    """logsumexp with a sum that drops its axes: the sum is an output of the row program (one value per row),
    and the reshaped maximum added to its log outside; no reduction is left."""
    x = data((32, 64), "float64")
    y = row_logsumexp(gnp, gnp.asarray(x, chunks=(8, 64)))
    (group,) = row_groups(y)
    assert group["ops"] == ["max-row", "subtract", "exp", "sum-row"] and len(group["outputs"]) == 2
    assert not [n for n in DAG(optimize(y.expr)).order if type(n).__name__ == "Reduction"]
    assert_eq(y, row_logsumexp(np, x), rtol=1e-13)


ROW_REDUCTIONS = ["sum", "mean", "max", "min", "var", "std", "ptp"]
UNARY = ["exp", "abs", "square", "tanh"]


def check_random_row_chain(data_: st.DataObject, dtype: str, tolerance: float, split: bool) -> None:
    """A reduction of rows broadcast back, a function of the difference, a second reduction of that, with
    random row blocks, row lengths and kinds (the row axis whole in the blocks, or ``split`` at random):
    NumPy's values."""
    rows, n = data_.draw(st.integers(1, 12)), data_.draw(st.integers(2, 40))
    split = split and data_.draw(st.booleans())
    chunks = (data_.draw(axis_chunks(rows)), data_.draw(axis_chunks(n)) if split else (n,))
    first, second = data_.draw(st.sampled_from(ROW_REDUCTIONS)), data_.draw(st.sampled_from(ROW_REDUCTIONS))
    f = data_.draw(st.sampled_from(UNARY))
    keep = data_.draw(st.booleans())
    x = np.random.default_rng(rows * 100 + n).standard_normal((rows, n)).astype(dtype)

    def chain(xp: Any, x: Any) -> Any:
        a = getattr(xp, first)(x, axis=1, keepdims=True)
        e = getattr(xp, f)(x - a)
        b = getattr(xp, second)(e, axis=1, keepdims=keep)
        return (e * b + a) if keep else b

    y = chain(gnp, gnp.asarray(x, chunks=chunks))
    assert bool(row_groups(y)) == (len(chunks[1]) == 1)
    assert_eq(y, chain(np, x), rtol=tolerance, atol=tolerance)


@given(st.data())
def test_random_row_chains_match_numpy(data_: st.DataObject) -> None:
    check_random_row_chain(data_, "float64", 1e-9, split=True)


def test_row_results_used_elsewhere_are_outputs() -> None:
    """The row maximum read by the kernel and by the user: an output of the kernel (one per row), NaN rows
    and rows of -inf as NumPy gives them."""
    x = data((20, 50), "float64")
    x[3, 7] = np.nan
    x[5] = -np.inf
    xg = gnp.asarray(x, chunks=(5, 50))
    m = gnp.max(xg, axis=1, keepdims=True)
    y = gnp.exp(xg - m) + m
    assert len(row_groups(y)) == 1
    with np.errstate(invalid="ignore"):
        mx = np.max(x, axis=1, keepdims=True)
        expected = np.exp(x - mx) + mx
    assert_eq(y, expected, rtol=1e-13)
    assert_eq(m * 2, mx * 2)


def test_row_reductions_of_other_kinds() -> None:
    """Integer and boolean row reductions (min, any, ptp, prod) and a per-row input read once per row."""
    x = np.random.default_rng(3).integers(-50, 50, (30, 20)).astype(np.int32)
    offsets = np.arange(30, dtype=np.int32)[:, None]
    xg, og = gnp.asarray(x, chunks=(10, 20)), gnp.asarray(offsets, chunks=(10, 1))
    y = (xg - gnp.min(xg, axis=1, keepdims=True) + og) * gnp.any(xg > 40, axis=1, keepdims=True)
    w, wg = x.astype(np.int64), xg.astype(np.int64)
    z = wg // (gnp.ptp(wg, axis=1, keepdims=True) + 1) + gnp.prod(wg % 2 + 1, axis=1, keepdims=True)
    assert row_groups(y) and row_groups(z)
    assert_eq(y, (x - x.min(axis=1, keepdims=True) + offsets) * np.any(x > 40, axis=1, keepdims=True))
    assert_eq(z, w // (np.ptp(w, axis=1, keepdims=True) + 1) + np.prod(w % 2 + 1, axis=1, keepdims=True))


def test_what_is_left_to_fusion() -> None:
    """A reduction nobody broadcasts back is not a row program, nor a few long rows: the fusion pass folds their
    partials as before."""
    x = gnp.asarray(data((16, 16), "float32"))
    assert not row_groups(gnp.sum(gnp.exp(x), axis=1, keepdims=True))
    assert not row_groups(gnp.exp(x) - gnp.sum(x, axis=1))  # no keepdims: broadcast against the columns
    with gnp.config.set(fusion=False):
        assert not row_groups(softmax(gnp, x))
    few_long = data((4, 5000), "float32")  # too few rows to keep a GPU busy: one per thread block
    assert not row_groups(softmax(gnp, gnp.asarray(few_long)))
    assert_eq(softmax(gnp, gnp.asarray(few_long)), softmax(np, few_long), rtol=1e-5, atol=1e-8)


# --- the CUDA path on the CPU: the generated row kernels run by the emulator, and compiled by nvcc ---------

emulated = pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy",
                              reason="needs g++; CPU runs only")


def launched_rows(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """Fused kernels of NumPy blocks emulated, recording the variant of each row program launched."""
    _cuda_emulator.emulated_fused(monkeypatch)
    launched, launch_plan = [], _fused._launch_plan

    def counted(prepared: Any, program: tuple, inputs: Any, offset: tuple, shape: tuple, global_shape: tuple) -> Any:
        if prepared.rows:
            launched.append(tuple(shape))
        return launch_plan(prepared, program, inputs, offset, shape, global_shape)

    monkeypatch.setattr(_fused, "_launch_plan", counted)
    return launched


# (shapes of their own: graphs of a structure compiled before are reused, with the task functions of then)
EMULATED_LAYOUTS = [((20, 300), (8, 300), -1), ((12, 40), (5, 40), -1), ((2, 8, 40), (1, 8, 40), (1, 2))]


@emulated
@pytest.mark.parametrize("layout", EMULATED_LAYOUTS, ids=["long", "short", "3d"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_emulated_row_kernels(name: str, dtype: str, layout: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated kernels (a thread block per row of 300, a warp per row of 40, two reduced axes) give
    NumPy's results."""
    shape, chunks, axis = layout
    if name == "layer_norm" and axis != -1:
        pytest.skip("layer norm normalizes the last axis")
    launched = launched_rows(monkeypatch)
    x = data(shape, dtype)
    y = gnp.fetch(WORKLOADS[name](gnp, gnp.asarray(x, chunks=chunks), axis))
    assert launched and all(s[1:] == chunks[1:] for s in launched)
    np.testing.assert_allclose(y, WORKLOADS[name](np, x, axis), rtol=tolerance(dtype), atol=tolerance(dtype))


@emulated
def test_emulated_row_kernels_of_other_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Integer, boolean and NaN rows, a per-row input and several scalars through the emulated kernels."""
    launched = launched_rows(monkeypatch)
    x = np.random.default_rng(4).integers(-50, 50, (24, 20)).astype(np.int32)
    offsets = np.arange(24, dtype=np.int32)[:, None]
    xg, og = gnp.asarray(x, chunks=(6, 20)), gnp.asarray(offsets, chunks=(6, 1))
    y = (xg - gnp.min(xg, axis=1, keepdims=True) + og) * gnp.any(xg > 40, axis=1, keepdims=True)
    np.testing.assert_array_equal(gnp.fetch(y), (x - x.min(axis=1, keepdims=True) + offsets)
                                  * np.any(x > 40, axis=1, keepdims=True))
    f = data((12, 70), "float32")
    f[2, 5] = np.nan
    fg = gnp.asarray(f, chunks=(4, 70))
    m = gnp.max(fg, axis=1, keepdims=True)
    got = gnp.fetch(gnp.exp(fg - m) * 0.5 + 1.5 * m - 2.0 * gnp.min(fg, axis=1, keepdims=True))
    with np.errstate(invalid="ignore"):
        mx = f.max(axis=1, keepdims=True)
        np.testing.assert_allclose(got, np.exp(f - mx) * 0.5 + 1.5 * mx - 2.0 * f.min(axis=1, keepdims=True), rtol=1e-6)
    assert len(launched) == 7


@emulated
def test_emulated_random_row_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    """The random chains through the generated kernels (float32: graphs of their own, see ``EMULATED_LAYOUTS``)."""
    launched = launched_rows(monkeypatch)
    # a quarter of the examples: each compiles a kernel of its own with the host compiler (the NumPy-block test
    # above takes the full count)
    examples = max(1, settings.default.max_examples // 4)
    settings(max_examples=examples)(given(st.data())(
        lambda data_: check_random_row_chain(data_, "float32", 2e-4, split=False)))()
    assert launched


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def _row_program(f: Callable, shape: tuple[int, ...], dtype: str) -> dict:
    (group,) = row_groups(f(gnp, gnp.asarray(data(shape, dtype)), -1))
    return group


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_row_kernel_sources_compile(name: str) -> None:
    """Every variant of a row kernel (warp or thread block per row, 32- or 64-bit positions, per-row inputs,
    specialized to its scalars) compiles with nvcc."""
    group = _row_program(WORKLOADS[name], (8, 64), "float32")
    program = group["program"]
    constants = tuple(_fused.scalar_args(program.instrs, group["scalars"]))
    for lanes, index, row_inputs, values in ((32, "int", (), ()), (256, "long long", group["row_inputs"], ()),
                                             (256, "int", (), constants)):
        source, kernel = _rows.kernel_source(program, lanes, index, row_inputs, values)
        assert f"void __launch_bounds__(256) {kernel}(" in source
        compile_check(source)
