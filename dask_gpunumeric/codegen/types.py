"""What generated kernels are made from: the C types of the dtypes they handle, exact C++ constants, and the
typed programs (``Program``, a stencil group's ``StencilPlan`` and its sweeps' ``StencilCode``).

The typed programs are NamedTuples that print (``repr``) and compare as plain tuples: kernel names are hashes
of that text, and programs are cache keys and task arguments.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

#: dtype name -> the C++ type generated kernels hold it in
CTYPES = {
    "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "unsigned long long", "float32": "float", "float64": "double",
}

#: C++ type -> its NumPy dtype
NP_OF_CTYPE = {v: np.dtype(k) for k, v in CTYPES.items()}


def ctype(dt: str | np.dtype) -> str:
    """The C++ type of a dtype (or its ``.str``)."""
    try:
        return _CTYPE_OF[dt]
    except (KeyError, TypeError):  # (another spelling: a dtype's ``.name`` is slow, so it is read only here)
        return CTYPES[np.dtype(dt).name]


# the native dtypes and their ``.str``: code generation asks for millions of C types per CI run
_CTYPE_OF: dict[Any, str] = {key: v for k, v in CTYPES.items() for key in (np.dtype(k), np.dtype(k).str)}


def dtype_supported(dtype: np.dtype) -> bool:
    """Dtypes the generated kernels handle (no complex, no float16, native byte order only)."""
    return np.dtype(dtype) in _SUPPORTED  # (a non-native dtype differs from the native one)


_SUPPORTED = frozenset(NP_OF_CTYPE.values())


def scalar_supported(value: Any) -> bool:
    """Python and NumPy scalars a kernel takes as an argument."""
    if isinstance(value, (bool, np.bool_)):
        return True
    if isinstance(value, (int, np.integer)):
        return -(2**63) <= int(value) < 2**64
    return isinstance(value, (float, np.floating)) and dtype_supported(np.asarray(value).dtype)


def c_literal(ct: str, value: Any) -> str:
    """``value`` as an exact C++ constant of C type ``ct``: floats in hexadecimal (their bits where not
    finite), integers through their two's-complement bits."""
    dt = NP_OF_CTYPE[ct]
    v = dt.type(value)
    if dt.kind == "b":
        return "true" if v else "false"
    if dt.kind == "f":
        if np.isfinite(v):
            return float(v).hex() + ("f" if ct == "float" else "")
        return (f"__uint_as_float({int(v.view(np.uint32)):#x}u)" if ct == "float"
                else f"__longlong_as_double({int(v.view(np.int64))}ll)")
    return f"({ct}){int(v) % 2 ** (8 * dt.itemsize)}ull"


def _as_tuple(self: tuple) -> str:
    """A typed program's text: the plain tuple's (kernel names hash it)."""
    return tuple.__repr__(self)


# edge modes of a stencil sweep's reads: what a read past a buffer's ends gives
WRAP = 1  # the element a period away (the buffer holds a whole period of a cyclic axis)
FILL = 2  # a constant (reads past the ends of an array padded with it)

# outputs of a thread block of a tile kernel per axis, by number of axes: 64 (32) columns keep rows coalesced
TILES = {1: (1024,), 2: (32, 64), 3: (8, 16, 32)}
# the most sweeps per tile kernel by number of axes, unless ``gpunumeric.stencil-tile-sweeps`` says: a 1-d
# halo grows by a few elements per sweep, so 1-d runs go deeper (docs/benchmarks.md, "1-d tile kernels")
TILE_SWEEPS = {1: 8, 2: 4, 3: 4}
TILE_THREADS = 256
TILE_HALO = 2  # the largest offset per axis at which a sweep of a tile kernel may read its predecessor's outputs
TILE_SHARED_BYTES = 48 * 1024  # the static shared memory a thread block may declare
# an sm_90 multiprocessor (H100, H200): its shared memory, the part of it the driver keeps per thread block, its
# threads. A tile kernel asks the compiler for registers that let as many of its thread blocks stay resident as
# its shared memory does (``tile_blocks``)
SM_SHARED_BYTES = 228 * 1024
SM_BLOCK_SHARED_BYTES = 1024
SM_THREADS = 2048
TILE_WORK = 1.25  # the most work a tile kernel may do on its extended tiles, per sweep, over the tile's


