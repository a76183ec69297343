"""gnp takes NumPy's arguments: a test generated from NumPy's own signatures (every public function of
``numpy``, ``numpy.linalg`` and ``numpy.fft`` that gnp also defines accepts each of NumPy's parameters,
positionally in NumPy's order and by NumPy's name), and the calls NumPy users write, through ``gnp.fetch``
against NumPy: positional arguments, ufuncs' ``out=``/``where=``/``dtype=``/``casting=``, reductions'
``out=``/``where=``/``initial=``, ``where(cond)``, NumPy's method forms, and NumPy's parameters that mean
nothing here (``like=``, ``subok=``, ``order``)."""
from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from conftest import BACKEND

import dask_gpunumeric as gnp

P = inspect.Parameter
POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)

# NumPy's ufunc keywords after ``out`` (generalized ufuncs such as matmul take no ``where``)
UFUNC_KEYWORDS = ("where", "casting", "order", "dtype", "subok", "signature")
GUFUNC_KEYWORDS = ("casting", "order", "dtype", "subok", "signature", "axes", "axis")

# gnp functions whose signature differs from NumPy's on purpose: name -> why. None today: every function
# gnp shares with NumPy takes all of NumPy's parameters (those that mean nothing here are accepted, or
# refused when given a value that would need them, with an error that says so).
EXCEPTIONS: dict[str, str] = {}


def shared_functions() -> Iterator[tuple[str, Callable, Callable]]:
    """(name, NumPy's function, gnp's) for every public function NumPy and gnp both define."""
    for gnp_module, numpy_module, prefix in ((gnp, np, ""), (gnp.linalg, np.linalg, "linalg."),
                                            (gnp.fft, np.fft, "fft.")):
        for name in sorted(dir(gnp_module)):
            ours, theirs = getattr(gnp_module, name), getattr(numpy_module, name, None)
            if name.startswith("_") or theirs is None or not callable(ours) or not callable(theirs):
                continue
            if isinstance(ours, type) or isinstance(theirs, type) or inspect.ismodule(ours):
                continue
            yield prefix + name, theirs, ours


def numpy_parameters(func: Callable) -> tuple[list[P], list[str], bool] | None:
    """NumPy's positional parameters, keyword-only parameter names, and whether it takes ``*args``; None
    where NumPy publishes no signature."""
    if isinstance(func, np.ufunc):
        inputs = [P(f"x{i}", P.POSITIONAL_ONLY) for i in range(func.nin)]
        keywords = GUFUNC_KEYWORDS if func.signature else UFUNC_KEYWORDS
        return [*inputs, P("out", P.POSITIONAL_OR_KEYWORD, default=None)], list(keywords), False
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return None
    return ([p for p in parameters if p.kind in POSITIONAL], [p.name for p in parameters if p.kind == P.KEYWORD_ONLY],
            any(p.kind == P.VAR_POSITIONAL for p in parameters))


def refused(numpy_func: Callable, gnp_func: Callable) -> list[str]:
    """The NumPy parameters that gnp's function does not accept as NumPy does."""
    expected = numpy_parameters(numpy_func)
    if expected is None:
        return []
    positional, keywords, var_positional = expected
    signature = inspect.signature(gnp_func)
    ours = list(signature.parameters.values())
    our_positional = [p for p in ours if p.kind in POSITIONAL]
    takes_args = any(p.kind == P.VAR_POSITIONAL for p in ours)
    takes_kwargs = any(p.kind == P.VAR_KEYWORD for p in ours)
    by_keyword = {p.name for p in ours if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)}
    problems = []
    if var_positional and not takes_args:
        problems.append("*args")
    for i, p in enumerate(positional):
        if i >= len(our_positional):
            if not takes_args:
                problems.append(f"{p.name} (position {i})")
        elif p.kind == P.POSITIONAL_OR_KEYWORD and not isinstance(numpy_func, np.ufunc) and (
                our_positional[i].name != p.name or our_positional[i].kind != P.POSITIONAL_OR_KEYWORD):
            problems.append(f"{p.name} (position {i}, gnp's is {our_positional[i].name})")
    for name in keywords + (["out"] if isinstance(numpy_func, np.ufunc) else []):
        if name not in by_keyword and not takes_kwargs:
            problems.append(f"{name}=")
    return problems


SHARED = {name: (theirs, ours) for name, theirs, ours in shared_functions()}


