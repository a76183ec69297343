"""``gnp.Array``: the Dask collection users hold. A thin object around an immutable ``ArrayExpr``.

Methods and operators build new expressions (nothing runs until ``compute``/``persist``/``fetch``); the
Dask collection protocol lets ``dask.compute``, ``dask.persist``, ``Client.compute``, xarray and others
treat it like any Dask collection; ``__array_ufunc__``/``__array_function__`` route NumPy calls here.
"""
from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any, Union

import dask
import numpy as np
from dask._task_spec import convert_legacy_graph, cull
from dask.base import DaskMethodsMixin
from dask.core import flatten

from . import guards as _guards
from ..kernels.backend import device_name, to_numpy
from ..expr.nodes import ArrayExpr, FromGraph, Materialized
from ..runtime.faults import local_scheduler

ArrayLike = Union["Array", np.ndarray, int, float, complex, bool, list, Any]


def _finalize(results: Any, numblocks: tuple[int, ...]) -> Any:
    from ..kernels.blocks import concatenate_grid

    def flatten(x: Any) -> list:
        return [y for item in x for y in flatten(item)] if isinstance(x, (list, tuple)) else [x]

    return concatenate_grid(flatten(results), numblocks)


class Array(DaskMethodsMixin):
    """A lazy, chunked N-d array whose blocks are CuPy arrays on a GPU or NumPy arrays on the CPU."""

    __slots__ = ("_expr",)
    __array_priority__ = 20

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
        return Materialized((self._expr,)).__dask_graph__()

    def __dask_keys__(self) -> list:
        return self._expr.__dask_keys__()

    def __dask_layers__(self) -> tuple[str, ...]:
        return (self._expr._name,)

    def __dask_tokenize__(self) -> str:
        return self._expr._name

    @property
    def __dask_scheduler__(self) -> Any:
        return local_scheduler(self.backend)

    @staticmethod
    def __dask_optimize__(dsk: Any, keys: Any, **kwargs: Any) -> Any:
        return dsk

    def __dask_postcompute__(self) -> tuple:
        return _finalize, (self.numblocks,)

    def __dask_postpersist__(self) -> tuple:
        return self._rebuild, ()

    def _rebuild(self, dsk: Any, *args: Any, rename: dict | None = None) -> Array:
        """An Array over ``dsk``: either this Array's computed blocks (persist) or a whole graph holding
        them (``dask.optimize``, graph manipulation; ``rename`` gives the blocks' new name), culled to them."""
        e = self._expr
        name = (rename or {}).get(e._name, e._name)
        keys = [(name, *k[1:]) for k in flatten(self.__dask_keys__())]
        layer = dict(dsk)
        if layer.keys() != set(keys):
            if rename is None:  # dask.optimize: dask made the unfused graph of the expression; what runs is ours
                layer = self.__dask_graph__()
            layer = cull(convert_legacy_graph(layer), keys)
        return Array(FromGraph(layer, name, e.chunks, e.dtype, e.backend))

    def __reduce__(self) -> tuple:
        return Array, (self._expr,)

    def visualize(self, filename: str | None = "mydask", format: str | None = None, optimize_graph: bool = False,
                  **kwargs: Any) -> Any:
        """Draw the task graph that runs (fused, named as on the dashboard) with ``dask.visualize``."""
        return dask.visualize(dask.optimize(self)[0], filename=filename, format=format, **kwargs)

    # --- metadata -------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """Length of each axis."""
        return self._expr.shape

    @property
    def dtype(self) -> np.dtype:
        """Element type."""
        return self._expr.dtype

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return self._expr.ndim

    @property
    def size(self) -> int:
        """Number of elements."""
        return self._expr.size

    @property
    def nbytes(self) -> int:
        """Bytes of all elements."""
        return self.size * self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        """Block lengths along each axis, as in dask.array."""
        return self._expr.chunks

    @property
    def chunksize(self) -> tuple[int, ...]:
        """The largest block's shape."""
        return self._expr.chunksize

    @property
    def numblocks(self) -> tuple[int, ...]:
        """Number of blocks along each axis."""
        return self._expr.numblocks

    @property
    def npartitions(self) -> int:
        """Total number of blocks."""
        return int(np.prod(self.numblocks))

    @property
    def name(self) -> str:
        """The key name of this Array's blocks."""
        return self._expr._name

    @property
    def backend(self) -> str:
        """"cupy" when blocks are CuPy arrays, "numpy" otherwise."""
        return self._expr.backend

    @property
    def device(self) -> str:
        """Where the blocks live: "cpu" or "cuda:<id> (<name>)"."""
        return device_name(self.backend)

    @property
    def _meta(self) -> Any:
        return self._expr._meta

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
    def item(self) -> Any:
        """The single element as a Python scalar (explicit fetch: always allowed)."""
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return to_numpy(self.compute()).item()

    def tolist(self) -> Any:
        """The data as nested Python lists (explicit fetch)."""
        return to_numpy(self.compute()).tolist()

    def _implicit_scalar(self, what: str, convert: Any) -> Any:
        _guards.check_fetch(f"{what}({self!r})")
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

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = to_numpy(self.compute())
        return out if dtype is None else out.astype(dtype)

    def __iter__(self) -> Iterator[Any]:
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        _guards.check_iteration(self.shape)
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
        from ..kernels.backend import resolve

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
        from .indexing import getitem

        return getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        from .indexing import setitem

        self._expr = setitem(self, index, value).expr

    # --- NumPy protocols ------------------------------------------------------------------------------
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        from .interop import array_ufunc

        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        from .interop import array_function

        return array_function(func, types, args, kwargs)

    def __array_namespace__(self, *, api_version: str | None = None) -> Any:
        if api_version not in (None, "2021.12", "2022.12", "2023.12", "2024.12"):
            raise ValueError(f"unsupported array API version {api_version!r}")
        import dask_gpunumeric

        return dask_gpunumeric

    def to_device(self, device: Any, /, *, stream: Any = None) -> Array:
        """Array API ``to_device``: "cpu" moves blocks to NumPy, "gpu"/"cuda" to CuPy."""
        return self.to_backend({"cpu": "numpy"}.get(str(device), "cupy" if str(device).startswith(("gpu", "cuda")) else str(device)))


class _ToBackend(ArrayExpr):
    """Blocks moved between host (NumPy) and device (CuPy)."""

    _parameters = ["array", "backend"]
    _like = "array"

    def _block_task(self, index: Any) -> Any:
        from dask._task_spec import Task

        from ..kernels.blocks import as_block

        return Task(self.key(index), as_block, self.array.ref(index), self.dtype, self.operand("backend"))
