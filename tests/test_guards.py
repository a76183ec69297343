"""The three guards (DESIGN.md, "Semantics of the guards"): gnp.allowscalar, gnp.allowpromotion and
gnp.allowfetch. Mode "warn" by default (a GuardWarning subclass once per call site, naming the user's line
and the fix), "error" (strict) or "allow" (silent); set globally through gnp.config (for all guards or one)
or locally inside ``with gnp.X():``, ``@gnp.X`` and ``@gnp.X()``; nested and restored after exceptions;
reaching into other modules and into threads run in a copied context. Every implicit conversion goes
through the same check; messages are true for the backend and name what triggered them."""
from __future__ import annotations

import contextvars
import inspect
import operator
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import _other_library
import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import BACKEND, assert_eq, to_host

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


# name -> (switch, error, its standard base class, warning, guard's name in config, guarded action)
SWITCHES: dict[str, tuple[Any, type[Exception], type[Exception], type[Warning], str, Callable[[], None]]] = {
    "allowscalar": (gnp.allowscalar, gnp.ScalarIndexingError, IndexError, gnp.ScalarIndexingWarning, "scalar",
                    _scalar),
    "allowpromotion": (gnp.allowpromotion, gnp.PromotionError, TypeError, gnp.PromotionWarning, "promotion",
                       _promotion),
    "allowfetch": (gnp.allowfetch, gnp.FetchError, TypeError, gnp.FetchWarning, "fetch", _fetch),
}
NAMES = list(SWITCHES)


def blocked(name: str) -> None:
    """The guarded action raises the switch's error, which names the switch."""
    _, error, _, _, _, action = SWITCHES[name]
    with pytest.raises(error, match=f"gnp.{name}"):
        action()


def warned(name: str) -> None:
    """The guarded action warns (naming the switch) and gives NumPy's result."""
    _, _, _, warning, _, action = SWITCHES[name]
    with pytest.warns(warning, match=f"gnp.{name}"):
        action()


