"""Checks left on the device (``kernels/checks.py``): ``gnp.linalg.solve`` of one system and ``gnp.linalg.inv``
of one matrix on CuPy blocks keep cuSOLVER's status on the device; a singular matrix raises NumPy's LinAlgError
when the result, or anything computed from it, is delivered, through every entry point, and a regular one is
read back (waited for) only there, in one small copy. Run on the emulated device of ``_fake_device`` (every
copy to the host recorded), and on the GPU where the suite runs on CuPy blocks."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import _fake_device
import dask
import numpy as np
import pytest
from conftest import BACKEND

import dask_gpunumeric as gnp
from dask_gpunumeric.backend import namespace

LinAlgError = np.linalg.LinAlgError
DEVICES = ["emulated"] + (["gpu"] if BACKEND == "cupy" else [])
N, K = 64, 4  # rows and columns of X


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list | None:
    """The device the CuPy blocks live on: the emulated one (its copies to the host, returned) or the GPU."""
    if request.param == "emulated":
        return _fake_device.fake_device(monkeypatch)
    return None


FORMS: dict[str, Callable[[Any, Any], Any]] = {  # least squares as users write it
    "solve": lambda X, y: gnp.linalg.solve(X.T @ X, X.T @ y),
    "inv": lambda X, y: gnp.linalg.inv(X.T @ X) @ (X.T @ y),
}


def least_squares(X: Any, y: Any) -> Any:
    return FORMS["solve"](X, y)


def data(singular: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    X = rng.standard_normal((N, K)).astype(np.float32)
    if singular:
        X[:, 2] = 0  # X.T @ X has a zero row and column: an exact zero pivot
    return X, rng.standard_normal(N).astype(np.float32)


def on_device(X: np.ndarray, y: np.ndarray) -> tuple[gnp.Array, gnp.Array]:
    return gnp.from_array(X, backend="cupy"), gnp.from_array(y, backend="cupy")


def _fetch_tuple(a: gnp.Array) -> Any:
    return gnp.fetch((a, a + 1))[0]


def _as_numpy(a: gnp.Array) -> Any:
    with gnp.allowfetch():
        return np.asarray(a)


def _accelerated(a: gnp.Array) -> Any:
    return gnp.fetch(gnp.accelerate(lambda v: v * 2)(a.persist()))


DELIVERIES: dict[str, Callable[[gnp.Array], Any]] = {
    "gnp.fetch": gnp.fetch,
    "gnp.fetch of a tuple": _fetch_tuple,
    "np.asarray": _as_numpy,
    ".compute()": lambda a: a.compute(),
    "dask.compute": lambda a: dask.compute(a)[0],
    "dask.compute of two": lambda a: dask.compute(a, a * 2)[0],
    "gnp.compute of two": lambda a: gnp.compute(a, a * 2)[0],
    "gnp.persist, then gnp.fetch": lambda a: gnp.fetch(gnp.persist(a, a + 1)[0]),
    "persist, then gnp.fetch": lambda a: gnp.fetch(a.persist()),
    "persist, then compute() of X @ beta": lambda a: a.persist().compute(),
    "dask.persist, then gnp.fetch": lambda a: gnp.fetch(dask.persist(a)[0]),
    "persist, then an accelerated function": _accelerated,
}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("how", DELIVERIES)
def test_singular_matrix_raises_when_delivered(device: list | None, how: str, form: str) -> None:
    X, y = on_device(*data(singular=True))
    beta = FORMS[form](X, y)
    result = X @ beta if "X @ beta" in how else beta
    with pytest.raises(LinAlgError, match="^Singular matrix\n") as raised:
        DELIVERIES[how](result)
    assert any(f"status of gnp.linalg.{form}" in note for note in raised.value.__notes__)


def test_singular_solve_raises_on_every_delivery_of_persisted_blocks(device: list | None) -> None:
    """A persisted singular solve keeps raising (its status is never taken as read), also for arrays computed
    from it and for arrays persisted from those."""
    X, y = on_device(*data(singular=True))
    beta = least_squares(X, y).persist()
    again = (beta * 2).persist()
    for delivery in (gnp.fetch, gnp.fetch, lambda a: (a + 1).compute()):
        for a in (beta, again):
            with pytest.raises(LinAlgError, match="Singular matrix"):
                delivery(a)


def finite_only(block: Any) -> Any:
    """A user's block function that refuses what a singular solve gives."""
    if not bool(namespace(block).isfinite(block).all()):
        raise ValueError("not finite")
    return block


