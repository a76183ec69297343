"""The check a fused program (or a stencil sweep's code) passes before it becomes CUDA source
(``codegen.program.kernel_source``, ``codegen.stencil.kernel_source``).

Generated source is made of our own templates, filled with names looked up in our tables (operations,
reductions, random kinds, C types of native-order dtypes) and with integers (slots, operand numbers, axes).
Programs come from the fusion pass, which builds them from those tables; this check makes that a guarantee
rather than a convention: whatever a program carries (a string from a user, a forged tuple), source is made
only when every string in it is one of our names and every number an integer in range.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..ops.reductions import REDUCTIONS
from ..ops.ufuncs import UFUNCS, fusable
from .philox import N_PARAMS
from .types import CTYPES, TILE_HALO


class ProgramError(ValueError):
    """A fused program that the fusion pass could not have made; no source is generated from it."""


def check_program(program: Any, mode: Any, group: Any, index: Any = "long long", singles: Any = ()) -> None:
    """Raise ``ProgramError`` unless ``program`` (see ``codegen.program``) holds only our names and integers in
    range, and ``mode``/``group``/``index``/``singles`` are launch variants we generate."""
    _require(mode in ("flat", "spread", "strided", "rows"), f"launch mode {mode!r}")
    _require(_is_int(group) and group in ((32, 256) if mode == "rows" else (1, 2, 4)),
             f"Philox group (lanes per row in mode rows) {group!r}")
    _require(index in ("int", "long long"), f"index type {index!r}")
    _require(isinstance(program, tuple) and len(program) == 4, "a program is (ndim, dtypes, instructions, outputs)")
    ndim, inputs, instrs, outputs = program
    _require(isinstance(singles, tuple) and all(_is_int(k) and 0 <= k < len(inputs) for k in singles),
             f"single-element inputs {singles!r}")
    _require(_is_int(ndim) and 0 <= ndim <= 64, f"ndim {ndim!r}")
    _require(isinstance(inputs, tuple) and all(_is_dtype(d) for d in inputs), f"input dtypes {inputs!r}")
    _require(isinstance(instrs, tuple) and isinstance(outputs, tuple) and outputs, "instructions and outputs")
    for i, ins in enumerate(instrs):
        _check_instruction(i, ins, len(inputs), ndim)
    rows = {ins[4] for ins in instrs if ins[0] == "row"}
    flat = {i for i, ins in enumerate(instrs) if ins[0] == "row" and not ins[6]}
    _require(not any(ins[0] in ("op", "row") and set(ins[4] if ins[0] == "op" else (ins[1],)) & flat for ins in instrs),
             "a row reduction without its axes kept is only stored")
    _require((mode == "rows") == bool(rows) and len(rows) <= 1, "row reductions (over one set of axes) in mode rows")
    _require(mode != "rows" or all(ins[0] in ("load", "scalar", "op", "row") for ins in instrs)
             and all(out[0] == "store" for out in outputs), "a row program of loads, scalars, ops and stores")
    for out in outputs:
        _check_output(out, len(instrs), ndim)


def check_stencil_code(code: Any, index: Any, edges: Any = None) -> None:
    """Raise ``ProgramError`` unless a stencil sweep's ``code`` (see ``codegen.stencil``) holds only our
    names and integers in range: its program, buffer dtypes, loads (a buffer slot and an integer offset per
    axis, or none for a 0-d array), restricted axes, bases and output dtypes (of its stores, before its full
    reductions: none in a kernel with a region); ``index`` is a C type we
    generate, and ``edges`` None or an edge mode (0, 1 or 2) per buffer slot and axis (none for a 0-d one)."""
    _require(index in ("int", "long long"), f"index type {index!r}")
    _require(isinstance(code, tuple) and len(code) == 6, "stencil code is (program, dtypes, loads, axes, bases, dtypes)")
    program, buffers, loads, restricted, bases, out_dtypes = code
    check_program(program, "flat", 1)
    ndim, outputs = program[0], program[3]
    _require(isinstance(buffers, tuple) and all(_is_dtype(d) for d in buffers), f"buffer dtypes {buffers!r}")

    def read(value: Any) -> bool:
        return (isinstance(value, tuple) and len(value) == 2 and _is_int(value[0]) and 0 <= value[0] < len(buffers)
                and isinstance(value[1], tuple) and len(value[1]) in (0, ndim) and all(_is_int(e) for e in value[1]))

    _require(isinstance(loads, tuple) and len(loads) == len(program[1]) and all(read(r) for r in loads),
             f"loads {loads!r}")
    _require(isinstance(restricted, tuple) and len(set(restricted)) == len(restricted)
             and all(_is_int(d) and 0 <= d < ndim for d in restricted), f"restricted axes {restricted!r}")
    _require(isinstance(out_dtypes, tuple) and len(out_dtypes) <= len(outputs) and all(_is_dtype(d) for d in out_dtypes)
             and all(out[0] == "store" for out in outputs[:len(out_dtypes)]) and all(
                 out[0] == "reduce" and out[4] == tuple(range(ndim)) for out in outputs[len(out_dtypes):])
             and (not restricted or len(out_dtypes) == len(outputs)), f"stencil outputs {outputs!r}")
    _require(isinstance(bases, tuple) and len(bases) == len(out_dtypes)
             and all(b is None or read(b) and len(b[1]) == ndim for b in bases), f"bases {bases!r}")
    _require(edges is None or isinstance(edges, tuple) and len(edges) == len(buffers) and all(
        isinstance(modes, tuple) and len(modes) in (0, ndim) and all(_is_int(m) and m in (0, 1, 2) for m in modes)
        for modes in edges), f"edges {edges!r}")


def check_tiles(codes: Any, links: Any, index: Any, edges: Any, stored: Any = (), config: Any = None) -> None:
    """Raise ``ProgramError`` unless consecutive 1-d, 2-d or 3-d sweeps' codes and edges pass ``check_stencil_code``, none
    has random draws and none but the last full reductions, each sweep but the first has in ``links``
    distinct slots linked to outputs of the previous sweep (``(slot, output)``), read at offsets of at most
    ``TILE_HALO`` per axis, the sweeps but the last have the same output dtypes, and ``stored`` lists some of
    the sweeps but the last, in order, and ``config`` (a ``TileConfig``, None: the default) has thread blocks of
    whole warps, each row of a 2-d tile a multiple of a warp that divides them, and loads at most 64 partials ahead
    (``codegen.stencil.tile_source``)."""
    _require(config is None or isinstance(config, tuple) and len(config) == 8 and all(_is_int(v) and v > 0 for v in config[:3])
             and config[3] in (False, True) and _is_int(config[4]) and 0 <= config[4] <= 32
             and all(v in (False, True) for v in config[5:7]) and _is_int(config[7]) and 0 <= config[7] <= 64
             and config[2] % 32 == 0 and config[2] <= 1024 and config[1] % 32 == 0 and config[2] % config[1] == 0,
             f"tile configuration {config!r}")
    _require(isinstance(codes, tuple) and isinstance(edges, tuple) and isinstance(links, tuple)
             and len(codes) >= 2 and len(edges) == len(codes) and len(links) == len(codes) - 1, "tile sweeps")
    for j, (code, modes) in enumerate(zip(codes, edges)):
        check_stencil_code(code, index, modes)
        _require(modes is not None and code[0][0] == codes[0][0][0] in (1, 2, 3)
                 and (j == len(codes) - 1 or len(code[5]) == len(code[0][3]))
                 and all(ins[0] != "random" for ins in code[0][2]), "tiles of 1-d, 2-d or 3-d sweeps, reductions last")
    _require(len({tuple(code[5]) for code in codes[:-1]}) == 1, "sweeps but the last of one output dtype each")
    _require(isinstance(stored, tuple) and all(_is_int(j) and 0 <= j < len(codes) - 1 for j in stored)
             and list(stored) == sorted(set(stored)), f"stored sweeps {stored!r}")
    for first, second, shared in zip(codes, codes[1:], links):
        _require(isinstance(shared, tuple) and shared and all(
            isinstance(pair, tuple) and len(pair) == 2 and _is_int(pair[0]) and 0 <= pair[0] < len(second[1])
            and _is_int(pair[1]) and 0 <= pair[1] < len(first[5]) for pair in shared)
            and len({slot for slot, _ in shared}) == len(shared), f"shared slots {shared!r}")
        slots = {slot for slot, _ in shared}
        _require(all(len(offset) == codes[0][0][0] and all(abs(e) <= TILE_HALO for e in offset)
                     for slot, offset in (*second[2], *(b for b in second[4] if b is not None)) if slot in slots),
                 "reads of shared slots within the tile's halo")


def _check_instruction(i: int, ins: Any, n_inputs: int, ndim: int) -> None:
    _require(isinstance(ins, tuple) and ins, f"instruction {i}")
    tag = ins[0]
    if tag == "load":
        _require(len(ins) == 3 and _is_int(ins[1]) and 0 <= ins[1] < n_inputs and _is_dtype(ins[2]),
                 f"load instruction {ins!r}")
    elif tag in ("scalar", "full"):
        _require(len(ins) == 3 and _is_int(ins[1]) and ins[1] >= 0 and _is_dtype(ins[2]), f"{tag} instruction {ins!r}")
    elif tag == "random":
        _require(len(ins) == 5 and isinstance(ins[1], str) and ins[1] in N_PARAMS and _is_dtype(ins[2]) and _is_int(ins[3]) and ins[3] >= 0
                 and _is_int(ins[4]) and ins[4] == N_PARAMS[ins[1]], f"random instruction {ins!r}")
    elif tag == "op":
        _require(len(ins) == 6 and isinstance(ins[1], str) and fusable(ins[1]), f"operation {ins[1:2]!r}")
        _, func, dtype, kwargs, args, compute = ins
        arity = UFUNCS[func].arity
        _require(_is_dtype(dtype) and _is_dtype(compute) and isinstance(kwargs, tuple), f"operation {ins!r}")
        _require(isinstance(args, tuple) and len(args) == arity and all(_is_int(a) and 0 <= a < i for a in args),
                 f"operands {args!r} of instruction {i}")
    elif tag == "total":
        _require(len(ins) == 7 and _is_int(ins[1]) and 0 <= ins[1] < i and isinstance(ins[6], bool),
                 f"total instruction {ins!r}")
        _, _, dtype, kind, axes, params, _ = ins
        _check_reduction((kind, axes, dtype, params), ndim)
        _require(isinstance(axes, tuple) and sorted(axes) == list(range(ndim)), f"a total over every axis: {ins!r}")
    elif tag == "row":
        _require(len(ins) == 7 and _is_int(ins[1]) and 0 <= ins[1] < i and isinstance(ins[6], bool),
                 f"row instruction {ins!r}")
        _, _, dtype, kind, axes, params, _ = ins
        _check_reduction((kind, axes, dtype, params), ndim)
        _require(axes and axes == tuple(range(ndim - len(axes), ndim)) and len(axes) < ndim,
                 f"a row reduction over trailing axes: {ins!r}")
    else:
        _require(False, f"instruction {ins!r}")


def _check_output(out: Any, n_instrs: int, ndim: int) -> None:
    _require(isinstance(out, tuple) and len(out) >= 2 and _is_int(out[1]) and 0 <= out[1] < n_instrs,
             f"output {out!r}")
    if out[0] == "store":
        _require(len(out) == 2, f"output {out!r}")
        return
    _require(out[0] == "reduce" and len(out) == 7 and out[6] is False, f"output {out!r}")
    _, _, dtype, kind, axes, params, _ = out
    _check_reduction((kind, axes, dtype, params), ndim)


def _check_reduction(reduction: tuple, ndim: int) -> None:
    """``(kind, axes, dtype, params)`` of a reduction output or a total."""
    kind, axes, dtype, params = reduction
    _require(isinstance(kind, str) and kind in REDUCTIONS and REDUCTIONS[kind].fusable, f"reduction {kind!r}")
    _require(isinstance(axes, tuple) and all(_is_int(a) and 0 <= a < ndim for a in axes), f"reduction axes {axes!r}")
    _require(_is_dtype(dtype) and isinstance(params, tuple), f"reduction {reduction!r}")
    _require("{S}" not in REDUCTIONS[kind].total or (len(params) >= 1 and _is_dtype(params[0])),
             f"{kind} parameters {params!r}")  # a mean's sum dtype


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_dtype(value: Any) -> bool:
    """A native-order dtype (or its ``.str``) of one of the C types the kernels use."""
    if not isinstance(value, (str, np.dtype)):
        return False
    try:
        dtype = np.dtype(value)
    except TypeError:
        return False
    return dtype.name in CTYPES and dtype.isnative


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise ProgramError(f"not a program of ours: {what}; fused programs are made by the fusion pass")
