"""Deep expressions as plain NumPy-style loops make them: thousands of operations deep, they compute (no
recursion through the nodes), give NumPy's values, and a second call of the same loop compiles no new kernel."""
from __future__ import annotations

import os
import pathlib
import pickle
import sys

import dask
import numpy as np
import pytest
from conftest import assert_eq

import dask_gpunumeric as gnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
from rk4 import rk4  # noqa: E402  (the user-code benchmark's RK4; benchmarks/ is not a package)


def affine_loop(xp, x, steps):
    for _ in range(steps):
        x = x * 1.0001 + 0.5
    return x


def where_reverse_loop(xp, x, y, steps):
    for _ in range(steps):
        x = xp.where(x > 2.0, x * 0.5, x + 0.001 * y)
        y = y * 0.999 + x[::-1] * 0.001
    return x, y


def test_loop_thousands_of_operations_deep_fetches():
    x = affine_loop(gnp, gnp.ones(1000), 3000)  # 6,000 nodes: far past Python's recursion limit
    assert_eq(x, affine_loop(np, np.ones(1000), 3000))


def test_deep_expression_pickles_as_a_cluster_ships_it():
    x = affine_loop(gnp, gnp.ones(1000), 3000)
    back = pickle.loads(pickle.dumps(x))
    assert back.expr._name == x.expr._name
    assert_eq(back, affine_loop(np, np.ones(1000), 3000))


@pytest.mark.slow
def test_deep_loop_of_selections_over_several_blocks():
    a, b = np.linspace(0.0, 1.0, 1000), np.ones(1000)
    expected = where_reverse_loop(np, a, b, 400)
    x, y = where_reverse_loop(gnp, gnp.asarray(a, chunks=250), gnp.asarray(b, chunks=250), 400)
    for got, want in zip(dask.compute(x, y), expected):
        assert_eq(got, want)
    assert_eq(y, expected[1])  # and through every other entry point


def test_second_call_of_a_deep_loop_compiles_no_new_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("GNP_KERNEL_DUMP_DIR", str(tmp_path))  # every generated kernel source lands there
    rng = np.random.default_rng(0)

    def call(steps):
        u0, v0 = (rng.uniform(0.5, 1.5, 4096).astype(np.float32) for _ in range(2))
        u, v = gnp.fetch(rk4(gnp, gnp.asarray(u0), gnp.asarray(v0), steps))  # fresh inputs: a new graph
        want = rk4(np, u0, v0, steps)
        assert_eq(u, want[0], rtol=1e-4)
        assert_eq(v, want[1], rtol=1e-4)
        return len(os.listdir(tmp_path))

    first = call(20)
    assert first > 0
    assert call(20) == first
    # twice the steps repeat the same loop body: its kernels are those compiled already (a remainder aside)
    assert call(40) - first < first


def test_fused_interpreter_leaves_inputs_untouched():
    a = np.arange(4096, dtype=np.float64)
    keep = a.copy()
    x = gnp.asarray(a)
    y = affine_loop(gnp, x, 50) * x - x
    assert_eq(gnp.fetch(y), affine_loop(np, keep, 50) * keep - keep)
    assert_eq(a, keep)