class TileConfig(NamedTuple):
    """The compile-time shape of a tile kernel (``codegen.stencil.tile_source``): its thread block's ``threads``
    and, for 2-d sweeps, its tile of ``rows`` x ``columns`` outputs (1-d and 3-d: ``TILES``'). Each thread keeps
    a column and walks ``threads // columns`` rows apart, ``rows * columns // threads`` outputs per sweep
    (``benchmarks/stencil_probe.py --variants`` compares configurations). ``packed``: in 2-d, each thread of the
    tile's columns keeps ``codegen.stencil.PACK`` consecutive ones, reading buffers and storing outputs as packs
    (``gnp_pack4``: vector accesses) where they are aligned to them. ``min_blocks``: the thread blocks per
    multiprocessor its registers must allow (0: as many as its shared memory does, ``codegen.stencil.tile_blocks``).
    ``packed_last``: with ``packed``, the last sweep too where it reads only shared memory (CG's ``p.Ap``, heat's
    and Gray-Scott's last sweeps): ``PACK`` consecutive columns per thread, each shared row it reads one 16-byte
    access, the columns past the pack one by one, its outputs stored as packs. ``prefetch_next``: in 2-d kernels
    whose thread blocks walk the tiles (full reductions: CG's pair kernel), each block first asks L2 for the rows
    its first sweep reads from global memory for its *next* tile (sm_90's bulk prefetch, no waiting), so that
    those reads are in flight while it computes this one. ``combine_ahead``: in kernels with full reductions,
    each thread of the last thread block loads that many partials before it combines them, in the same order (0:
    one at a time, ``codegen.program.finish``). A ``min_blocks`` set is kept even where the compiler then spills
    (the bound from shared memory is dropped there: compiled again without it)."""

    rows: int = TILES[2][0]
    columns: int = TILES[2][1]
    threads: int = TILE_THREADS
    packed: bool = False
    min_blocks: int = 0
    packed_last: bool = False
    prefetch_next: bool = False
    combine_ahead: int = 0

    def tile(self, ndim: int) -> tuple[int, ...]:
        """The outputs of a thread block per axis for sweeps of ``ndim`` axes."""
        return (self.rows, self.columns) if ndim == 2 else TILES[ndim]


class SweepConfig(NamedTuple):
    """The compile-time choices of a one-sweep stencil kernel (``codegen.stencil.kernel_source``): ``rows``
    positions per thread (0: ``codegen.stencil.rows``' choice), ``min_blocks`` thread blocks per
    multiprocessor its registers must allow (0: the compiler's own choice) and, for 2-d sweeps, ``columns``
    threads of a thread block along the last axis (0: ``codegen.stencil.THREADS``'; wider blocks read fewer
    neighbours' columns per row, as many threads in all: ``benchmarks/stencil_probe.py --variants`` compares
    configurations). ``packed``: in 2-d, each thread computes ``codegen.stencil.PACK`` consecutive columns of
    each of its rows, moving each buffer's row as one pack (``gnp_pack4``: a vector access) where the buffers
    are aligned to it. ``combine_ahead``: in a kernel with full reductions, each thread of the last thread block
    loads that many partials before it combines them, in the same order (0: one at a time,
    ``codegen.program.finish``). The same bits under every configuration but for the partials' grouping (rows,
    columns, packed)."""

    rows: int = 0
    min_blocks: int = 0
    columns: int = 0
    packed: bool = False
    combine_ahead: int = 0


class Load(NamedTuple):
    """Value: external input ``input`` (broadcast to the block)."""

    tag: str
    input: int
    dtype: str

    __repr__ = _as_tuple


class Scalar(NamedTuple):
    """Value: scalar argument ``slot`` (``tag`` "scalar"), or a constant array of it (``tag`` "full")."""

    tag: str
    slot: int
    dtype: str

    __repr__ = _as_tuple


class Random(NamedTuple):
    """Value: a Philox draw of ``kind``; scalars ``slot..`` hold key, stream and ``nparams`` parameters."""

    tag: str
    kind: str
    dtype: str
    slot: int
    nparams: int

    __repr__ = _as_tuple


