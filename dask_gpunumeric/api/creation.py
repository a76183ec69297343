"""Creating Arrays: from existing data (NumPy, CuPy, dask.array, lists, anything with ``__array__``) and
from nothing (full, arange, linspace, eye). Blocks of created arrays are computed where they are needed."""
from __future__ import annotations

import functools
import hashlib
import math
import operator
import uuid
from typing import Any

import numpy as np
from dask.array.core import normalize_chunks as _dask_normalize_chunks
from dask.tokenize import tokenize

from .. import config
from ..expr import ArrayExpr, Creation, FromArray, FromGraph
from ..backend import backend_of, resolve
from ..runtime.cluster import active_workers
from .array import Array, ArrayLike
from .guards import check_fetch
from .namespace import supported_dtype

Shape = int | tuple[int, ...]


def normalize_chunks(chunks: Any, shape: tuple[int, ...], dtype: np.dtype, backend: str,
                     previous_chunks: Any = None) -> tuple[tuple[int, ...], ...]:
    """Chunks in every form Dask accepts ("auto", a byte size like "64MiB", an int, a block shape, explicit
    tuples, -1/None per axis, a dict by axis) turned into explicit tuples; "auto" aims at the backend's
    block size (``gnp.config``). With ``previous_chunks`` (a rechunk), axes that a dict leaves out or that
    are None keep their chunks, as in ``dask.array.rechunk``. Invalid chunks raise ValueError."""
    if isinstance(chunks, str) and chunks == "auto" and previous_chunks is None:
        per_worker = _chunks_per_worker(shape, np.dtype(dtype), config.chunk_bytes(backend))
        if per_worker is not None:
            return per_worker
    if isinstance(chunks, dict):
        chunks = tuple(chunks.get(d, chunks.get(d - len(shape))) for d in range(len(shape)))
    if previous_chunks is not None and isinstance(chunks, (tuple, list)) and len(chunks) == len(shape):
        chunks = tuple(p if c is None else c for c, p in zip(chunks, previous_chunks))
    parts = chunks if isinstance(chunks, (tuple, list)) else (chunks,)
    if 0 in shape:  # no data to size blocks by (Dask would divide by zero): "auto" and byte sizes mean whole axes
        parts = tuple(-1 if isinstance(c, str) else c for c in parts)
        chunks = parts if isinstance(chunks, (tuple, list)) else parts[0]
    # a byte size given in chunks sets the block size itself (Dask refuses a second, different limit)
    limit = None if any(isinstance(c, str) and c != "auto" for c in parts) else config.chunk_bytes(backend)
    try:
        out = _dask_chunks(chunks, shape, limit, np.dtype(dtype), previous_chunks)
    except (ValueError, TypeError, ZeroDivisionError) as e:
        raise ValueError(f"invalid chunks {chunks!r} for shape {shape}: {e}") from None
    return out


def _dask_chunks(chunks: Any, shape: tuple[int, ...], limit: int | None, dtype: np.dtype,
                 previous_chunks: Any) -> tuple[tuple[int, ...], ...]:
    """Dask's ``normalize_chunks``, refusing negative block lengths (ValueError), remembered for hashable
    arguments (arrays are made on every call of user code: the same shapes and chunk requests again and
    again)."""
    try:
        return _dask_chunks_cached(chunks, shape, limit, dtype, previous_chunks)
    except TypeError as e:
        if "unhashable" not in str(e):
            raise
        return _dask_chunks_cached.__wrapped__(chunks, shape, limit, dtype, previous_chunks)


@functools.lru_cache(maxsize=1024)
def _dask_chunks_cached(chunks: Any, shape: tuple[int, ...], limit: int | None, dtype: np.dtype,
                        previous_chunks: Any) -> tuple[tuple[int, ...], ...]:
    out = _dask_normalize_chunks(chunks, shape, limit=limit, dtype=dtype, previous_chunks=previous_chunks)
    if any(c < 0 for axis in out for c in axis):  # checked once per distinct request: the result is kept
        raise ValueError("negative block lengths")
    return out


