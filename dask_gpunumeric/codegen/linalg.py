"""Dense linear algebra kernels: the products of a tall-skinny matrix's transpose with itself and with other
operands over its rows in one pass (``gram_source``), and a small system solved by one thread block
(``small_solve_source``)."""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from .types import ctype

TILE = 8  # the outputs a thread keeps in registers: TILE x TILE
STATIC_SHARED = 48 * 1024  # bytes of static shared memory a kernel may have
SUM_ROWS = 32  # the sum kernel's threads per partial element: blocks of (32, SUM_ROWS)
SOLVE_LARGEST = 128  # equations of a small system, at most
REGISTER_WIDTH = 72  # columns of a system whose rows a register solve keeps (a register each, float32)
SOLVE_BYTES = 160 * 1024  # its matrix and right-hand sides in dynamic shared memory, at most (opted in past 48 KB)
DYNAMIC_SHARED = "extern __shared__ unsigned char gnp_dynamic_shared[];"  # the kernels' dynamic shared memory
_SFMIN = {"float": "1.17549435e-38f", "double": "2.2250738585072014e-308"}  # LAPACK's dlamch('S')


def _tag(config: tuple) -> str:
    """What tells a configuration's kernels (a ``GramConfig``'s, a ``SolveConfig``'s) from the default's in their
    names: '' for the default."""
    return "".join(f"_{''.join(w[0] for w in f.split('_'))}{int(v)}"  # chunk_rows: cr, chunk_bytes: cb
                   for f, v, d in zip(config._fields, config, type(config)()) if v != d)


