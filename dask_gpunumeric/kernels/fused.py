"""What a Fused task runs on one block: its program (``codegen.program``) interpreted on NumPy blocks (the
reference: ``interpreter``), or its generated kernel launched on CuPy blocks.

A program compiles once per worker whatever its scalar values (and once per launch variant: flat, spread (a flat block
with an input off the alignment of the flat kernels' packs) or strided, Philox group, 32-bit or 64-bit positions,
which inputs are one element); values that come back get a kernel
specialized to them, compiled in the background (``_Kernel``). A launch is one full wave of thread blocks
(``cuda.wave_blocks``).
"""
from __future__ import annotations

import functools
import math
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .. import config
from ..codegen import program as _program
from ..codegen import rows as _rows
from ..codegen import types as _types
from ..ops.reductions import REDUCTIONS
from . import blocks as _blocks
from . import cuda as _cuda
from . import philox as _philox
from .interpreter import run_numpy


#: Blocks of fewer elements than this are indexed with 32-bit ints (the margin: grid-stride loops step past
#: the end by up to a grid's threads times the elements each handles per step).
INT_INDEX_LIMIT = 2**31 - 2**26


class _Prepared(NamedTuple):
    """What launches of one program need that depends on the program alone, worked out once per program object
    (``_prepared``): the caches keyed by a program hash its whole instruction tuple on each lookup, which for a
    program of hundreds of operations took longer than the launch."""

    philox: int  # ``codegen.program.philox_group``
    after: dict[int, int]  # ``codegen.program.epilogue_values``
    folds: tuple  # ``codegen.program.program_folds``
    kernels: dict  # variant -> ``_Kernel`` (``_kernel``)
    rows: tuple[int, ...]  # ``codegen.rows.row_axes``: the axes of a row program's reductions
    plans: dict  # launch key -> ``_Plan`` (``_launch_plan``)
    hosted: dict  # positions of inputs given as NumPy scalars -> the program taking them as scalars (``_hosted``)


_PREPARED: dict[int, tuple[tuple, _Prepared]] = {}
_PREPARED_SIZE = 1024  # programs kept (each keeps its kernels)


def _prepared(program: tuple) -> _Prepared:
    """The ``_Prepared`` of a program, by identity (the plans of repeated calls hold the same program objects)."""
    hit = _PREPARED.get(id(program))
    if hit is not None and hit[0] is program:
        return hit[1]
    instrs = program.instrs
    prepared = _Prepared(_program.philox_group(instrs), _program.epilogue_values(instrs),
                         _program.program_folds(program), {}, _rows.row_axes(instrs), {}, {})
    if len(_PREPARED) >= _PREPARED_SIZE:
        _PREPARED.clear()
    _PREPARED[id(program)] = (program, prepared)  # the program kept with it: its id is not reused meanwhile
    return prepared


def _launch_geometry(program: tuple, inputs: Sequence[Any], offset: tuple[int, ...], shape: tuple[int, ...],
                     global_shape: tuple[int, ...]) -> tuple[_program.Variant, list[Any]]:
    """The kernel variant of one launch (mode, Philox group, index type, single-element inputs) and its
    geometry arguments."""
    ndim = program.ndim
    gstrides = [math.prod(global_shape[d + 1 :]) for d in range(ndim)]
    goff = sum(o * s for o, s in zip(offset, gstrides))
    size = math.prod(shape)
    shape = tuple(shape)
    index, to_index = ("int", np.int32) if size < INT_INDEX_LIMIT else ("long long", np.int64)
    flat = all((a.size == 1) or (a.shape == shape and a.flags.c_contiguous) for a in inputs)
    contiguous_in_global = shape[1:] == tuple(global_shape[1:])
    prepared = _prepared(program)
    philox = prepared.philox
    if flat and (contiguous_in_global or not philox):
        # flat mode keys random draws by goff + t: only right when the block is contiguous in the global
        # array; otherwise the strided mode maps each element to its global index
        singles = frozenset(k for k, a in enumerate(inputs) if a.size == 1)
        spread = _spreads(prepared) and not all(_packable(a) for k, a in enumerate(inputs) if k not in singles)
        return (_program.Variant("spread" if spread else "flat", philox or 1, index, singles),
                [to_index(size), np.int64(goff)])
    geometry: list[Any] = [to_index(size), np.int64(goff)]
    for d in range(ndim):
        geometry += [to_index(shape[d]), np.int64(gstrides[d])]
    return _program.Variant("strided", 1, index, frozenset()), geometry + _element_strides(inputs, ndim)


