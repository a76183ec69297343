"""Elementwise functions: validation, NumPy 2 / NEP 50 dtype rules, the promotion guard, broadcasting and
chunk alignment, all building one ``Elemwise`` expression.

Every array API (2024.12) elementwise function is here under its standard name, plus the NumPy names
users reach for. Each maps to the function of the same behaviour in NumPy and CuPy (``BLOCK_FUNCTION``).
"""
from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

import numpy as np

from ..expr import ArrayExpr, Chunks, Elemwise, joined_leaves
from ..expr.elemwise import NO_KWARGS, broadcast_chunks, token_head
from ..expr.replay import Kept, rebuilt, template_of
from ..ops.ufuncs import BLOCK_FUNCTION, UFUNCS
from . import guards as _guards
from . import special_values as _special_values
from .scalars import KINDS, Param
from .array import NUMPY_NUMBERS, Array, ArrayLike
from .creation import SCALAR_OPERANDS, as_array, as_operand, check_order, device_backend
from .manipulation import broadcast_shape, check_output_cast, rechunk_expr, store
from .namespace import supported_dtype, warn_integer_division_by_zero
from . import kept_nodes as _kept_nodes
from .kept_nodes import KEPT as _KEPT, NEVER, keep
from .recipes import reused

# gnp function name -> the NumPy/CuPy function of the same behaviour (the registry: ``ops.ufuncs``)
_UNARY = {name: u.numpy for u in UFUNCS.values() if u.arity == 1 for name in u.names}
_BINARY = {name: u.numpy for u in UFUNCS.values() if u.arity == 2 for name in u.names}

# the public functions (``from ._elementwise import *`` in the package): the helpers below stay internal
__all__ = [*_UNARY, *_BINARY, "clip", "round", "astype"]


def _dtypes(op: str, operands: list[Any], kwargs: dict, skip: int) -> tuple[np.dtype, np.dtype | None]:
    """The dtype NumPy gives ``op`` on operands of these dtypes (NEP 50: Python scalars are weak), and the
    common dtype of the operands the promotion guard looks at (after ``skip`` leading ones) where it is
    wider than one of their arrays' dtypes (else None)."""
    key = tuple([a.dtype if isinstance(a, ArrayExpr) else (type(a), a) for a in operands])
    args = (op, key, tuple(sorted(kwargs.items())) if kwargs else (), skip)
    try:
        return _operation_dtypes(*args)
    except TypeError as e:
        if "unhashable" not in str(e):
            raise
        return _operation_dtypes.__wrapped__(*args)


# ops whose trailing operands keep their own dtype (ldexp's integer exponent): how many leading ones are promoted
_PROMOTED_OPERANDS = {"ldexp": 1}


# entries of the caches below keyed by scalar values (a loop's changing constants) are made amid the nodes of
# the expression being built: kept, each keeps its part of that memory from being reused compactly by later
# expressions (the optimizer walks them measurably slower), so few are kept
_SHORT_PLANS_SIZE = 1024


@functools.lru_cache(maxsize=_SHORT_PLANS_SIZE)
def _operation_dtypes(op: str, operands: tuple, kwargs: tuple, skip: int) -> tuple[np.dtype, np.dtype | None]:
    def probe(o: Any) -> Any:
        return np.empty((0,), dtype=o) if isinstance(o, np.dtype) else o[1]

    func = getattr(np, BLOCK_FUNCTION[op])
    with np.errstate(all="ignore"):
        out = np.asarray(func(*[probe(o) for o in operands], **dict(kwargs))).dtype
    promoted = operands[skip:][: _PROMOTED_OPERANDS.get(op)]
    arrays = [o for o in promoted if isinstance(o, np.dtype)]
    if len(promoted) < 2 or not arrays:
        return out, None
    common = np.result_type(*[probe(o) for o in promoted])
    return out, common if _guards.widened(arrays, common) else None


