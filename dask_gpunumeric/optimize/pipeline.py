"""The optimizer: a declared list of passes, each a pure function of the expression and of the settings it
names. Those names are the whole key under which optimized graphs and plans are cached (``settings_key``),
so a new pass is one entry in ``PASSES``."""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from .. import config
from ..expr import ArrayExpr, Fused
from .dag import DAG, sharing
from .fusion import fuse
from .gram import gram_products
from .rows import fuse_rows
from .simplify import simplify
from .stencil import stencils


class Pass(NamedTuple):
    """One pass: ``run(root, settings) -> root'`` (same values, same root shape), given the values of the
    settings named in ``settings`` and reading no others."""

    name: str
    run: Callable[[ArrayExpr, Mapping[str, Any]], ArrayExpr]
    settings: tuple[str, ...]


PASSES: tuple[Pass, ...] = (
    Pass("simplify", simplify, ()),
    Pass("gram", gram_products, ()),
    Pass("stencils", stencils, ("fusion", "stencil-sweeps", "stencil-tiles", "stencil-tile-sweeps",
                                "stencil-recompute", "stencil-quotients", "stencil-late-reductions")),
    Pass("rows", fuse_rows, ("fusion", "kernel-size")),
    Pass("fusion", fuse, ("fusion", "kernel-size")),
)


# settings read while loops are traced (``api.loops``: ``rotation``), keys of plans like the passes'
TRACE_SETTINGS: tuple[str, ...] = ("loop-rotation", "stencil-tiles", "stencil-quotients")


def settings_read() -> tuple[str, ...]:
    """The settings the passes read, each once, in pipeline order, then those read while tracing."""
    return tuple(dict.fromkeys([*(name for p in PASSES for name in p.settings), *TRACE_SETTINGS]))


_READ = settings_read()


class _HashedTuple(tuple):
    """A tuple that computes its hash once (a plain tuple computes it on every lookup of a key holding it)."""

    _hash: int

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:  # (a plain tuple elsewhere: another process hashes strings differently)
        return tuple, (tuple(self),)


_KEYS: dict[tuple, _HashedTuple] = {}  # the settings' values -> their ``settings_key``


def settings_key() -> tuple:
    """The current values of the settings the passes read, as (name, value) pairs: part of the key of every cache
    of optimized graphs or plans (read on every compute and accelerated call: the same object for the same
    values, its hash computed once)."""
    values = config.values(_READ)
    try:
        key = _KEYS.get(values)
    except TypeError:  # a value that is no key (the caches refuse it as before)
        return tuple(zip(_READ, values))
    if key is None:
        key = _HashedTuple(zip(_READ, values))
        key._hash = tuple.__hash__(key)
        if len(_KEYS) >= 64:
            _KEYS.clear()
        _KEYS[values] = key
    return key


# the scalar operands of elementwise nodes that no pass reads but through ``by_type``'s exceptions: floating and
# complex numbers, Python's (weak: their type alone decides dtypes, NEP 50) and NumPy's; programs take them as kernel
# arguments. (A Python int's value decides its dtype and whether a kernel takes it: ``codegen.program.compute_dtype``.)
_BY_TYPE = frozenset({float, complex, np.float16, np.float32, np.float64, np.longdouble, np.complex64, np.complex128,
                      np.clongdouble})


def by_type(value: object) -> bool:
    """Whether an elementwise node's scalar operand ``value`` may take another value of its type without changing
    the optimized graph but for that value (where a graph is reused by structure, ``runtime.reuse``, it takes the
    new one): a float or complex number other than 0 and 1, the values ``simplify`` reads (``x * 1``, ``x + 0``)."""
    return type(value) in _BY_TYPE and not (value == 0 or value == 1)


def optimize(root: ArrayExpr) -> ArrayExpr:
    """The expression after every pass, in order."""
    values = dict(settings_key())
    with _no_cyclic_collection(), sharing():  # the shared DAGs freed before the collector runs again
        for p in PASSES:
            root = p.run(root, {name: values[name] for name in p.settings})
    return root


@contextlib.contextmanager
def _no_cyclic_collection() -> Iterator[None]:
    """The cyclic garbage collector paused: the passes make only objects that live on (nodes, groups, plans),
    and on a DAG of 10,000s of nodes its collections, each walking every object, cost time growing with its size."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def explain_groups(root: ArrayExpr) -> list[Fused]:
    """The Fused nodes of the optimized expression (for ``gnp.explain``)."""
    return [n for n in DAG(optimize(root)).order if isinstance(n, Fused)]