def _chunks_per_worker(shape: tuple[int, ...], dtype: np.dtype, limit: int) -> tuple[tuple[int, ...], ...] | None:
    """With a cluster active: the leading axis split evenly over the workers (one block each, or a few
    each where a worker's share exceeds the block-size target), the other axes whole."""
    workers = len(active_workers())
    if workers < 2 or not shape or shape[0] < workers:
        return None
    share_bytes = -(-shape[0] // workers) * math.prod(shape[1:]) * dtype.itemsize
    blocks = workers * max(1, -(-share_bytes // limit))
    blocks = min(blocks, shape[0])
    base, extra = divmod(shape[0], blocks)
    return (tuple(base + (1 if i < extra else 0) for i in range(blocks)), *((n,) for n in shape[1:]))


def _data_token(x: np.ndarray) -> str:
    """A token of host data: its exact bytes for small arrays (Dask's tokenize gives the same token to 0-d
    NaNs of either sign), Dask's content hash for large ones."""
    if x.nbytes <= 2**20:
        data = np.ascontiguousarray(x)
        return hashlib.sha1(f"{data.dtype.str}{data.shape}".encode() + data.tobytes()).hexdigest()
    return tokenize(x)


def _shape(shape: Shape) -> tuple[int, ...]:
    if type(shape) is int and shape >= 0:  # (the common case, on every array made)
        return (shape,)
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    try:
        if any(isinstance(s, bool) for s in shape):  # NumPy takes no bools as lengths
            raise TypeError
        shape = tuple(map(operator.index, shape))
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimensions are not allowed (shape {shape})")
    return shape


def operator_index(value: Any) -> int:
    """``operator.index`` with NumPy's error message."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"'{type(value).__name__}' object cannot be interpreted as an integer") from None


def check_order(order: Any, what: str) -> None:
    """``order=``: blocks are C-ordered, which every order but "F" allows; "F" is refused."""
    if order not in ("K", "A", "C", None):
        if order in ("F", "f"):
            raise ValueError(f"{what}: order='F' is not supported (blocks are C-ordered); leave order out")
        raise ValueError(f"{what}: order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")


_DEVICE_BACKENDS = {"cpu": "numpy", "numpy": "numpy", "gpu": "cupy", "cuda": "cupy", "cupy": "cupy"}


def device_backend(device: Any, backend: str | None = None) -> str | None:
    """The backend named by an array API ``device`` ("cpu"/"numpy" or "gpu"/"cuda"/"cupy"; None: the
    default), unless ``backend`` is given."""
    if backend is not None or device is None:
        return backend
    name = str(device).split(":")[0].split(" ")[0]
    if name not in _DEVICE_BACKENDS:
        raise ValueError(f"unknown device {device!r}: use 'cpu' or 'gpu'")
    return _DEVICE_BACKENDS[name]


def _backend(backend: str | None) -> str:
    return resolve(backend) if backend is not None else config.backend()


def from_array(x: Any, chunks: Any = "auto", *, dtype: Any = None, backend: str | None = None) -> Array:
    """A lazy Array over existing data cut into blocks.

    ``x`` may be a NumPy or CuPy array, a dask.array, a gnp Array, a list or scalar, or anything with
    ``__array__``. ``chunks`` takes every form Dask accepts (default "auto"). Blocks live on ``backend``
    ("numpy" or "cupy"; default: CuPy input stays on the GPU, other input goes to ``gnp.config.backend()``).
    """
    if isinstance(x, Array):
        out = x if backend is None else x.to_backend(backend)
        out = out if chunks == "auto" else out.rechunk(chunks)
        return out if dtype is None else out.astype(dtype)
    if _is_dask_array(x):
        return from_dask_array(x, backend=backend).rechunk(chunks) if chunks != "auto" else from_dask_array(x, backend=backend)
    if backend is None:
        backend = "cupy" if backend_of(x) == "cupy" else config.backend()
    else:
        backend = _backend(backend)
    if backend_of(x) != "cupy":
        try:
            x = np.asarray(x)
        except (TypeError, ValueError) as e:  # NumPy's exception type (ValueError for ragged lists)
            raise type(e)(f"cannot make an Array from {type(x).__name__}: {e}") from None
        if x.dtype == object:
            raise TypeError(f"cannot make an Array from {type(x).__name__} of Python objects (dtype object)")
    # in the machine's byte order (big-endian data is converted block by block): CuPy knows no other, and
    # NumPy's operations would return native blocks from non-native ones
    dtype = (np.dtype(dtype) if dtype is not None else x.dtype).newbyteorder("=")
    on_host = backend_of(x) != "cupy"
    if not x.ndim and on_host and isinstance(chunks, str) and chunks == "auto":
        # a scalar (an accelerated call's salt or rate, made again on every call): one block, named by its data,
        # dtype and backend alone (no chunks to normalize, no Dask tokenize, no generic node constructor: most of
        # the host time of such a call before its first kernel launch, docs/benchmarks.md)
        data = f"{x.dtype.str}|{dtype.str}|{backend}|".encode() + x.tobytes()
        return Array(FromArray.of_scalar(x, dtype, backend, hashlib.sha1(data).hexdigest()))
    token = _data_token(x) if on_host else uuid.uuid4().hex
    if not x.ndim and isinstance(chunks, str) and chunks == "auto":  # (a 0-d CuPy array: named by a new token)
        return Array(FromArray(x, (), dtype, backend, hashlib.sha1(f"{token}{dtype.str}{backend}".encode()).hexdigest()))
    chunks = normalize_chunks(chunks, x.shape, dtype, backend)
    return Array(FromArray(x, chunks, dtype, backend, tokenize(token, chunks, str(dtype), backend)))


def asarray(a: Any, dtype: Any = None, order: Any = None, *, device: Any = None, copy: bool | None = None,
            like: Any = None, chunks: Any = "auto") -> Array:
    """Convert to an Array (array API ``asarray``): Arrays are returned as they are (cast if ``dtype``);
    other data go through ``from_array``. ``device`` may be "cpu"/"numpy" or "gpu"/"cupy".

    ``copy=True`` gives a new Array object (``__setitem__`` on it leaves ``obj`` alone) and snapshots array
    data (later writes to ``obj`` don't reach the Array); ``copy=False`` raises ValueError where a copy is
    needed (a dtype change, or input that is not an array), as NumPy does. ``like`` is accepted (the result is
    a gnp Array whatever it is); ``order="F"`` is refused (blocks are C-ordered).
    """
    obj = a
    check_order(order, "asarray")
    backend = device_backend(device)
    is_array = isinstance(obj, (Array, np.ndarray)) or backend_of(obj) == "cupy"
    if copy is False and (not is_array or dtype is not None and np.dtype(dtype) != obj.dtype):
        raise ValueError("copy=False was asked for, but this input needs a copy to become an Array")
    if isinstance(obj, Array):
        out = obj if backend is None else obj.to_backend(backend)
        out = out if dtype is None else out.astype(dtype, copy=False)
        return Array(out.expr) if copy and out is obj else out
    if copy and not _is_dask_array(obj):
        obj = obj.copy() if backend_of(obj) == "cupy" else np.array(obj, copy=True)
    return from_array(obj, chunks=chunks, dtype=dtype, backend=backend)


def as_array(x: ArrayLike) -> Array:
    """An Array from an Array or anything ``asarray`` takes."""
    return x if isinstance(x, Array) else asarray(x)


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Array:
    """An Array from any object with ``__dlpack__`` (host data through NumPy, CUDA data through CuPy)."""
    kind, _ = x.__dlpack_device__()
    if kind == 1:
        data = np.from_dlpack(x)
    else:
        import cupy

        data = cupy.from_dlpack(x)
    return asarray(data, device=device, copy=copy)


# Python and NumPy scalars: operands as they are (weak and strong scalars of NEP 50)
SCALAR_OPERANDS = (bool, int, float, complex, np.generic)


def as_operand(value: Any, backend: str | None, force_array: bool = False) -> Any:
    """An operand for an expression: Arrays as expressions, Python/NumPy scalars as they are (weak and
    strong scalars of NEP 50), other array-likes converted with ``from_array``."""
    if isinstance(value, Array):
        return value.expr
    if isinstance(value, ArrayExpr):
        return value
    if not force_array and isinstance(value, SCALAR_OPERANDS):
        return value
    if isinstance(value, (np.ndarray, list, tuple)) or hasattr(value, "__array__") or backend_of(value) == "cupy" \
            or isinstance(value, SCALAR_OPERANDS):
        return from_array(value, backend=backend).expr
    raise TypeError(f"unsupported operand type {type(value).__name__!r} for a gnp Array operation")


def _is_dask_array(x: Any) -> bool:
    return type(x).__module__.startswith("dask.array") and hasattr(x, "chunks") and hasattr(x, "dask")


def from_dask_array(x: Any, *, backend: str | None = None) -> Array:
    """Adopt a dask.array (blocks NumPy or CuPy) as a gnp Array, without computing it."""
    meta = getattr(x, "_meta", None)
    own = "cupy" if backend_of(meta) == "cupy" else "numpy"
    if any(math.isnan(c) for cs in x.chunks for c in cs):
        x = x.compute_chunk_sizes()
    layer = dict(x.__dask_optimize__(x.__dask_graph__(), x.__dask_keys__()))
    out = Array(FromGraph(layer, x.name, x.chunks, x.dtype, own))
    return out if backend is None or _backend(backend) == own else out.to_backend(backend)


def _creation(kind: str, shape: tuple[int, ...], dtype: np.dtype, chunks: Any, backend: str | None,
              params: tuple) -> Array:
    backend, dtype = _backend(backend), np.dtype(dtype)
    key = _made_key(kind, shape, dtype, chunks, backend, params)
    try:
        node = None if key is None else _MADE.get(key)
    except TypeError:  # (a setting that is no key)
        key = node = None
    if node is None:
        normalized = normalize_chunks(chunks, shape, dtype, backend)
        node = Creation.made([kind, normalized, dtype, backend, params], normalized, dtype, backend)
        if key is not None:
            if len(_MADE) >= _MADE_SIZE:
                _MADE.clear()
            _MADE[key] = node
    return Array(node)


# created nodes by everything that makes them (user code makes the same draws and constants call after call)
_MADE: dict[tuple, ArrayExpr] = {}
_MADE_SIZE = 256
_EXACT = frozenset({int, str, type(None)})  # types whose equal values write the same token text


def _made_key(kind: str, shape: tuple[int, ...], dtype: np.dtype, chunks: Any, backend: str,
              params: tuple) -> tuple | None:
    """The key of a created node in ``_MADE``: its arguments, the block size asked for and the number of workers
    ("auto" chunks split over a cluster's); None where equal arguments could make other nodes (floats: 0.0 and
    -0.0; True and 1), so that only the same node is ever found."""
    if not (_exact(params) and (type(chunks) in _EXACT or type(chunks) is tuple and _exact(chunks))):
        return None
    workers = len(active_workers()) if chunks == "auto" else 0
    return kind, shape, dtype, chunks, backend, params, config.get("chunk-size"), workers


def _exact(values: tuple) -> bool:
    """Whether a tuple holds ints, strings, None and tuples of those alone."""
    return all(type(v) in _EXACT or type(v) is tuple and _exact(v) for v in values)


def full(shape: Shape, fill_value: Any, dtype: Any = None, order: str = "C", *, device: Any = None, like: Any = None,
         chunks: Any = "auto", backend: str | None = None) -> Array:
    """An Array of ``shape`` filled with ``fill_value`` (dtype from the value unless given). ``like`` is
    accepted (the result is a gnp Array whatever it is); ``order="F"`` is refused (blocks are C-ordered)."""
    check_order(order, "full")
    if isinstance(fill_value, Array):
        check_fetch("using a lazy Array as fill_value of full()")
        fill_value = fill_value.item()
    dtype = supported_dtype(dtype if dtype is not None else np.asarray(fill_value).dtype, "full")
    return _creation("full", _shape(shape), dtype, chunks, device_backend(device, backend), (fill_value,))


def zeros(shape: Shape, dtype: Any = None, order: str = "C", *, device: Any = None, like: Any = None,
          chunks: Any = "auto", backend: str | None = None) -> Array:
    """An Array of zeros (float64 unless ``dtype``)."""
    return full(shape, 0, dtype or np.float64, order, device=device, chunks=chunks, backend=backend)


def ones(shape: Shape, dtype: Any = None, order: str = "C", *, device: Any = None, like: Any = None,
         chunks: Any = "auto", backend: str | None = None) -> Array:
    """An Array of ones (float64 unless ``dtype``)."""
    return full(shape, 1, dtype or np.float64, order, device=device, chunks=chunks, backend=backend)


def empty(shape: Shape, dtype: Any = None, order: str = "C", *, device: Any = None, like: Any = None,
          chunks: Any = "auto", backend: str | None = None) -> Array:
    """An uninitialized Array (float64 unless ``dtype``)."""
    check_order(order, "empty")
    dtype = np.dtype(dtype or np.float64)
    return _creation("empty", _shape(shape), dtype, chunks, device_backend(device, backend), ())


def _like(x: ArrayLike, dtype: Any, order: Any, shape: Shape | None,
          device: Any) -> tuple[tuple[int, ...], np.dtype, Any, str]:
    check_order(order, "*_like")
    a = as_array(x)
    shape_ = _shape(shape) if shape is not None else a.shape
    dtype_ = np.dtype(dtype) if dtype is not None else a.dtype
    return shape_, dtype_, a.chunks if shape is None else "auto", device_backend(device) or a.backend


def full_like(a: ArrayLike, fill_value: Any, dtype: Any = None, order: str = "K", subok: bool = True,
              shape: Shape | None = None, *, device: Any = None) -> Array:
    """An Array like ``a`` (shape, chunks, backend; dtype unless given) filled with ``fill_value``."""
    shape_, dtype_, chunks, backend = _like(a, dtype, order, shape, device)
    return full(shape_, fill_value, dtype=dtype_, chunks=chunks, backend=backend)


def zeros_like(a: ArrayLike, dtype: Any = None, order: str = "K", subok: bool = True, shape: Shape | None = None, *,
               device: Any = None) -> Array:
    """Zeros like ``a``."""
    return full_like(a, 0, dtype, order, subok, shape, device=device)


def ones_like(a: ArrayLike, dtype: Any = None, order: str = "K", subok: bool = True, shape: Shape | None = None, *,
              device: Any = None) -> Array:
    """Ones like ``a``."""
    return full_like(a, 1, dtype, order, subok, shape, device=device)


def empty_like(a: ArrayLike, dtype: Any = None, order: str = "K", subok: bool = True, shape: Shape | None = None, *,
               device: Any = None) -> Array:
    """An uninitialized Array like ``a``."""
    shape_, dtype_, chunks, backend = _like(a, dtype, order, shape, device)
    return empty(shape_, dtype=dtype_, chunks=chunks, backend=backend)


def arange(start: Any, /, stop: Any = None, step: Any = 1, dtype: Any = None, *, device: Any = None,
           like: Any = None, chunks: Any = "auto", backend: str | None = None) -> Array:
    """Evenly spaced values in ``[start, stop)``, as ``numpy.arange``."""
    if dtype is None:  # NumPy's rule: at least the default integer, promoted with each argument's dtype
        dtype = np.result_type(np.intp, *(np.asarray(v).dtype for v in (start, stop, step) if v is not None))
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ZeroDivisionError("arange: step must not be zero")
    n = max(0, math.ceil((stop - start) / step))
    dtype = np.dtype(dtype)
    return _creation("arange", (n,), dtype, chunks, device_backend(device, backend), (start, step))


def linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, retstep: bool = False, dtype: Any = None,
             axis: int = 0, *, device: Any = None, chunks: Any = "auto", backend: str | None = None) -> Any:
    """``num`` evenly spaced values from ``start`` to ``stop`` (``stop`` left out unless ``endpoint``), as
    ``numpy.linspace``; with ``retstep``, the pair (values, step). ``start`` and ``stop`` are scalars."""
    if np.ndim(start) or np.ndim(stop) or isinstance(start, Array) or isinstance(stop, Array):
        raise NotImplementedError("linspace: start and stop must be scalars (arrays of them are not supported)")
    if axis not in (0, -1):
        raise np.exceptions.AxisError(axis, 1)
    num = operator_index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else (stop - start) * 0.0
    dtype = np.dtype(dtype) if dtype is not None else np.result_type(float(0.0), start, stop)
    out = _creation("linspace", (num,), dtype, chunks, device_backend(device, backend),
                    (start, step, num, stop, endpoint))
    return (out, step if div > 0 else np.nan) if retstep else out


def eye(N: int, M: int | None = None, k: int = 0, dtype: Any = None, order: str = "C", *,  # noqa: N803
        device: Any = None, like: Any = None, chunks: Any = "auto", backend: str | None = None) -> Array:
    """A 2-D Array of ``N`` rows and ``M`` columns (``N`` unless given) with ones on diagonal ``k`` and zeros
    elsewhere."""
    check_order(order, "eye")
    shape = _shape((N, N if M is None else M))
    return _creation("eye", shape, np.dtype(dtype or np.float64), chunks, device_backend(device, backend),
                     (operator_index(k),))