def align_chunks(arrays: list[ArrayExpr], shape: tuple[int, ...]) -> dict[str, ArrayExpr]:
    """Rechunk arrays so that every non-broadcast axis shares the same chunks: where operands disagree,
    the chunking with the fewest blocks (the first such operand's on a tie). Unlike the common refinement
    of all chunkings, this keeps the block count of repeated misaligned operations (stencils written with
    shifted slices) from growing step after step."""
    if len(arrays) == 1:  # nothing to agree with
        return {arrays[0]._name: arrays[0]}
    wanted, _ = _alignment(tuple(a.chunks for a in arrays), shape)
    return {a._name: a if want == a.chunks else rechunk_expr(a, want) for a, want in zip(arrays, wanted)}


def _alignment(operand_chunks: tuple[Chunks, ...], shape: tuple[int, ...] | None,
               op: str = "") -> tuple[list[Chunks], Chunks | None]:
    """The chunks ``align_chunks`` gives arrays of these chunks broadcasting to ``shape`` (None: their own broadcast
    shape, with ``op``'s error where they don't broadcast), and with ``shape`` None, the result's chunks where that
    rechunks none of them (else None); kept for the next call (shifted slices in stencils: the same chunks on every
    step)."""
    key = (*operand_chunks, shape)
    known = _ALIGNMENTS.get(key)
    if known is None:
        chunks = list(operand_chunks)
        wanted = _wanted_chunks(chunks, broadcast_shape(op, [tuple(map(sum, c)) for c in chunks]) if shape is None
                                else shape)
        aligned = broadcast_chunks(chunks) if shape is None and wanted == chunks else None
        if len(_ALIGNMENTS) >= _SHORT_PLANS_SIZE:
            _ALIGNMENTS.clear()
        known = _ALIGNMENTS[key] = wanted, aligned
    return known


# ``_alignment`` by the operands' chunks and the shape they broadcast to (None: theirs)
_ALIGNMENTS: dict[tuple, tuple[list[Chunks], Chunks | None]] = {}


def _wanted_chunks(operand_chunks: list[Chunks], shape: tuple[int, ...]) -> list[Chunks]:
    """The chunks ``align_chunks`` gives arrays of these chunks, broadcasting to ``shape``."""
    ndim = len(shape)
    shapes = [tuple(map(sum, c)) for c in operand_chunks]
    target: list[tuple[int, ...] | None] = []
    for d in range(ndim):
        dims = [c[d - ndim + len(c)] for c, s in zip(operand_chunks, shapes)
                if d - ndim + len(c) >= 0 and s[d - ndim + len(c)] == shape[d]]
        target.append(min(dims, key=len) if dims else None)
    out = []
    for chunks, s in zip(operand_chunks, shapes):
        lead = ndim - len(chunks)
        out.append(tuple(
            target[lead + d] if s[d] == shape[lead + d] and target[lead + d] is not None
            else (1,) if s[d] == 1  # a broadcast axis is one block (not, say, chunks (0, 1))
            else chunks[d]
            for d in range(len(chunks))
        ))
    return out


# operands that as_operand keeps as they are (no conversion to an array on some backend)
_KEPT_OPERANDS = (Array, ArrayExpr, *SCALAR_OPERANDS)


# functions whose operands' values can change the node built (a warning, a special value's correction):
# never the short path
_VALUE_DEPENDENT = frozenset({"floor_divide", "remainder", "fmod", *_special_values.CORRECTIONS})


