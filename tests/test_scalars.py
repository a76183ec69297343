"""Scalar arguments of accelerated functions: Python and NumPy numbers select the plan by type, not value,
so a call with a new value traces, optimizes and compiles nothing, and gives NumPy's values and dtypes
(Python scalars weak, NumPy scalars strong); a function that needs a scalar's value while traced (a shape, a
shift, a Python branch) is traced by value instead, with NumPy's results too."""
from __future__ import annotations

import os
import pathlib
import sys
import warnings
from concurrent.futures import Future

import dask
import numpy as np
import pytest
import _cuda_emulator
from conftest import BACKEND, assert_eq, to_host

import dask_gpunumeric as gnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))
from rk4 import rates  # noqa: E402  (the user-code benchmark's right-hand side; benchmarks/ is not a package)


def rk4_step(xp, u, v, dt):
    """One classical RK4 step of size ``dt`` (a Python or NumPy number)."""
    k1u, k1v = rates(u, v)
    k2u, k2v = rates(u + 0.5 * dt * k1u, v + 0.5 * dt * k1v)
    k3u, k3v = rates(u + 0.5 * dt * k2u, v + 0.5 * dt * k2v)
    k4u, k4v = rates(u + dt * k3u, v + dt * k3v)
    return u + dt / 6.0 * (k1u + 2.0 * k2u + 2.0 * k3u + k4u), v + dt / 6.0 * (k1v + 2.0 * k2v + 2.0 * k3v + k4v)


def _fields(dtype=np.float32, n=1000):
    rng = np.random.default_rng(7)
    return [rng.uniform(0.5, 1.5, n).astype(dtype) for _ in range(2)]


def test_new_python_scalars_trace_and_compile_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("GNP_KERNEL_DUMP_DIR", str(tmp_path))  # every generated kernel source lands there
    traced = []

    @gnp.accelerate
    def step(u, v, dt):
        traced.append(dt)
        return rk4_step(gnp, u, v, dt)

    un, vn = _fields()
    u, v = gnp.asarray(un, chunks=250), gnp.asarray(vn, chunks=250)
    sources = None
    # powers of two, zeros of both signs, a value NumPy rounds to float32: each NumPy's bits, in float32
    for dt in (0.05, 0.01, 2.0, 1.0, 0.0, -0.0, -0.125, 1e-30, 0.1 + 1e-12):
        got = step(u, v, dt)
        for g, want in zip(got, rk4_step(np, un, vn, dt)):
            assert want.dtype == np.float32
            assert_eq(g, want)
        count = len(os.listdir(tmp_path))
        assert sources is None or count == sources, dt  # no new kernel source
        sources = count
    assert len(traced) == 1 and len(step.plans) == 1


@pytest.mark.parametrize("dtype, scalars", [
    (np.float64, (0.3, -2.5, 1e300)),
    (np.int32, (3, -7, 0, 2**31 - 1)),
    (np.uint8, (1, 200, 0)),
    (np.bool_, (True, False)),
    (np.float32, (1, -3, 2**24)),  # Python ints with a float array
    (np.complex128, (0.5 + 1j, -2j)),
])
def test_scalar_kinds_keep_numpy_dtypes(dtype, scalars):
    traced = []

    def f(xp, x, s):
        return x * s + s, xp.where(x > s, x, s), (x + s) * 2

    g = gnp.accelerate(lambda x, s: traced.append(1) or f(gnp, x, s))
    xn = (np.arange(24) % 7).astype(dtype)
    x = gnp.asarray(xn, chunks=8)
    for s in scalars:
        with np.errstate(all="ignore"):
            expected = f(np, xn, s)
        for got, want in zip(g(x, s), expected):
            assert_eq(got, want)  # (NumPy's dtype too)
    assert len(traced) == 1