def _spreads(prepared: _Prepared) -> bool:
    """Whether a flat kernel of the program moves packs of consecutive elements, and so has a spread variant for
    blocks off their alignment (not where Philox groups or folds set its loop)."""
    return prepared.philox <= 1 and not prepared.folds


def _packable(a: Any) -> bool:
    """Whether array ``a`` starts at a multiple of 16 bytes, the alignment of the packs of consecutive elements
    that a flat kernel moves (a view into a larger array may not)."""
    data = a.data
    address = data.ptr if hasattr(data, "ptr") else a.__array_interface__["data"][0]  # CuPy's; NumPy's (emulated)
    return address % 16 == 0


def _element_strides(inputs: Sequence[Any], ndim: int) -> list[Any]:
    """Each input's stride in elements along each of ``ndim`` axes (aligned on trailing axes), 0 where it
    broadcasts."""
    strides = []
    for a in inputs:
        lead = ndim - a.ndim
        for d in range(ndim):
            if d < lead or a.shape[d - lead] == 1:
                strides.append(np.int64(0))
            else:
                strides.append(np.int64(a.strides[d - lead] // a.itemsize))
    return strides


class _Plan(NamedTuple):
    """What every launch of a program on blocks of one geometry and one input layout does alike, worked out on
    the first (``_new_plan``): a repeated launch reads each input's dtype, shape and strides once (attributes
    of CuPy arrays cost host time) and does little more than allocate its outputs and call the kernel."""

    casts: tuple | None  # the dtype each input is converted to, where one needs converting
    kernel: _Kernel
    geometry: tuple  # the geometry arguments (``_launch_geometry``)
    need: int  # thread blocks that give each thread work
    waves: int  # full waves of thread blocks launched at most
    buffers: tuple  # (shape, dtype, one element?) of each output array the kernel writes, in argument order
    results: tuple | None  # how each output's result is made of the buffers (``_results``); None: the buffers
    folds: tuple  # the accumulator dtypes of the folds' partials (``fold_buffers``)
    shared: bool  # whether a launch takes anything from its stream's ``_Workspace`` (folds, one-element outputs)


#: Launch plans kept per program (one per block geometry and input layout).
_PLANS_KEPT = 256


def _launch_plan(prepared: _Prepared, program: tuple, inputs: Sequence[Any], offset: tuple[int, ...],
                 shape: tuple[int, ...], global_shape: tuple[int, ...]) -> _Plan:
    """The ``_Plan`` of a launch, remembered per program by block geometry and each input's dtype, shape,
    strides and alignment (``_packable``)."""
    key = (offset, shape, global_shape, *[(a.dtype, a.shape, a.strides, _packable(a)) for a in inputs])
    plan = prepared.plans.get(key)
    if plan is None:
        if len(prepared.plans) >= _PLANS_KEPT:
            prepared.plans.clear()
        plan = prepared.plans[key] = _new_plan(prepared, program, inputs, offset, shape, global_shape)
    return plan


def _new_plan(prepared: _Prepared, program: tuple, inputs: Sequence[Any], offset: tuple[int, ...],
              shape: tuple[int, ...], global_shape: tuple[int, ...]) -> _Plan:
    """The ``_Plan`` of a launch worked out from its arguments."""
    ndim, input_dtypes, instrs, outputs = program
    casts = tuple(input_dtypes) if any(a.dtype != dt for a, dt in zip(inputs, input_dtypes)) else None
    if casts:
        inputs = _cast(inputs, casts)
    if prepared.rows:
        return _row_plan(prepared, program, casts, inputs, shape)
    size = math.prod(shape)
    variant, geometry = _launch_geometry(program, inputs, offset, shape, global_shape)
    kernel = _kernel(program, variant)
    per_thread = (variant.group * _program.PHILOX_STEPS if variant.group > 1
                  else _program.UNROLL if variant.mode in ("flat", "spread") else 1)
    buffers, results = [], []
    for k, out in enumerate(outputs):
        if k in kernel.finals:
            folds = _final_folds(prepared, k)
            count = REDUCTIONS[out.kind].count
            results.append(("final", len(buffers), tuple(fold.field for fold in folds), {count: size} if count else {}))
            buffers += [((1,) * ndim, fold.final) for fold in folds]
        else:
            value_shape = (1,) * prepared.after[out.value] if out.value in prepared.after else tuple(shape)
            # a reduction over some axes: of the stored block, once the kernel has written it
            results.append(("reduce", len(buffers), out) if out.tag == "reduce" else ("array", len(buffers)))
            buffers.append((value_shape, _program.value_dtype(instrs[out.value])))
    plain = all(r == ("array", k) for k, r in enumerate(results))
    marked = _marked(buffers)
    return _Plan(casts, kernel, kernel.arguments(geometry), -(-size // (per_thread * _THREADS)),
                 _DRAW_WAVES if variant.group > 1 else 1, marked, None if plain else tuple(results),
                 tuple(fold.acc for fold in prepared.folds), bool(prepared.folds) or any(m[2] for m in marked))


def _marked(buffers: Sequence[tuple]) -> tuple:
    """(shape, dtype) of output buffers with whether each is one element (``SmallOutputs`` reuses those)."""
    return tuple((shape, dtype, math.prod(shape) == 1) for shape, dtype in buffers)


def _cast(inputs: Sequence[Any], dtypes: Sequence[np.dtype]) -> list[Any]:
    """The inputs converted to the dtypes the program reads them in (those not already in them)."""
    return [a if a.dtype == dt else a.astype(dt) for a, dt in zip(inputs, dtypes)]


def _results(plan: _Plan, bufs: list[Any]) -> list[Any]:
    """The outputs of a launch of ``plan`` from the arrays its kernel wrote: arrays, full reductions' partials
    (their one-element arrays by field, with the count) and partial reductions of the stored blocks."""
    if plan.results is None:
        return bufs
    results = []
    for how, first, *rest in plan.results:
        if how == "array":
            results.append(bufs[first])
        elif how == "final":
            fields, extra = rest
            results.append({**dict(zip(fields, bufs[first:first + len(fields)])), **extra})
        else:
            (out,) = rest
            results.append(_blocks.reduce_chunk(out.kind, bufs[first], out.axes, np.dtype(out.dtype), out.params, ()))
    return results


def run_cuda(program: tuple, scalars: Sequence[Any], offset: tuple[int, ...], shape: tuple[int, ...],
             global_shape: tuple[int, ...], inputs: Sequence[Any]) -> list[Any]:
    """Run a program on one block of CuPy arrays with its generated kernel (one launch); returns the outputs.
    What depends on the program alone (the kernel, its grid, its scalar arguments for given values) is
    made once (``_kernel``), what depends on the block's geometry too once per geometry (``_launch_plan``);
    the per-block partials of full reductions live in a per-stream workspace."""
    import cupy

    hosted = False
    for a in inputs:  # (a 0-d input given as a NumPy scalar: a kernel argument, not a copy to the device)
        if isinstance(a, np.generic):
            program, scalars, inputs = _hosted(program, scalars, inputs)
            hosted = True
            break
    if 0 in shape:  # nothing to launch: the block functions give empty outputs (and totals of nothing)
        return run_numpy(program, scalars, offset, shape, global_shape, _cast(inputs, program.inputs), "cupy")
    plan = _launch_plan(_prepared(program), program, inputs, offset, shape, global_shape)
    if plan.casts:
        inputs = _cast(inputs, plan.casts)
    launch = plan.kernel.launch(scalars, fold=not hosted)
    blocks = max(1, min(plan.need, launch.max_blocks * plan.waves))
    if plan.shared:
        workspace = _workspace()
        bufs = [workspace.outputs.take(value_shape, dtype) if one else cupy.empty(value_shape, dtype=dtype)
                for value_shape, dtype, one in plan.buffers]
        folds = workspace.fold_arguments(blocks, plan.folds, plan.kernel.packs) if plan.folds else ()
    else:
        bufs, folds = [cupy.empty(value_shape, dtype=dtype) for value_shape, dtype, _ in plan.buffers], ()
    launch.function((blocks,), (_THREADS,), (*inputs, *bufs, *folds, *launch.args, *plan.geometry))
    return _results(plan, bufs)


def _hosted(program: tuple, scalars: Sequence[Any], inputs: Sequence[Any]) -> tuple[tuple, tuple, list[Any]]:
    """A launch whose 0-d inputs that are NumPy scalars (host values: an accelerated function's scalar
    arguments) become scalar arguments: the program reading them as scalars after its own (made once per
    program and such inputs), its scalar values and its other inputs."""
    hosts = tuple(k for k, a in enumerate(inputs) if isinstance(a, np.generic))
    values = (*scalars, *(inputs[k] for k in hosts))  # (converted to their C types as every scalar is)
    made = _prepared(program).hosted
    hosted = made.get(hosts)
    if hosted is None:
        ndim, dtypes, instrs, outputs = program
        slots = {k: len(scalars) + j for j, k in enumerate(hosts)}
        kept = [k for k in range(len(dtypes)) if k not in slots]
        number = {k: j for j, k in enumerate(kept)}
        instrs = tuple(ins if ins.tag != "load" else
                       _types.Scalar("scalar", slots[ins.input], ins.dtype) if ins.input in slots else
                       _types.Load("load", number[ins.input], ins.dtype) for ins in instrs)
        hosted = made[hosts] = _types.Program(ndim, tuple(dtypes[k] for k in kept), instrs, outputs)
        if recording():
            record_sources(hosted, values)
    return hosted, values, [a for k, a in enumerate(inputs) if k not in hosts]


def _row_plan(prepared: _Prepared, program: tuple, casts: tuple | None, inputs: Sequence[Any],
              shape: tuple[int, ...]) -> _Plan:
    """The ``_Plan`` of a launch of a row program (``codegen.rows``): rows spread over a wave of thread blocks."""
    ndim = program.ndim
    axes = prepared.rows
    n = math.prod(shape[axes[0]:])
    nrows = math.prod(shape) // n
    row_inputs = frozenset(_rows.row_inputs([a.shape for a in inputs], axes, ndim))
    to_index = np.int32 if math.prod(shape) < INT_INDEX_LIMIT else np.int64
    lanes = _rows.lanes_for(n)
    variant = _program.Variant("rows", lanes, "int" if to_index is np.int32 else "long long", row_inputs)
    kernel = _kernel(program, variant)
    shapes = {"row": shape[:axes[0]] + (1,) * len(axes), "element": shape, "flat": shape[:axes[0]]}
    geometry = (to_index(nrows), to_index(n), *map(to_index, shape), *_element_strides(inputs, ndim))
    marked = _marked([(shapes[kind], dtype) for kind, dtype in kernel.row_outputs])
    return _Plan(casts, kernel, kernel.arguments(geometry), -(-nrows // (_THREADS // lanes)), 1, marked, None, (),
                 any(m[2] for m in marked))


def final_buffers(program: tuple, k: int, size: int) -> tuple[dict[str, Any], list[Any]]:
    """The result of output ``k``, a full reduction over ``size`` elements finished in the launch, as the partial
    ``_blocks.reduce_chunk`` gives, and the one-element device arrays the kernel writes it to (``fin<k>``, one
    per fold)."""
    import cupy

    folds = _final_folds(_prepared(program), k)
    finals = [cupy.empty((1,) * program.ndim, dtype=fold.final) for fold in folds]
    partial = {fold.field: final for fold, final in zip(folds, finals)}
    count = REDUCTIONS[program.outputs[k].kind].count
    return ({**partial, count: size} if count else partial), finals


def _final_folds(prepared: _Prepared, k: int) -> list:
    """The folds of output ``k`` (a full reduction finished in the launch)."""
    return [fold for fold in prepared.folds if fold.output == k]


def fold_buffers(program: tuple, blocks: int) -> list[Any]:
    """The kernel arguments of a launch of ``blocks`` thread blocks for its folds' partials and the ticket
    (``fold_params``), in the current stream's workspace."""
    folds = _prepared(program).folds
    return list(_workspace().fold_arguments(blocks, tuple(fold.acc for fold in folds))) if folds else []


_THREADS = 256  # threads per block: the kernels' __launch_bounds__ and shared-memory trees assume it
#: Waves of thread blocks for kernels drawing grouped Philox blocks: they are bound by arithmetic, and a second
#: wave evens out the multiprocessors' finishing times (docs/benchmarks.md, "Monte-Carlo's kernel and host time").
_DRAW_WAVES = 2


class SmallOutputs:
    """The one-element output arrays of launches on one stream (a full reduction's total, its partial fields),
    each given again to a later launch once nothing but this holds it: no allocation before such a launch. An
    array is given again only when its reference counts (the array's, its memory pointer's and its memory's) are
    those it had when only this held it, so never while a result, a view of it or its memory is alive; the
    kernel that writes it again runs on this stream after every earlier use of it on this stream (as CuPy's
    memory pool gives freed memory to later allocations of its stream)."""

    def __init__(self) -> None:
        self._held: dict[tuple, list] = {}  # (shape, dtype) -> [array, its reference counts held here alone]

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """A one-element array of ``shape`` and ``dtype`` that nothing else holds (the one of an earlier launch,
        or a new one)."""
        held = self._held.get((shape, dtype))
        if held is not None:
            array, alone = held
            if _references(array) == alone:
                return array
        import cupy

        array = cupy.empty(shape, dtype=dtype)
        held = self._held[(shape, dtype)] = [array, None]
        held[1] = _references(array)  # (counted as ``take`` counts them above: held here and by ``array``)
        return array


def _references(array: Any) -> tuple[int, int, int]:
    """The reference counts of an array, of its memory pointer and of that pointer's memory (CuPy's ``data`` and
    ``data.mem``; 0 where an array has no such attribute)."""
    count = sys.getrefcount(array)
    pointer = getattr(array, "data", None)
    memory = getattr(pointer, "mem", None)
    return (count, 0 if pointer is None else sys.getrefcount(pointer),
            0 if memory is None else sys.getrefcount(memory))


class _Workspace:
    """Device memory that the kernels launched on one stream share, one launch after another (a stream runs
    its launches in order): the zeroed counter with which full reductions find their last thread block
    (each kernel resets it to zero when it finishes), room for the thread blocks' partials, and the one-element
    outputs given again (``SmallOutputs``)."""

    def __init__(self) -> None:
        import cupy

        self.ticket = cupy.zeros(1, dtype=np.uint32)
        self._room = cupy.empty(0, dtype=np.uint8)
        self._arguments: dict[tuple, tuple] = {}  # (blocks, partials' count) -> ``fold_arguments`` in this room
        self.outputs = SmallOutputs()

    def fold_arguments(self, blocks: int, dtypes: Sequence[np.dtype], packed: bool = False) -> tuple:
        """The kernel arguments of the folds of a launch of ``blocks`` thread blocks accumulating in ``dtypes`` (of
        at most 8 bytes each): pointers to an array of ``blocks`` partials of each, then the ticket (``fold_params``);
        the same objects launch after launch while the room stays (``packed``: as ``cuda.packed`` makes them)."""
        known = self._arguments.get((blocks, len(dtypes), packed))
        return known if known is not None else self._new_arguments(blocks, len(dtypes), packed)

    def _new_arguments(self, blocks: int, count: int, packed: bool) -> tuple:
        import cupy

        need = 8 * blocks * count
        if self._room.nbytes < need:
            self._room = cupy.empty(need, dtype=np.uint8)  # the old room is freed in stream order
            self._arguments.clear()
        base = self._room.data.ptr
        pointers = [np.uintp(base + 8 * blocks * j) for j in range(count)]
        made = (*pointers, self.ticket) if not packed else _cuda.packed([*pointers, np.uintp(self.ticket.data.ptr)])
        self._arguments[(blocks, count, packed)] = made  # (the room and the ticket live as long as this)
        return made


@functools.lru_cache(maxsize=None)
def _workspace_for(device: int, stream: int, module: Any) -> _Workspace:
    return _Workspace()


def _workspace() -> _Workspace:
    """The workspace of the current device and stream (and of the ``cupy`` module in use: an emulated device's
    arrays never meet a GPU's)."""
    import cupy

    return _workspace_for(cupy.cuda.Device().id, cupy.cuda.get_current_stream().ptr, cupy)


def _scalar_arg(scalars: Sequence[Any], k: int, ctype: str, instrs: Sequence[tuple]) -> Any:
    """The kernel argument of scalar slot ``k``: random parameters converted as the Philox stream
    defines them; other values cast to their C type."""
    for ins in instrs:
        if ins.tag == "random" and ins.slot + 3 <= k < ins.slot + 3 + ins.nparams:

            slot = ins.slot
            converted = _philox.check_params(ins.kind, np.dtype(ins.dtype), scalars[slot + 3 : slot + 3 + ins.nparams])
            return converted[k - slot - 3]
    return _types.NP_OF_CTYPE[ctype].type(scalars[k])


def scalar_args(instrs: Sequence[tuple], scalars: Sequence[Any]) -> list[Any]:
    """The scalar kernel arguments of a program's instructions for these scalar values: each slot as its
    C type (``s<k>``), then each scalar operand converted to the type it is computed in."""
    types = _program.scalar_ctypes(instrs)
    return ([_scalar_arg(scalars, k, types[k], instrs) for k in sorted(types)]
            + [_cast_arg(scalars, instrs, j, ct) for j, ct in _program.scalar_casts(instrs)])


def launch_args(instrs: tuple, args: Sequence[Any]) -> tuple:
    """The scalar arguments ``args`` (``scalar_args``) as a launch passes them: one struct (a NumPy structured
    scalar, which CuPy passes by value) where the kernel gathers them (``codegen.program.scalar_struct``)."""
    layout = _program.scalar_struct(instrs)
    if layout is None:
        return tuple(args)
    record = np.zeros((), layout)
    for name, value in zip(layout.names, args):
        record[name] = value
    return (record[()],)


def _cast_arg(scalars: Sequence[Any], instrs: Sequence[tuple], j: int, ctype: str) -> Any:
    """The value of scalar instruction ``j`` as its own C type, then converted to ``ctype`` (what ``(ctype)v``
    gives in C: NumPy's casts round the same way)."""
    own = _types.NP_OF_CTYPE[_types.ctype(instrs[j].dtype)].type(scalars[instrs[j].slot])
    return _types.NP_OF_CTYPE[ctype].type(own)


def _value_key(scalars: Sequence[Any]) -> tuple:
    """A key telling scalar values apart as the kernel's arguments do: by value and type (1 and 1.0 are equal in
    Python), and zeros by sign (0.0 == -0.0)."""
    values = tuple(scalars)
    key = (values, tuple(map(type, values)))
    if 0 in values:
        key += (tuple(bool(np.signbit(v)) if isinstance(v, (float, np.floating)) else False for v in values),)
    return key


class _Launch(NamedTuple):
    """What a launch of a program variant with one set of scalar values calls: the compiled function, the
    most thread blocks worth launching (one full wave), and the scalar arguments."""

    function: Any
    max_blocks: int
    args: tuple


class _ValueSet:
    """The launches of a kernel with one set of scalar values: how many so far, what they call, and the
    compilation of a kernel specialized to the values, while it runs (or whether one was tried)."""

    __slots__ = ("constants", "launches", "launch", "pending", "tried")

    def __init__(self, constants: tuple, launch: _Launch) -> None:
        self.constants, self.launches, self.launch, self.pending, self.tried = constants, 0, launch, None, False


class _Kernel:
    """A compiled variant of a program: the full reductions finished in the launch (and which outputs they
    give), and the launch (``_Launch``) for the scalar values of recent calls. The kernel takes its scalars
    as arguments, so that new values need no compilation. Scalar values that come back (a Python constant
    of the user's code, a seed) get a kernel specialized to them from their ``SPECIALIZE_AFTER``-th launch
    on (``gpunumeric.specialize``), compiled in the background while the generic kernel keeps running:
    their constants fold into the instructions and free registers, as in a hand-written kernel. The grid
    of each is one full wave: as many blocks as the device keeps resident at once; a grid-stride loop
    covers the rest, where a partial second wave would leave multiprocessors idle."""

    _REMEMBERED = 64  # scalar value sets kept (a loop changing a scalar each step would grow without bound)
    SPECIALIZE_AFTER = 2  # launches with the same scalar values before a kernel is specialized to them
    MAX_SPECIALIZED = 8  # value sets with a specialized kernel, at most (each is a compilation)

    def __init__(self, program: tuple, variant: _program.Variant) -> None:

        self._program, self._variant = program, variant
        self.finals = _program.final_outputs(program)
        self.row_outputs = _rows.row_outputs(program, variant.singles) if variant.mode == "rows" else ()
        self._generic = _cuda.compile_function(*self._source(()), _THREADS)
        self.packs = _cuda.takes_packed(self._generic[0])  # (a CuPy kernel: its launches' constant arguments packed)
        self._values: dict[tuple, _ValueSet] = {}
        self._last: tuple[Any, _ValueSet | None] = (None, None)  # the scalars of the latest call and their values
        self._specialized = 0

    def _source(self, constants: tuple) -> tuple[str, str]:
        variant = self._variant
        if variant.mode == "rows":
            return _rows.kernel_source(self._program, variant.group, variant.index, tuple(sorted(variant.singles)),
                                       constants)
        return _program.kernel_source(self._program, variant.mode, variant.group, variant.index,
                             tuple(sorted(variant.singles)), constants)

    def launch(self, scalars: Sequence[Any], fold: bool = True) -> _Launch:
        """The launch for these scalar values (remembered by value and type: 1 and 1.0 are equal in Python; and
        by identity for the tuple of the latest call, which the task of a repeated graph passes again); not
        ``fold``: values that are arguments of calls (``_hosted``: each call's blocks launch with them),
        never specialized to."""
        last = self._last
        if last[0] is scalars:
            values = last[1]
        else:
            values = self._value_set(scalars)
            if type(scalars) is tuple:  # immutable: the same object holds the same values
                self._last = (scalars, values)
        values.launches += 1
        if values.pending is not None and values.pending.done():
            self._finish_specialization(values, _program.kept_parameters(self._program.instrs, values.constants))
        elif (fold and not values.tried and values.constants and values.launches >= self.SPECIALIZE_AFTER
              and self._specialized < self.MAX_SPECIALIZED and config.get("specialize")):
            values.tried = True
            self._specialized += 1
            values.pending = _cuda.compile_in_background(*self._source(values.constants), _THREADS)
        return values.launch

    def _value_set(self, scalars: Sequence[Any]) -> _ValueSet:
        key = _value_key(scalars)
        values = self._values.get(key)
        if values is None:
            if len(self._values) >= self._REMEMBERED:
                self._values.clear()
                self._specialized = 0
            instrs = self._program.instrs
            constants = tuple(scalar_args(instrs, scalars))
            values = self._values[key] = _ValueSet(constants, _Launch(*self._generic,
                                                                      self.arguments(launch_args(instrs, constants))))
            # (nothing to specialize to where every value stays a parameter)
            values.tried = len(_program.kept_parameters(instrs, constants)) == len(constants)
        return values

    def arguments(self, values: Sequence[Any]) -> tuple:
        """Arguments of every launch of this kernel with these values (``cuda.packed`` for a CuPy kernel)."""
        return _cuda.packed(values) if self.packs else tuple(values)

    def _finish_specialization(self, values: _ValueSet, kept: tuple[int, ...]) -> None:
        """Launch with the specialized kernel once compiled (with the values it still takes as parameters:
        ``kept``, ``codegen.program.kept_parameters``), or with the generic one if it failed."""
        pending, values.pending = values.pending, None
        error = pending.exception()
        if error is None:
            values.launch = _Launch(*pending.result(), self.arguments([values.constants[k] for k in kept]))
        else:  # a generated source nvcc compiles in CI: a bug, but the generic kernel gives the same results
            warnings.warn(f"dask_gpunumeric: a kernel specialized to its scalar values did not compile ({error}); "
                          "the generic kernel runs instead. Please report this; gnp.config.set(specialize=False) "
                          "turns specialization off.", RuntimeWarning, stacklevel=3)


def kept_programs() -> tuple[int, int]:
    """How many programs this process keeps prepared (each with its kernels), and the most it keeps."""
    return len(_PREPARED), _PREPARED_SIZE


def forget_kernels() -> None:
    """Forget every program's kernels (their launch counts with them); the compiled modules stay cached."""
    _PREPARED.clear()


def _kernel(program: tuple, variant: _program.Variant) -> _Kernel:
    """The compiled kernel of a program variant (compiled once per process; CuPy also caches on disk)."""
    kernels = _prepared(program).kernels
    kernel = kernels.get(variant)
    if kernel is None:
        kernel = kernels[variant] = _Kernel(program, variant)
    return kernel


def recording() -> bool:
    """Whether kernel sources are written out (``GNP_KERNEL_DUMP_DIR`` set: CI; ``record_sources``)."""
    return bool(os.environ.get("GNP_KERNEL_DUMP_DIR"))


def record_sources(program: tuple, scalars: Sequence[Any], row_inputs: tuple[int, ...] = ()) -> None:
    """With ``GNP_KERNEL_DUMP_DIR`` set (CI), write every kernel variant of a program there (and the one
    specialized to these scalar values), so that nvcc compiles what the test suite generated even on
    machines without a GPU. A row program's variants have its inputs ``row_inputs`` one value per row.
    A program met again (a loop's repeated body, the next entry point of a test) was written already:
    generating its sources again would cost more than the rest of fusion."""

    if not recording():
        return
    constants = tuple(scalar_args(program.instrs, scalars))
    key = (os.environ["GNP_KERNEL_DUMP_DIR"], program, row_inputs)
    specialized = (*key, _value_key(constants)) if constants else None
    variants_new, specialized_new = key not in _recorded, bool(constants) and specialized not in _recorded
    if not variants_new and not specialized_new:
        return
    _recorded.update((key, specialized))
    if _rows.row_axes(program.instrs):
        if variants_new:
            for lanes in _rows.ROW_LANES:
                for index in ("int", "long long"):
                    _cuda.record_source(_rows.kernel_source(program, lanes, index, row_inputs)[0])
        if specialized_new:
            _cuda.record_source(_rows.kernel_source(program, 256, "int", row_inputs, constants)[0])
        return
    singles = tuple(range(len(program.inputs)))
    spread = [("spread", 1, ())] if _spreads(_prepared(program)) else []
    variants = [("flat", 1, ()), ("strided", 1, ()), *spread, ("flat", 1, singles)]
    if _program.philox_group(program.instrs):
        variants.append(("flat", _program.philox_group(program.instrs), ()))
    if variants_new:
        for mode, group, single in variants:
            for index in ("int", "long long"):
                _cuda.record_source(_program.kernel_source(program, mode, group, index, single)[0])
    if specialized_new:
        _cuda.record_source(_program.kernel_source(program, *variants[-1][:2], "int", (), constants)[0])


_recorded: set[tuple | None] = set()  # (dump folder, program, row inputs[, constants' key]) record_sources wrote


def run(program: tuple, scalars: Sequence[Any], offset: tuple[int, ...], shape: tuple[int, ...],
        global_shape: tuple[int, ...], backend: str, *inputs: Any) -> Any:
    """Task function of a Fused block: the outputs (one value, or a tuple when there are several)."""
    if backend == "cupy":
        results = run_cuda(program, scalars, offset, shape, global_shape, inputs)
    else:
        results = run_numpy(program, scalars, offset, shape, global_shape, inputs, backend)
    return results[0] if len(results) == 1 else tuple(results)


def pick(outputs: tuple, k: int) -> Any:
    """Output ``k`` of a multi-output Fused block."""
    return outputs[k]