def _short_path(op: str, args: tuple, skip: int = 0) -> Array | None:
    """The node of the common case, Arrays of the same chunks and Python or NumPy numbers, that the full path
    below would build (``skip``: its ``skip_promotion``), on its shortest route; None for anything else (the
    promotion guard's, a special value's correction, a warning, alignment: the full path's cases).

    Plain code builds the same nodes call after call: the node made before of the same operation on the same
    operand objects and numbers is given again where it is kept (``kept_nodes``); else a node's name, dtype and
    chunks are found by its operation and its operands' names and numbers (``_NODES``), where they were worked
    out before. Nothing is kept for nodes on a fresh operand (one never built before: a time-stepping loop's next
    step)."""
    operands: list[Any] = [op, None, NO_KWARGS]  # the node's: its block function and dtype set once found
    key: list[Any] = [op, skip]  # then each operand's name, or the type and the value of a number
    for a in args:
        kind = type(a)
        if kind is Array:
            a = a._expr
            if a._fresh:
                return _new_node(op, args, skip)
            key.append(a._name)
        elif kind is int:
            key += (kind, a)
        elif kind is float or kind in NUMPY_NUMBERS:
            if not a or a != a:  # a zero or a NaN: equal values of other bits (other nodes)
                return _new_node(op, args, skip)
            key += (kind, a)
        else:
            return None
        operands.append(a)
    names = tuple(key)
    kept = _KEPT.get(names)
    if kept is not None and kept[1] == operands:  # (the same operand objects: lists of nodes compare by identity)
        result = _new_array(Array)  # Array(node) without its check: the node is ours
        result._expr = kept[0]
        return result
    known = _NODES.get(names, _UNKNOWN)
    if known is _UNKNOWN:
        made = _new_node(op, args, skip, names)
        if made is not None:
            keep(names, made._expr, operands, args)
        return made
    if known is None:
        return None
    leaves = _UNKNOWN  # (the array operands' inputs, joined)
    for a in args:
        if type(a) is Array:
            more = a._expr._leaves
            leaves = more if leaves is _UNKNOWN or more is leaves else joined_leaves(leaves, more)
    if leaves is _UNKNOWN:  # (no array operand: the full path's)
        return None
    if type(known) is _Realigned:  # its operands rechunked to agree first: the nodes kept, made again
        result = _new_array(Array)
        template = known.template
        result._expr = rebuilt(template, [a for a in operands if isinstance(a, ArrayExpr)])[template.outputs[0]]
        return result
    # (kept nodes tried: for operands met the first time, or once another Array is watched)
    held = operands.copy() if kept is None or (kept[0] is None and kept is not NEVER
                                                 and kept is not _kept_nodes.unwatched) else None
    func, out_dtype, rewrite, extra, chunks, named = known
    if rewrite:  # the full path's rewrite (``_rewritten``)
        operands = [func, out_dtype, NO_KWARGS, *operands[3:][rewrite], *extra]
    else:
        operands[0] = func
        operands[1] = out_dtype
    result = _new_array(Array)
    result._expr = node = Elemwise.named(operands, chunks, named, leaves)
    if held is not None:
        keep(names, node, held, args)
    elif kept[0] is not None:  # made before of other operand objects of these names: made anew on each call
        _KEPT[names] = NEVER
    return result


def _new_node(op: str, args: tuple, skip: int, key: tuple | None = None) -> Array | None:
    """``_short_path``'s node made from its operands (a plan of its operation on their dtypes, ``_short_plan``);
    what it found kept under ``key`` (not None) for the next node of the same operation and operands."""
    operands: list[Any] = []
    dtypes: list[Any] = [op, skip]  # then as ``_dtypes`` makes it
    chunks = None
    broadcast = False
    for a in args:
        kind = type(a)
        if kind is Array:
            a = a._expr
            dtypes.append(a.dtype)
            if chunks is None:
                chunks = a.chunks
            elif a.chunks is not chunks and a.chunks != chunks:
                broadcast = True
        elif kind is float or kind is int or kind in NUMPY_NUMBERS:
            dtypes.append((kind, a))
        else:
            return None
        operands.append(a)
    realign = False
    if broadcast:
        chunks = _aligned_chunks(op, [a.chunks for a in operands if isinstance(a, ArrayExpr)])
        realign = chunks is None
    plan = None if chunks is None and not realign else _SHORT_PLANS.get(tuple(dtypes), _UNKNOWN)
    if plan is _UNKNOWN:
        plan = _short_plan(op, tuple(dtypes[2:]), skip)
    if plan is None:
        if key is not None:
            _keep_node(key, None)
        return None
    if realign:
        return _realigned(op, operands, plan, key)
    func, out_dtype, keep, extra, head = plan
    node = Elemwise.of_aligned(func, out_dtype, [*operands[keep], *extra] if keep else operands, chunks, head)
    if key is not None:
        _keep_node(key, (func, out_dtype, keep, extra, chunks, (node._determ_token, node._name, node.backend)))
    result = _new_array(Array)
    result._expr = node
    return result


