"""dask_gpunumeric: NumPy-style arrays on every GPU of a node or cluster, as a lazy Dask collection.

>>> import dask_gpunumeric as gnp
>>> x = gnp.arange(10, chunks=4)
>>> gnp.fetch(gnp.sum(x * x))
285
"""
from __future__ import annotations

import importlib.util as _importlib_util

import numpy as _np

from . import config, fft, lib, linalg, random
from . import _operators  # noqa: F401  (attaches operators and methods to Array)
from ._accelerate import accelerate
from ._loops import fori_loop, while_loop
from ._array import Array
from ._blockwise import apply_gufunc, map_blocks
from ._checkpoint import checkpoint
from ._overlap import map_overlap
from ._cluster import cluster
from ._coverage import coverage
from ._contraction import matmul
from ._creation import (
    arange, asarray, empty, empty_like, eye, from_array, from_dask_array, from_dlpack, full, full_like, linspace, ones,
    ones_like, zeros, zeros_like,
)
from ._elementwise import *  # noqa: F403  (every elementwise function by its standard and NumPy name)
from ._elementwise import FUNCTIONS as _ELEMENTWISE
from ._elementwise import astype, clip, round, where  # noqa: A004
from ._explain import explain
from ._faults import OutOfMemoryError
from ._guards import FetchError, PromotionError, ScalarIndexingError, allowfetch, allowpromotion, allowscalar
from ._namespace import __array_namespace_info__, can_cast, finfo, iinfo, isdtype, result_type
from ._manipulation import (
    broadcast_arrays, broadcast_to, concat, expand_dims, flip, matrix_transpose, moveaxis, permute_dims, ravel,
    rechunk, reshape, roll, squeeze, stack, swapaxes, transpose, unstack,
)
from ._protocols import FallbackWarning, fetch, register as _register
from ._sorting import *  # noqa: F403  (sort, argsort, searchsorted, nonzero, unique_*, count_nonzero, ...)
from ._statistics import *  # noqa: F403  (nan* reductions, median, percentile, quantile, histogram, ...)
from ._tensor import dot, einsum, outer, tensordot, vecdot
from ._utility import *  # noqa: F403  (take, tile, repeat, meshgrid, tril, triu, diff, pad, convolve, ...)
from . import _sorting, _statistics, _tensor, _utility
from ._reductions import (
    all, any, argmax, argmin, cumprod, cumsum, cumulative_prod, cumulative_sum, max, mean, min, prod, std, sum,
    var,
)

__version__ = "0.1.0"
__array_api_version__ = "2024.12"

# dtypes and constants of the array API namespace (NumPy's objects, so they compare equal to them)
bool = _np.bool_  # noqa: A001
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
complex64, complex128 = _np.complex64, _np.complex128
e, pi, inf, nan, newaxis = _np.e, _np.pi, _np.inf, _np.nan, None
concatenate = concat

# numpy.f(gnp_array, ...) -> gnp.f(...)
for _name, _func in {
    **_ELEMENTWISE, "where": where, "clip": clip, "round": round, "around": round, "astype": astype,
    "sum": sum, "prod": prod, "mean": mean, "var": var, "std": std, "min": min, "max": max, "amin": min,
    "amax": max, "all": all, "any": any, "argmin": argmin, "argmax": argmax, "cumsum": cumsum,
    "cumprod": cumprod, "cumulative_sum": cumulative_sum, "cumulative_prod": cumulative_prod,
    "broadcast_arrays": broadcast_arrays, "broadcast_to": broadcast_to, "concatenate": concat, "concat": concat,
    "expand_dims": expand_dims, "flip": flip, "matrix_transpose": matrix_transpose, "moveaxis": moveaxis,
    "permute_dims": permute_dims, "ravel": ravel, "reshape": reshape, "roll": roll, "squeeze": squeeze,
    "stack": stack, "swapaxes": swapaxes, "transpose": transpose, "zeros_like": zeros_like,
    "ones_like": ones_like, "full_like": full_like, "empty_like": empty_like, "matmul": matmul,
}.items():
    if hasattr(_np, _name):
        _register(getattr(_np, _name), _func)
_register(_np.lib.stride_tricks.sliding_window_view, lib.stride_tricks.sliding_window_view)
for _module in (_utility, _tensor, _sorting, _statistics):
    for _name in _module.__all__:
        if hasattr(_np, _name):
            _register(getattr(_np, _name), getattr(_module, _name))
for _numpy_module, _gnp_module in ((_np.linalg, linalg), (_np.fft, fft)):
    for _name in _gnp_module.__all__:
        if callable(getattr(_numpy_module, _name, None)) and not isinstance(getattr(_numpy_module, _name), type):
            _register(getattr(_numpy_module, _name), getattr(_gnp_module, _name))

if _importlib_util.find_spec("xarray") is not None:  # gnp Arrays in xarray objects (see dask_gpunumeric.xarray)
    from . import xarray as _xarray

    _xarray.register()
