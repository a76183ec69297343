"""Generic array code written elsewhere runs unchanged on gnp Arrays: a conjugate-gradient solver written
against the array API (lazy scalars throughout), and an explicit Runge-Kutta integrator written for NumPy."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import assert_eq, to_host


def laplacian(u: Any) -> Any:
    """Matrix-free 5-point Laplacian with zero Dirichlet boundaries, written for any array API namespace."""
    xp = u.__array_namespace__() if hasattr(u, "__array_namespace__") else np
    padded = xp.concat([xp.zeros_like(u[:1]), u, xp.zeros_like(u[:1])], axis=0)
    padded = xp.concat([xp.zeros_like(padded[:, :1]), padded, xp.zeros_like(padded[:, :1])], axis=1)
    return 4 * u - padded[:-2, 1:-1] - padded[2:, 1:-1] - padded[1:-1, :-2] - padded[1:-1, 2:]


def conjugate_gradient(apply: Any, b: Any, iterations: int) -> Any:
    """Plain CG on a matrix-free operator: every scalar stays a lazy 0-d array of the namespace."""
    xp = b.__array_namespace__() if hasattr(b, "__array_namespace__") else np
    x = xp.zeros_like(b)
    r = b - apply(x)
    p = r
    rr = xp.sum(r * r)
    for step in range(iterations):
        ap = apply(p)
        alpha = rr / xp.sum(p * ap)
        x = x + alpha * p
        r = r - alpha * ap
        rr_new = xp.sum(r * r)
        p = r + (rr_new / rr) * p
        rr = rr_new
        if hasattr(x, "persist") and step % 5 == 4:  # keep the expression small on lazy namespaces
            x, r, p, rr = x.persist(), r.persist(), p.persist(), rr.persist()
    return x


@pytest.mark.slow
def test_conjugate_gradient_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    b = rng.standard_normal((24, 20))
    expected = conjugate_gradient(laplacian, b, 15)
    got = conjugate_gradient(laplacian, gnp.from_array(b, chunks=(8, 7)), 15)
    assert isinstance(got, gnp.Array)
    assert_eq(got, expected, rtol=1e-8, atol=1e-10)
    residual = np.linalg.norm(to_host(laplacian(got).compute()) - b) / np.linalg.norm(b)
    assert residual < 0.1  # converging: 15 CG steps on 480 unknowns


def test_lazy_scalars_need_no_fetch() -> None:
    """The CG above never fetches: a fetch would warn (FetchWarning) outside allowfetch."""
    b = gnp.from_array(np.ones((6, 6)), chunks=3)
    rr = gnp.sum(b * b)
    scaled = (1.0 / rr) * b  # a lazy 0-d array feeding an array operation
    with pytest.warns(gnp.FetchWarning):
        float(rr)
    assert_eq(scaled, np.ones((6, 6)) / 36)


def heat_rk4(u: Any, dt: float, steps: int) -> Any:
    """Explicit RK4 for u' = laplacian_periodic(u), written for NumPy (np.roll on the arrays given)."""
    def rhs(v: Any) -> Any:
        return (np.roll(v, 1, axis=0) + np.roll(v, -1, axis=0) + np.roll(v, 1, axis=1) + np.roll(v, -1, axis=1)
                - 4 * v)

    for _ in range(steps):
        k1 = rhs(u)
        k2 = rhs(u + 0.5 * dt * k1)
        k3 = rhs(u + 0.5 * dt * k2)
        k4 = rhs(u + dt * k3)
        u = u + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return u


def test_numpy_written_rk4_runs_on_gnp() -> None:
    rng = np.random.default_rng(1)
    u0 = rng.random((16, 18))
    expected = heat_rk4(u0, 0.05, 6)
    got = heat_rk4(gnp.from_array(u0, chunks=(5, 6)), 0.05, 6)
    assert isinstance(got, gnp.Array)
    assert_eq(got, expected, rtol=1e-10)
    assert got.chunks == ((5, 5, 5, 1), (6, 6, 6))


def test_opt_einsum_contract_on_gnp_arrays() -> None:
    opt_einsum = pytest.importorskip("opt_einsum")
    rng = np.random.default_rng(2)
    a, b, c = rng.random((6, 5)), rng.random((5, 7)), rng.random((7, 4))
    ga, gb, gc = (gnp.from_array(m, chunks=3) for m in (a, b, c))
    got = opt_einsum.contract("ij,jk,kl->il", ga, gb, gc)
    assert isinstance(got, gnp.Array)
    assert_eq(got, np.einsum("ij,jk,kl->il", a, b, c), rtol=1e-10)
    assert_eq(opt_einsum.contract("ij,ij->", ga, ga), np.einsum("ij,ij->", a, a), rtol=1e-10)