def allowed(name: str) -> None:
    """The guarded action runs silently and gives NumPy's result."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", gnp.GuardWarning)
        SWITCHES[name][5]()


@pytest.fixture
def strict():
    """Guards in mode "error" for the test (cuNumeric.jl's behaviour)."""
    with gnp.config.set(guards="error"):
        yield


@pytest.mark.parametrize("name", NAMES)
def test_classes(name):
    _, error, base, warning, _, _ = SWITCHES[name]
    assert issubclass(error, base)
    assert issubclass(warning, gnp.GuardWarning) and issubclass(gnp.GuardWarning, UserWarning)
    assert getattr(gnp, error.__name__) is error and getattr(gnp, warning.__name__) is warning


@pytest.mark.parametrize("name", NAMES)
def test_warn_by_default(name):
    switch = SWITCHES[name][0]
    assert gnp.config.get("guards") == "warn"
    assert switch.mode() == "warn" and not switch.enabled()
    assert "warn" in repr(switch)
    warned(name)


@pytest.mark.parametrize("name", NAMES)
def test_global_modes(name):
    switch, _, _, _, guard, _ = SWITCHES[name]
    with gnp.config.set(guards="error"):
        assert switch.mode() == "error"
        blocked(name)
    with gnp.config.set(guards="allow"):
        assert switch.enabled()
        allowed(name)
    with gnp.config.set(guards={guard: "error"}):  # one guard only
        blocked(name)
        others = [n for n in NAMES if n != name]
        for other in others:
            warned(other)
    for value, check in ((True, allowed), (False, blocked), ("allow", allowed), ("error", blocked), ("warn", warned)):
        with gnp.config.set(guards="error", **{f"allow_{guard}": value}):  # a guard's own setting wins
            check(name)
    warned(name)


def test_invalid_mode_is_refused():
    with gnp.config.set(guards="loud"):
        with pytest.raises(ValueError, match="warn.*error.*allow"):
            _fetch()


def test_warning_once_per_call_site_naming_the_line():
    s = gnp.sum(X)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's default: once per location
        for k in range(4):
            float(s * k)  # one call site, a new lazy value each time
        line = inspect.currentframe().f_lineno - 1
        float(s)  # another call site
    fetches = [w for w in caught if issubclass(w.category, gnp.FetchWarning)]
    assert [(w.filename, w.lineno) for w in fetches] == [(__file__, line), (__file__, line + 2)]
    message = str(fetches[0].message)
    assert "float()" in message and "gnp.fetch" in message and "gnp.allowfetch" in message


def test_warning_names_the_caller_inside_another_library():
    with pytest.warns(gnp.ScalarIndexingWarning) as record:
        _other_library.first_element(X)
    assert record[0].filename == _other_library.__file__


@pytest.mark.parametrize("name", NAMES)
def test_context_manager(name, strict):
    switch = SWITCHES[name][0]
    with switch():
        assert switch.enabled() and "allow" in repr(switch)
        allowed(name)
    assert not switch.enabled()
    blocked(name)


@pytest.mark.parametrize("name", NAMES)
def test_context_manager_silences_the_default(name):
    with SWITCHES[name][0]():
        allowed(name)
    warned(name)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("with_parens", [False, True])
def test_decorator(name, with_parens, strict):
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
def test_nesting(name, strict):
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
def test_local_strictness_overrides_the_default(name):
    with SWITCHES[name][0](enabled=False):
        blocked(name)
    warned(name)


@pytest.mark.parametrize("name", NAMES)
def test_restored_after_exception(name, strict):
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
    blocked(name)


def test_reaches_into_other_module(strict):
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
def test_propagates_into_threads_with_copied_context(name, strict):
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


# --- allowscalar ---------------------------------------------------------------------------------------
def test_scalar_indexing_errors(strict):
    y = gnp.asarray(np.arange(12).reshape(3, 4), chunks=2)
    with pytest.raises(gnp.ScalarIndexingError, match=r"shape \(10,\)") as info:
        X[3]
    assert isinstance(info.value, IndexError)
    with pytest.raises(IndexError, match=r"\(3, 4\).*gnp\.allowscalar"):
        y[1, 2]
    with pytest.raises(gnp.ScalarIndexingError, match=r"setting.*\(3, 4\)"):
        y[1, 2] = 0
    with pytest.raises(gnp.ScalarIndexingError, match="iterat.*gnp.allowscalar"):
        list(X)
    with pytest.raises(gnp.ScalarIndexingError):
        for _ in y:
            pass


def test_scalar_indexing_warns_and_matches_numpy():
    ref = np.arange(12).reshape(3, 4)
    y = gnp.asarray(ref, chunks=2)
    with pytest.warns(gnp.ScalarIndexingWarning, match="single element"):
        assert_eq(y[1, 2], ref[1, 2])
    with pytest.warns(gnp.ScalarIndexingWarning, match="iterating"):
        rows = list(y)
    for row, ref_row in zip(rows, ref):
        assert_eq(row, ref_row)


def test_scalar_indexing_not_triggered_by_slices(strict):
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
def test_promotion_warns_errors_and_allowed(a, b):
    xa = gnp.asarray(np.arange(1, 7).astype(a), chunks=4)
    xb = gnp.asarray(np.arange(2, 8).astype(b), chunks=4)
    ref = np.arange(1, 7).astype(a) * np.arange(2, 8).astype(b)
    common = np.result_type(a, b)
    with gnp.config.set(guards="error"), pytest.raises(gnp.PromotionError) as info:
        xa * xb
    msg = str(info.value)
    assert "multiply" in msg and np.dtype(a).name in msg and np.dtype(b).name in msg and common.name in msg
    assert "gnp.allowpromotion" in msg
    assert isinstance(info.value, TypeError)
    with pytest.warns(gnp.PromotionWarning, match="multiply"):
        assert_eq(xa * xb, ref)
    with gnp.allowpromotion():
        assert_eq(xa * xb, ref)
        assert_eq(np.multiply(xa, xb), ref)


def test_promotion_message_names_numpy_scalars():
    with pytest.warns(gnp.PromotionWarning, match=r"float32 array, a numpy\.float64 scalar.*float64") as record:
        result = X * np.sqrt(2.0)
    assert len(record) == 1
    assert_eq(result, A * np.sqrt(2.0))


def test_no_promotion_guard_when_nothing_widens(strict):
    x32 = gnp.asarray(A, chunks=4)
    assert_eq(x32 * 2.0, A * 2.0)  # Python scalars are weak (NEP 50)
    assert_eq(x32 + 1, A + 1)
    assert_eq(x32 * x32, A * A)
    assert_eq(x32 * np.float32(2.0), A * np.float32(2.0))
    assert (x32 * 2.0).dtype == np.float32
    i = gnp.asarray(np.arange(6, dtype=np.int16), chunks=4)
    assert_eq(i + 3, np.arange(6, dtype=np.int16) + 3)
    mask = gnp.asarray(np.arange(10) % 2 == 0, chunks=3)
    assert_eq(mask * x32, (np.arange(10) % 2 == 0) * A)  # booleans are not widened


# --- allowfetch ----------------------------------------------------------------------------------------
CONVERSIONS = {
    "float": float, "int": int, "bool": bool, "complex": complex, "operator.index": operator.index,
    "if": lambda v: 1 if v else 0, "format": lambda v: f"{v:.3f}", "round": round,
}


@pytest.mark.parametrize("conv", list(CONVERSIONS))
def test_fetch_errors(conv, strict):
    s = gnp.sum(gnp.asarray(np.arange(1, 6, dtype=np.int32), chunks=2))
    with pytest.raises(gnp.FetchError) as info:
        CONVERSIONS[conv](s)
    msg = str(info.value)
    op = "bool" if conv == "if" else conv
    assert f"{op}()" in msg and "int" in msg and "gnp.allowfetch" in msg and "gnp.fetch" in msg
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("conv", list(CONVERSIONS))
def test_fetch_warns_and_matches_numpy(conv):
    ref = np.arange(1, 6, dtype=np.int32)
    s = gnp.sum(gnp.asarray(ref, chunks=2))
    with pytest.warns(gnp.FetchWarning):
        got = CONVERSIONS[conv](s)
    expected = CONVERSIONS[conv](ref.sum())
    assert got == expected and type(got) is type(expected)
    with gnp.allowfetch():
        assert CONVERSIONS[conv](s) == expected


def test_format_and_round_like_numpy():
    ref = np.arange(1, 6) / 3
    x = gnp.asarray(ref, chunks=2)
    with gnp.allowfetch():
        assert f"{x.sum():.3f}" == f"{ref.sum():.3f}"
        assert round(x.sum(), 2) == round(ref.sum(), 2) and type(round(x.sum(), 2)) is type(round(ref.sum(), 2))
    with pytest.raises(TypeError):
        f"{x:.3f}"
    with pytest.raises(TypeError):
        f"{ref:.3f}"
    assert f"{x}" == str(x)  # no format spec: the Array's description, nothing computed


def test_messages_true_for_the_backend():
    s = gnp.sum(X)
    with pytest.warns(gnp.FetchWarning) as record:
        float(s)
    with pytest.warns(gnp.ScalarIndexingWarning) as scalar_record:
        X[1]
    for message in (str(record[0].message), str(scalar_record[0].message)):
        if BACKEND == "cupy":
            assert "GPU" in message
        else:
            assert "device" not in message and "GPU" not in message


def test_hidden_computes_go_through_the_same_check(strict):
    ref = np.arange(10.0)
    x = gnp.asarray(ref, chunks=3)
    mask = x > 4
    with pytest.raises(gnp.FetchError, match="numpy.asarray"):
        np.asarray(x)
    with pytest.raises(gnp.FetchError, match="indexing with a lazy 1-d bool Array"):
        x[mask]
    with gnp.allowfetch():
        np.testing.assert_array_equal(np.asarray(x), ref)
        assert_eq(x[mask], ref[ref > 4])


def test_hidden_computes_warn_by_default():
    ref = np.arange(10.0)
    x = gnp.asarray(ref, chunks=3)
    with pytest.warns(gnp.FetchWarning, match="numpy.asarray"):
        np.testing.assert_array_equal(np.asarray(x), ref)
    with pytest.warns(gnp.FetchWarning, match="indexing"):
        assert_eq(x[x > 4], ref[ref > 4])


def test_xarray_conversions_are_guarded(strict):
    xr = pytest.importorskip("xarray")
    da = xr.DataArray(gnp.asarray(np.arange(6.0), chunks=2), dims="x")
    with pytest.raises(gnp.FetchError):
        float(da.mean())
    with pytest.raises(gnp.FetchError):
        da.values
    with gnp.allowfetch():
        assert float(da.mean()) == 2.5
    np.testing.assert_array_equal(to_host(da.compute().data), np.arange(6.0))  # explicit: allowed


def test_accelerated_calls_are_checked_per_call():
    @gnp.accelerate
    def scale(a: gnp.Array) -> gnp.Array:
        return a * np.float64(3.0)

    with gnp.allowpromotion():
        assert_eq(scale(X), A * np.float64(3.0))  # traced here, silently
    with gnp.config.set(guards="error"), pytest.raises(gnp.PromotionError, match="numpy.float64 scalar"):
        scale(X)  # the same plan, reused: still checked
    with pytest.warns(gnp.PromotionWarning):
        scale(X)
    assert len(scale.plans) == 1


COUNTS = gnp.asarray(np.arange(6.0), chunks=4)  # data an accelerated function reads (not an argument)


@gnp.accelerate
def _promoted_inside(a: gnp.Array, b: gnp.Array) -> gnp.Array:
    with gnp.allowpromotion():
        return a * b


@gnp.accelerate
def _scalar_inside(a: gnp.Array) -> gnp.Array:
    with gnp.allowscalar():
        return a[3] * 2


@gnp.accelerate
def _fetched_inside(a: gnp.Array) -> gnp.Array:
    with gnp.allowfetch():
        n = int(gnp.sum(COUNTS > 2.0))
    return a * n


# name -> (an accelerated function that allows the guard in its body, its arguments, NumPy's result)
INSIDE: dict[str, tuple[Callable[..., gnp.Array], tuple, np.ndarray]] = {
    "allowpromotion": (_promoted_inside, (X, X64), A * A64),
    "allowscalar": (_scalar_inside, (X,), A[3] * 2),
    "allowfetch": (_fetched_inside, (X,), A * 3),
}


@pytest.mark.parametrize("strict_mode", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_allowed_inside_an_accelerated_function_on_every_call(name, strict_mode):
    """A guard allowed in the body of an accelerated function is silent on every call (its plan reused), as on
    the call that traced it, in the default mode and the strict one."""
    func, args, expected = INSIDE[name]
    func.plans.clear()
    with gnp.config.set(guards="error" if strict_mode else "warn"), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            np.testing.assert_array_equal(gnp.fetch(func(*args)), expected)
    assert not [w for w in seen if issubclass(w.category, gnp.GuardWarning)]
    assert len(func.plans) == 1


def test_allowed_inside_leaves_the_other_guards_to_the_call():
    """A guard not allowed inside the accelerated function is checked under each call's modes (allowed around
    the call site, it is silent there), while the one allowed inside stays silent (also allowed around the call
    that traced it)."""
    @gnp.accelerate
    def third(a: gnp.Array, b: gnp.Array) -> gnp.Array:
        with gnp.allowpromotion():
            product = a * b
        return product[3]

    expected = A[3] * A64[3]
    with gnp.allowscalar(), gnp.allowpromotion(), warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gnp.fetch(third(X, X64)) == expected  # traced here
    for _ in range(2):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert gnp.fetch(third(X, X64)) == expected
        assert [w.category for w in seen] == [gnp.ScalarIndexingWarning]
        with gnp.config.set(guards="error"), pytest.raises(gnp.ScalarIndexingError):
            third(X, X64)
        with gnp.config.set(guards="error"), gnp.allowscalar(), warnings.catch_warnings():
            warnings.simplefilter("error")
            assert gnp.fetch(third(X, X64)) == expected
    assert len(third.plans) == 1


@pytest.mark.parametrize("mode", ["warn", "error"])
def test_library_steps_allowed_inside_an_accelerated_function_on_every_call(mode):
    """gnp.isclose of integer arrays computes in float64 (as NumPy does) in steps that allow their promotion:
    silent on every call of an accelerated function that calls it, as on the first."""
    @gnp.accelerate
    def close(a: gnp.Array) -> gnp.Array:
        return gnp.isclose(a, a[::-1])

    ints = np.arange(10, dtype=np.int32)
    with gnp.config.set(guards=mode), warnings.catch_warnings():
        warnings.simplefilter("error", gnp.GuardWarning)
        for _ in range(3):
            np.testing.assert_array_equal(gnp.fetch(close(gnp.asarray(ints, chunks=3))), np.isclose(ints, ints[::-1]))
    assert len(close.plans) == 1


def test_fetch_index_in_python_sequence():
    i = gnp.sum(gnp.asarray(np.array([1, 2]), chunks=1))
    items = list(range(10))
    with gnp.config.set(guards="error"), pytest.raises(gnp.FetchError):
        items[i]
    with pytest.warns(gnp.FetchWarning):
        assert items[i] == 3
    with gnp.allowfetch():
        assert list(range(i)) == [0, 1, 2]


def test_everyday_numpy_code_runs_by_default():
    """What NumPy users write every day works under the default configuration (with warnings)."""
    ref = np.arange(1.0, 7.0)
    x = gnp.asarray(ref, chunks=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gnp.GuardWarning)
        assert float(x.sum()) == ref.sum()
        err, tol = x.std(), 10.0
        assert err < tol
        assert np.allclose(x, ref)
        assert f"{x.sum():.3f}" == f"{ref.sum():.3f}"


def test_explicit_fetch_always_allowed(strict):
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


def test_bool_of_many_elements_inside_allowfetch(strict):
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
