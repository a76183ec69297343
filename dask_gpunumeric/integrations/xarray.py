"""xarray integration: gnp Arrays as the chunked arrays inside DataArrays and Datasets.

``GpuNumericManager`` is xarray's chunk manager for them (``chunked_array_type="gpunumeric"``), so that
xarray's operations build gnp expressions, fused when they run. A gnp Array is also a Dask collection, which
xarray's own dask manager would claim too ("Multiple ChunkManagers recognise type"): ``register()`` (run on
import) therefore also puts in the "dask" slot xarray's dask manager narrowed to leave gnp Arrays alone, and
gives gnp Arrays NumPy's indexing rules in xarray's adapter. Details: docs/xarray.md."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xarray.core import indexing
from xarray.namedarray.daskmanager import DaskManager
from xarray.namedarray.parallelcompat import ChunkManagerEntrypoint, list_chunkmanagers

from .. import config
from ..api.array import Array
from ..api.blockwise import apply_gufunc, map_blocks
from ..api.creation import from_array, from_dask_array, normalize_chunks
from ..api.manipulation import moveaxis
from ..backend import backend_of

__all__ = ["DaskArrayManager", "DaskIndexingAdapter", "GpuNumericManager", "register"]


class GpuNumericManager(ChunkManagerEntrypoint[Array]):
    """xarray's interface to gnp Arrays (registered as "gpunumeric")."""

    available = True

    def __init__(self) -> None:
        self.array_cls = Array

    def is_chunked_array(self, data: Any) -> bool:
        return isinstance(data, Array)

    def chunks(self, data: Array) -> tuple[tuple[int, ...], ...]:
        return data.chunks

    def normalize_chunks(self, chunks: Any, shape: tuple[int, ...] | None = None, limit: int | None = None,
                         dtype: Any = None, previous_chunks: Any = None) -> tuple[tuple[int, ...], ...]:
        """Chunks in every form Dask accepts as explicit tuples; "auto" aims at gnp's block size for the
        current backend (or at ``limit`` bytes when given)."""
        target = config.set(chunk_size=limit) if limit is not None else contextlib.nullcontext()
        with target:
            return normalize_chunks(chunks, tuple(shape or ()), np.dtype(dtype or np.float64), config.backend(),
                                    previous_chunks=previous_chunks)

    def get_auto_chunk_size(self) -> int:
        """Bytes of an "auto" block on the current backend."""
        return config.chunk_bytes(config.backend())

    def from_array(self, data: Any, chunks: Any, **kwargs: Any) -> Array:
        """A gnp Array over in-memory data (NumPy or CuPy), or over a lazily indexed file-backed array
        (what ``open_dataset``/``open_zarr`` give) read block by block when computed, then moved to the
        current backend. ``kwargs`` (``name``, ``lock``, ``inline_array``, ...) go to the reading tasks."""
        if isinstance(data, np.ndarray) or backend_of(data) == "cupy":
            return from_array(data, chunks)
        import dask.array as da

        if any(s == 0 for s in data.shape):
            chunks = data.shape  # dask cannot size "auto" blocks of an empty axis
        return from_dask_array(da.from_array(data, chunks, meta=np.ndarray, **kwargs), backend=config.backend())

    def rechunk(self, data: Array, chunks: Any, **kwargs: Any) -> Array:
        return data.rechunk(chunks)

    def compute(self, *data: Any, **kwargs: Any) -> tuple[Any, ...]:
        import dask

        return dask.compute(*data, **kwargs)

    def persist(self, *data: Any, **kwargs: Any) -> tuple[Any, ...]:
        import dask

        return dask.persist(*data, **kwargs)

    @property
    def array_api(self) -> Any:
        """The namespace xarray calls for chunked data: gnp."""
        return _Namespace(Array._namespace)

    def apply_gufunc(self, func: Callable[..., Any], signature: str, *args: Any, **kwargs: Any) -> Any:
        return apply_gufunc(func, signature, *args, **kwargs)

    def map_blocks(self, func: Callable[..., Any], *args: Any, dtype: Any = None, chunks: Any = None,
                   drop_axis: Any = None, new_axis: Any = None, **kwargs: Any) -> Array:
        """``func`` on every block (``gnp.map_blocks``); axes can't be dropped or added (use
        ``xr.apply_ufunc`` with core dimensions for that)."""
        if drop_axis is not None or new_axis is not None:
            raise NotImplementedError("gnp map_blocks keeps the axes of its inputs: drop_axis and new_axis are not "
                                      "supported; use xr.apply_ufunc with core dimensions")
        return map_blocks(func, *args, dtype=dtype, chunks=chunks, **kwargs)

    def store(self, sources: Array | Sequence[Array], targets: Any, **kwargs: Any) -> Any:
        """Write arrays into ``targets`` (zarr or netCDF variables) block by block, through
        ``dask.array.store`` over the same blocks brought to the host."""
        import dask.array as da

        many = isinstance(sources, (list, tuple))
        host = [s.to_backend("numpy").to_dask_array() for s in (sources if many else [sources])]
        return da.store(host if many else host[0], targets, **kwargs)


