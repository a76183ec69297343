"""``gnp.Array``: the Dask collection users hold. A thin object around an immutable ``ArrayExpr``.

Methods and operators build new expressions (nothing runs until ``compute``/``persist``/``fetch``); the
Dask collection protocol lets ``dask.compute``, ``dask.persist``, ``Client.compute``, xarray and others
treat it like any Dask collection; ``__array_ufunc__``/``__array_function__`` route NumPy calls here.

Methods and operators are the gnp functions of the same meaning. Those functions build on this class, so
this module imports none of them: the namespace hands itself to the class once imported (``_namespace``).
"""
from __future__ import annotations

import operator
import types
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Union

import dask
import numpy as np
from dask._task_spec import Task, convert_legacy_graph, cull
from dask.base import DaskMethodsMixin

from ..expr import ArrayExpr, FromArray, FromGraph, Materialized, flat_keys
from ..backend import backend_of, device_name, resolve, to_numpy
from ..kernels.blocks import as_block, concatenate_grid
from ..runtime.compile import graph_of
from ..runtime.fetch import collection_scheduler, compute_now, persist_now
from . import guards as _guards
from .kept_nodes import rebinding

ArrayLike = Union["Array", np.ndarray, int, float, complex, bool, list, Any]


def _finalize(results: Any, numblocks: tuple[int, ...]) -> Any:
    def flatten(x: Any) -> list:
        return [y for item in x for y in flatten(item)] if isinstance(x, (list, tuple)) else [x]

    return concatenate_grid(flatten(results), numblocks)


def _operand_ok(other: Any) -> bool:
    """Whether ``other`` can be an operand; if not, the operator returns NotImplemented (as NumPy's do, also
    for objects that opt out of NumPy's operators with ``__array_ufunc__ = None``)."""
    if type(other) in _PLAIN_OPERANDS:  # the usual operands, none of which opts out: at once
        return True
    if getattr(type(other), "__array_ufunc__", False) is None:
        return False
    return isinstance(other, (Array, bool, int, float, complex, np.generic, np.ndarray, list, tuple)) or \
        hasattr(other, "__array__") or backend_of(other) == "cupy"


def _operators(func: str, elementwise: bool = True) -> tuple[Callable, Callable, Callable]:
    """``x <op> y``, ``y <op> x`` and ``x <op>= y`` as ``gnp.<func>``."""
    forward, reflected = _binary(func, elementwise, False), _binary(func, elementwise, True)

    def inplace(self: Array, other: Any) -> Any:
        # Arrays are immutable: ``x += y`` rebinds x to a new Array, with NumPy's in-place casting rule.
        out = forward(self, other)
        if out is NotImplemented:
            return out
        if out.dtype != self.dtype:
            if not np.can_cast(out.dtype, self.dtype, casting="same_kind"):
                raise TypeError(
                    f"Cannot cast ufunc '{func}' output from {out.dtype} to {self.dtype} with casting rule 'same_kind'"
                )
            out = out.astype(self.dtype)
        return out

    return forward, reflected, inplace


def _binary(func: str, elementwise: bool, reflected: bool) -> Callable:
    """``x <op> y`` (or, ``reflected``, ``y <op> x``) as ``gnp.<func>``; where it is ``elementwise``, the usual
    operands take its short path first (``Array._elementwise``: two calls less on every operator a user writes)."""
    def binary(self: Array, other: Any) -> Any:
        args = (other, self) if reflected else (self, other)
        if type(other) in _PLAIN_OPERANDS:
            if elementwise:
                short = self._elementwise(func, args)
                if short is not None:
                    return short
            return getattr(self._namespace, func)(*args)
        return getattr(self._namespace, func)(*args) if _operand_ok(other) else NotImplemented

    return binary


def _equality(func: str) -> Callable:
    """``==``/``!=``: elementwise, and as NumPy's with an object that is no array operand (None, a str, ...):
    all unequal."""
    forward = _operators(func)[0]

    def compare(self: Array, other: Any) -> Any:
        out = forward(self, other)
        if out is NotImplemented and getattr(type(other), "__array_ufunc__", False) is not None:
            return self._namespace.full_like(self, func == "not_equal", dtype=np.bool_)
        return out

    return compare


def _unary(func: str) -> Callable:
    """``<op> x`` as ``gnp.<func>`` (elementwise: its short path first, as ``_operators``)."""
    def unary(self: Array) -> Array:
        short = self._elementwise(func, (self,))
        return getattr(self._namespace, func)(self) if short is None else short

    return unary