def test_numpy_scalars_are_strong_and_their_own_plan():
    traced = []

    @gnp.accelerate
    def f(x, a):
        traced.append(1)
        return x * a + 1.0

    xn = np.linspace(0, 1, 50, dtype=np.float32)
    x = gnp.asarray(xn, chunks=10)
    with gnp.allowpromotion():
        for a in (np.float64(0.1), np.float64(3.0), np.float32(0.1), 0.1, np.float32(7.0), np.float64(2.0)):
            out = f(x, a)
            want = xn * a + 1.0
            assert out.dtype == want.dtype
            assert_eq(out, want)
    assert len(traced) == 3 and len(f.plans) == 3  # float64, float32, Python float


def test_arithmetic_of_scalars_replayed_per_call():
    traced = []

    @gnp.accelerate
    def f(x, t, n):
        traced.append(1)
        omega = 2.0 * np.pi / (n + 0.5)
        return gnp.sin(x * omega + t) * np.exp(-t) + (t ** 2) * n - abs(-t) // 0.3

    xn = np.linspace(-1, 1, 40)
    x = gnp.asarray(xn, chunks=10)
    for t, n in ((0.5, 3), (1.25, 10), (-2.0, 0)):
        omega = 2.0 * np.pi / (n + 0.5)
        assert_eq(f(x, t, n), np.sin(xn * omega + t) * np.exp(-t) + (t ** 2) * n - abs(-t) // 0.3)
    assert len(traced) == 1


def test_scalars_whose_value_shapes_the_trace_are_traced_by_value():
    traced = []

    @gnp.accelerate
    def f(x, n, dt):
        traced.append(1)
        y = gnp.roll(x, n)[: x.shape[0] - n] * dt
        if dt > 0:
            y = y + 1
        return y + gnp.zeros(x.shape[0] - n)

    xn = np.arange(30.0)
    x = gnp.asarray(xn, chunks=10)

    def want(n, dt):
        y = np.roll(xn, n)[: xn.shape[0] - n] * dt
        return (y + 1 if dt > 0 else y) + np.zeros(xn.shape[0] - n)

    for n, dt in ((1, 0.5), (3, -0.5), (1, 0.5)):
        assert_eq(f(x, n, dt), want(n, dt))
    assert len(f.plans) == 2  # by value: (1, 0.5) and (3, -0.5)


@pytest.mark.parametrize("value", [lambda a: int(a), gnp.fetch, np.asarray, lambda a: dask.compute(a)[0],
                                   lambda a: a.compute()], ids=["int", "fetch", "asarray", "dask.compute", "compute"])
def test_a_function_that_needs_an_arrays_value_while_traced_runs_as_plain_code(value):
    calls = []

    @gnp.accelerate
    def f(x, c):
        calls.append(1)
        with gnp.allowfetch():
            n = int(to_host(value(gnp.sum(x > c))))  # the argument's value decides a Python number
        return x[:n] * 2.0

    xn = np.arange(10.0)
    x = gnp.asarray(xn, chunks=4)
    with pytest.warns(gnp.AccelerateWarning, match="runs as plain code .* pass it in as a Python number"):
        first = f(x, 4)
    assert_eq(first, xn[:5] * 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", gnp.AccelerateWarning)  # warned once, for the first call
        assert_eq(f(x, 6.5), xn[:3] * 2.0)  # arrays alike: plain code again, whatever the scalars
        assert_eq(f(gnp.asarray(xn + 1, chunks=4), 4), xn[:6] * 2.0 + 2.0)
    assert not f.plans and len(calls) == 5  # traced (by type, then by value) and run, then run twice


def test_values_a_plan_cannot_take_get_numpys_answer():
    """An int out of the range of the integer array it meets (NumPy's OverflowError), a computed value whose
    type changes with the values (``2 ** n``: an int, or a float for n < 0), a division by zero (Python's)."""
    @gnp.accelerate
    def f(x, n):
        return x + n, x * (2 ** n)

    xn = np.arange(10, dtype=np.int8)
    x = gnp.asarray(xn, chunks=5)
    assert_eq(f(x, 3)[0], xn + 3)
    assert_eq(f(x, 3)[1], xn * 8)
    with pytest.raises(OverflowError):
        f(x, 300)
    with gnp.allowpromotion():  # (int8 times a Python float: float64)
        assert_eq(f(x, -1)[1], xn * 0.5)

    @gnp.accelerate
    def g(x, t):
        return x / t + 1 / t

    xf = np.linspace(1, 2, 8)
    assert_eq(g(gnp.asarray(xf, chunks=4), 0.5), xf / 0.5 + 1 / 0.5)
    with pytest.raises(ZeroDivisionError):
        g(gnp.asarray(xf, chunks=4), 0.0)


def test_lazy_calls_with_other_values_keep_apart():
    @gnp.accelerate
    def f(x, dt):
        return (x * dt).sum(), x + dt

    xn = np.linspace(0, 1, 20, dtype=np.float32)
    x = gnp.asarray(xn, chunks=5)
    with gnp.config.set(dispatch="lazy"):
        a, b = f(x, 0.5), f(x, 0.25)
    (sa, ea), (sb, eb) = dask.compute(a, b)
    np.testing.assert_array_equal(to_host(ea), xn + np.float32(0.5))
    np.testing.assert_array_equal(to_host(eb), xn + np.float32(0.25))
    assert_eq(a[0], (xn * 0.5).sum(), rtol=1e-6)
    assert_eq(b[0], (xn * 0.25).sum(), rtol=1e-6)
    assert a[1].name != b[1].name and len(f.plans) == 1


def test_scalars_inside_a_fori_loop():
    @gnp.accelerate
    def f(x, dt):
        return gnp.fori_loop(5, lambda i, y: y + dt * gnp.sin(y), x)

    xn = np.linspace(0, 1, 16)
    x = gnp.asarray(xn, chunks=8)

    def want(dt):
        y = xn
        for _ in range(5):
            y = y + dt * np.sin(y)
        return y

    for dt in (0.1, 0.3):
        assert_eq(f(x, dt), want(dt))
    assert len(f.plans) == 1


def test_cluster_call_with_new_scalars():
    distributed = pytest.importorskip("distributed")
    traced = []

    @gnp.accelerate
    def step(u, v, dt):
        traced.append(1)
        return rk4_step(gnp, u, v, dt)

    un, vn = _fields(n=400)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        client.wait_for_workers(1)
        u, v = dask.persist(gnp.asarray(un, chunks=100), gnp.asarray(vn, chunks=100))
        for dt in (0.05, 0.02, 0.05):
            got = dask.compute(*step(u, v, dt))
            for g, want in zip(got, rk4_step(np, un, vn, dt)):
                np.testing.assert_allclose(to_host(g), want, rtol=1e-6)
    assert len(traced) == 1


@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy",
                    reason="the kernel emulator needs a host C++ compiler and NumPy blocks")
def test_scalar_arguments_reach_kernels_as_arguments(monkeypatch):
    """On CuPy blocks (emulated) a scalar argument, a NumPy scalar on the host, is a kernel argument of the
    fused kernels (no copy to the device): a new value compiles no kernel."""
    from dask_gpunumeric.kernels import cuda as _cuda
    from dask_gpunumeric.kernels import fused as _fused

    run, kernel, launch_plan = _fused.run, _fused._kernel, _fused._launch_plan
    _cuda_emulator.emulated_fused(monkeypatch)
    monkeypatch.setattr(_fused, "run", lambda program, scalars, offset, shape, global_shape, backend, *inputs:
                        run(program, scalars, offset, shape, global_shape, "cupy", *inputs))  # host scalars kept
    # kernels kept from launch to launch, as on a GPU: one call's blocks launch with one set of values
    monkeypatch.setattr(_fused, "_kernel", kernel)
    monkeypatch.setattr(_fused, "_launch_plan", launch_plan)
    compile_module, sources, hosted = _cuda.compile_module, set(), []
    monkeypatch.setattr(_cuda, "compile_module", lambda source: sources.add(source) or compile_module(source))
    monkeypatch.setattr(_fused, "_hosted", lambda *args, _f=_fused._hosted: hosted.append(1) or _f(*args))
    specialized = []  # (kernels specialized to scalar values: compiled in the background, here never done)
    monkeypatch.setattr(_cuda, "compile_in_background", lambda *args: specialized.append(args) or Future())
    step = gnp.accelerate(lambda u, v, dt: rk4_step(gnp, u, v, dt))
    un, vn = _fields(n=333)  # (a shape of its own: no graph cached by another test)
    u, v = gnp.asarray(un, chunks=111), gnp.asarray(vn, chunks=111)
    for k, dt in enumerate((0.05, 0.02, -0.5)):
        for got, want in zip(gnp.fetch(step(u, v, dt)), rk4_step(np, un, vn, dt)):
            np.testing.assert_allclose(got, want, rtol=2e-6)
            assert got.dtype == want.dtype
        if k == 0:
            first = set(sources)
    # no kernel specialized to a call's values either (each value is used by the call's three blocks)
    assert hosted and sources == first and not specialized and len(step.plans) == 1


def test_only_the_scalars_whose_values_are_needed_select_the_plan_by_value():
    traced = []

    @gnp.accelerate
    def relax(u, w, sweeps):
        traced.append(1)
        for _ in range(sweeps):
            u = u + w * (gnp.roll(u, 1) - u)
        return u

    un = np.linspace(0, 1, 12)
    u = gnp.asarray(un, chunks=6)

    def want(w, sweeps):
        x = un
        for _ in range(sweeps):
            x = x + w * (np.roll(x, 1) - x)
        return x

    for w, sweeps in ((0.25, 2), (0.5, 2), (0.125, 3), (0.75, 3)):
        assert_eq(relax(u, w, sweeps), want(w, sweeps))
    assert len(relax.plans) == 2  # one per number of sweeps, whatever the weight


@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy",
                    reason="the kernel emulator needs a host C++ compiler and NumPy blocks")
