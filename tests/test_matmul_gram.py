"""``X.T @ X`` and the products ``X.T @ v`` over the same rows in one pass over X (the gram kernel), and small
systems solved in one launch, against NumPy in float64: on NumPy blocks, on the emulated device of
``tests/_fake_device.py`` (CuPy blocks whose kernels run on the CPU) and, in the CuPy run, on the GPU."""
from __future__ import annotations

import pathlib
import sys
from collections import Counter
from typing import Any

import _fake_device
import dask
import numpy as np
import pytest
from dask.utils import key_split

import dask_gpunumeric as gnp
from dask_gpunumeric.codegen.linalg import GramConfig, SolveConfig
from dask_gpunumeric.kernels import faster as _faster
from dask_gpunumeric.kernels import gram as _gram
from dask_gpunumeric.kernels import lapack as _lapack
from conftest import BACKEND, to_host

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
from gram_probe import GRAM_VARIANTS, SOLVE_VARIANTS  # noqa: E402  (benchmarks/ is not a package)

DEVICES = ["numpy", "emulated"] + (["gpu"] if BACKEND == "cupy" else [])
LinAlgError = np.linalg.LinAlgError


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the blocks live: NumPy blocks, or CuPy blocks on the emulated device or on the GPU."""
    if request.param == "emulated":
        _fake_device.fake_device(monkeypatch)
    elif request.param == "gpu":  # our kernels, faster than the library's routines or not
        monkeypatch.setattr(_faster, "_ours_won", {})
        monkeypatch.setattr(_faster, "ours_faster", lambda ours, library: True)
    return request.param


@pytest.fixture(params=[SolveConfig(), SolveConfig(registers=True)], ids=["shared", "registers"])
def solve_config(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> SolveConfig:
    """The small solve's kernel: one for all systems in shared memory, or one per size of system with its rows
    in registers (larger systems: in shared memory)."""
    monkeypatch.setattr(_lapack, "SOLVE", request.param)
    return request.param


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list:
    """The gram kernel's launches (the shapes of its operands: x's, then the others', sorted) and the small
    solve's (its systems')."""
    calls: list = []
    gram_launch, solve_launch = _gram._launch, _lapack.small_gesv

    def gram(plan: Any, x: Any, others: Any) -> tuple:
        calls.append(("gram", x.shape, tuple(sorted(v.shape for v in others))))
        return gram_launch(plan, x, others)

    def solve(a: Any, b: Any) -> tuple:
        calls.append(("solve", a.shape, b.shape))
        return solve_launch(a, b)

    monkeypatch.setattr(_gram, "_launch", gram)
    monkeypatch.setattr(_lapack, "small_gesv", solve)
    return calls


def on(device: str, *hosts: np.ndarray) -> list[gnp.Array]:
    backend = "numpy" if device == "numpy" else "cupy"
    return [gnp.from_array(h, backend=backend) for h in hosts]


def data(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def close(actual: Any, expected: np.ndarray, dtype: str) -> None:
    """Within the dtype's rounding of ``expected`` (computed in float64), relative to its largest entry."""
    actual = to_host(actual)
    assert actual.shape == expected.shape and actual.dtype == dtype
    scale = np.abs(expected).max()
    assert np.abs(actual - expected).max() <= (2e-5 if dtype == "float32" else 1e-12) * scale


@pytest.mark.parametrize("k", [1, 3, 64, 100, 128])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_products_in_one_pass(device: str, launches: list, k: int, dtype: str) -> None:
    """``X.T @ X``, ``X.T @ y`` and ``X.T @ Z`` of one block X (rows not a multiple of any chunk of the kernel)
    computed together equal NumPy's; on CuPy blocks the three come from one launch of the gram kernel (no
    library product), ``X.T @ X`` mirrored (exactly symmetric), the same bits when computed again."""
    n = _gram.ROWS_PER_COLUMN * k + 13
    h, v, w = data((n, k), dtype, 1), data((n,), dtype, 2), data((n, 2), dtype, 3)
    X, y, Z = on(device, h, v, w)
    gram, moment, cross = dask.compute(X.T @ X, X.T @ y, np.matmul(X.T, Z))
    wide = h.astype(np.float64)
    for got, want in ((gram, wide.T @ wide), (moment, wide.T @ v), (cross, wide.T @ w)):
        close(got, want, dtype)
    assert np.array_equal(to_host(gram), to_host(gram).T)
    assert launches == ([] if device == "numpy" else [("gram", (n, k), ((n,), (n, 2)))])
    again = dask.compute(X.T @ X, X.T @ y, np.matmul(X.T, Z))  # the partials summed in a fixed order
    assert all(np.array_equal(to_host(a), to_host(b)) for a, b in zip(again, (gram, moment, cross)))