@pytest.mark.parametrize("name", sorted(SHARED))
def test_accepts_numpy_parameters(name: str) -> None:
    problems = refused(*SHARED[name])
    if name in EXCEPTIONS:
        assert problems, f"gnp.{name} takes NumPy's parameters now: drop it from EXCEPTIONS"
    else:
        assert not problems, f"gnp.{name} refuses NumPy's {problems}"


def test_many_functions_are_checked() -> None:
    """The comparison finds the shared functions (a change of how they are listed would empty it)."""
    assert {"add", "sum", "roll", "concatenate", "linspace", "where", "linalg.solve", "fft.fft"} <= set(SHARED)


# --- NumPy's calls, through gnp.fetch against NumPy ------------------------------------------------------


def data(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def check(ours: Any, expected: Any) -> None:
    host = gnp.fetch(ours)
    if isinstance(expected, tuple):
        assert len(host) == len(expected)
        for h, e in zip(host, expected):
            check_values(h, e)
    else:
        check_values(host, expected)


def check_values(host: Any, expected: Any) -> None:
    expected = np.asarray(expected)
    assert np.shape(host) == expected.shape and np.asarray(host).dtype == expected.dtype
    np.testing.assert_allclose(host, expected, rtol=1e-12)


def test_positional_calls_of_the_issue() -> None:
    u, a, b = data((4, 5), 1), data((4, 5), 2), data((4, 3), 3)
    gu, ga, gb = gnp.asarray(u, chunks=2), gnp.asarray(a, chunks=(3, 2)), gnp.asarray(b, chunks=2)
    check(gnp.roll(gu, 1, 0), np.roll(u, 1, 0))
    check(gnp.flip(ga, 0), np.flip(a, 0))
    check(gnp.concatenate((ga, gb), 1), np.concatenate((a, b), 1))
    check(gnp.ones((3,), "float32"), np.ones((3,), "float32"))
    check(gnp.eye(3, 4, 1), np.eye(3, 4, 1))
    check(gnp.linspace(0, 1, 5, False), np.linspace(0, 1, 5, False))
    check(gnp.where(ga > 0), np.where(a > 0))
    check(np.where(ga > 0), np.where(a > 0))  # through NumPy's dispatch
    check(gnp.where(ga > 0, ga, 0.0), np.where(a > 0, a, 0.0))
    with pytest.raises(ValueError, match="both or neither"):
        gnp.where(ga > 0, ga)


def test_positional_calls_of_numpy_signatures() -> None:
    a = data((3, 4), 4)
    x = gnp.asarray(a, chunks=2)
    check(gnp.sum(x, 0, None, None, True), np.sum(a, 0, None, None, True))
    check(gnp.mean(x, 1, "float32"), np.mean(a, 1, "float32"))
    check(gnp.var(x, 0, None, None, 1), np.var(a, 0, None, None, 1))
    check(gnp.max(x, 1, None, False, 0.5), np.max(a, 1, None, False, 0.5))
    check(gnp.full((2, 3), 1.5, "float32"), np.full((2, 3), 1.5, "float32"))
    check(gnp.zeros_like(x, "int32"), np.zeros_like(a, "int32"))
    check(gnp.full_like(x, 7, None, "K", True, (2, 2)), np.full_like(a, 7, None, "K", True, (2, 2)))
    check(gnp.asarray([1, 2], "float32"), np.asarray([1, 2], "float32"))
    check(gnp.reshape(x, (4, 3), "C"), np.reshape(a, (4, 3), "C"))
    check(gnp.ravel(x, "C"), np.ravel(a, "C"))
    check(gnp.stack((x, x), 1), np.stack((a, a), 1))
    check(gnp.clip(x, -0.5, 0.5), np.clip(a, -0.5, 0.5))
    check(gnp.round(x, 2), np.round(a, 2))
    check(gnp.cumsum(x, 1, "float32"), np.cumsum(a, 1, "float32"))
    check(gnp.linalg.solve(x[:, :3], x[:, 3]), np.linalg.solve(a[:, :3], a[:, 3]))
    check(gnp.tensordot(x, x.T, 1), np.tensordot(a, a.T, 1))
    check(gnp.linspace(0, 2, 4, True, True)[0], np.linspace(0, 2, 4, True, True)[0])
    assert gnp.linspace(0, 2, 4, True, True)[1] == np.linspace(0, 2, 4, True, True)[1]
    check(gnp.fft.fftfreq(8, 0.5, None), np.fft.fftfreq(8, 0.5, None))


def test_numpy_parameters_that_mean_nothing_here() -> None:
    a = data((2, 3), 5)
    x = gnp.asarray(a)
    check(gnp.zeros((2,), like=x), np.zeros((2,)))
    check(gnp.asarray(a, like=a), a)
    check(gnp.ones_like(x, subok=False), np.ones_like(a))
    check(gnp.add(x, 1, subok=False, order="C"), np.add(a, 1))
    check(gnp.broadcast_to(x, (2, 2, 3), True), np.broadcast_to(a, (2, 2, 3)))
    for call in (lambda: gnp.zeros((2,), order="F"), lambda: gnp.reshape(x, (3, 2), "F"),
                 lambda: gnp.add(x, 1, order="F"), lambda: x.astype("f4", "F")):
        with pytest.raises(ValueError, match="order='F'"):
            call()
    with pytest.raises(TypeError, match="unexpected keyword"):
        gnp.add(x, 1, bogus=1)


def test_numpy_creation_like_a_gnp_array() -> None:
    """NumPy's creation functions with ``like=`` a gnp Array give gnp Arrays (NumPy's dispatch)."""
    x = gnp.ones(3)
    for ours, expected in [(np.zeros(3, like=x), np.zeros(3)), (np.full(2, 1.5, like=x), np.full(2, 1.5)),
                           (np.ones((2, 2), "int32", like=x), np.ones((2, 2), "int32")),
                           (np.eye(2, 3, 1, like=x), np.eye(2, 3, 1)), (np.arange(1, 7, 2, like=x), np.arange(1, 7, 2)),
                           (np.asarray([1, 2], like=x), [1, 2])]:
        assert isinstance(ours, gnp.Array)
        check(ours, expected)


# --- ufuncs: out=, where=, dtype=, casting= --------------------------------------------------------------


def test_ufunc_out_rebinds_the_array() -> None:
    a, b = data((4, 3), 6), data((4, 3), 7)
    x, y = gnp.asarray(a, chunks=2), gnp.asarray(b, chunks=3)
    z = gnp.zeros((4, 3))
    alias = z
    assert gnp.add(x, y, out=z) is z and alias is z
    check(z, a + b)
    assert gnp.multiply(x, 2, z) is z  # out given positionally
    check(z, a * 2)
    assert np.subtract(x, y, out=z) is z  # through NumPy's dispatch (out arrives as a tuple)
    check(z, a - b)
    assert gnp.exp(x, out=(z,)) is z
    check(z, np.exp(a))
    w = gnp.zeros((2, 4, 3))  # the result broadcast to out's shape
    gnp.add(x, 1, out=w)
    check(w, np.broadcast_to(a + 1, (2, 4, 3)))


def test_ufunc_where_keeps_out_elsewhere() -> None:
    a = data((5,), 8)
    mask = a > 0
    expected = np.full(5, -1.0)
    np.sqrt(a, out=expected, where=mask)
    out = gnp.full((5,), -1.0)
    gnp.sqrt(gnp.asarray(a), out=out, where=gnp.asarray(mask))
    check(out, expected)
    out = gnp.full((5,), -1.0)
    np.sqrt(gnp.asarray(a), out=out, where=mask)
    check(out, expected)


def test_ufunc_dtype_and_casting() -> None:
    a = np.arange(6, dtype=np.int32)
    x = gnp.asarray(a, chunks=4)
    check(gnp.add(x, x, dtype=np.float64), np.add(a, a, dtype=np.float64))
    check(gnp.multiply(x, 3, dtype="int64", casting="safe"), np.multiply(a, 3, dtype="int64", casting="safe"))
    with pytest.raises(TypeError) as ours:
        gnp.add(x, x, dtype=np.int8, casting="safe")
    with pytest.raises(TypeError) as theirs:
        np.add(a, a, dtype=np.int8, casting="safe")
    assert str(ours.value) == str(theirs.value)
    out = gnp.zeros((6,), dtype=np.int32)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'divide' output"):
        gnp.divide(x, 2, out=out)  # float64 into int32: refused by same_kind, as NumPy does
    check(gnp.divide(x, 2, out=out, casting="unsafe"), np.divide(a, 2, out=np.zeros(6, np.int32), casting="unsafe"))
    with pytest.raises(ValueError, match="non-broadcastable output"):
        gnp.add(x, 1, out=gnp.zeros((3,), dtype=np.int32))


def test_ufunc_out_numpy_array_is_written() -> None:
    a = data((4,), 9)
    out = np.zeros(4)
    with gnp.allowfetch():
        assert gnp.add(gnp.asarray(a), 1, out=out) is out
    np.testing.assert_allclose(out, a + 1)


# --- reductions: out=, where=, initial= ------------------------------------------------------------------


@pytest.mark.parametrize("func", ["sum", "prod", "min", "max", "mean", "var", "std", "all", "any", "nansum",
                                  "nanprod", "nanmin", "nanmax", "nanmean", "nanvar", "nanstd"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reduction_where_initial_and_out(func: str, axis: Any) -> None:
    a = data((4, 5), 10)
    a[1, 2] = np.nan if func.startswith("nan") else a[1, 2]
    mask = np.random.default_rng(11).random((4, 5)) > 0.3
    mask[:, 0] = True  # no empty slice (NumPy warns and gives NaN there)
    kwargs: dict[str, Any] = {"where": mask}
    if func in ("sum", "prod", "min", "max", "nansum", "nanprod", "nanmin", "nanmax"):
        kwargs["initial"] = 0.25
    x = gnp.asarray(a, chunks=(3, 2))
    check(getattr(gnp, func)(x, axis, **kwargs), getattr(np, func)(a, axis, **kwargs))
    expected = getattr(np, func)(a, axis, keepdims=True, **kwargs)
    out = gnp.zeros(expected.shape, dtype=expected.dtype)
    assert getattr(gnp, func)(x, axis, out=out, keepdims=True, **kwargs) is out
    check(out, expected)


def test_reduction_initial_on_empty_axes_and_errors() -> None:
    empty = np.zeros((0, 3))
    x = gnp.asarray(empty)
    check(gnp.max(x, 0, initial=-1.0), np.max(empty, 0, initial=-1.0))
    check(gnp.sum(x, 0, initial=2.0), np.sum(empty, 0, initial=2.0))
    with pytest.raises(ValueError, match="identity"):
        gnp.min(gnp.ones((3,)), where=np.array([True, False, True]))
    with pytest.raises(ValueError, match="wrong shape"):
        gnp.sum(gnp.ones((3, 2)), 0, out=gnp.zeros((3,)))


def test_ufunc_reduce_through_numpy() -> None:
    a = data((3, 4), 12)
    x = gnp.asarray(a, chunks=2)
    check(np.add.reduce(x, 1, initial=1.0), np.add.reduce(a, 1, initial=1.0))
    out = gnp.zeros((4,))
    np.maximum.reduce(x, 0, out=out)
    check(out, np.maximum.reduce(a, 0))


# --- Array methods in NumPy's forms ---------------------------------------------------------------------


def test_methods_take_numpy_forms() -> None:
    a = data((3, 4), 13)
    x = gnp.asarray(a, chunks=2)
    check(x.sum(0, None, None, True), a.sum(0, None, None, True))
    check(x.max(1, None, False, 5.0), a.max(1, None, False, 5.0))
    check(x.mean(where=a > 0), a.mean(where=a > 0))
    check(x.astype("float32", "K", "same_kind"), a.astype("float32", "K", "same_kind"))
    check(x.reshape(2, 6, order="C"), a.reshape(2, 6, order="C"))
    check(x.transpose(1, 0), a.transpose(1, 0))
    check(x.argsort(1), a.argsort(1))
    check(x.dot(a.T), a.dot(a.T))
    check(x.nonzero(), a.nonzero())
    check(x.repeat(2, 0), a.repeat(2, 0))
    check(x.take([0, 2], 1), a.take([0, 2], 1))
    check(x.clip(-0.1, 0.1), a.clip(-0.1, 0.1))
    assert x.item(5) == a.item(5) and x.item(1, 2) == a.item(1, 2)
    y, b = x.copy(), a.copy()
    y.sort(0)
    b.sort(0)
    check(y, b)
    check(x, a)  # the copy was rebound, not the original
    y.fill(3.0)
    b.fill(3.0)
    check(y, b)
    assert y.backend == BACKEND