def _realigned(op: str, operands: list[Any], plan: tuple, key: tuple | None) -> Array | None:
    """``_new_node``'s node of arrays of other chunks, rechunked to agree first as the full path does (``align_chunks``:
    stencils written with shifted slices); kept under ``key`` (not None) as a template of the node and its rechunks
    (``expr.replay``), made again on the next operands of the same names. None where they don't broadcast (the full
    path raises)."""
    arrays = [a for a in operands if isinstance(a, ArrayExpr)]
    try:
        shape = broadcast_shape(op, [a.shape for a in arrays])
    except ValueError:
        return None
    aligned = align_chunks(arrays, shape)
    operands = [aligned[a._name] if isinstance(a, ArrayExpr) else a for a in operands]
    func, out_dtype, keep, extra, head = plan
    chunks = broadcast_chunks([a.chunks for a in operands if isinstance(a, ArrayExpr)])
    node = Elemwise.of_aligned(func, out_dtype, [*operands[keep], *extra] if keep else operands, chunks, head)
    if key is not None:
        template = template_of(node, arrays)
        _keep_node(key, None if template is None else _Realigned(template))
    result = _new_array(Array)
    result._expr = node
    return result


class _Realigned:
    """What ``_NODES`` keeps of a node whose operands were rechunked to agree: the template of those nodes."""

    __slots__ = ("template",)

    def __init__(self, template: Kept) -> None:
        self.template = template


def _keep_node(key: tuple, known: tuple | _Realigned | None) -> None:
    if len(_NODES) >= _NODES_SIZE:  # (a loop building new names on every step must not grow it without end)
        _NODES.clear()
    _NODES[key] = known


# (op, skip, *operand names or (type, value) of numbers) -> the node's (block function, dtype, the operands kept and
# those added by the full path's rewrite, chunks, and (token, name, backend)), a template of it and the rechunks of
# its operands (``_Realigned``), or None where the full path builds it
_NODES: dict[tuple, tuple | _Realigned | None] = {}
_NODES_SIZE = 2**14


_new_array = object.__new__
Array._elementwise = staticmethod(_short_path)  # (Array's operators: see there)


def _aligned_chunks(op: str, operand_chunks: list[Chunks]) -> Chunks | None:
    """The result's chunks where arrays of these chunks broadcast without rechunking (``align_chunks`` keeps
    them), else None (also where they don't broadcast: the full path raises)."""
    try:
        return _alignment(tuple(operand_chunks), None, op)[1]
    except ValueError:
        return None


_UNKNOWN = object()
# (op, skip, *operand dtypes or (type, value)) -> plan: (block function, result dtype, and where the full path
# rewrites the operation, the operands kept and those added; the node's ``token_head``)
_SHORT_PLANS: dict[tuple, tuple[str, np.dtype, slice | None, tuple, tuple[str, str]] | None] = {}


def _short_plan(op: str, key: tuple, skip: int) -> tuple[str, np.dtype, slice | None, tuple, tuple[str, str]] | None:
    """The block function and result dtype of ``op`` on operands of these dtypes (arrays) and (type, value)
    (Python numbers) on the short path, with the full path's rewrite (``_rewritten``), or None where the full
    path must build it; kept for the next call."""
    out_dtype, common = _operation_dtypes(op, key, (), skip)
    func = BLOCK_FUNCTION[op]
    plan = None
    if common is None and func not in _VALUE_DEPENDENT:
        operands = [k if isinstance(k, np.dtype) else k[1] for k in key]  # a dtype stands for an array of it
        func, kept, extra = _rewritten(func, operands, out_dtype, lambda o: isinstance(o, np.dtype))
        keep = None if kept == len(operands) and not extra else \
            slice(0, kept) if kept > 0 else slice(len(operands) + kept, None)
        plan = (func, out_dtype, keep, tuple(extra), token_head(func, out_dtype))
    if len(_SHORT_PLANS) >= _SHORT_PLANS_SIZE:  # (a loop over changing scalars must not grow it without end)
        _SHORT_PLANS.clear()
    _SHORT_PLANS[(op, skip, *key)] = plan
    return plan