def test_plan_of_the_least_squares_pair(device: str) -> None:
    """The pair of least squares reading one X is one ``matmul-gram`` task on CuPy blocks (its two outputs picked
    from it), two library products on NumPy blocks."""
    X, y = on(device, data((5000, 8), "float32", 4), data((5000,), "float32", 5))
    X, y = dask.persist(X, y)
    tasks = Counter(key_split(key) for key in gnp.linalg.solve(X.T @ X, X.T @ y).__dask_graph__())
    pair = {"matmul": 2} if device == "numpy" else {"matmul-gram": 1, "matmul-gram-out": 2}
    assert {name: count for name, count in tasks.items() if name.startswith("matmul")} == pair


@pytest.mark.parametrize("shape", [(1000, 64), (100_000, 129), (300, 5)], ids=["short", "wide", "short-narrow"])
def test_library_product_where_the_kernel_does_not_fit(device: str, launches: list, shape: tuple[int, int]) -> None:
    """X shorter than ``ROWS_PER_COLUMN`` rows per column, or wider than ``MAX_COLUMNS``: the library's product."""
    h = data(shape, "float32", 6)
    (X,) = on(device, h)
    close(gnp.fetch(X.T @ X), h.T.astype(np.float64) @ h, "float32")
    assert launches == []


def test_a_product_alone_or_of_another_dtype_keeps_the_library(device: str, launches: list) -> None:
    """``X.T @ y`` with no ``X.T @ X`` beside it is a library product; beside one, a ``y`` of another dtype than
    X's is not taken along."""
    h, v = data((4000, 8), "float64", 7), data((4000,), "float32", 8)
    X, y = on(device, h, v)
    close(gnp.fetch(X.T @ y.astype("float64")), h.T @ v.astype(np.float64), "float64")
    assert launches == []
    with gnp.allowpromotion():
        gram, moment = dask.compute(X.T @ X, X.T @ y)
    close(gram, h.T @ h, "float64")
    close(moment, h.T @ v.astype(np.float64), "float64")
    assert launches == ([] if device == "numpy" else [("gram", (4000, 8), ())])


def least_squares(X: gnp.Array, y: gnp.Array) -> gnp.Array:
    return gnp.linalg.solve(X.T @ X, X.T @ y)


@pytest.mark.parametrize("call", ["plain", "accelerated"])
def test_least_squares(device: str, launches: list, call: str) -> None:
    """``solve(X.T @ X, X.T @ y)`` as users write it (the suite's least-squares benchmark, smaller), plain and
    under ``gnp.accelerate``: NumPy's solution; on CuPy blocks one gram launch and one small solve."""
    h, v = data((8192, 64), "float32", 9), data((8192,), "float32", 10)
    X, y = on(device, h, v)
    got = gnp.fetch((gnp.accelerate(least_squares) if call == "accelerated" else least_squares)(X, y))
    wide = h.astype(np.float64)
    want = np.linalg.solve(wide.T @ wide, wide.T @ v)
    assert np.abs(to_host(got) - want).max() <= 1e-4 * np.abs(want).max()
    assert [c[0] for c in launches] == ([] if device == "numpy" else ["gram", "solve"])