@pytest.mark.parametrize("how", ["gnp.fetch", "dask.compute", "persist, then gnp.fetch"])
def test_singular_matrix_raises_before_what_failed_on_its_values(device: list | None, how: str) -> None:
    """A task failing on the values of a singular solve (inf/nan, in the same run) gives NumPy's LinAlgError,
    which NumPy would have raised first, with the task's error as its context."""
    X, y = on_device(*data(singular=True))
    with pytest.raises(LinAlgError, match="Singular matrix") as raised:
        DELIVERIES[how](gnp.map_blocks(finite_only, least_squares(X, y)))
    assert isinstance(raised.value.__context__, ValueError)


def test_several_arrays_persisted_together_are_checked_at_once(device: list | None) -> None:
    """Which of several persisted arrays a status belongs to is not known: they are checked when persisted."""
    X, y = on_device(*data(singular=True))
    with pytest.raises(LinAlgError, match="Singular matrix"):
        dask.persist(least_squares(X, y), X.sum(axis=0))
    host = data(singular=False)
    X, y = on_device(*host)
    beta, total = dask.persist(least_squares(X, y), X.sum(axis=0))
    np.testing.assert_allclose(gnp.fetch(beta), np.linalg.solve(*normal_equations(*host)), rtol=1e-4)
    np.testing.assert_allclose(gnp.fetch(total), host[0].sum(axis=0), rtol=1e-5)


def normal_equations(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return X.T @ X, X.T @ y


@pytest.mark.parametrize("form", FORMS)
def test_regular_matrix_reads_its_status_only_when_delivered(form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the emulated device: the call itself reads nothing back; a delivery reads the status once, after
    the result's copy to the host (``gnp.fetch``) or as its only copy (``compute()``, ``dask.compute``); a
    persist reads nothing, and the first delivery of the persisted blocks reads their status, later ones not."""
    reads = _fake_device.fake_device(monkeypatch)
    host = data(singular=False)
    expected = np.linalg.solve(*normal_equations(*host))
    X, y = on_device(*host)
    beta = FORMS[form](X, y)
    result, status = ("get", (K,)), ("get", (2,))

    def delivered(run: Callable[[], Any], expected_reads: list) -> Any:
        reads.clear()
        value = run()
        assert reads == expected_reads
        return value

    np.testing.assert_allclose(delivered(lambda: gnp.fetch(beta), [result, status]), expected, rtol=1e-4)
    computed = delivered(beta.compute, [status])
    assert type(computed) is _fake_device.DeviceArray
    np.testing.assert_allclose(computed.get(), expected, rtol=1e-4)
    (dasked,) = delivered(lambda: dask.compute(beta), [status])
    np.testing.assert_allclose(dasked.get(), expected, rtol=1e-4)
    persisted = delivered(beta.persist, [])
    delivered(lambda: (persisted * 2).persist(), [])
    np.testing.assert_allclose(delivered(lambda: gnp.fetch(persisted), [result, status]), expected, rtol=1e-4)
    delivered(lambda: gnp.fetch(persisted), [result])
    accelerated = delivered(lambda: gnp.accelerate(FORMS[form])(X.persist(), y.persist()), [])
    np.testing.assert_allclose(delivered(lambda: gnp.fetch(accelerated), [result, status]), expected, rtol=1e-4)


def test_numpy_blocks_raise_at_once() -> None:
    """On NumPy blocks NumPy raises in the task: a persist of a singular solve raises."""
    X, y = (gnp.from_array(a, backend="numpy") for a in data(singular=True))
    with pytest.raises(LinAlgError, match="Singular matrix"):
        least_squares(X, y).persist()