def _rewritten(func: str, operands: list[Any], out_dtype: np.dtype, is_array: Any) -> tuple[str, int, list[Any]]:
    """The exact rewrite of ``func`` on these operands (``is_array`` tells arrays, whose ``.dtype`` is read, from
    numbers): the function built instead, how many operands it keeps (the first ``n``, or the last ``-n``)
    and those it adds after them."""
    def dtype(o: Any) -> np.dtype:
        return o if isinstance(o, np.dtype) else o.dtype

    if func == "power" and type(operands[1]) is int and operands[1] == 2 and out_dtype.kind in "iuf":
        # x ** 2 is x * x, bit for bit (NumPy takes the same shortcut); kernels skip a pow() call
        return "square", 1, []
    if func == "true_divide" and type(operands[0]) in (int, float) and operands[0] == 1 and out_dtype.kind == "f" \
            and is_array(operands[1]) and dtype(operands[1]) == out_dtype:
        # 1 / x is NumPy's reciprocal of a float x, bit for bit (both round 1/x once); kernels take the
        # reciprocal's path instead of a division by a value they do not know
        return "reciprocal", -1, []
    if func == "true_divide" and is_array(operands[0]) and dtype(operands[0]) == out_dtype \
            and (reciprocal := exact_reciprocal(operands[1], out_dtype)) is not None:
        # x / 2**k is x * 2**-k, bit for bit (2**-k exact: both round the same real number); a division
        # takes many times the instructions of a product on a GPU
        return "multiply", 1, [reciprocal]
    return func, len(operands), []


def elementwise(op: str, *args: Any, dtype: Any = None, skip_promotion: int = 0, **kwargs: Any) -> Array:
    """Build the lazy elementwise application of ``op`` (a key of ``BLOCK_FUNCTION``) to the operands.

    ``skip_promotion`` leading operands (``where``'s condition) are left out of the promotion guard.
    """
    given = None  # (an accelerated function traced: its scalar arguments as placeholders, given as numbers)
    if any(type(a) is Param for a in args):
        if dtype is not None or kwargs:
            params = [a for a in args if type(a) is Param]
            params[0]._trace.refuse(params, f"{op} with keywords on a traced scalar")
        given, args = args, _bound(op, args, skip_promotion)
    if dtype is None and not kwargs:
        short = _short_path(op, args, skip_promotion)
        if short is not None:
            return short
    # where array-likes are converted: to CuPy if an Array operand is on CuPy (asked only when there are
    # array-likes, as a new node's backend is otherwise not needed until its graph is made)
    backend = None
    if not all(isinstance(a, _KEPT_OPERANDS) for a in args):
        backend = "cupy" if any(isinstance(a, Array) and a.backend == "cupy" for a in args) else None
    operands = [as_operand(a, backend) for a in args]
    arrays = [a for a in operands if isinstance(a, ArrayExpr)]
    if not arrays:
        operands[0] = as_operand(np.asarray(operands[0]), backend, force_array=True)
        arrays = [operands[0]]
    ufunc_dtype = dtype is not None and isinstance(getattr(np, BLOCK_FUNCTION[op]), np.ufunc)
    if ufunc_dtype:  # a ufunc's dtype= (numpy.add(x, y, dtype=...)): the loop's dtype, checked by NumPy here
        kwargs = {**kwargs, "dtype": np.dtype(dtype)}
    if dtype is not None and not ufunc_dtype:
        out_dtype, common = np.dtype(dtype), None
    else:
        out_dtype, common = _dtypes(op, operands, kwargs, skip_promotion)
    if dtype is None and common is not None:
        # (the guard's message names a traced number as the caller gave it)
        shown = operands if given is None else [g._value if type(g) is Param else o for g, o in zip(given, operands)]
        promoted = shown[skip_promotion:][: _PROMOTED_OPERANDS.get(op)]
        _guards.check_promotion(op, [a.dtype for a in promoted if isinstance(a, ArrayExpr)], common,
                                [a for a in promoted if not isinstance(a, ArrayExpr)])
    if len(arrays) > 1 and any(a.chunks != arrays[0].chunks for a in arrays):  # (the same chunks: aligned)
        shape = broadcast_shape(op, [a.shape for a in arrays])
        aligned = align_chunks(arrays, shape)
        operands = [aligned[a._name] if isinstance(a, ArrayExpr) else a for a in operands]
    func = BLOCK_FUNCTION[op]
    if func in ("floor_divide", "remainder", "fmod"):
        warn_integer_division_by_zero(func, operands[1], out_dtype)
    func, kept, extra = _rewritten(func, operands, out_dtype, lambda o: isinstance(o, ArrayExpr))
    if kept != len(operands) or extra:
        operands = [*(operands[:kept] if kept > 0 else operands[kept:]), *extra]
    if kwargs:
        result = Array(Elemwise(func, out_dtype, kwargs, *operands))
    else:  # (its token text written in one pass)
        chunks = broadcast_chunks([a.chunks for a in operands if isinstance(a, ArrayExpr)])
        result = Array(Elemwise.of_aligned(func, out_dtype, operands, chunks))
    kinds, correct = _special_values.CORRECTIONS.get(func, ("", None))
    return correct(result, *args, elementwise) if out_dtype.kind in kinds and not kwargs else result


