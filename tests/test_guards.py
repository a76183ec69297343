"""The three switches (DESIGN.md, "Semantics of the guards"): gnp.allowscalar, gnp.allowpromotion and
gnp.allowfetch. Off by default; on inside ``with gnp.X():``, ``@gnp.X`` and ``@gnp.X()``; nested and restored
after exceptions; reaching into other modules and into threads run in a copied context; settable globally
through Dask config. Their errors subclass what a NumPy user catches and say what to do."""
from __future__ import annotations

import contextvars
import operator
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import _other_library
import dask
import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import assert_eq

A = np.arange(10.0, dtype=np.float32) / 4
A64 = np.linspace(0.0, 1.0, 10)
X = gnp.asarray(A, chunks=3)
X64 = gnp.asarray(A64, chunks=4)


def _scalar() -> None:
    assert gnp.fetch(X[3]) == A[3]


def _promotion() -> None:
    assert_eq(X + X64, A + A64)


def _fetch() -> None:
    assert float(gnp.sum(X)) == float(A.sum())


# name -> (switch, error, standard base class, config key, guarded action that checks its result)
SWITCHES: dict[str, tuple[Any, type[Exception], type[Exception], str, Callable[[], None]]] = {
    "allowscalar": (gnp.allowscalar, gnp.ScalarIndexingError, IndexError, "allow-scalar", _scalar),
    "allowpromotion": (gnp.allowpromotion, gnp.PromotionError, TypeError, "allow-promotion", _promotion),
    "allowfetch": (gnp.allowfetch, gnp.FetchError, TypeError, "allow-fetch", _fetch),
}
NAMES = list(SWITCHES)


def blocked(name: str) -> None:
    """The guarded action raises the switch's error, which names the switch."""
    _, error, _, _, action = SWITCHES[name]
    with pytest.raises(error, match=f"gnp.{name}"):
        action()


def allowed(name: str) -> None:
    """The guarded action runs and gives NumPy's result."""
    SWITCHES[name][4]()


@pytest.mark.parametrize("name", NAMES)
def test_error_classes(name):
    _, error, base, _, _ = SWITCHES[name]
    assert issubclass(error, base)
    assert getattr(gnp, error.__name__) is error


@pytest.mark.parametrize("name", NAMES)
def test_off_by_default(name):
    switch, _, _, key, _ = SWITCHES[name]
    assert gnp.config.get(key) is False
    assert not switch.enabled()
    assert "off" in repr(switch)
    blocked(name)


@pytest.mark.parametrize("name", NAMES)
def test_context_manager(name):
    switch = SWITCHES[name][0]
    with switch():
        assert switch.enabled() and "on" in repr(switch)
        allowed(name)
    assert not switch.enabled()
    blocked(name)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("with_parens", [False, True])
def test_decorator(name, with_parens):
    switch = SWITCHES[name][0]

    def run(k: int) -> int:
        """Doc of run."""
        allowed(name)
        return k + 1

    wrapped = switch()(run) if with_parens else switch(run)
    assert wrapped.__name__ == "run" and wrapped.__doc__ == "Doc of run."
    assert wrapped(1) == 2
    assert wrapped(2) == 3  # reusable
    assert not switch.enabled()
    blocked(name)


@pytest.mark.parametrize("name", NAMES)
def test_decorator_syntax(name):
    switch = SWITCHES[name][0]

    @switch
    def bare() -> None:
        allowed(name)

    @switch()
    def called() -> None:
        allowed(name)

    bare()
    called()
    blocked(name)


@pytest.mark.parametrize("name", NAMES)
def test_nesting(name):
    switch = SWITCHES[name][0]
    ctx = switch()
    with ctx:
        with switch():
            allowed(name)
        allowed(name)  # still on after the inner block
        with ctx:  # the same context manager entered twice
            allowed(name)
        allowed(name)
        with switch(enabled=False):
            blocked(name)
        allowed(name)
    blocked(name)


@pytest.mark.parametrize("name", NAMES)
def test_restored_after_exception(name):
    switch = SWITCHES[name][0]
    with pytest.raises(RuntimeError, match="boom"):
        with switch():
            with switch():
                raise RuntimeError("boom")
    assert not switch.enabled()
    blocked(name)

    @switch
    def failing() -> None:
        allowed(name)
        raise KeyError("inside")

    with pytest.raises(KeyError):
        failing()
    assert not switch.enabled()
    blocked(name)