def test_scalar_arguments_of_stencil_kernels(monkeypatch):
    """A scalar argument read by stencil sweeps (a relaxation weight) on CuPy blocks (emulated kernels)."""
    _cuda_emulator.emulated_cupy(monkeypatch)

    @gnp.accelerate
    def relax(u, w):
        for _ in range(3):
            u = u + w * (gnp.roll(u, 1, axis=0) + gnp.roll(u, -1, axis=1) - 2 * u)
        return u

    un = np.random.default_rng(3).random((37, 29)).astype(np.float32)  # (a shape of its own)
    u = gnp.asarray(un, chunks=(19, 29))
    for w in (0.25, 0.1, 0.25):
        x = un
        for _ in range(3):
            x = x + w * (np.roll(x, 1, axis=0) + np.roll(x, -1, axis=1) - 2 * x)
        np.testing.assert_allclose(gnp.fetch(relax(u, w)), x, rtol=1e-6)
    assert len(relax.plans) == 1


def test_promotion_guard_names_a_numpy_scalar_argument():
    f = gnp.accelerate(lambda x, a: x * a)
    x = gnp.asarray(np.ones(4, np.float32))
    with gnp.config.set(guards="error"), pytest.raises(TypeError, match="numpy.float64 scalar"):
        f(x, np.float64(0.5))
    with gnp.config.set(guards="error"):
        assert_eq(f(x, 0.5), np.ones(4, np.float32) * 0.5)  # a Python float is weak: no promotion
    with gnp.allowpromotion():  # the guard's error left the argument traced by type
        for a in (np.float64(0.5), np.float64(0.25)):
            assert_eq(f(x, a), np.ones(4, np.float32) * a)
    assert len(f.plans) == 2


def test_scalars_in_a_while_loop_condition():
    traced = []

    @gnp.accelerate
    def shrink(x, tol, rate):
        traced.append(1)
        return gnp.while_loop(lambda s: gnp.sum(s * s) > tol ** 2, lambda s: s * rate, x, max_iter=1000)

    xn = np.linspace(1, 2, 16)
    x = gnp.asarray(xn, chunks=8)
    for tol, rate in ((0.5, 0.9), (0.1, 0.5), (1e-3, 0.7)):
        s = xn
        while np.sum(s * s) > tol ** 2:
            s = s * rate
        assert_eq(shrink(x, tol, rate), s)
    assert len(traced) == 1