def _bound(op: str, args: tuple, skip: int) -> tuple:
    """``args`` with each traced scalar (``scalars.Param``) as a 0-d placeholder of the dtype NumPy converts it
    to in this op: a NumPy scalar's own, a Python scalar's the common dtype of the promoted operands (NEP 50);
    refused (``ValueNeeded``) where that would not give NumPy's result dtype, or without Arrays."""
    params = [a for a in args if type(a) is Param]
    trace = params[0]._trace
    arrays = [a for a in args if isinstance(a, Array)]
    if not arrays or not all(isinstance(a, Array) or type(a) is Param or type(a) in KINDS for a in args):
        trace.refuse(params, f"{op} of traced scalars without gnp Arrays")
    backend = "cupy" if any(a.backend == "cupy" for a in arrays) else "numpy"
    key = [a.dtype if isinstance(a, Array) else (type(a._value), a._value) if type(a) is Param else (type(a), a)
           for a in args]
    out, _ = _operation_dtypes(op, tuple(key), (), skip)
    promoted = range(skip, skip + len(args[skip:][: _PROMOTED_OPERANDS.get(op)]))
    common = np.result_type(*[np.empty(0, key[i]) if isinstance(key[i], np.dtype) else key[i][1] for i in promoted])
    bound = list(args)
    for i, a in enumerate(args):
        if type(a) is Param:
            value = a._value
            key[i] = common if i in promoted and not isinstance(value, np.generic) else np.asarray(value).dtype
            bound[i] = Array(trace.placeholder(a, key[i], backend))
    if _operation_dtypes(op, tuple(key), (), skip)[0] != out:
        trace.refuse(params, f"{op} of a traced scalar as a 0-d array changes its dtype")
    return tuple(bound)


def exact_reciprocal(c: Any, dtype: np.dtype) -> float | None:
    """``1/c`` where ``c`` is a number (not a bool) that is a power of two of ``dtype``, a float dtype, whose
    reciprocal is a normal number of ``dtype`` (so exact); else None."""
    if dtype.kind != "f" or isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, float, np.integer, np.floating)):
        return None
    with np.errstate(all="ignore"):
        typed = dtype.type(c)
        reciprocal = dtype.type(1) / typed
    info = np.finfo(dtype)
    if (np.isfinite(typed) and typed == c and np.frexp(typed)[0] in (0.5, -0.5)
            and info.tiny <= np.abs(reciprocal) <= info.max):
        return float(reciprocal)
    return None


def promoting(op: str, *operands: Any) -> Any:
    """Check the promotion guard once on the caller's array operands (their common dtype must not widen any
    of them), and give a context that allows the internal promotions of the steps inside (``isclose``
    computes in floating point whatever the input, as NumPy does)."""
    dtypes = [o.dtype for o in operands if isinstance(o, Array)]
    if dtypes:
        _guards.check_promotion(op, dtypes, np.result_type(*dtypes))
    return _guards.allowpromotion()