def test_reaches_into_other_module():
    x32 = gnp.asarray(np.ones(4, np.float32), chunks=2)
    y64 = gnp.asarray(np.arange(4.0), chunks=2)
    s = gnp.sum(X)
    with pytest.raises(gnp.ScalarIndexingError):
        _other_library.first_element(X)
    with pytest.raises(gnp.PromotionError):
        _other_library.add(x32, y64)
    with pytest.raises(gnp.FetchError):
        _other_library.as_float(s)
    with gnp.allowscalar():
        assert_eq(_other_library.first_element(X), A[0])
    with gnp.allowpromotion():
        assert_eq(_other_library.add(x32, y64), np.ones(4, np.float32) + np.arange(4.0))
    with gnp.allowfetch():
        assert _other_library.as_float(s) == float(A.sum())

    @gnp.allowfetch
    @gnp.allowscalar()
    def user_code() -> float:
        return _other_library.as_float(_other_library.first_element(X))

    assert user_code() == float(A[0])


@pytest.mark.parametrize("name", NAMES)
def test_propagates_into_threads_with_copied_context(name):
    switch = SWITCHES[name][0]
    errors: list[BaseException] = []

    def in_thread() -> None:
        try:
            allowed(name)
        except BaseException as e:  # noqa: BLE001 - reported to the main thread
            errors.append(e)

    with switch():
        ctx = contextvars.copy_context()
        pool_ctx = contextvars.copy_context()
    # run after the with block ended here: the copied contexts keep the switch on
    t = threading.Thread(target=ctx.run, args=(in_thread,))
    t.start()
    t.join()
    assert not errors, errors
    with ThreadPoolExecutor(1) as pool:
        pool.submit(pool_ctx.run, allowed, name).result()
    blocked(name)


@pytest.mark.parametrize("name", NAMES)
def test_global_via_dask_config(name):
    switch, _, _, key, _ = SWITCHES[name]
    with dask.config.set({f"gpunumeric.{key}": True}):
        assert switch.enabled()
        allowed(name)
        with switch(enabled=False):  # a local switch overrides the global default
            blocked(name)
    blocked(name)
    with gnp.config.set(**{key.replace("-", "_"): True}):
        assert gnp.config.get(key) is True
        allowed(name)
    assert gnp.config.get(key) is False
    blocked(name)


# --- allowscalar ---------------------------------------------------------------------------------------
def test_scalar_indexing_errors():
    y = gnp.asarray(np.arange(12).reshape(3, 4), chunks=2)
    with pytest.raises(gnp.ScalarIndexingError, match=r"\(3,\)") as info:
        X[3]
    assert isinstance(info.value, IndexError)
    with pytest.raises(IndexError, match=r"\(1, 2\).*gnp\.allowscalar"):
        y[1, 2]
    with pytest.raises(gnp.ScalarIndexingError, match=r"\(1, 2\)"):
        y[1, 2] = 0
    with pytest.raises(gnp.ScalarIndexingError, match="iterat.*gnp.allowscalar"):
        list(X)
    with pytest.raises(gnp.ScalarIndexingError):
        for _ in y:
            pass


def test_scalar_indexing_not_triggered_by_slices():
    y = gnp.asarray(np.arange(12).reshape(3, 4), chunks=2)
    ref = np.arange(12).reshape(3, 4)
    assert_eq(y[1], ref[1])
    assert_eq(y[1:2, 2], ref[1:2, 2])
    assert_eq(y[:, 3], ref[:, 3])


def test_scalar_indexing_allowed_matches_numpy():
    ref = np.arange(12).reshape(3, 4)
    y = gnp.asarray(ref, chunks=2)
    with gnp.allowscalar():
        assert_eq(y[1, 2], ref[1, 2])
        assert_eq(y[-1, -1], ref[-1, -1])
        y[1, 2] = -5
        rows = list(y)
        assert len(rows) == 3
        for row, ref_row in zip(rows, ref):
            assert_eq(row, np.where(ref_row == 6, -5, ref_row))
    expected = ref.copy()
    expected[1, 2] = -5
    assert_eq(y, expected)


# --- allowpromotion ------------------------------------------------------------------------------------
@pytest.mark.parametrize("a, b", [
    (np.float32, np.float64), (np.int32, np.float32), (np.int8, np.int16), (np.float32, np.complex128),
    (np.uint8, np.int8),
])
def test_promotion_errors_and_allowed(a, b):
    xa = gnp.asarray(np.arange(1, 7).astype(a), chunks=4)
    xb = gnp.asarray(np.arange(2, 8).astype(b), chunks=4)
    ref = np.arange(1, 7).astype(a) * np.arange(2, 8).astype(b)
    common = np.result_type(a, b)
    with pytest.raises(gnp.PromotionError) as info:
        xa * xb
    msg = str(info.value)
    assert "multiply" in msg and np.dtype(a).name in msg and np.dtype(b).name in msg and common.name in msg
    assert "gnp.allowpromotion" in msg
    assert isinstance(info.value, TypeError)
    with gnp.allowpromotion():
        assert_eq(xa * xb, ref)
        assert_eq(np.multiply(xa, xb), ref)