def _method(func: str) -> Callable:
    """A method that is ``gnp.<func>(self, ...)``, with NumPy's ``ndarray`` method's arguments."""
    def method(self: Array, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._namespace, func)(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = func
    method.__doc__ = f"``gnp.{func}(self, ...)``, as ``numpy.ndarray.{func}``."
    return method



def _from_expr(name: str, doc: str) -> property:
    """A read-only property of an Array that is its expression's attribute ``name``."""
    return property(operator.attrgetter(f"_expr.{name}"), doc=doc)  # (no Python frame: read on every operation)


class Array(DaskMethodsMixin):
    """A lazy, chunked N-d array whose blocks are CuPy arrays on a GPU or NumPy arrays on the CPU."""

    __slots__ = ("_expr",)
    __array_priority__ = 20
    #: the ``dask_gpunumeric`` namespace, whose functions the methods and operators call (set on import)
    _namespace: ClassVar[types.ModuleType]
    #: the short path of the namespace's elementwise functions (``api.elementwise``, set on import): (name,
    #: operands) -> the Array ``gnp.<name>(*operands)`` gives, or None where that function must build it
    _elementwise: ClassVar[Callable[[str, tuple], Array | None]]

    def __init__(self, expr: ArrayExpr) -> None:
        if not isinstance(expr, ArrayExpr):
            raise TypeError(f"Array wraps an ArrayExpr, got {type(expr).__name__}; use gnp.asarray(data)")
        self._expr = expr

    # --- Dask collection protocol ---------------------------------------------------------------------
    @property
    def expr(self) -> ArrayExpr:
        """The expression this Array stands for."""
        return self._expr

    def __dask_graph__(self) -> dict:
        e = self._expr
        if type(e) is FromGraph:  # persisted blocks (what ``distributed.wait`` and ``futures_of`` read): as they are
            return graph_of(e)
        return Materialized((e,)).__dask_graph__()

    def __dask_keys__(self) -> list:
        return self._expr.__dask_keys__()

    def __dask_layers__(self) -> tuple[str, ...]:
        return (self._expr._name,)

    def __dask_tokenize__(self) -> str:
        return self._expr._name

    @property
    def __dask_scheduler__(self) -> Any:
        return collection_scheduler(self.backend)

    @staticmethod
    def __dask_optimize__(dsk: Any, keys: Any, **kwargs: Any) -> Any:
        return dsk

    def __dask_postcompute__(self) -> tuple:
        return _finalize, (self.numblocks,)

    def compute(self, **kwargs: Any) -> Any:
        """The computed array (a NumPy or CuPy array), as ``dask.compute(self)[0]``; on the local scheduler
        straight from the array's compiled graph, without Dask's collection machinery."""
        if not kwargs:
            value = compute_now(self)
            if value is not None:
                return value
        return super().compute(**kwargs)

    def persist(self, **kwargs: Any) -> Array:
        """This Array with its blocks computed and held in memory, as ``dask.persist(self)[0]``; on the local
        scheduler straight from the array's compiled graph, on a distributed client sent as one graph."""
        if not kwargs:
            blocks = persist_now(self)
            if blocks is not None:
                e = self._expr
                return Array(FromGraph.of(blocks, e._name, e.chunks, e.dtype, e.backend))
        return super().persist(**kwargs)

    def __dask_postpersist__(self) -> tuple:
        return self._rebuild, ()

    def _rebuild(self, dsk: Any, *args: Any, rename: dict | None = None) -> Array:
        """An Array over ``dsk``: either this Array's computed blocks (persist) or a whole graph holding
        them (``dask.optimize``, graph manipulation; ``rename`` gives the blocks' new name), culled to them."""
        e = self._expr
        name = (rename or {}).get(e._name, e._name)
        keys = flat_keys(e) if name == e._name else [(name, *k[1:]) for k in flat_keys(e)]
        layer = dsk if isinstance(dsk, dict) else dict(dsk)  # (persisted blocks may carry checks: CheckedBlocks)
        if layer.keys() != set(keys):
            if rename is None:  # dask.optimize: dask made the unfused graph of the expression; what runs is ours
                layer = self.__dask_graph__()
            layer = cull(convert_legacy_graph(layer), keys)
        return Array(FromGraph.of(layer, name, e.chunks, e.dtype, e.backend))

    def __reduce__(self) -> tuple:
        return Array, (self._expr,)

    def visualize(self, filename: str | None = "mydask", format: str | None = None, optimize_graph: bool = False,
                  **kwargs: Any) -> Any:
        """Draw the task graph that runs (fused, named as on the dashboard) with ``dask.visualize``."""
        return dask.visualize(dask.optimize(self)[0], filename=filename, format=format, **kwargs)

    # --- metadata -------------------------------------------------------------------------------------
    shape = _from_expr("shape", "Length of each axis.")
    dtype = _from_expr("dtype", "Element type.")
    ndim = _from_expr("ndim", "Number of axes.")
    size = _from_expr("size", "Number of elements.")
    chunks = _from_expr("chunks", "Block lengths along each axis, as in dask.array.")
    chunksize = _from_expr("chunksize", "The largest block's shape.")
    numblocks = _from_expr("numblocks", "Number of blocks along each axis.")
    backend = _from_expr("backend", '"cupy" when blocks are CuPy arrays, "numpy" otherwise.')
    _meta = _from_expr("_meta", "The empty block of the blocks' type and dtype (dask's ``_meta``).")

    @property
    def nbytes(self) -> int:
        """Bytes of all elements."""
        return self.size * self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def npartitions(self) -> int:
        """Total number of blocks."""
        return int(np.prod(self.numblocks))

    @property
    def name(self) -> str:
        """The key name of this Array's blocks."""
        return self._expr._name

    @property
    def device(self) -> str:
        """Where the blocks live: "cpu" or "cuda:<id> (<name>)"."""
        return device_name(self.backend)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self) -> str:
        return (
            f"gnp.Array<shape={self.shape}, dtype={self.dtype}, chunksize={self.chunksize}, "
            f"numblocks={self.numblocks}, backend={self.backend}, device={self.device}, name={self.name}>"
        )

    def _repr_html_(self) -> str:
        rows = [
            ("Shape", self.shape), ("Dtype", self.dtype), ("Chunk shape", self.chunksize),
            ("Blocks", f"{self.numblocks} ({self.npartitions} in all)"), ("Bytes", dask.utils.format_bytes(self.nbytes)),
            ("Backend", self.backend), ("Device", self.device),
        ]
        body = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{v}</td></tr>" for k, v in rows)
        return f"<table><caption>dask_gpunumeric.Array</caption>{body}</table>"

    # --- conversions (explicit and guarded) -----------------------------------------------------------
    def item(self, *args: Any) -> Any:
        """One element as a Python scalar (explicit fetch: always allowed): the only one, or the one at a flat
        index or at one index per axis, as ``numpy.ndarray.item``."""
        if args:
            index = args[0] if len(args) == 1 else args
            if isinstance(index, (int, np.integer)) and self.ndim != 1:
                index = tuple(int(i) for i in np.unravel_index(operator.index(index), self.shape))
            with _guards.allowscalar():
                return self[index].item()
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return to_numpy(self.compute()).item()

    def tolist(self) -> Any:
        """The data as nested Python lists (explicit fetch)."""
        return to_numpy(self.compute()).tolist()

    def _implicit_scalar(self, what: str, convert: Any) -> Any:
        _guards.check_fetch(f"{what}() of {_guards.describe(self)}", self.backend)
        if self.size != 1:
            if convert is bool:
                raise ValueError(
                    "The truth value of an array with more than one element is ambiguous. Use a.any() or a.all()"
                )
            raise TypeError("only length-1 arrays can be converted to Python scalars")
        return convert(self.item())

    def __bool__(self) -> bool:
        return self._implicit_scalar("bool", bool)

    def __float__(self) -> float:
        return self._implicit_scalar("float", float)

    def __int__(self) -> int:
        return self._implicit_scalar("int", int)

    def __complex__(self) -> complex:
        return self._implicit_scalar("complex", complex)

    def __index__(self) -> int:
        if self.dtype.kind not in "iub":
            raise TypeError(f"only integer arrays can be used as an index, not {self.dtype}")
        return self._implicit_scalar("operator.index", operator.index)

    def __format__(self, format_spec: str) -> str:
        if self.ndim:  # as NumPy: no format spec for arrays with axes (and no data fetched for str())
            if format_spec:
                raise TypeError("unsupported format string passed to gnp.Array.__format__")
            return str(self)
        return format(self._implicit_scalar("format", lambda v: v), format_spec)

    def __round__(self, ndigits: int | None = None) -> Any:
        if self.ndim:
            raise TypeError("round() of an Array with axes: use gnp.round(x, decimals)")
        return self.dtype.type(self._implicit_scalar("round", lambda v: round(v, ndigits))) if ndigits is not None \
            else self._implicit_scalar("round", round)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        _guards.check_fetch(f"numpy.asarray() of {_guards.describe(self)}", self.backend)
        out = to_numpy(self.compute())
        return out if dtype is None else out.astype(dtype)

    def __iter__(self) -> Iterator[Any]:
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        _guards.check_iteration(self.shape, self.backend)
        for i in range(self.shape[0]):
            yield self[i]

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: bool | None = None) -> Any:
        """DLPack export of the computed data (an explicit transfer: it computes the Array)."""
        return self.compute().__dlpack__(**({"stream": stream} if stream is not None else {}))

    def __dlpack_device__(self) -> tuple[int, int]:
        """(device type, id) of the blocks: (1, 0) for the CPU, (2, id) for a CUDA device."""
        if self.backend == "cupy":
            import cupy

            return (2, cupy.cuda.Device().id)
        return (1, 0)

    def to_backend(self, backend: str) -> Array:
        """The same Array with blocks moved to "numpy" (host) or "cupy" (device)."""
        backend = resolve(backend)
        if backend == self.backend:
            return self
        return Array(_ToBackend(self._expr, backend))

    def to_dask_array(self) -> Any:
        """A dask.array.Array over the same blocks (no computation)."""
        import dask.array as da
        from dask.highlevelgraph import HighLevelGraph

        graph = HighLevelGraph.from_collections(self.name, self.__dask_graph__(), dependencies=())
        return da.Array(graph, self.name, self.chunks, meta=self._meta)

    # --- indexing -------------------------------------------------------------------------------------
    def __getitem__(self, index: Any) -> Array:
        return self._namespace._getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        self._rebind(self._namespace._setitem(self, index, value).expr)

    # --- operators ------------------------------------------------------------------------------------
    # (the binary arithmetic operators, with their reflected and in-place forms: ``_BINARY_OPERATORS``)
    __matmul__, __rmatmul__ = _operators("matmul", elementwise=False)[:2]
    __lt__, __le__ = _operators("less")[0], _operators("less_equal")[0]
    __gt__, __ge__ = _operators("greater")[0], _operators("greater_equal")[0]
    __eq__, __ne__ = _equality("equal"), _equality("not_equal")
    __hash__ = None  # type: ignore[assignment]  # __eq__ is elementwise
    __neg__, __pos__, __abs__ = _unary("negative"), _unary("positive"), _unary("abs")
    __invert__ = _unary("bitwise_invert")

    # --- NumPy's methods: the gnp functions ------------------------------------------------------------
    sum, prod, mean, var, std = _method("sum"), _method("prod"), _method("mean"), _method("var"), _method("std")
    min, max, all, any = _method("min"), _method("max"), _method("all"), _method("any")
    argmin, argmax, cumsum, cumprod = _method("argmin"), _method("argmax"), _method("cumsum"), _method("cumprod")
    squeeze, swapaxes, rechunk = _method("squeeze"), _method("swapaxes"), _method("rechunk")
    round, clip = _method("round"), _method("clip")
    conj = conjugate = _method("conj")
    flatten = ravel = _method("ravel")
    argsort, dot, nonzero = _method("argsort"), _method("dot"), _method("nonzero")
    repeat, take, searchsorted = _method("repeat"), _method("take"), _method("searchsorted")
    diagonal, trace = _method("diagonal"), _method("trace")

    def astype(self, dtype: Any, order: str = "K", casting: str = "unsafe", subok: bool = True, copy: bool = True, *,
               device: Any = None) -> Array:
        """The array converted to ``dtype`` (``gnp.astype``), with ``numpy.ndarray.astype``'s arguments."""
        return self._namespace.astype(self, dtype, copy=copy, device=device, casting=casting, order=order)

    def sort(self, axis: int = -1, kind: str | None = None, order: Any = None, *, stable: bool | None = None) -> None:
        """Sort in place, as ``numpy.ndarray.sort``: this Array is rebound to the (lazy) sorted array."""
        self._rebind(self._namespace.sort(self, axis, kind, order, stable=stable).expr)

    def fill(self, value: Any) -> None:
        """Fill in place with ``value``, as ``numpy.ndarray.fill``: this Array is rebound to a constant array."""
        self._rebind(self._namespace.full_like(self, value).expr)

    def _rebind(self, expr: ArrayExpr) -> None:
        """Point this Array to ``expr``, as its in-place operations do (setitem, ``out=``, ``sort``, ``fill``,
        ``shuffle``: Arrays are views of immutable expressions); nodes kept over its old node are dropped
        (``kept_nodes.rebinding``)."""
        rebinding(self)
        self._expr = expr

    def map_blocks(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Array:
        """``func`` on every block of this Array (and of ``args``): ``gnp.map_blocks(func, self, *args, ...)``."""
        return self._namespace.map_blocks(func, self, *args, **kwargs)

    def transpose(self, *axes: Any) -> Array:
        """Axes reversed, or reordered (``x.transpose(1, 0)`` or ``x.transpose((1, 0))``)."""
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0]) if axes[0] is not None else ()
        return self._namespace.transpose(self, axes or None)

    def reshape(self, *shape: Any, **kwargs: Any) -> Array:
        """The array with a new shape (``x.reshape(2, 3)`` or ``x.reshape((2, 3))``)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return self._namespace.reshape(self, shape, **kwargs)

    def copy(self, order: str = "C") -> Array:
        """A new Array object for the same data (no data need be copied: a later ``__setitem__`` on either
        rebinds that one only); ``order="F"`` is refused."""
        if order not in ("C", "K", "A"):
            raise ValueError(f"copy: order={order!r} is not supported (blocks are C-ordered); leave order out")
        return Array(self.expr)

    @property
    def T(self) -> Array:  # noqa: N802 (NumPy's name)
        """Axes reversed."""
        return self._namespace.transpose(self)

    @property
    def mT(self) -> Array:  # noqa: N802 (NumPy's name)
        """The last two axes swapped."""
        return self._namespace.matrix_transpose(self)

    @property
    def real(self) -> Array:
        """Real part."""
        return self._namespace.real(self)

    @property
    def imag(self) -> Array:
        """Imaginary part."""
        return self._namespace.imag(self)

    def explain(self, *, source: bool = False) -> str:
        """The optimized plan, as printable text (see ``gnp.explain``)."""
        return self._namespace.explain(self, source=source)

    # --- NumPy protocols ------------------------------------------------------------------------------
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return self._namespace._array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        return self._namespace._array_function(func, types, args, kwargs)

    def __array_namespace__(self, *, api_version: str | None = None) -> Any:
        if api_version not in (None, "2021.12", "2022.12", "2023.12", "2024.12"):
            raise ValueError(f"unsupported array API version {api_version!r}")
        return self._namespace

    def to_device(self, device: Any, /, *, stream: Any = None) -> Array:
        """Array API ``to_device``: "cpu" moves blocks to NumPy, "gpu"/"cuda" to CuPy."""
        return self.to_backend({"cpu": "numpy"}.get(str(device), "cupy" if str(device).startswith(("gpu", "cuda")) else str(device)))



#: Python operator -> the gnp function ``x <op> y``, ``y <op> x`` and ``x <op>= y`` are
_BINARY_OPERATORS = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide", "floordiv": "floor_divide",
    "mod": "remainder", "pow": "pow", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
}
for _op, _func in _BINARY_OPERATORS.items():
    for _form, _implementation in zip(("__{}__", "__r{}__", "__i{}__"), _operators(_func)):
        setattr(Array, _form.format(_op), _implementation)


def host_value(value: Any, fetching: str | None = None) -> np.ndarray:
    """A small argument that decides what is built (quantiles, bin edges, indices, a lookup table) as a NumPy
    array: an Array made from a NumPy array (``gnp.asarray([5, 50, 95])``) gives that array without running
    anything; any other Array is computed (after the fetch guard's check, where ``fetching`` says what needs
    it); anything else is converted (a CuPy array copied to the host)."""
    if not isinstance(value, Array):
        return to_numpy(value)
    expr = value.expr
    if type(expr) is FromArray and type(expr.operand("array")) is np.ndarray:
        return expr.operand("array").astype(expr.dtype, copy=False)
    if fetching is not None:
        _guards.check_fetch(fetching, value.backend)
    return to_numpy(value.compute())


class _ToBackend(ArrayExpr):
    """Blocks moved between host (NumPy) and device (CuPy)."""

    _parameters = ["array", "backend"]
    _like = "array"

    def _block_task(self, index: Any) -> Any:
        return Task(self.key(index), as_block, self.array.ref(index), self.dtype, self.operand("backend"))


# exact types that are always operands
#: NumPy's scalar types of numbers and booleans (operands as users write them: ``x * np.float32(0.5)``,
#: ``x * np.sqrt(2.0)``), whose values are hashable
NUMPY_NUMBERS = frozenset(t for t in set(np.sctypeDict.values())
                          if issubclass(t, (np.number, np.bool_)) and not issubclass(t, np.timedelta64))
_PLAIN_OPERANDS = frozenset({Array, int, float, *NUMPY_NUMBERS})
