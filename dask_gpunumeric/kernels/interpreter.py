"""The interpreter of fused programs (``codegen.program``) on NumPy blocks: the reference of the generated
kernels, and what a ``Fused`` or ``Stencil`` task runs without a GPU.

A program runs from a plan (``_Plan``) worked out once per program object and block shapes: every op's ufunc
writes into a buffer assigned ahead (in place where an operand dies there, as NumPy code with augmented
assignments would), the buffers taken from the thread's pool (``buffer_pool``) once per run, Python-float
scalars passed as 0-d arrays of the op's dtype (``_float_loop``). Long elementwise programs on large blocks run
piece by piece (``_run_chunked``), so that their temporaries stay in cache.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..codegen import program as _program
from ..codegen import rows as _rows
from ..codegen import types as _types
from . import blocks as _blocks
from . import philox as _philox
from ..backend import namespace


def run_numpy(program: tuple, scalars: Sequence[Any], offset: tuple[int, ...], shape: tuple[int, ...],
              global_shape: tuple[int, ...], inputs: Sequence[Any], backend: str,
              into: Sequence[Any] = ()) -> list[Any]:
    """Evaluate a program on one block with the unfused block functions; returns the outputs. On NumPy
    blocks each ufunc writes into a buffer of the run's plan (``_plan``); a stored output with an array in
    ``into`` (its block's shape and dtype, overlapping no input) is written there by its last ufunc."""
    xp = namespace(*inputs) if inputs else (np if backend == "numpy" else __import__("cupy"))
    known = _known(program)
    buffered = xp is np
    if (buffered and known.chunkable and shape and math.prod(shape) >= 4 * CHUNK
            and math.prod(shape[1:]) <= CHUNK):
        return _run_chunked(known, scalars, offset, shape, global_shape, inputs, backend, into)
    key = (tuple(shape), tuple(getattr(a, "shape", ()) for a in inputs), buffered)
    plan = known.plans.get(key)
    if plan is None:
        plan = known.plans[key] = _plan(known, *key)
    pool = buffer_pool() if buffered else None
    dests = {}
    for out, dest in zip(program.outputs, into):
        slot = plan.dests.get(out.value)
        if (slot is not None and dest is not None and out.tag == "store" and dest.dtype == known.dtypes[out.value]
                and dest.shape == plan.shapes[out.value] and not any(np.may_share_memory(dest, a) for a in inputs)):
            dests[slot] = dest
    bufs = [dests[s] if s in dests else pool.take(*kind) for s, kind in enumerate(plan.buffers)]
    instrs, dtypes = program.instrs, known.dtypes
    values: list[Any] = [None] * len(instrs)
    if plan.typed:
        values += _typed_scalars(plan, scalars)
    for i, k in plan.loads:
        values[i] = inputs[k]
    for i, slot in plan.scalars:
        values[i] = scalars[slot]
    with np.errstate(all="ignore"):
        for kind, i, call, x, y, out in plan.steps:
            try:
                # (the buffer as the last positional argument: a ufunc parses a keyword ``out`` slower)
                if kind == _BINARY:
                    values[i] = call(values[x], values[y], bufs[out])
                    continue
                if kind == _UNARY:
                    values[i] = call(values[x], bufs[out])
                    continue
                if kind == _NARY:
                    values[i] = call(*[values[j] for j in x], bufs[out])
                    continue
            except TypeError:  # a cast that "same_kind" casting forbids: the block function casts
                values[i] = _unbuffered(instrs[i], dtypes[i], [values[j] for j in instrs[i].args])
                continue
            values[i] = None if kind == _DROP else _value(instrs[i], dtypes[i], values, scalars, offset, shape,
                                                          global_shape, xp)
    for s in plan.returned:
        if s not in dests:
            pool.give(bufs[s])
    if known.rows:  # each value as it is: a block, or one per row
        return [values[out.value] for out in program.outputs]
    finished = known.finished
    return [values[out.value] if out.value in finished else _output(out, values, shape) for out in program.outputs]


def _value(ins: tuple, dt: np.dtype, values: list[Any], scalars: Sequence[Any], offset: tuple[int, ...],
           shape: tuple[int, ...], global_shape: tuple[int, ...], xp: Any) -> Any:
    """The value of an instruction that writes into no buffer of the plan."""
    tag = ins.tag
    if tag == "op":
        return _blocks.elemwise(ins.func, dt, dict(ins.kwargs), *[values[j] for j in ins.args])
    if tag == "full":
        return xp.full(shape, scalars[ins.slot], dtype=dt)
    if tag == "random":
        slot = ins.slot
        return _philox.draw_block(ins.kind, (scalars[slot], scalars[slot + 1]), scalars[slot + 2], global_shape,
                                  offset, shape, dt, tuple(scalars[slot + 3 : slot + 3 + ins.nparams]), xp=xp)
    total = np.dtype(ins.dtype)
    partial = _blocks.reduce_chunk(ins.kind, _block_of(values[ins.value], shape), ins.axes, total, ins.params, ())
    return _blocks.reduce_finish(ins.kind, partial, ins.axes, ins.keepdims, total, ins.params)


def _unbuffered(ins: tuple, dt: np.dtype, args: list[Any]) -> Any:
    """An op of the plan's buffers computed by its block function instead, as an array of its own (its
    arguments' buffers are written again later)."""
    value = _blocks.elemwise(ins.func, dt, dict(ins.kwargs), *args)
    if getattr(value, "base", None) is not None or any(value is a for a in args):
        value = value.copy()
    return value


#: Elements of a block that the interpreter evaluates an elementwise program on at a time, in blocks of at
#: least ``4 * CHUNK`` elements whose rows (all axes but the first) hold at most ``CHUNK`` (``_run_chunked``):
#: the temporaries of a piece then stay in the core's cache, where NumPy's whole-array operations stream
#: memory; smaller blocks fit it whole.
CHUNK = 2**16
#: Operations a program needs for ``_run_chunked``: with fewer, its time goes to reading its inputs and writing
#: its outputs, which pieces do not save, and the pieces' own cost shows.
CHUNK_OPS = 8


def _run_chunked(known: _Known, scalars: Sequence[Any], offset: tuple[int, ...], shape: tuple[int, ...],
                 global_shape: tuple[int, ...], inputs: Sequence[Any], backend: str,
                 into: Sequence[Any]) -> list[Any]:
    """``run_numpy`` of an elementwise program on pieces of ``CHUNK`` elements along the block's first axis,
    each piece's outputs written into the whole outputs (``into``'s arrays where given): the same operations
    on every element as on the whole block."""
    program = known.program
    rows = max(1, CHUNK // max(1, math.prod(shape[1:])))
    ndim = len(shape)
    whole: list[Any] = [None] * len(program.outputs)
    for k, dest in enumerate(into):
        if dest is not None and program.outputs[k].tag == "store" and dest.shape == tuple(shape):
            whole[k] = dest
    first = {}  # outputs of one value share one array, as run_numpy's do
    for k, out in enumerate(program.outputs):
        first.setdefault(out.value, k)
    for start in range(0, shape[0], rows):
        stop = min(shape[0], start + rows)
        pieces = [a[start:stop] if getattr(a, "ndim", 0) == ndim and a.shape[0] != 1 else a for a in inputs]
        dests = [None if w is None or first[out.value] != k else w[start:stop]
                 for k, (out, w) in enumerate(zip(program.outputs, whole))]
        values = run_numpy(known.stores, scalars, (offset[0] + start, *offset[1:]), (stop - start, *shape[1:]),
                           global_shape, pieces, backend, dests)
        for k, (out, dest, value) in enumerate(zip(program.outputs, dests, values)):
            if first[out.value] != k:
                whole[k] = whole[first[out.value]]
                continue
            if dest is None:  # the first piece: the whole output takes its dtype
                whole[k] = np.empty(tuple(shape), dtype=value.dtype)
                dest = whole[k][start:stop]
            if value is not dest:
                dest[...] = value
    return [value if out.tag == "store" else
            _blocks.reduce_chunk(out.kind, value, out.axes, np.dtype(out.dtype), out.params, ())
            for out, value in zip(program.outputs, whole)]


class _Known:
    """What the interpreter works out once per program object (``_known``): per instruction the NumPy
    ufunc (or ``_INTO`` function) of an op that can write into a given buffer, the value's dtype and the
    instruction reading it last; the values computed after its totals (``codegen.program.epilogue_values``);
    whether ``_run_chunked`` may cut blocks (an elementwise program, no totals, no random draws, of at least
    ``CHUNK_OPS`` operations); whether it is a row program (``codegen.rows``); the program it runs on pieces (every output stored); the plans made so far
    (``_plan``), by block shape, input shapes and whether buffers are used."""

    __slots__ = ("program", "ufuncs", "dtypes", "last", "finished", "chunkable", "rows", "stores", "plans")

    def __init__(self, program: tuple) -> None:
        instrs = program.instrs
        self.program = program
        self.ufuncs = tuple(_buffered_ufunc(ins) for ins in instrs)
        self.dtypes = tuple(np.dtype(ins.dtype) for ins in instrs)
        last = list(range(len(instrs)))  # a value nobody reads dies where it is made
        for i, ins in enumerate(instrs):
            for j in ins.args if ins.tag == "op" else (ins.value,) if ins.tag in ("total", "row") else ():
                last[j] = i
        for out in program.outputs:
            last[out.value] = len(instrs)
        self.last = tuple(last)
        self.finished = _program.epilogue_values(instrs)
        self.chunkable = (all(ins.tag in ("op", "load", "scalar", "full") for ins in instrs)
                          and sum(ins.tag == "op" for ins in instrs) >= CHUNK_OPS)
        self.rows = bool(_rows.row_axes(instrs))
        self.stores = program._replace(outputs=tuple(_types.Store("store", out.value) for out in program.outputs))
        self.plans: dict[tuple, _Plan] = {}


_KNOWN: dict[int, tuple[tuple, _Known]] = {}
_KNOWN_SIZE = 1024  # programs kept (each with its plans)


def _known(program: tuple) -> _Known:
    """The ``_Known`` of a program, by identity (hashing a program of hundreds of operations on each run
    costs more than the lookup saves; the plans of repeated calls hold the same program objects)."""
    hit = _KNOWN.get(id(program))
    if hit is not None and hit[0] is program:
        return hit[1]
    known = _Known(program)
    if len(_KNOWN) >= _KNOWN_SIZE:
        _KNOWN.clear()
    _KNOWN[id(program)] = (program, known)  # the program kept with it: its id is not reused meanwhile
    return known


# the kinds of a plan's steps: an op writing into its buffer with one, two or any number of operands, an
# instruction ``_value`` computes, a value dropped (it died, and its array is no buffer of the plan)
_UNARY, _BINARY, _NARY, _VALUE, _DROP = range(5)


class _Plan(NamedTuple):
    """How a program runs on blocks of given shapes (``_plan``): the buffers (shape and dtype of each); the
    loads and scalars (value, input or slot); the steps in order, each ``(kind, value, function, operand,
    operand, buffer)`` (an ``_NARY`` op's operands all in the first); the buffers given back to the pool
    after a run (those no output is, or may be a view of); the buffer of each output op (its own, so that a
    given array may stand in for it) and each value's shape; the scalars that ops read as arrays of their loop's
    dtype where they are Python floats (``_float_loop``), each ``(slot, dtype)``, values numbered in order
    after the program's, and the scalars of recent runs with those arrays (``_typed_scalars``)."""

    buffers: tuple[tuple[tuple[int, ...], np.dtype], ...]
    loads: tuple[tuple[int, int], ...]
    scalars: tuple[tuple[int, int], ...]
    steps: tuple[tuple[int, int, Any, Any, int, int], ...]
    returned: tuple[int, ...]
    dests: dict[int, int]
    shapes: tuple[tuple[int, ...], ...]
    typed: tuple[tuple[int, np.dtype], ...]
    memo: dict


def _plan(known: _Known, shape: tuple[int, ...], input_shapes: tuple[tuple[int, ...], ...], buffered: bool) -> _Plan:
    """The plan of a program on a block of ``shape`` with inputs of ``input_shapes``: buffers are assigned
    in order, each op's taken from those whose values all died (its operands' first, in place), a new one
    where none of its shape and dtype is free; a value that may be a view of its operands (an op with no
    buffer) keeps their buffers in use while it lives."""
    program, last = known.program, known.last
    outputs = {out.value for out in program.outputs}
    shapes: list[tuple[int, ...]] = []
    buffers: list[tuple[tuple[int, ...], np.dtype]] = []
    busy: list[int] = []  # per buffer, the last instruction reading a value in it (or a view of it)
    ends: dict[int, list[int]] = {}  # instruction -> buffers whose use may end there
    free: dict[tuple, list[int]] = {}
    uses: list[frozenset[int]] = []  # per value, the buffers it is or may be a view of
    loads, scalars, steps, dests = [], [], [], {}

    def hold(s: int, until: int) -> None:
        if busy[s] < until:
            busy[s] = until
            ends.setdefault(until, []).append(s)

    def release(i: int) -> None:
        for s in ends.pop(i, ()):
            if busy[s] == i:
                free.setdefault(buffers[s], []).append(s)

    for i, ins in enumerate(program.instrs):
        tag, used = ins.tag, frozenset()
        if tag == "load":
            shapes.append(input_shapes[ins.input])
            loads.append((i, ins.input))
        elif tag == "scalar":
            shapes.append(())
            scalars.append((i, ins.slot))
        elif tag == "op":
            shapes.append(np.broadcast_shapes(*(shapes[j] for j in ins.args)))
            call = known.ufuncs[i] if buffered else None
            if call is None:  # a view of an operand, maybe (astype to its own dtype, real, ...)
                used = frozenset().union(*(uses[j] for j in ins.args))
                for s in used:
                    hold(s, last[i])
                steps.append((i, None, ins.args, -1))
            else:
                release(i)  # before its buffer is picked: it may be an operand's (in place)
                key = (shapes[i], known.dtypes[i])
                spare = free.get(key) if i not in outputs else None
                if spare:
                    s = spare.pop()
                    busy[s] = -1
                else:
                    s = len(buffers)
                    buffers.append(key)
                    busy.append(-1)
                hold(s, last[i])
                used = frozenset((s,))
                if i in outputs:
                    dests[i] = s
                steps.append((i, call, ins.args, s))
        elif tag in ("total", "row"):
            shapes.append(tuple(1 if d in ins.axes else n for d, n in enumerate(shape)) if ins.keepdims
                          else tuple(n for d, n in enumerate(shape) if d not in ins.axes))
            steps.append((i, None, (), -1))
        else:  # full, random
            shapes.append(tuple(shape))
            steps.append((i, None, (), -1))
        uses.append(used)
        release(i)
    dead: dict[int, list[int]] = {}
    for j, i in enumerate(last):
        if not uses[j] and program.instrs[j].tag not in ("load", "scalar"):
            dead.setdefault(i, []).append(j)
    kept = frozenset().union(*(uses[j] for j in outputs))
    runs = []
    typed: dict[tuple[int, np.dtype], int] = {}
    for i, call, args, s in steps:
        loop = _float_loop(program.instrs, known.dtypes, i, call)
        if loop is not None:
            args = tuple(typed.setdefault((program.instrs[j].slot, loop), len(program.instrs) + len(typed))
                         if program.instrs[j].tag == "scalar" else j for j in args)
        if call is None:
            runs.append((_VALUE, i, None, -1, -1, -1))
        elif len(args) == 1:
            runs.append((_UNARY, i, call, args[0], -1, s))
        elif len(args) == 2:
            runs.append((_BINARY, i, call, *args, s))
        else:
            runs.append((_NARY, i, call, args, -1, s))
        runs += [(_DROP, j, None, -1, -1, -1) for j in dead.get(i, ())]
    return _Plan(tuple(buffers), tuple(loads), tuple(scalars), tuple(runs),
                 tuple(s for s in range(len(buffers)) if s not in kept), dests, tuple(shapes),
                 tuple(typed), {})


def _typed_scalars(plan: _Plan, scalars: Sequence[Any]) -> list[Any]:
    """The values of ``plan.typed`` for these scalars: a Python float as a read-only 0-d array of its dtype,
    anything else as it is; kept by the identity of the tuple of scalars they were made of, with it (a graph
    run again passes the same tuples: one per task, and the tasks of a time-stepping loop's steps share a
    program and its plan)."""
    memo = plan.memo
    hit = memo.get(id(scalars))
    if hit is not None and hit[0] is scalars:
        return hit[1]
    typed = []
    with np.errstate(all="ignore"):  # as the ufunc would convert it: an overflow is inf
        for slot, dt in plan.typed:
            value = scalars[slot]
            if type(value) is float:
                value = np.array(value, dt)
                value.flags.writeable = False
            typed.append(value)
    if type(scalars) is tuple:  # (immutable: the same object holds the same values)
        if (len(memo) + 1) * max(1, len(typed)) > _TYPED_KEPT:
            memo.clear()
        memo[id(scalars)] = (scalars, typed)
    return typed


_TYPED_KEPT = 2**13  # typed values a plan keeps, of all its scalar tuples (about 1 MB)


def _float_loop(instrs: tuple, dtypes: tuple, i: int, call: Any) -> np.dtype | None:
    """The float dtype in which ufunc ``call`` of op ``i`` reads its scalars where they are Python floats: that
    of its array operands, all of it, when the ufunc has a loop of that dtype alone (NumPy's weak Python
    scalars then take it: passed as 0-d arrays of it, the loop and the values are the same, and the ufunc
    skips converting them on each call); None for any other op."""
    if not isinstance(call, np.ufunc):
        return None
    args = instrs[i].args
    arrays = [dtypes[j] for j in args if instrs[j].tag != "scalar"]
    if not arrays or len(arrays) == len(args) or len(set(arrays)) != 1:
        return None
    dt = arrays[0]
    if dt.char not in "efd" or np.dtype(instrs[i].compute) != dt:
        return None
    signature = dt.char * len(args) + "->"
    return dt if any(t.startswith(signature) for t in call.types) else None


def _buffered_ufunc(ins: tuple) -> Any:
    """The NumPy ufunc of an op whose result ``func(*args, out=buffer)`` gives exactly (its loop's result
    cast to the buffer's dtype, as ``_blocks.elemwise`` casts it), or None."""
    if ins.tag != "op" or ins.kwargs:
        return None
    if ins.func in _INTO:
        return _INTO[ins.func]
    ufunc = getattr(np, ins.func, None)
    return ufunc if isinstance(ufunc, np.ufunc) and ufunc.nout == 1 else None


def _astype_into(x: Any, out: np.ndarray) -> np.ndarray:
    """``x.astype(out.dtype)`` written into ``out``; a TypeError where ``_blocks.elemwise`` converts another way
    (floats to small unsigned integers: the caller then calls it)."""
    if not isinstance(x, np.ndarray) or (x.dtype.kind == "f" and out.dtype.kind == "u" and out.dtype.itemsize < 8):
        raise TypeError("astype: not into this buffer")
    np.copyto(out, x, casting="unsafe")
    return out


def _where_into(condition: Any, x: Any, y: Any, out: np.ndarray) -> np.ndarray:
    """``numpy.where(condition, x, y)`` of arrays, cast to ``out``'s dtype and written there (``y`` copied, then
    ``x`` where the condition holds; where ``out`` is ``x`` itself, ``y`` where it does not); a TypeError
    where ``out`` overlaps an operand otherwise (the caller then calls ``numpy.where``)."""
    if not (isinstance(condition, np.ndarray) and condition.dtype == bool and isinstance(x, np.ndarray)
            and isinstance(y, np.ndarray)) or np.may_share_memory(out, condition):
        raise TypeError("where: not into this buffer")
    if out is x and not np.may_share_memory(out, y):
        np.copyto(out, y, casting="same_kind", where=~condition)
        return out
    if np.may_share_memory(out, x):
        raise TypeError("where: not into this buffer")
    np.copyto(out, y, casting="same_kind")
    np.copyto(out, x, casting="same_kind", where=condition)
    return out


_INTO = {"astype": _astype_into, "where": _where_into}
"""Ops that are no NumPy ufunc, written into a given buffer the way ``_blocks.elemwise`` computes them."""


class _Pool:
    """Buffers of one thread's interpreter runs, kept from one run to the next (up to ``LIMIT`` bytes): a
    block's temporaries then reuse memory already mapped, instead of a fresh allocation per operation that
    the allocator may have given back to the system (page faults on every first write)."""

    LIMIT = 128 * 2**20

    def __init__(self) -> None:
        self.free: dict[tuple, list[np.ndarray]] = {}
        self.nbytes = 0

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        free = self.free.get((shape, dtype))
        if not free:
            return np.empty(shape, dtype)
        buffer = free.pop()
        self.nbytes -= buffer.nbytes
        return buffer

    def give(self, buffer: np.ndarray) -> None:
        if self.nbytes + buffer.nbytes <= self.LIMIT:
            self.free.setdefault((buffer.shape, buffer.dtype), []).append(buffer)
            self.nbytes += buffer.nbytes


_local = threading.local()


def buffer_pool() -> _Pool:
    """The calling thread's pool of NumPy buffers (threads of the local scheduler run blocks at the same
    time)."""
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = _Pool()
    return pool


def _block_of(value: Any, shape: tuple[int, ...]) -> Any:
    """A value as a whole block (a broadcast load or scalar spread over it)."""
    return value if value.shape == shape else namespace(value).broadcast_to(value, shape)


def _output(out: tuple, values: list[Any], shape: tuple[int, ...]) -> Any:
    value = _block_of(values[out.value], shape)
    if out.tag == "store":
        return value
    return _blocks.reduce_chunk(out.kind, value, out.axes, np.dtype(out.dtype), out.params, ())