class _Namespace:
    """gnp as xarray's chunked-array namespace: every gnp function, plus ``sliding_window_view`` at the top
    level, where xarray looks for it (``rolling``)."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def sliding_window_view(self, x: Array, window_shape: Any, axis: Any = None, *,
                            automatic_rechunk: bool = True) -> Array:
        """``gnp.lib.stride_tricks.sliding_window_view``; ``automatic_rechunk`` is dask.array's option
        (xarray passes it): gnp's windows are views of their blocks, so there is nothing to rechunk."""
        return self._module.lib.stride_tricks.sliding_window_view(x, window_shape, axis=axis)


class DaskArrayManager(DaskManager):
    """xarray's dask manager for dask.array only: gnp Arrays are Dask collections too, but they belong to
    ``GpuNumericManager``."""

    def is_chunked_array(self, data: Any) -> bool:
        return not isinstance(data, Array) and super().is_chunked_array(data)

    def from_array(self, data: Any, chunks: Any, **kwargs: Any) -> Any:
        """A dask.array over ``data``; a gnp Array is only rechunked (``.chunk()`` of a gnp-backed object
        without ``chunked_array_type`` keeps its kind rather than wrapping one collection in another)."""
        if isinstance(data, Array):
            return data.rechunk(chunks)
        return super().from_array(data, chunks, **kwargs)


class DaskIndexingAdapter(indexing.DaskIndexingAdapter):
    """xarray's indexing adapter for Dask collections, which gnp Arrays are, with NumPy's indexing rules
    taken into account for them: dask.array refuses several index arrays (and xarray then indexes one axis
    at a time), whereas gnp, like NumPy, selects points with them; and gnp has no ``vindex``."""

    def _oindex_get(self, indexer: indexing.OuterIndexer) -> Any:
        if not isinstance(self.array, Array):
            return super()._oindex_get(indexer)
        value = self.array
        for axis, key in reversed(list(enumerate(indexer.tuple))):  # orthogonal: one axis at a time
            value = value[(slice(None),) * axis + (key,)]
        return value

    def _vindex_get(self, indexer: indexing.VectorizedIndexer) -> Any:
        if not isinstance(self.array, Array):
            return super()._vindex_get(indexer)
        key = indexer.tuple
        value = self.array[key]
        arrays = [d for d, k in enumerate(key) if not isinstance(k, slice)]
        if arrays and arrays[0] > 0 and arrays == list(range(arrays[0], arrays[-1] + 1)):
            # NumPy leaves adjacent index arrays' dimensions where they are; xarray wants them first
            n = np.broadcast(*(key[d] for d in arrays)).ndim
            value = moveaxis(value, tuple(range(arrays[0], arrays[0] + n)), tuple(range(n)))
        return value


def register() -> None:
    """Make xarray use gnp Arrays through ``GpuNumericManager`` ("gpunumeric"), narrow xarray's own dask
    manager ("dask") to dask.arrays, and index gnp Arrays with NumPy's rules (``DaskIndexingAdapter``).
    Idempotent; runs on ``import dask_gpunumeric`` when xarray is importable."""
    if indexing.DaskIndexingAdapter is DaskIndexingAdapter.__base__:
        indexing.DaskIndexingAdapter = DaskIndexingAdapter  # what xarray.core.indexing.as_indexable makes
    managers = list_chunkmanagers()
    if not isinstance(managers.get("gpunumeric"), GpuNumericManager):
        managers["gpunumeric"] = GpuNumericManager()
    if type(managers.get("dask")) is DaskManager:
        managers["dask"] = DaskArrayManager()