def _up(n: int) -> int:
    return -(-n // TILE) * TILE


class GramConfig(NamedTuple):
    """The compile-time choices of a gram kernel: ``threads`` per block at most, ``chunk_rows`` of the operands
    copied to shared memory at a time at most, ``chunk_bytes`` of shared memory for the chunks at most (all
    ``buffers`` together; dynamic shared memory past ``STATIC_SHARED``), ``buffers`` 2 to copy the next chunk (``cp.async`` on sm_80 and
    later) while the threads sum the last, ``min_blocks`` resident per SM asked of the compiler (0: none), and
    ``vectors``: ``x`` copied 16 bytes at a time where its columns allow it (the launch checks its alignment),
    ``unroll``: rows of a chunk a thread's loop takes at a time (their shared-memory loads issued together; 0:
    as the compiler sees fit)."""

    threads: int = 128
    chunk_rows: int = 128
    chunk_bytes: int = 22 * 1024
    buffers: int = 1
    min_blocks: int = 0
    vectors: bool = True
    unroll: int = 0



class SolveConfig(NamedTuple):
    """The compile-time choices of the small solve: ``threads`` of its one block, whether a kernel is compiled
    for each size of system (``fixed``: its loops' bounds known) or one for all, and ``registers``: a kernel for
    each size whose threads keep a row of the system each in registers (``register_solve_source``; systems of
    ``n + r`` up to ``REGISTER_WIDTH`` columns, others as ``fixed``)."""

    threads: int = 512
    fixed: bool = True
    registers: bool = False

    def kernel_size(self, n: int, rhs: int) -> tuple[int, int]:
        """The size of system the kernel solving one of ``n`` equations and ``rhs`` right-hand sides is compiled
        for: (0, 0) where one kernel solves all."""
        return (n, rhs) if self.fixed or self.registers else (0, 0)

    def in_registers(self, n: int, rhs: int) -> bool:
        """Whether that kernel keeps the rows in registers."""
        return self.registers and 0 < n + rhs <= REGISTER_WIDTH



class GramPlan(NamedTuple):
    """The geometry of a gram kernel: ``x`` (rows of ``k``) and the operands ``widths`` (their columns) side by
    side in shared memory as one matrix ``z`` of ``padded`` columns, each ``TILE`` of them followed by a gap
    (``stride``: the tiles that the threads of a warp read at once start in distinct banks); ``tiles`` output
    tiles of ``TILE`` x ``TILE`` (those of ``x.T @ z`` at or above the diagonal), each kept by ``groups``
    threads, every thread summing ``rows`` of each ``chunk``."""

    dtype: str
    k: int
    widths: tuple[int, ...]
    padded: int
    tiles: int
    groups: int
    rows: int
    config: GramConfig = GramConfig()

    @property
    def threads(self) -> int:
        return self.tiles * self.groups

    @property
    def chunk(self) -> int:
        return self.groups * self.rows

    @property
    def shared_bytes(self) -> int:
        """The shared memory of the chunks."""
        return self.config.buffers * self.chunk * self.row * np.dtype(self.dtype).itemsize

    @property
    def dynamic(self) -> bool:
        """Whether the chunks lie in dynamic shared memory (launch with ``shared_bytes``): past the 48 KB of
        static shared memory a kernel may have."""
        return self.config.chunk_bytes > STATIC_SHARED

    @property
    def stride(self) -> int:
        """Elements from a tile's first column in shared memory to the next tile's: 16 bytes of gap (a tile of
        float32 starts 12 words after the last, float64 20: eight tiles in a row fill the 32 banks)."""
        return TILE + 16 // np.dtype(self.dtype).itemsize

    @property
    def vectors(self) -> bool:
        """Whether ``x`` is copied 16 bytes at a time (its rows and their starts must lie 16 bytes apart)."""
        return self.config.vectors and self.k % (16 // np.dtype(self.dtype).itemsize) == 0

    @property
    def row(self) -> int:
        """Elements of one row of ``z`` in shared memory."""
        return self.padded // TILE * self.stride

    @property
    def name(self) -> str:
        widths = "_".join(map(str, self.widths))
        return (f"gnp_gram_{np.dtype(self.dtype).char}_k{self.k}" + (f"_w{widths}" if widths else "")
                + _tag(self.config))


@functools.lru_cache(maxsize=256)
def gram_plan(dtype: np.dtype, k: int, widths: tuple[int, ...], config: GramConfig = GramConfig()) -> GramPlan:
    """The plan of ``x.T @ x`` and ``x.T @ v`` for each operand ``v`` of ``widths`` columns, ``x`` of ``k`` columns
    (``1 <= k <= 128``, the widths at most 32 in all), compiled as ``config`` says; memoized (worked out on every
    launch)."""
    dtype = np.dtype(dtype)
    tx, tz = _up(k) // TILE, (_up(k) + _up(sum(widths))) // TILE
    tiles = sum(tz - i for i in range(tx))
    groups = max(1, config.threads // tiles)
    row_bytes = tz * (TILE * dtype.itemsize + 16)
    rows = max(1, min(-(-config.chunk_rows // groups), config.chunk_bytes // config.buffers // row_bytes // groups))
    return GramPlan(dtype.name, k, tuple(widths), tz * TILE, tiles, groups, rows, config)


def gram_source(plan: GramPlan) -> str:
    """Two kernels: ``<name>`` sums each thread block's range of rows into one partial of every tile (the groups
    of a block added in a fixed order), ``<name>_sum`` adds the partials of the blocks in a fixed order and
    writes ``x.T @ x`` (mirrored from its upper triangle) and each ``x.T @ v``.

    ``<name>(x, ldx, v0, ldv0, ..., n, rows_per_block, partials)`` with a grid of ``blocks`` and ``plan.threads``
    threads; ``<name>_sum(partials, blocks, gram, out0, ...)`` with blocks of (32, ``SUM_ROWS``) threads and a grid
    of ``ceil(plan.tiles * 64 / 32)``. Rows are contiguous (``ld*`` elements apart)."""
    t, k, name = ctype(plan.dtype), plan.k, plan.name
    kp, tz, tiles, chunk, stride = _up(k), plan.padded // TILE, plan.tiles, plan.chunk, plan.stride
    span = chunk * plan.row
    lanes = 16 // np.dtype(plan.dtype).itemsize  # elements of a 16-byte load
    vector = f"gnp_gram_v{np.dtype(plan.dtype).char}"
    passes = span // (TILE * TILE)  # tiles reduced through shared memory at a time
    offsets = [kp + sum(plan.widths[:q]) for q in range(len(plan.widths))]
    params = "".join(f"const {t}* __restrict__ v{q}, long long ldv{q}, " for q in range(len(plan.widths)))
    step = lanes if plan.vectors else 1  # x's elements a copy takes
    operands = [("x", "ldx", k, 0, step, vector if plan.vectors else t)] + [
        (f"v{q}", f"ldv{q}", m, off, 1, t) for q, (m, off) in enumerate(zip(plan.widths, offsets))]

    def loads(into: str, first: str) -> str:
        """The copies of the chunk of rows from ``first`` into the shared memory at ``into`` (rows past the end
        zero: they add nothing)."""
        return "".join(f"""
        for (int e = tid; e < {chunk * m // step}; e += {plan.threads}) {{
            const int r = e / {m // step}, c = (e - r * {m // step}) * {step};
            const long long row = {first} + r;
            const int at = {off} + c;
            {item}* to = reinterpret_cast<{item}*>({into} + r * {plan.row} + at / {TILE} * {stride} + at % {TILE});
            if (row < end) gnp_gram_copy(to, reinterpret_cast<const {item}*>({v} + row * {ld} + c)); else *to = {item}{{}};
        }}""" for v, ld, m, off, step, item in operands)

    if plan.config.buffers == 1:
        chunks = f"""for (long long start = begin; start < end; start += {chunk}) {{
        __syncthreads();  // the last chunk read (and the zeros written) by every thread
        {loads("z", "start")}
        gnp_gram_commit_wait(0);
        __syncthreads();
        const {t}* now = z;"""
    else:  # the next chunk copied while the threads sum this one
        chunks = f"""__syncthreads();  // the zeros written before the copies
    {loads("z", "begin")}
    gnp_gram_commit_wait(2);  // the first chunk's copies a group of their own, not waited for
    for (long long start = begin; start < end; start += {chunk}) {{
        const int current = (int)((start - begin) / {chunk}) & 1;
        __syncthreads();  // the other buffer read by every thread (the chunk before)
        if (start + {chunk} < end) {{{loads(f"z + (current ^ 1) * {span}", f"start + {chunk}")}
        }}
        gnp_gram_commit_wait(1);  // this thread's copies of this chunk done (the next chunk's may be pending)
        __syncthreads();  // and every thread's
        const {t}* now = z + current * {span};"""
    outs = "".join(f", {t}* __restrict__ out{q}" for q in range(len(plan.widths)))
    scatter = "".join(f"""
    {"else " if q else ""}if (c < {off - kp + m}) out{q}[i * {m} + c - {off - kp}] = v;"""
                      for q, (m, off) in enumerate(zip(plan.widths, offsets)))
    shared = (f"{DYNAMIC_SHARED}\n    {t}* z = reinterpret_cast<{t}*>(gnp_dynamic_shared);" if plan.dynamic
              else f"alignas(16) __shared__ {t} z[{plan.config.buffers * span}];")
    bounds = f"{plan.threads}, {plan.config.min_blocks}" if plan.config.min_blocks else f"{plan.threads}"
    tile_of = f"""int ti = 0, rest = tile;
    while (rest >= {tz} - ti) {{ rest -= {tz} - ti; ++ti; }}
    const int tj = ti + rest;"""
    return f"""#ifndef GNP_GRAM_VECTORS
#define GNP_GRAM_VECTORS
struct alignas(16) gnp_gram_vf {{ float v[4]; }};
struct alignas(16) gnp_gram_vd {{ double v[2]; }};
// an element copied to shared memory: asynchronously (cp.async) on sm_80 and later
template <typename T> __device__ __forceinline__ void gnp_gram_copy(T* to, const T* from)
{{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned shared;  // the shared-memory address of ``to`` (in PTX: no header needed under NVRTC)
    asm("{{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }}" : "=r"(shared) : "l"(to));
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\\n" :: "r"(shared), "l"(from), "n"(sizeof(T)));
#else
    *to = *from;
#endif
}}
// this thread's copies since the last commit committed as one group, then the wait until at most ``pending``
// of its groups are left (0 or 1; more: no wait)
__device__ __forceinline__ void gnp_gram_commit_wait(int pending)
{{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\\n" ::: "memory");
    if (pending == 0) asm volatile("cp.async.wait_group 0;\\n" ::: "memory");
    else if (pending == 1) asm volatile("cp.async.wait_group 1;\\n" ::: "memory");
#endif
}}
#endif
#ifndef GNP_GRAM_{name.upper()}
#define GNP_GRAM_{name.upper()}
extern "C" __global__ void __launch_bounds__({bounds}) {name}(const {t}* __restrict__ x, long long ldx, {params}long long n, long long rows_per_block, {t}* __restrict__ partials)
{{
    {shared}
    const int tid = threadIdx.x, group = tid / {tiles}, tile = tid - group * {tiles};
    {tile_of}
    {t} acc[{TILE}][{TILE}];
    #pragma unroll
    for (int a = 0; a < {TILE}; ++a)
        #pragma unroll
        for (int b = 0; b < {TILE}; ++b) acc[a][b] = 0;
    for (int e = tid; e < {plan.config.buffers * span}; e += {plan.threads}) z[e] = 0;  // the padding columns stay zero
    const long long begin = (long long)blockIdx.x * rows_per_block;
    const long long end = n < begin + rows_per_block ? n : begin + rows_per_block;
    {chunks}
        {f"#pragma unroll {plan.config.unroll}" if plan.config.unroll else "// (unrolled as the compiler sees fit)"}
        for (int s = 0; s < {plan.rows}; ++s) {{
            const {t}* zr = now + (group * {plan.rows} + s) * {plan.row};
            const {vector}* va = reinterpret_cast<const {vector}*>(zr + ti * {stride});  // 16-byte loads
            const {vector}* vb = reinterpret_cast<const {vector}*>(zr + tj * {stride});
            {t} a[{TILE}], b[{TILE}];
            #pragma unroll
            for (int h = 0; h < {TILE // lanes}; ++h) {{
                const {vector} ah = va[h], bh = vb[h];
                #pragma unroll
                for (int u = 0; u < {lanes}; ++u) {{ a[h * {lanes} + u] = ah.v[u]; b[h * {lanes} + u] = bh.v[u]; }}
            }}
            #pragma unroll
            for (int p = 0; p < {TILE}; ++p)
                #pragma unroll
                for (int q = 0; q < {TILE}; ++q) acc[p][q] += a[p] * b[q];
        }}
    }}
    // the groups' sums added in group order, {passes} tiles at a time in shared memory, then written out
    {t}* partial = partials + (long long)blockIdx.x * {tiles * TILE * TILE};
    for (int t0 = 0; t0 < {tiles}; t0 += {passes}) {{
        for (int g = 0; g < {plan.groups}; ++g) {{
            __syncthreads();  // the chunk's readers, the group before and the last pass's writers done
            if (group == g && tile >= t0 && tile < t0 + {passes}) {{
                {t}* red = z + (tile - t0) * {TILE * TILE};
                #pragma unroll
                for (int p = 0; p < {TILE}; ++p)
                    #pragma unroll
                    for (int q = 0; q < {TILE}; ++q) red[p * {TILE} + q] = g == 0 ? acc[p][q] : red[p * {TILE} + q] + acc[p][q];
            }}
        }}
        __syncthreads();
        const int count = ({tiles} - t0 < {passes} ? {tiles} - t0 : {passes}) * {TILE * TILE};
        for (int e = tid; e < count; e += {plan.threads}) partial[t0 * {TILE * TILE} + e] = z[e];
    }}
}}

extern "C" __global__ void __launch_bounds__({32 * SUM_ROWS}) {name}_sum(const {t}* __restrict__ partials, int blocks, {t}* __restrict__ gram{outs})
{{
    __shared__ {t} part[{SUM_ROWS}][33];
    const int at = blockIdx.x * 32 + threadIdx.x;
    {t} s = 0;
    if (at < {tiles * TILE * TILE})
        for (int b = threadIdx.y; b < blocks; b += {SUM_ROWS}) s += partials[(long long)b * {tiles * TILE * TILE} + at];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || at >= {tiles * TILE * TILE}) return;
    {t} v = part[0][threadIdx.x];
    for (int y = 1; y < {SUM_ROWS}; ++y) v += part[y][threadIdx.x];
    const int tile = at / {TILE * TILE}, e = at - tile * {TILE * TILE};
    {tile_of}
    const int i = ti * {TILE} + e / {TILE}, col = tj * {TILE} + e % {TILE};
    if (i >= {k}) return;
    if (col < {kp}) {{  // x.T @ x: each element below the diagonal is its mirror's
        if (col >= {k} || (ti == tj && i > col)) return;
        gram[i * {k} + col] = v;
        if (i != col) gram[col * {k} + i] = v;
        return;
    }}
    const int c = col - {kp};{scatter}
}}
#endif
"""


def register_solve_source(dtype: np.dtype, size: tuple[int, int]) -> tuple[str, str]:
    """``small_solve_source``'s kernel for systems of ``size`` (n, r) only, in one thread block of ``n`` threads
    (rounded up to a warp): each thread keeps a row of ``[a | b]`` in registers and the row exchanges of the
    pivoting exchange the rows' positions; the pivot's row goes through shared memory (two buffers: one
    barrier a step). The same operations in the same order as the shared-memory kernel (getf2, then the back
    substitution). Launched with no dynamic shared memory. (source, name)"""
    t = ctype(dtype)
    n, r = size
    w, threads = n + r, -(-n // 32) * 32
    warps = threads // 32
    name = f"gnp_register_solve_{np.dtype(dtype).char}_n{n}_r{r}"
    fabs = "fabsf" if t == "float" else "fabs"
    return f"""#ifndef GNP_SMALL_SOLVE_{name.upper()}
#define GNP_SMALL_SOLVE_{name.upper()}
extern "C" __global__ void __launch_bounds__({threads}) {name}(const {t}* __restrict__ a, long long a_row, long long a_col, const {t}* __restrict__ b, long long b_row, long long b_col, int rows, int rhs, {t}* __restrict__ x, int* __restrict__ status)
{{
    __shared__ {t} pivot_row[2][{w}];
    __shared__ {t} best_of[2][{warps}];
    __shared__ int best_at[2][{warps}];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const bool mine = tid < {n};  // the threads past n hold no row
    {t} row[{w}];
    #pragma unroll
    for (int c = 0; c < {w}; ++c)
        row[c] = !mine ? ({t})0 : c < {n} ? a[tid * a_row + c * a_col] : b[tid * b_row + (c - {n}) * b_col];
    int pos = tid, info = 0;  // pos: where this thread's row is after the exchanges so far
    for (int j = 0; j < {n}; ++j) {{
        const int buffer = j & 1;
        {t} v = 0;  // this row's entry of column j
        #pragma unroll
        for (int c = 0; c < {n}; ++c) if (c == j) v = row[c];
        // the pivot, the first row of largest magnitude at or below j
        {t} best = mine && pos >= j ? {fabs}(v) : ({t})-1;
        int at = mine && pos >= j ? pos : {n};
        for (int s = 16; s > 0; s >>= 1) {{
            const {t} other = __shfl_xor_sync(0xffffffffu, best, s);
            const int other_at = __shfl_xor_sync(0xffffffffu, at, s);
            if (other > best || (other == best && other_at < at)) {{ best = other; at = other_at; }}
        }}
        if (lane == 0) {{ best_of[buffer][warp] = best; best_at[buffer][warp] = at; }}
        __syncthreads();
        for (int u = 0; u < {warps}; ++u) {{
            const {t} other = best_of[buffer][u];
            const int other_at = best_at[buffer][u];
            if (other > best || (other == best && other_at < at)) {{ best = other; at = other_at; }}
        }}
        if (mine && pos == at) {{
            #pragma unroll
            for (int c = 0; c < {w}; ++c) pivot_row[buffer][c] = row[c];
        }}
        __syncthreads();
        const {t} pivot = pivot_row[buffer][j];
        {t} l = v;
        if (pivot != 0) {{  // rows j and at exchanged, column j scaled
            if (pos == at) pos = j; else if (pos == j) pos = at;
            const {t} inverse = 1 / pivot;
            const bool normal = {fabs}(pivot) >= {_SFMIN[t]};
            l = normal ? v * inverse : v / pivot;
            if (mine && pos > j) {{
                #pragma unroll
                for (int c = 0; c < {n}; ++c) if (c == j) row[c] = l;
            }}
        }} else if (info == 0) {{
            info = j + 1;
        }}
        if (mine && pos > j) {{  // the rank-1 update
            #pragma unroll
            for (int c = 1; c < {w}; ++c) if (c > j) row[c] -= l * pivot_row[buffer][c];
        }}
    }}
    for (int j = {n - 1}; j >= 0; --j) {{  // U x = y, a column of U at a time (LAPACK's trsm)
        const int buffer = j & 1;
        if (mine && pos == j) {{
            {t} d = 0;
            #pragma unroll
            for (int c = 0; c < {n}; ++c) if (c == j) d = row[c];
            #pragma unroll
            for (int c = {n}; c < {w}; ++c) {{
                const {t} xj = row[c] / d;
                pivot_row[buffer][c] = xj;
                x[j * {r} + c - {n}] = xj;
            }}
        }}
        __syncthreads();
        if (mine && pos < j) {{
            {t} u = 0;
            #pragma unroll
            for (int c = 0; c < {n}; ++c) if (c == j) u = row[c];
            #pragma unroll
            for (int c = {n}; c < {w}; ++c) row[c] -= pivot_row[buffer][c] * u;
        }}
    }}
    if (tid == 0) {{ status[0] = info; status[1] = 0; }}
}}
#endif
""", name


def small_solve_source(dtype: np.dtype, config: SolveConfig = SolveConfig(),
                       size: tuple[int, int] = (0, 0)) -> tuple[str, str]:
    """A kernel solving ``a @ x = b`` (``a`` n x n, ``b`` n x r, any strides) in one thread block of
    ``config.threads``: LU factorization with partial pivoting in shared memory in LAPACK getf2's order (the first
    row of largest magnitude, the column scaled by the pivot's reciprocal where that is normal, the rank-1
    update), ``b`` carried along as extra columns (getrs's forward substitution), then the back substitution.
    ``status`` gets getrf's ``info`` (the first zero pivot, 1-based; 0 where ``a`` is regular) and a 0 for
    getrs's. The system lies in ``n * (n + r)`` elements of dynamic shared memory (launch with as many bytes).
    Given a ``size`` (n, r) (``config.kernel_size``) the kernel solves only systems of that size, its loops' bounds
    known to the compiler; (0, 0): any.
    (source, name)"""
    t = ctype(dtype)
    sized = size != (0, 0)
    name = f"gnp_small_solve_{np.dtype(dtype).char}{_tag(config)}" + (f"_n{size[0]}_r{size[1]}" if sized else "")
    n, w = (str(size[0]), str(size[0] + size[1])) if sized else ("rows", "rows + rhs")
    threads = config.threads
    fabs = "fabsf" if t == "float" else "fabs"
    return f"""#ifndef GNP_SMALL_SOLVE_{name.upper()}
#define GNP_SMALL_SOLVE_{name.upper()}
extern "C" __global__ void __launch_bounds__({threads}) {name}(const {t}* __restrict__ a, long long a_row, long long a_col, const {t}* __restrict__ b, long long b_row, long long b_col, int rows, int rhs, {t}* __restrict__ x, int* __restrict__ status)
{{
    {DYNAMIC_SHARED}
    {t}* m = reinterpret_cast<{t}*>(gnp_dynamic_shared);  // [a | b], row-major, rows of w
    const int n = {n}, w = {w}, tid = threadIdx.x, lane = tid & 31;
    for (int e = tid; e < n * w; e += {threads}) {{
        const int i = e / w, c = e - i * w;
        m[e] = c < n ? a[i * a_row + c * a_col] : b[i * b_row + (c - n) * b_col];
    }}
    int info = 0;
    __syncthreads();
    for (int j = 0; j < n; ++j) {{
        // the pivot, the first row of largest magnitude at or below j (found by every warp)
        {t} best = -1;
        int at = j;
        for (int i = j + lane; i < n; i += 32) {{
            const {t} v = {fabs}(m[i * w + j]);
            if (v > best) {{ best = v; at = i; }}
        }}
        for (int s = 16; s > 0; s >>= 1) {{
            const {t} other = __shfl_xor_sync(0xffffffffu, best, s);
            const int other_at = __shfl_xor_sync(0xffffffffu, at, s);
            if (other > best || (other == best && other_at < at)) {{ best = other; at = other_at; }}
        }}
        const {t} pivot = m[at * w + j], old = m[j * w + j];
        __syncthreads();
        if (pivot != 0) {{  // rows j and at swapped (column j by its rows' threads), column j scaled
            if (at != j)
                for (int c = tid; c < w; c += {threads})
                    if (c != j) {{ const {t} v = m[j * w + c]; m[j * w + c] = m[at * w + c]; m[at * w + c] = v; }}
            const {t} inverse = 1 / pivot;
            const bool normal = {fabs}(pivot) >= {_SFMIN[t]};
            for (int i = j + tid; i < n; i += {threads}) {{
                if (i == j) {{ m[i * w + j] = pivot; continue; }}
                const {t} v = i == at ? old : m[i * w + j];
                m[i * w + j] = normal ? v * inverse : v / pivot;
            }}
        }} else if (info == 0) {{
            info = j + 1;
        }}
        __syncthreads();
        for (int i = j + 1 + (tid >> 5); i < n; i += {threads // 32}) {{  // a row per warp, a column per lane
            const {t} l = m[i * w + j];
            for (int c = j + 1 + lane; c < w; c += 32) m[i * w + c] -= l * m[j * w + c];
        }}
        __syncthreads();
    }}
    for (int j = n - 1; j >= 0; --j) {{  // U x = y, a column of U at a time (LAPACK's trsm)
        for (int i = tid; i <= j; i += {threads})
            for (int c = n; c < w; ++c) {{
                const {t} xj = m[j * w + c] / m[j * w + j];
                if (i == j) x[j * (w - n) + c - n] = xj;
                else m[i * w + c] -= xj * m[i * w + j];
            }}
        __syncthreads();
    }}
    if (tid == 0) {{ status[0] = info; status[1] = 0; }}
}}
#endif
""", name