# NumPy's ufunc keywords after the inputs and ``out`` (gufuncs such as matmul take all but ``where``)
UFUNC_KEYWORDS = ("where", "casting", "order", "dtype", "subok", "signature")


def check_keywords(what: str, kwargs: dict, allowed: tuple[str, ...] = UFUNC_KEYWORDS) -> None:
    """NumPy's TypeError for a keyword the function doesn't take; the harmless ones checked: ``order``
    (not "F"), ``subok`` (there are no subclasses), ``signature`` (None: give the loop's dtype with ``dtype=``)."""
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise TypeError(f"{what}() got an unexpected keyword argument '{unknown[0]}'")
    check_order(kwargs.get("order", "K"), what)
    if kwargs.get("signature") is not None:
        raise TypeError(f"{what}: signature= is not supported; give the loop's dtype with dtype=")


def _probe(value: Any) -> Any:
    """A stand-in for NumPy's dtype checks: an empty array of an operand's dtype, Python scalars as they are."""
    if isinstance(value, (Array, np.ndarray)):
        return np.empty((0,), dtype=value.dtype)
    return value if isinstance(value, SCALAR_OPERANDS) else np.empty((0,), dtype=np.asarray(value).dtype)


def ufunc_call(op: str, args: tuple, out: Any, kwargs: dict) -> Array:
    """A ufunc called with NumPy's keywords (``where``, ``casting``, ``order``, ``dtype``, ``subok``,
    ``signature``) and ``out``: the inputs checked against ``dtype`` and ``casting`` by NumPy itself, then
    the result stored as ``store_where`` says."""
    check_keywords(op, kwargs)
    dtype, casting = kwargs.get("dtype"), kwargs.get("casting", "same_kind")
    if dtype is not None or casting != "same_kind":
        with np.errstate(all="ignore"):
            getattr(np, BLOCK_FUNCTION[op])(*map(_probe, args), dtype=dtype, casting=casting)
    return store_where(op, elementwise(op, *args, dtype=dtype), out, casting, kwargs.get("where", True))


def store_where(op: str, result: Array, out: Any, casting: str = "same_kind", where: Any = True) -> Any:
    """NumPy's ``out=`` and ``where=`` (``manipulation.store``): where ``where`` is False, ``out`` keeps its
    elements. Without ``out`` NumPy leaves those elements undefined: here they are the result's."""
    target = out[0] if isinstance(out, tuple) and len(out) == 1 else out
    if where is not True and isinstance(target, (Array, np.ndarray)):
        check_output_cast(op, result.dtype, target.dtype, casting)
        result = elementwise("where", where, astype(result, target.dtype), target, dtype=target.dtype, skip_promotion=1)
    return store(op, result, out, casting)


def _make_ufunc(name: str, nin: int) -> Any:
    numpy_name = BLOCK_FUNCTION[name]
    # (the short path first: these run on every operator a user writes)
    if nin == 1:
        def func(x: ArrayLike, /, out: Any = None, **kwargs: Any) -> Array:
            if out is None and not kwargs:
                short = _short_path(name, (x,))
                return elementwise(name, x) if short is None else short
            return ufunc_call(name, (x,), out, kwargs)
    else:
        def func(x1: ArrayLike, x2: ArrayLike, /, out: Any = None, **kwargs: Any) -> Array:  # type: ignore[misc]
            if out is None and not kwargs:
                short = _short_path(name, (x1, x2))
                return elementwise(name, x1, x2) if short is None else short
            return ufunc_call(name, (x1, x2), out, kwargs)

    inputs = [inspect.Parameter(p, inspect.Parameter.POSITIONAL_ONLY) for p in (["x"] if nin == 1 else ["x1", "x2"])]
    keywords = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=d)
                for k, d in zip(UFUNC_KEYWORDS, (True, "same_kind", "K", None, True, None))]
    func.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [*inputs, inspect.Parameter("out", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None), *keywords])
    func.__name__ = func.__qualname__ = name
    func.__doc__ = (f"Elementwise ``{name}`` {'of an array' if nin == 1 else 'of two arrays with broadcasting'}, as "
                    f"``numpy.{numpy_name}`` (lazy), with its ``out``, ``where``, ``casting``, ``dtype`` (see "
                    "``store_where``: a gnp Array ``out`` is rebound to the result).")
    return func


