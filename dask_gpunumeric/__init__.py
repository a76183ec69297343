"""dask_gpunumeric: NumPy-style arrays on every GPU of a node or cluster, as a lazy Dask collection.

>>> import dask_gpunumeric as gnp
>>> x = gnp.arange(10, chunks=4)
>>> gnp.fetch(gnp.sum(x * x))
285
"""
from __future__ import annotations

import importlib.util as _importlib_util
import sys as _sys

import numpy as _np

from . import config, fft, lib, linalg, random
from .api.accelerate import AccelerateWarning, accelerate
from .api.loops import fori_loop, while_loop
from .api.array import Array
from .api.blockwise import apply_gufunc, map_blocks
from .api.checkpoint import checkpoint
from .api.overlap import map_overlap
from .runtime.cluster import cluster
from .api.coverage import coverage
from .api.creation import (
    arange, asarray, empty, empty_like, eye, from_array, from_dask_array, from_dlpack, full, full_like, linspace, ones,
    ones_like, zeros, zeros_like,
)
from .api.elementwise import *  # noqa: F403  (every elementwise function by its standard and NumPy name)
from .api.elementwise import FUNCTIONS as _ELEMENTWISE
from .api.elementwise import astype, clip, round  # noqa: A004
from .api.explain import explain
from .runtime.faults import OutOfMemoryError
from .expr import TracedValueError
from .api.guards import (
    FetchError, FetchWarning, GuardWarning, PromotionError, PromotionWarning, ScalarIndexingError,
    ScalarIndexingWarning, allowfetch, allowpromotion, allowscalar,
)
from .api.namespace import __array_namespace_info__, can_cast, finfo, iinfo, isdtype, result_type
from .api.manipulation import (
    broadcast_arrays, broadcast_to, concat, expand_dims, flip, matrix_transpose, meshgrid, moveaxis, permute_dims,
    ravel, rechunk, reshape, roll, squeeze, stack, swapaxes, transpose, unstack,
)
from .api.indexing import getitem as _getitem
from .api.indexing import setitem as _setitem
from .api.interop import NAMESPACES as _NAMESPACES, FallbackWarning, register as _register
from .api.interop import array_function as _array_function
from .api.interop import array_ufunc as _array_ufunc
from .api.interop import namespace_function as _namespace_function
from .runtime.compute import compute, persist
from .runtime.fetch import fetch
from .api.sorting import *  # noqa: F403  (sort, argsort, searchsorted, nonzero, where, unique_*, ...)
from .api.sorting import where
from .api.statistics import *  # noqa: F403  (nan* reductions, median, percentile, quantile, histogram, ...)
from .api.tensor import dot, einsum, matmul, outer, tensordot, vecdot
from .api.stacking import *  # noqa: F403  (vstack, hstack, split, atleast_2d, kron, trace, tri, logspace, ...)
from .api.numeric import *  # noqa: F403  (cross, isin, interp, lexsort, partition, polyfit, polyval, ...)
from .api.constructors import *  # noqa: F403  (array, indices, windows, is* predicates, inner, vdot, ...)
from .api import comparison as _comparison
from .api import constructors as _constructors
from .api import convolution as _convolution
from .api import differences as _differences
from .api import matrices as _matrices
from .api import numeric as _numeric
from .api import padding as _padding
from .api import selection as _selection
from .api import stacking as _stacking
from .api import sorting as _sorting
from .api import statistics as _statistics
from .api import tensor as _tensor
from .api import tiling as _tiling
from .api.comparison import allclose, array_equal, array_equiv, isclose
from .api.convolution import convolve
from .api.differences import diff, gradient, trapezoid
from .api.matrices import diag, tril, triu
from .api.padding import pad
from .api.selection import take, take_along_axis
from .api.tiling import repeat, tile
from .api.reductions import (
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
    "ones_like": ones_like, "full_like": full_like, "empty_like": empty_like, "meshgrid": meshgrid,
    # numpy.zeros(..., like=gnp_array) and the other creation functions that take like=
    "zeros": zeros, "ones": ones, "empty": empty, "full": full, "eye": eye, "arange": arange, "asarray": asarray,
}.items():
    if hasattr(_np, _name):
        _register(getattr(_np, _name), _func)
_register(_np.lib.stride_tricks.sliding_window_view, lib.stride_tricks.sliding_window_view)
for _module in (_selection, _tiling, _matrices, _differences, _comparison, _padding, _convolution, _tensor,
                _sorting, _statistics, _stacking, _numeric, _constructors):
    for _name in _module.__all__:
        if hasattr(_np, _name):
            _register(getattr(_np, _name), getattr(_module, _name))
for _numpy_module, _gnp_module in ((_np.linalg, linalg), (_np.fft, fft)):
    for _name in _gnp_module.__all__:
        if callable(getattr(_numpy_module, _name, None)) and not isinstance(getattr(_numpy_module, _name), type):
            _register(getattr(_numpy_module, _name), getattr(_gnp_module, _name))

# Array's methods and operators are these functions (they build on Array, so Array can't import them)
Array._namespace = _sys.modules[__name__]

if _importlib_util.find_spec("xarray") is not None:  # gnp Arrays in xarray objects (see dask_gpunumeric.xarray)
    from .integrations import xarray as _xarray

    _xarray.register()

_NAMESPACES.update({"": _sys.modules[__name__], "linalg.": linalg, "fft.": fft})


def __getattr__(name: str) -> object:
    """NumPy functions without a native version here: NumPy's dispatch to ours, else the fallback (a
    ``FallbackWarning`` says which), so that NumPy code with only the import changed runs."""
    return _namespace_function(name)