def test_no_promotion_error_when_nothing_widens():
    x32 = gnp.asarray(A, chunks=4)
    assert_eq(x32 * 2.0, A * 2.0)  # Python scalars are weak (NEP 50)
    assert_eq(x32 + 1, A + 1)
    assert_eq(x32 * x32, A * A)
    assert (x32 * 2.0).dtype == np.float32
    i = gnp.asarray(np.arange(6, dtype=np.int16), chunks=4)
    assert_eq(i + 3, np.arange(6, dtype=np.int16) + 3)
    mask = gnp.asarray(np.arange(10) % 2 == 0, chunks=3)
    assert_eq(mask * x32, (np.arange(10) % 2 == 0) * A)  # booleans are not widened


# --- allowfetch ----------------------------------------------------------------------------------------
CONVERSIONS = {
    "float": float, "int": int, "bool": bool, "complex": complex, "operator.index": operator.index,
    "if": lambda v: 1 if v else 0,
}


@pytest.mark.parametrize("conv", list(CONVERSIONS))
def test_fetch_errors(conv):
    s = gnp.sum(gnp.asarray(np.arange(1, 6, dtype=np.int32), chunks=2))
    with pytest.raises(gnp.FetchError) as info:
        CONVERSIONS[conv](s)
    msg = str(info.value)
    op = "bool" if conv == "if" else conv
    assert f"{op}(" in msg and "int" in msg and "gnp.allowfetch" in msg
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("conv", list(CONVERSIONS))
def test_fetch_allowed_matches_numpy(conv):
    ref = np.arange(1, 6, dtype=np.int32)
    s = gnp.sum(gnp.asarray(ref, chunks=2))
    with gnp.allowfetch():
        got = CONVERSIONS[conv](s)
    expected = CONVERSIONS[conv](ref.sum())
    assert got == expected and type(got) is type(expected)


def test_fetch_index_in_python_sequence():
    i = gnp.sum(gnp.asarray(np.array([1, 2]), chunks=1))
    items = list(range(10))
    with pytest.raises(gnp.FetchError):
        items[i]
    with gnp.allowfetch():
        assert items[i] == 3
        assert list(range(i)) == [0, 1, 2]


def test_explicit_fetch_always_allowed():
    ref = np.arange(12.0).reshape(3, 4)
    x = gnp.asarray(ref, chunks=2)
    s, m = gnp.sum(x), gnp.mean(x, axis=0)
    assert gnp.fetch(s) == ref.sum() and isinstance(gnp.fetch(s), float)
    np.testing.assert_array_equal(gnp.fetch(m), ref.mean(axis=0))
    assert isinstance(gnp.fetch(m), np.ndarray)
    assert s.item() == ref.sum().item() and isinstance(s.item(), float)
    assert x[1:2, 2:3].item() == ref[1, 2]
    np.testing.assert_array_equal(np.asarray(s.compute().tolist()), ref.sum())
    assert_eq(s, ref.sum())
    fs, fm, plain = gnp.fetch([s, m, 7])
    assert fs == ref.sum() and plain == 7
    np.testing.assert_array_equal(fm, ref.mean(axis=0))
    t = gnp.fetch((s, gnp.max(x)))
    assert isinstance(t, tuple) and t == (ref.sum(), ref.max())
    assert gnp.fetch(3.5) == 3.5


def test_fetch_item_requires_size_one():
    x = gnp.asarray(np.arange(4.0), chunks=2)
    with pytest.raises(ValueError, match="size 1"):
        x.item()
    with pytest.raises(ValueError):
        np.arange(4.0).item()


def test_bool_of_many_elements_inside_allowfetch():
    ref = np.arange(4.0)
    x = gnp.asarray(ref, chunks=2)
    with pytest.raises(ValueError, match="ambiguous") as ours:
        with gnp.allowfetch():
            bool(x)
    with pytest.raises(ValueError, match="ambiguous") as numpys:
        bool(ref)
    assert type(ours.value) is type(numpys.value)
    with gnp.allowfetch():
        with pytest.raises(TypeError):
            float(x)
        with pytest.raises(TypeError):
            float(ref)
    with pytest.raises(gnp.FetchError):
        bool(x)