_module = sys.modules[__name__]
for _name in (*_UNARY, *_BINARY):
    if isinstance(getattr(np, BLOCK_FUNCTION[_name]), np.ufunc):
        setattr(_module, _name, _make_ufunc(_name, 1 if _name in _UNARY else 2))


# the elementwise functions that are no ufunc in NumPy, with NumPy's parameters


def real(val: ArrayLike) -> Array:
    """The real part, as ``numpy.real`` (lazy)."""
    return elementwise("real", val)


def imag(val: ArrayLike) -> Array:
    """The imaginary part, as ``numpy.imag`` (lazy)."""
    return elementwise("imag", val)


def fix(x: ArrayLike, out: Any = None) -> Array:
    """Rounded towards zero, as ``numpy.fix`` (lazy; ``out`` as in ``store``)."""
    return store("fix", elementwise("fix", x), out)


def sinc(x: ArrayLike) -> Array:
    """``sin(pi x) / (pi x)``, as ``numpy.sinc`` (lazy)."""
    return elementwise("sinc", x)


FUNCTIONS = {name: getattr(_module, name) for name in (*_UNARY, *_BINARY)}


def where(condition: ArrayLike, x1: ArrayLike, x2: ArrayLike, /) -> Array:
    """Elements of ``x1`` where ``condition`` is true, else of ``x2``, with broadcasting (lazy)."""
    short = _short_path("where", (condition, x1, x2), 1)  # (the condition: no promotion)
    return elementwise("where", condition, x1, x2, skip_promotion=1) if short is None else short


@reused
def clip(a: ArrayLike, a_min: Any = None, a_max: Any = None, out: Any = None, *, min: Any = None,  # noqa: A002
         max: Any = None, **kwargs: Any) -> Array:  # noqa: A002
    """Values of ``a`` limited to ``[a_min, a_max]`` (either bound may be None; ``min``/``max`` are the array
    API's names for them), as ``numpy.clip``: the result dtype is that of ``a`` and the bounds together, and a
    Python int beyond an integer ``a``'s range is no bound. ``out`` and the ufunc keywords as in ``store_where``."""
    if (a_min is not None and min is not None) or (a_max is not None and max is not None):
        raise ValueError("Passing `min` or `max` keyword argument when `a_min` and `a_max` are provided is forbidden.")
    low, high = (a_min if min is None else min), (a_max if max is None else max)
    check_keywords("clip", kwargs)
    result = as_array(a)
    if result.dtype.kind in "iu":
        info = np.iinfo(result.dtype)
        low = None if type(low) is int and low <= info.min else low
        high = None if type(high) is int and high >= info.max else high
    if low is not None:
        result = elementwise("maximum", result, low)
    if high is not None:
        result = elementwise("minimum", result, high)
    if kwargs.get("dtype") is not None:
        result = astype(result, kwargs["dtype"])
    return store_where("clip", result, out, kwargs.get("casting", "same_kind"), kwargs.get("where", True))


def round(a: ArrayLike, decimals: int = 0, out: Any = None) -> Array:  # noqa: A001
    """Round to ``decimals`` decimal places (half to even), as ``numpy.round``; ``out`` as in ``store``."""
    return store("round", elementwise("round", a, decimals=decimals), out)


@reused
def astype(x: ArrayLike, dtype: Any, /, *, copy: bool = True, device: Any = None, casting: str = "unsafe",
           order: str = "K") -> Array:
    """The array converted to ``dtype`` (explicit: never guarded), on ``device`` if given (``order="F"`` is
    refused: blocks are C-ordered)."""
    check_order(order, "astype")
    arr = as_array(x)
    if device is not None:
        arr = arr.to_backend(device_backend(device))
    dtype = supported_dtype(dtype, "astype")
    if not np.can_cast(arr.dtype, dtype, casting=casting):
        raise TypeError(f"Cannot cast array data from {arr.dtype} to {dtype} according to the rule {casting!r}")
    if dtype == arr.dtype and not copy:
        return arr
    return Array(Elemwise("astype", dtype, {}, arr.expr))

