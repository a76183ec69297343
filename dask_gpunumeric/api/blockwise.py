"""``map_blocks``: run a function on every block, for what the other primitives don't express."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..expr import MapBlocks
from ..backend import namespace
from .array import Array, ArrayLike
from .creation import as_array
from .elementwise import align_chunks
from .manipulation import expand_dims, squeeze


def map_blocks(func: Callable[..., Any], *arrays: ArrayLike, dtype: Any = None, chunks: Any = None,
               name: str | None = None, offsets: bool = False, **kwargs: Any) -> Array:
    """Apply ``func`` block by block: output block ``i`` is ``func(*(a's block i for a in arrays),
    **kwargs)``. The arrays must share the output's block grid along every axis they have (one block along
    an axis broadcasts); ``chunks`` gives the output's chunks when they differ from the first array's,
    ``dtype`` its dtype (default: the first array's). With ``offsets=True``, ``func`` also receives
    ``block_offset`` (the block's position in the output) and ``global_shape``. ``func`` must be a
    picklable top-level function that works on NumPy and CuPy blocks (see ``_backend.namespace``)."""
    if not arrays:
        raise TypeError("map_blocks needs at least one array")
    arrs = [as_array(a) for a in arrays]
    first = arrs[0]
    out_chunks = first.chunks if chunks is None else tuple(tuple(int(c) for c in axis) for axis in chunks)
    numblocks = tuple(len(c) for c in out_chunks)
    for a in arrs:
        lead = len(numblocks) - a.ndim
        if lead < 0 or any(n not in (1, numblocks[lead + d]) for d, n in enumerate(a.numblocks)):
            raise ValueError(
                f"map_blocks: an input with blocks {a.numblocks} does not match the output's block grid "
                f"{numblocks}; rechunk it first"
            )
    label = name or getattr(func, "__name__", "map-blocks").strip("_").replace("_", "-") or "map-blocks"
    return Array(MapBlocks(func, label, out_chunks, np.dtype(dtype or first.dtype), kwargs, offsets,
                           *[a.expr for a in arrs]))


_CORE = r"\(\s*(?:\w+(?:\s*,\s*\w+)*)?\s*\)"
_SIGNATURE = re.compile(rf"^\s*{_CORE}(?:\s*,\s*{_CORE})*\s*->\s*{_CORE}(?:\s*,\s*{_CORE})*\s*$")


def _parse_signature(signature: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]], bool]:
    """Core dimension names of each input and output of a gufunc signature like ``"(i),(i)->()"``, and
    whether it has several outputs."""
    if not _SIGNATURE.match(signature):
        raise ValueError(f"not a valid gufunc signature: {signature!r} (e.g. '(i),(i)->()')")
    sides = [[tuple(d.strip() for d in group.split(",") if d.strip()) for group in re.findall(r"\(([^)]*)\)", side)]
             for side in signature.split("->")]
    return sides[0], sides[1], len(sides[1]) > 1


def _gufunc_block(*blocks: Any, gufunc: Callable[..., Any], loop_ndim: int,
                  layouts: tuple[tuple[int, int, int], ...], out_slot: tuple[int, int], out_index: int | None,
                  ndim: int, **kwargs: Any) -> Any:
    """One block of an ``apply_gufunc`` output: each input block gets back its own layout (``layouts``: its
    number of loop axes and the slot of its core axes), dropping the length-1 axes that stand for loop axes
    it lacks and for the other operands' core dimensions; ``gufunc`` runs, and its output ``out_index``
    (when several) gets such axes back around its own core dimensions (``out_slot`` of ``ndim`` axes)."""
    args = [b.reshape(b.shape[loop_ndim - loops:loop_ndim] + b.shape[start:stop])
            for b, (loops, start, stop) in zip(blocks, layouts)]
    out = gufunc(*args, **kwargs)
    out = namespace(*blocks).asarray(out if out_index is None else out[out_index])
    loop = out.shape[: out.ndim - (out_slot[1] - out_slot[0])]
    core = out.shape[len(loop):]
    return out.reshape(loop + (1,) * (out_slot[0] - loop_ndim) + core + (1,) * (ndim - out_slot[1]))


def apply_gufunc(func: Callable[..., Any], signature: str, *args: ArrayLike, output_dtypes: Any = None,
                 output_sizes: dict[str, int] | None = None, vectorize: bool = False, allow_rechunk: bool = False,
                 **kwargs: Any) -> Array | tuple[Array, ...]:
    """Apply ``func``, a generalized ufunc of ``signature`` (``"(i),(i)->()"``), block by block, as
    ``dask.array.apply_gufunc``: loop (leading) dimensions broadcast and keep their blocks, core (trailing)
    dimensions must be one block each (``allow_rechunk=True`` rechunks them so). ``output_dtypes`` (one per
    output; inferred from a small NumPy call when None) and ``output_sizes`` (lengths of output core
    dimensions that no input has) describe the outputs; ``kwargs`` go to ``func``. With ``vectorize``,
    ``func`` is wrapped in ``numpy.vectorize`` (NumPy blocks only). Several outputs give a tuple of
    Arrays (``func`` then runs once per output and block)."""
    core_in, core_out, several = _parse_signature(signature)
    arrays = [as_array(a) for a in args]
    if len(arrays) != len(core_in):
        raise ValueError(f"apply_gufunc: signature {signature!r} takes {len(core_in)} inputs, got {len(arrays)}")
    if vectorize:
        func = np.vectorize(func, signature=signature, otypes=output_dtypes)
    sizes: dict[str, int] = dict(output_sizes or {})
    for a, dims in zip(arrays, core_in):
        if a.ndim < len(dims):
            raise ValueError(f"apply_gufunc: an input of {a.ndim} dimensions has fewer than its core dimensions {dims}")
        for name, n in zip(dims, a.shape[a.ndim - len(dims):]):
            if sizes.setdefault(name, n) != n:
                raise ValueError(f"apply_gufunc: core dimension {name!r} has lengths {sizes[name]} and {n}")
    missing = sorted({d for dims in core_out for d in dims} - set(sizes))
    if missing:
        raise ValueError(f"apply_gufunc: output core dimensions {missing} are in no input; give their lengths "
                         "in output_sizes")
    loops = [a.shape[: a.ndim - len(dims)] for a, dims in zip(arrays, core_in)]
    loop_ndim = max(len(s) for s in loops)
    # Every operand's core dimensions get axes of their own after the loop axes (length 1 in the other
    # operands), so that map_blocks sees one block grid whatever the core dimensions are.
    slots, start = [], loop_ndim
    for dims in [*core_in, *core_out]:
        slots.append((start, start + len(dims)))
        start += len(dims)
    padded = []
    for a, dims, (lo, hi), loop in zip(arrays, core_in, slots, loops):
        for name, c in zip(dims, a.chunks[a.ndim - len(dims):]):
            if len(c) > 1 and not allow_rechunk:
                raise ValueError(f"Core dimension {name!r} consists of multiple chunks. To fix, rechunk into a single "
                                 "chunk along this dimension or set `allow_rechunk=True`, but beware that this may "
                                 "increase memory usage significantly.")
        a = a.rechunk(a.chunks[: len(loop)] + tuple((s,) for s in a.shape[len(loop):]))
        new_axes = tuple(range(loop_ndim - len(loop))) + tuple(d for d in range(loop_ndim, start) if not lo <= d < hi)
        padded.append(expand_dims(a, axis=new_axes) if new_axes else a)
    shape = np.broadcast_shapes(*(p.shape for p in padded))
    aligned = align_chunks([p.expr for p in padded], shape)
    padded = [Array(aligned[p.expr._name]) for p in padded]
    if output_dtypes is None:
        probes = [np.ones((1,) * len(loop) + a.shape[len(loop):], dtype=a.dtype) for a, loop in zip(arrays, loops)]
        try:
            result = func(*probes, **kwargs)
        except Exception as e:  # noqa: BLE001 - any failure means the dtype can't be inferred this way
            raise ValueError(f"apply_gufunc: cannot infer the output dtypes ({e}); pass output_dtypes") from None
        output_dtypes = [np.asarray(r).dtype for r in (result if several else [result])]
    dtypes = list(output_dtypes) if isinstance(output_dtypes, (list, tuple)) else [output_dtypes]
    if len(dtypes) != len(core_out):
        raise ValueError(f"apply_gufunc: {len(core_out)} output(s) in the signature, {len(dtypes)} output_dtypes")
    loop_chunks = tuple(max((p.chunks[d] for p in padded), key=len) for d in range(loop_ndim))
    layouts = tuple((len(loop), *slot) for loop, slot in zip(loops, slots))
    outputs = []
    for k, (dims, slot, dtype) in enumerate(zip(core_out, slots[len(core_in):], dtypes)):
        chunks = loop_chunks + tuple((1,) if not slot[0] <= d < slot[1] else (sizes[dims[d - slot[0]]],)
                                     for d in range(loop_ndim, start))
        out = map_blocks(_gufunc_block, *padded, chunks=chunks, dtype=dtype, name=getattr(func, "__name__", None),
                         gufunc=func, loop_ndim=loop_ndim, layouts=layouts, out_slot=slot,
                         out_index=k if several else None, ndim=start, **kwargs)
        trailing = tuple(d for d in range(slot[1], start))
        out = squeeze(out, axis=tuple(range(loop_ndim, slot[0])) + trailing) if slot[0] > loop_ndim or trailing else out
        outputs.append(out)
    return tuple(outputs) if several else outputs[0]