class Op(NamedTuple):
    """Value: the ufunc ``func`` (``ops.ufuncs``) of values ``args``, computed in dtype ``compute``."""

    tag: str
    func: str
    dtype: str
    kwargs: tuple
    args: tuple[int, ...]
    compute: str

    __repr__ = _as_tuple


class Reduction(NamedTuple):
    """The reduction ``kind`` (``ops.reductions``) of value ``value`` over ``axes`` in dtype ``dtype``: as an
    instruction (``tag`` "total"), the value of the finished reduction over every axis of a one-block array
    (keeping the axes if ``keepdims``), or (``tag`` "row") over the trailing axes ``axes`` of a block holding
    them whole: one value per row (``codegen.rows``; only stored where not ``keepdims``); as an output (``tag``
    "reduce"), the block's partial."""

    tag: str
    value: int
    dtype: str
    kind: str
    axes: tuple[int, ...]
    params: tuple
    keepdims: bool

    __repr__ = _as_tuple


class Store(NamedTuple):
    """Output: a block of value ``value``."""

    tag: str
    value: int

    __repr__ = _as_tuple


_TYPES = {"load": Load, "scalar": Scalar, "full": Scalar, "random": Random, "op": Op, "total": Reduction,
          "row": Reduction, "store": Store, "reduce": Reduction}


def typed_program(program: tuple) -> Program:
    """A program (checked: ``check.check_program``) with its instructions and outputs typed."""
    ndim, inputs, instrs, outputs = program
    return Program(ndim, inputs, tuple(_TYPES[i[0]](*i) for i in instrs), tuple(_TYPES[o[0]](*o) for o in outputs))


class Program(NamedTuple):
    """What one fused group computes per block, in SSA form (``codegen.program``): value ``i`` is defined by
    instruction ``i`` (``Load``, ``Scalar``, ``Random``, ``Op``, a total ``Reduction``); ``inputs`` holds the dtypes of
    the external inputs, ``outputs`` the ``Store`` and partial ``Reduction`` outputs."""

    ndim: int
    inputs: tuple[str, ...]
    instrs: tuple[tuple, ...]
    outputs: tuple[tuple, ...]

    __repr__ = _as_tuple


class StencilCode(NamedTuple):
    """What one stencil sweep's generated kernel depends on (``codegen.stencil``): its ``program``, whose
    ``("load", k, dtype)`` reads buffer slot ``loads[k][0]`` at offset ``loads[k][1]`` (``()``: a 0-d
    array), the slots' dtypes, the axes where a region applies, per store what it keeps outside the region
    (``(slot, offset)`` or None) and the stores' dtypes."""

    program: Program
    buffers: tuple[str, ...]
    loads: tuple[tuple[int, tuple[int, ...]], ...]
    restricted: tuple[int, ...]
    bases: tuple[Any, ...]
    out_dtypes: tuple[str, ...]

    __repr__ = _as_tuple


class Sweep(NamedTuple):
    """One kernel of a stencil group: its code, the group's buffer number of each of its slots, its region
    (``(lo, hi)`` per restricted axis) and per slot ``(modes, fill, extent)``: what reads past the slot's
    buffer give along each axis."""

    code: StencilCode
    slots: tuple[int, ...]
    region: tuple[tuple[int, int], ...]
    edges: tuple[tuple[tuple[int, ...], Any, tuple[int, ...]], ...]

    __repr__ = _as_tuple


class StencilPlan(NamedTuple):
    """A stencil group (``codegen.stencil_plan``): the fields' ``shape``, its ``sweeps`` in order, the
    buffers it returns, whether each axis is ``periodic``, per source and axis whether its halo ``wraps``,
    its full ``reductions`` (``(sweep, output)``) and the runs of sweeps in tile kernels, ``(first sweep,
    count)`` (``tile_runs``)."""

    ndim: int
    shape: tuple[int, ...]
    sweeps: tuple[Sweep, ...]
    outputs: tuple[int, ...]
    periodic: tuple[bool, ...]
    wraps: tuple[tuple[bool, ...], ...]
    reductions: tuple[tuple[int, int], ...]
    tiles: tuple[tuple[int, int], ...] = ()

    __repr__ = _as_tuple