@pytest.mark.parametrize("ours", ["slower", "measured"])
def test_kernels_only_where_faster(device: str, launches: list, monkeypatch: pytest.MonkeyPatch, ours: str) -> None:
    """The plan takes the gram kernel and the small solve only for the kinds of call where they were measured
    faster than cuBLAS and cuSOLVER (once, on the first call: on the GPU, or said slower): NumPy's solution
    either way, the same bits every time, and no launch of ours where they lose."""
    if device == "numpy" or (ours == "measured" and device != "gpu"):
        pytest.skip("measured on the GPU")
    monkeypatch.setattr(_faster, "_ours_won", {})
    if ours == "slower":
        monkeypatch.setattr(_faster, "ours_faster", lambda ours, library: False)
    h, v = data((8192, 64), "float32", 17), data((8192,), "float32", 18)
    X, y = on(device, h, v)
    got = [to_host(gnp.fetch(least_squares(X, y))) for _ in range(2)]
    wide = h.astype(np.float64)
    want = np.linalg.solve(wide.T @ wide, wide.T @ v)
    assert np.abs(got[0] - want).max() <= 1e-4 * np.abs(want).max()
    assert np.array_equal(got[0], got[1])
    if ours == "slower":
        assert launches == []


@pytest.mark.parametrize("config", GRAM_VARIANTS + SOLVE_VARIANTS, ids=str)
def test_probe_variants(device: str, launches: list, monkeypatch: pytest.MonkeyPatch, config: Any) -> None:
    """Least squares with each configuration of the gram kernel and of the small solve that
    ``benchmarks/gram_probe.py --variants`` compares (the one the plan takes set in ``kernels``): NumPy's
    solution, from one gram launch and one small solve on CuPy blocks."""
    if device == "numpy":
        pytest.skip("the kernels run on CuPy blocks")
    module, name = (_gram, "CONFIG") if isinstance(config, GramConfig) else (_lapack, "SOLVE")
    monkeypatch.setattr(module, name, config)
    h, v = data((700, 8), "float32", 15), data((700,), "float32", 16)
    X, y = on(device, h, v)
    wide = h.astype(np.float64)
    want = np.linalg.solve(wide.T @ wide, wide.T @ v)
    assert np.abs(to_host(gnp.fetch(least_squares(X, y))) - want).max() <= 1e-4 * np.abs(want).max()
    assert [c[0] for c in launches] == ["gram", "solve"]


@pytest.mark.parametrize("n", [1, 3, 64, 100, 128, 129])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rhs", [None, 3])
def test_small_solve(device: str, solve_config: SolveConfig, launches: list, n: int, dtype: str, rhs: int | None) -> None:
    """One system of ``n`` equations (a vector or 3 right-hand sides) equals NumPy's solution; on CuPy blocks in
    one launch up to 128 equations (cuSOLVER beyond)."""
    a = data((n, n), dtype, 11) + np.float32(n) * np.eye(n, dtype=dtype) * (n > 3)  # well conditioned
    b = data((n,) if rhs is None else (n, rhs), dtype, 12)
    A, B = on(device, a, b)
    got = gnp.fetch(gnp.linalg.solve(A, B))
    close(got, np.linalg.solve(a.astype(np.float64), b.astype(np.float64)), dtype)
    assert launches == ([("solve", (n, n), b.shape)] if device != "numpy" and n <= 128 else [])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_small_solve_pivots(device: str, solve_config: SolveConfig, dtype: str) -> None:
    """A system whose leading entries are zero needs row exchanges: a permutation's solution is exact."""
    a = np.eye(5, dtype=dtype)[[3, 0, 4, 1, 2]] * np.array([2, -4, 8, 0.5, 1], dtype=dtype)
    b = np.arange(1, 6, dtype=dtype)
    A, B = on(device, a, b)
    np.testing.assert_array_equal(to_host(gnp.fetch(gnp.linalg.solve(A, B))), np.linalg.solve(a, b))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_small_singular_system(device: str, solve_config: SolveConfig, dtype: str) -> None:
    """A singular matrix (a zero column: an exact zero pivot) raises NumPy's LinAlgError when the result is
    delivered."""
    a = data((6, 6), dtype, 13)
    a[:, 2] = 0
    A, B = on(device, a, data((6,), dtype, 14))
    with pytest.raises(LinAlgError, match="Singular matrix"):
        gnp.fetch(gnp.linalg.solve(A, B))
    with pytest.raises(LinAlgError, match="Singular matrix"):
        dask.compute(gnp.linalg.solve(A, B))
