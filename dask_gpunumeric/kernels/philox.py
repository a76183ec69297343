"""Counter-based random numbers: Philox4x32-10, with identical streams on NumPy and CUDA.

Stream definition (the contract every backend implements)
=========================================================

Key
    Two uint32 words ``(k0, k1) = numpy.random.SeedSequence(seed).generate_state(2, uint32)``
    (:func:`seed_to_key`).

Stream
    Every draw call of a generator has a stream number ``stream`` (``0 <= stream < 2**64``),
    so successive calls give independent numbers.

Words of an element
    An array of shape ``S`` is drawn element by element in C order. The element with global
    flat index ``i`` uses ``w`` consecutive 32-bit words (``w`` from
    :func:`words_per_element`: 1, 2 or 4). They are words ``(i*w) % 4 ... (i*w) % 4 + w - 1``
    of the Philox4x32-10 output block

        ``philox4x32_10(counter=(c & 0xffffffff, c >> 32, stream & 0xffffffff, stream >> 32),
        key=(k0, k1))`` with ``c = (i*w) // 4``.

    Nothing depends on how the array is chunked, on the number of devices, or on the backend.

Distributions (``kind``; ``a, b, c, d`` are the element's words in order; ``u53(a, b) =
((a >> 5) * 2**26 + (b >> 6)) * 2**-53``; every float operation is rounded in the output
dtype, one operation at a time, never fused into an FMA)

    ``"random"``           float32: ``w=1``, ``(a >> 8) * 2**-24``; float64: ``w=2``,
                           ``u53(a, b)``. Both exact, in ``[0, 1)``.
    ``"uniform"``          params ``(low, high)``: ``low + (high - low) * random``. As with
                           NumPy, rounding can give ``high`` for some ``(low, high)``.
    ``"standard_normal"``  Box-Muller, ``z = sqrt(-2 log u1) * cos(2 pi u2)``.
                           float32: ``w=2``, ``u1 = ((a >> 8) + 1) * 2**-24`` (in ``(0, 1]``),
                           ``u2 = (b >> 8) * 2**-24``, ``2 pi`` rounded to float32.
                           float64: ``w=4``, ``u1 = 1 - u53(a, b)``, ``u2 = u53(c, d)``.
    ``"normal"``           params ``(loc, scale)``: ``loc + scale * standard_normal``;
                           ``scale < 0`` is a ``ValueError``.
    ``"integers"``         params ``(low, high)``, the half-open range ``[low, high)`` (callers
                           convert ``endpoint=True``); any integer or bool dtype: ``w=2``,
                           ``u = (a << 32) | b`` (uint64), value ``low + u % (high - low)``
                           computed in uint64 (wrapping) and cast to the dtype. ``high <= low``
                           is a ``ValueError``. The modulo has a bias of at most
                           ``(high - low) / 2**64``.

Everything except ``log``/``cos`` in the normals is bit-identical between backends; those two
differ by the libraries' few-ulp errors.

Backends
========
* NumPy: :func:`draw_block` (vectorized; blocks are cut into runs of consecutive flat indices,
  Philox is evaluated once per needed counter, in cache-sized chunks).
* CUDA: :func:`cuda_source` generates one full ``extern "C" __global__`` kernel per
  ``(kind, dtype, ndim)`` (no ``#include``: NVRTC and nvcc both compile it). Key, stream,
  parameters and the block geometry are kernel arguments, so one compiled kernel serves every
  call. :data:`PHILOX_DEVICE_SOURCE` holds the reusable ``__device__`` functions (include-guarded,
  so several sources can be concatenated) for fused kernels: per element with global flat index
  ``i``, ``gnp_random_f32(k0, k1, stream, i)``, ``gnp_uniform_f64(k0, k1, stream, i, low, high)``,
  ``gnp_standard_normal_f32(...)``, ``gnp_normal_f64(..., loc, scale)``,
  ``gnp_integers_u64(..., low, span)`` (``span == 0`` meaning ``2**64``), and the building blocks
  ``gnp_philox4x32_10``, ``gnp_u32_to_f32``, ``gnp_u64_to_f64``.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Sequence

import numpy as np

from . import cuda as _cuda

__all__ = [
    "KINDS",
    "PHILOX_DEVICE_SOURCE",
    "cuda_source",
    "draw_block",
    "philox4x32_10",
    "seed_to_key",
    "words_per_element",
]

#: The distributions of the stream definition.
KINDS = ("random", "uniform", "standard_normal", "normal", "integers")

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10

_MASK32 = 0xFFFFFFFF
_U64 = np.uint64
_F32_2M24 = np.float32(2.0**-24)
_F64_2M53 = 2.0**-53
_F32_TWO_PI = np.float32(2.0 * np.pi)
_F64_TWO_PI = 2.0 * np.pi
#: Philox counters per piece of a NumPy block (keeps the work arrays in cache).
_CHUNK = 1 << 14

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_N_PARAMS = {"random": 0, "uniform": 2, "standard_normal": 0, "normal": 2, "integers": 2}


# ---------------------------------------------------------------------------------------------
# keys, kinds, dtypes, parameters


def seed_to_key(seed: int | np.random.SeedSequence | None) -> tuple[int, int]:
    """Return the Philox key ``(k0, k1)`` of a seed.

    ``seed`` is an int ``>= 0``, a ``numpy.random.SeedSequence``, or ``None`` for fresh OS
    entropy. The key is ``SeedSequence(seed).generate_state(2, numpy.uint32)``.
    """
    if type(seed) is int:  # the common case, made on every draw: remembered
        return _int_seed_key(seed)
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    k0, k1 = seq.generate_state(2, np.uint32)
    return int(k0), int(k1)


@functools.lru_cache(maxsize=1024)
def _int_seed_key(seed: int) -> tuple[int, int]:
    k0, k1 = np.random.SeedSequence(seed).generate_state(2, np.uint32)
    return int(k0), int(k1)


def _check_kind(kind: str) -> None:
    if kind not in _N_PARAMS:
        raise ValueError(f"unknown random kind {kind!r}; expected one of {KINDS}")


def _resolve_dtype(kind: str, dtype: Any) -> np.dtype:
    """The output dtype of ``kind`` (``None``: float64, or int64 for integers), validated."""
    _check_kind(kind)
    if kind == "integers":
        dt = np.dtype(np.int64 if dtype is None else dtype)
        if dt.kind not in "iub":
            raise TypeError(f"integers() supports integer and bool dtypes, got {dt}")
    else:
        dt = np.dtype(np.float64 if dtype is None else dtype)
        if dt not in _FLOAT_DTYPES:
            raise TypeError(f"{kind}() supports float32 and float64 dtypes, got {dt}")
    return dt


def words_per_element(kind: str, dtype: Any) -> int:
    """Return how many 32-bit Philox words one element of ``kind``/``dtype`` uses (1, 2 or 4)."""
    dt = _resolve_dtype(kind, dtype)
    if kind in ("random", "uniform"):
        return 1 if dt == np.float32 else 2
    if kind in ("standard_normal", "normal"):
        return 2 if dt == np.float32 else 4
    return 2


def _check_params(kind: str, dt: np.dtype, params: Sequence[Any]) -> tuple:
    """Validate ``params`` and return them as the kernel takes them.

    Floats: values of the output dtype. Integers: ``(low mod 2**64, (high - low) mod 2**64)``
    as ``numpy.uint64`` (a span of 0 meaning ``2**64``).
    """
    params = tuple(params)
    if len(params) != _N_PARAMS[kind]:
        raise TypeError(f"{kind}() takes {_N_PARAMS[kind]} parameters, got {len(params)}")
    if kind in ("uniform", "normal"):
        p0, p1 = dt.type(params[0]), dt.type(params[1])
        if kind == "normal" and p1 < 0:
            raise ValueError("scale < 0")
        if kind == "uniform":
            with np.errstate(over="ignore", invalid="ignore"):
                span = p1 - p0
            if not np.isfinite(span):
                raise OverflowError(f"uniform(): high - low is not finite in {dt}")
        return (p0, p1)
    if kind == "integers":
        low, high = operator.index(params[0]), operator.index(params[1])
        if high <= low:
            raise ValueError("high <= low")
        lo_bound, hi_bound = (0, 1) if dt.kind == "b" else (np.iinfo(dt).min, np.iinfo(dt).max)
        if low < lo_bound:
            raise ValueError(f"low is out of bounds for {dt}")
        if high - 1 > hi_bound:
            raise ValueError(f"high is out of bounds for {dt}")
        return (_U64(low % 2**64), _U64((high - low) % 2**64))
    return ()


def _check_key_stream(key: Sequence[int], stream: int) -> tuple[int, int, int]:
    k0, k1 = (operator.index(k) for k in key)
    stream = operator.index(stream)
    if not (0 <= k0 <= _MASK32 and 0 <= k1 <= _MASK32):
        raise ValueError(f"key words must be uint32, got {key!r}")
    if not 0 <= stream < 2**64:
        raise ValueError(f"stream must be in [0, 2**64), got {stream}")
    return k0, k1, stream


# ---------------------------------------------------------------------------------------------
# NumPy Philox


def _philox_rounds(x0: np.ndarray, x1: np.ndarray, x2: np.ndarray, x3: np.ndarray,
                   k0: Any, k1: Any) -> None:
    """Apply the 10 Philox4x32 rounds in place to uint64 arrays holding 32-bit words.

    ``k0``/``k1`` are uint64 scalars or arrays broadcastable to the words.
    """
    p0 = np.empty_like(x0)
    p1 = np.empty_like(x0)
    for r in range(PHILOX_ROUNDS):
        if r:
            k0 = (k0 + _U64(PHILOX_W0)) & _U64(_MASK32)
            k1 = (k1 + _U64(PHILOX_W1)) & _U64(_MASK32)
        np.multiply(x0, _U64(PHILOX_M0), out=p0)
        np.multiply(x2, _U64(PHILOX_M1), out=p1)
        # (x0, x1, x2, x3) <- (hi(p1) ^ x1 ^ k0, lo(p1), hi(p0) ^ x3 ^ k1, lo(p0))
        np.right_shift(p1, _U64(32), out=x0)
        x0 ^= x1
        x0 ^= k0
        np.right_shift(p0, _U64(32), out=x2)
        x2 ^= x3
        x2 ^= k1
        np.bitwise_and(p1, _U64(_MASK32), out=x1)
        np.bitwise_and(p0, _U64(_MASK32), out=x3)


def philox4x32_10(counter: np.ndarray, key: np.ndarray | Sequence[int]) -> np.ndarray:
    """Philox4x32-10 (Random123) of ``counter`` (``[..., 4]`` uint32) under ``key``.

    ``key`` is a ``[..., 2]`` array or a pair of ints; it broadcasts against the counters'
    leading dimensions. Returns the ``[..., 4]`` uint32 output blocks.
    """
    counter = np.asarray(counter)
    key = np.asarray(key)
    if counter.shape[-1:] != (4,) or key.shape[-1:] != (2,):
        raise ValueError("counter must have shape [..., 4] and key shape [..., 2]")
    if (key < 0).any() or (key > _MASK32).any() or (counter < 0).any() or (counter > _MASK32).any():
        raise ValueError("counter and key words must be uint32")
    shape = np.broadcast_shapes(counter.shape[:-1], key.shape[:-1])
    ctr = np.broadcast_to(counter, shape + (4,)).reshape(-1, 4).astype(_U64)
    k = np.broadcast_to(key, shape + (2,)).reshape(-1, 2).astype(_U64)
    x = [np.ascontiguousarray(ctr[:, j]) for j in range(4)]
    _philox_rounds(*x, k[:, 0], k[:, 1])
    return np.stack(x, axis=-1).astype(np.uint32).reshape(shape + (4,))


def _counter_blocks(counters: np.ndarray, key: tuple[int, int], stream: int) -> np.ndarray:
    """The ``[N, 4]`` uint32 Philox output for the uint64 counters ``c`` of one stream."""
    x0 = counters & _U64(_MASK32)
    x1 = counters >> _U64(32)
    x2 = np.full_like(counters, stream & _MASK32)
    x3 = np.full_like(counters, stream >> 32)
    _philox_rounds(x0, x1, x2, x3, _U64(key[0]), _U64(key[1]))
    out = np.empty((counters.size, 4), dtype=np.uint32)
    for j, x in enumerate((x0, x1, x2, x3)):
        out[:, j] = x
    return out


# ---------------------------------------------------------------------------------------------
# block geometry


def _check_geometry(global_shape: Sequence[int], block_offset: Sequence[int],
                    block_shape: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    g = tuple(operator.index(n) for n in global_shape)
    o = tuple(operator.index(n) for n in block_offset)
    b = tuple(operator.index(n) for n in block_shape)
    if not len(g) == len(o) == len(b):
        raise ValueError(f"global_shape {g}, block_offset {o} and block_shape {b} differ in ndim")
    if any(n < 0 for n in g + b) or any(oi < 0 or oi + bi > gi for gi, oi, bi in zip(g, o, b)):
        raise ValueError(f"block at {o} of shape {b} is not inside global shape {g}")
    if int(np.prod(g, dtype=object)) >= 2**63:
        raise ValueError(f"global shape {g} has 2**63 or more elements")
    return g, o, b


def _runs(g: tuple[int, ...], o: tuple[int, ...],
          b: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """Collapse a block into ``(block_extent, global_start, global_stride)`` per dimension.

    The trailing dimensions that the block covers whole merge with the first one it does not
    into one dimension of consecutive flat indices (stride 1), so the result has at least one
    and at most ``ndim`` dimensions; the global flat index of the block's element with
    coordinates ``j`` is ``sum((start_d + j_d) * stride_d)``.
    """
    strides = [1] * len(g)
    for d in range(len(g) - 2, -1, -1):
        strides[d] = strides[d + 1] * g[d + 1]
    d0 = max(len(g) - 1, 0)
    while d0 > 0 and b[d0] == g[d0]:
        d0 -= 1
    run_len = int(np.prod(b[d0:], dtype=object))
    run_start = o[d0] * strides[d0] if g else 0
    return [(b[d], o[d], strides[d]) for d in range(d0)] + [(run_len, run_start, 1)]


def _row_starts(runs: list[tuple[int, int, int]]) -> np.ndarray:
    """The uint64 global flat index of the first element of each run (C order of the rows)."""
    *outer, (_, run_start, _) = runs
    starts = np.full((), run_start, dtype=_U64)
    for extent, start, stride in outer:
        starts = starts[..., None] + (np.arange(extent, dtype=_U64) + _U64(start)) * _U64(stride)
    return starts.reshape(-1)


def _element_words(starts: np.ndarray, run_len: int, w: int, key: tuple[int, int],
                   stream: int) -> np.ndarray:
    """The ``[rows, run_len, w]`` uint32 words of the runs of ``run_len`` flat indices from
    each of ``starts``; Philox is evaluated once per counter a run needs."""
    per = 4 // w  # elements per Philox output block
    first = starts // _U64(per)
    offset = (starts % _U64(per)) * _U64(w)
    n_counters = int(((starts + _U64(run_len - 1)) // _U64(per) - first).max()) + 1
    counters = first[:, None] + np.arange(n_counters, dtype=_U64)
    words = _counter_blocks(counters.reshape(-1), key, stream).reshape(starts.size, 4 * n_counters)
    need = run_len * w
    offsets = np.unique(offset)
    if offsets.size == 1:
        o = int(offsets[0])
        sel = words[:, o:o + need]
    else:
        sel = np.empty((starts.size, need), dtype=np.uint32)
        for o in offsets.tolist():
            rows = offset == o
            sel[rows] = words[rows, o:o + need]
    return sel.reshape(starts.size, run_len, w)


def _draw_numpy(kind: str, dt: np.dtype, params: tuple, key: tuple[int, int], stream: int,
                runs: list[tuple[int, int, int]], block_shape: tuple[int, ...]) -> np.ndarray:
    """The NumPy block, computed in pieces of about :data:`_CHUNK` Philox counters."""
    out = np.empty(block_shape, dtype=dt)
    if out.size == 0:
        return out
    w = words_per_element(kind, dt)
    starts = _row_starts(runs)
    run_len = runs[-1][0]
    rows = out.reshape(starts.size, run_len)
    piece = _CHUNK * 4 // w  # elements per piece
    if run_len >= piece:
        for r in range(starts.size):
            for j in range(0, run_len, piece):
                n = min(piece, run_len - j)
                words = _element_words(starts[r:r + 1] + _U64(j), n, w, key, stream)
                rows[r:r + 1, j:j + n] = _transform(kind, dt, params, words)
    else:
        step = piece // run_len
        for r in range(0, starts.size, step):
            words = _element_words(starts[r:r + step], run_len, w, key, stream)
            rows[r:r + step] = _transform(kind, dt, params, words)
    return out


# ---------------------------------------------------------------------------------------------
# NumPy transforms (word -> number); each float operation rounded in the output dtype


def _u53(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x = (a >> 5).astype(np.float64)
    x *= 67108864.0
    x += b >> 6
    x *= _F64_2M53
    return x


def _random(dt: np.dtype, words: list[np.ndarray]) -> np.ndarray:
    if dt == np.float32:
        return (words[0] >> 8).astype(np.float32) * _F32_2M24
    return _u53(words[0], words[1])


def _standard_normal(dt: np.dtype, words: list[np.ndarray]) -> np.ndarray:
    if dt == np.float32:
        u1 = ((words[0] >> 8) + np.uint32(1)).astype(np.float32) * _F32_2M24
        u2 = (words[1] >> 8).astype(np.float32) * _F32_2M24
        two_pi, minus_two = _F32_TWO_PI, np.float32(-2.0)
    else:
        u1 = 1.0 - _u53(words[0], words[1])
        u2 = _u53(words[2], words[3])
        two_pi, minus_two = _F64_TWO_PI, -2.0
    np.log(u1, out=u1)
    u1 *= minus_two
    np.sqrt(u1, out=u1)
    u2 *= two_pi
    np.cos(u2, out=u2)
    u1 *= u2
    return u1


def _transform(kind: str, dt: np.dtype, params: tuple, element_words: np.ndarray) -> np.ndarray:
    """The numbers of ``kind`` from ``[..., w]`` words (``[...]`` shaped result)."""
    words = [element_words[..., j] for j in range(element_words.shape[-1])]
    if kind == "random":
        return _random(dt, words)
    if kind == "uniform":
        low, high = params
        x = _random(dt, words)
        x *= high - low
        x += low
        return x
    if kind == "standard_normal":
        return _standard_normal(dt, words)
    if kind == "normal":
        loc, scale = params
        x = _standard_normal(dt, words)
        x *= scale
        x += loc
        return x
    low, span = params
    u = (words[0].astype(_U64) << _U64(32)) | words[1]
    if span:
        u %= span
    u += low
    return u.astype(dt)


# ---------------------------------------------------------------------------------------------
# CUDA sources

PHILOX_DEVICE_SOURCE = r"""
#ifndef GNP_PHILOX_DEVICE_SOURCE
#define GNP_PHILOX_DEVICE_SOURCE
/* Philox4x32-10 (Salmon et al., SC'11; Random123) and the stream definition of
   dask_gpunumeric.kernels.philox. No include directives: NVRTC and nvcc both compile it.
   Float arithmetic uses the _rn intrinsics so that no FMA contraction changes the bits. */

struct gnp_u32x4 { unsigned int x, y, z, w; };

__device__ __forceinline__ gnp_u32x4 gnp_philox4x32_10(gnp_u32x4 c, unsigned int k0, unsigned int k1)
{
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        const unsigned int hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        const unsigned int hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        gnp_u32x4 n;
        n.x = hi1 ^ c.y ^ k0; n.y = lo1; n.z = hi0 ^ c.w ^ k1; n.w = lo0;
        c = n;
    }
    return c;
}

/* Output block number c of a stream. */
__device__ __forceinline__ gnp_u32x4 gnp_philox_block(unsigned int k0, unsigned int k1,
                                                      unsigned long long stream, unsigned long long c)
{
    gnp_u32x4 ctr;
    ctr.x = (unsigned int)c; ctr.y = (unsigned int)(c >> 32);
    ctr.z = (unsigned int)stream; ctr.w = (unsigned int)(stream >> 32);
    return gnp_philox4x32_10(ctr, k0, k1);
}

/* The word of element i (global flat index) with 1 word per element. */
__device__ __forceinline__ unsigned int gnp_words1(unsigned int k0, unsigned int k1,
                                                   unsigned long long stream, unsigned long long i)
{
    const gnp_u32x4 r = gnp_philox_block(k0, k1, stream, i >> 2);
    const unsigned int j = (unsigned int)(i & 3ull);
    return j == 0u ? r.x : j == 1u ? r.y : j == 2u ? r.z : r.w;
}

/* The two words of element i with 2 words per element. */
__device__ __forceinline__ void gnp_words2(unsigned int k0, unsigned int k1, unsigned long long stream,
                                           unsigned long long i, unsigned int &a, unsigned int &b)
{
    const gnp_u32x4 r = gnp_philox_block(k0, k1, stream, i >> 1);
    const bool odd = (i & 1ull) != 0ull;
    a = odd ? r.z : r.x;
    b = odd ? r.w : r.y;
}

/* (a >> 8) * 2**-24, in [0, 1). */
__device__ __forceinline__ float gnp_u32_to_f32(unsigned int a)
{
    return __fmul_rn(__uint2float_rn(a >> 8), 5.9604644775390625e-08f);
}

/* ((a >> 8) + 1) * 2**-24, in (0, 1]. */
__device__ __forceinline__ float gnp_u32_to_f32_nonzero(unsigned int a)
{
    return __fmul_rn(__uint2float_rn((a >> 8) + 1u), 5.9604644775390625e-08f);
}

/* ((a >> 5) * 2**26 + (b >> 6)) * 2**-53 of words a (first) and b, in [0, 1). */
__device__ __forceinline__ double gnp_u64_to_f64(unsigned int a, unsigned int b)
{
    return __dmul_rn(__dadd_rn(__dmul_rn(__uint2double_rn(a >> 5), 67108864.0), __uint2double_rn(b >> 6)),
                     1.1102230246251565404236316680908203125e-16);
}

/* Word-level transforms (the element's words in order), shared by the per-element functions below
   and by fused kernels that draw several elements from one Philox block. */
__device__ __forceinline__ float gnp_w_standard_normal_f32(unsigned int a, unsigned int b)
{
    const float u1 = gnp_u32_to_f32_nonzero(a);
    const float u2 = gnp_u32_to_f32(b);
    return __fmul_rn(__fsqrt_rn(__fmul_rn(logf(u1), -2.0f)), cosf(__fmul_rn(u2, 6.2831855f)));
}

__device__ __forceinline__ double gnp_w_standard_normal_f64(unsigned int a, unsigned int b,
                                                            unsigned int c, unsigned int d)
{
    const double u1 = __dsub_rn(1.0, gnp_u64_to_f64(a, b));
    const double u2 = gnp_u64_to_f64(c, d);
    return __dmul_rn(__dsqrt_rn(__dmul_rn(log(u1), -2.0)), cos(__dmul_rn(u2, 6.283185307179586)));
}

/* low + u % span in uint64 (wrapping), u = (a << 32) | b; span == 0 means 2**64. */
__device__ __forceinline__ unsigned long long gnp_w_integers_u64(unsigned int a, unsigned int b,
                                                                 unsigned long long low, unsigned long long span)
{
    const unsigned long long u = ((unsigned long long)a << 32) | (unsigned long long)b;
    return low + (span == 0ull ? u : u % span);
}

__device__ __forceinline__ float gnp_random_f32(unsigned int k0, unsigned int k1,
                                                unsigned long long stream, unsigned long long i)
{
    return gnp_u32_to_f32(gnp_words1(k0, k1, stream, i));
}

__device__ __forceinline__ double gnp_random_f64(unsigned int k0, unsigned int k1,
                                                 unsigned long long stream, unsigned long long i)
{
    unsigned int a, b;
    gnp_words2(k0, k1, stream, i, a, b);
    return gnp_u64_to_f64(a, b);
}

__device__ __forceinline__ float gnp_uniform_f32(unsigned int k0, unsigned int k1, unsigned long long stream,
                                                 unsigned long long i, float low, float high)
{
    return __fadd_rn(low, __fmul_rn(gnp_random_f32(k0, k1, stream, i), __fsub_rn(high, low)));
}

__device__ __forceinline__ double gnp_uniform_f64(unsigned int k0, unsigned int k1, unsigned long long stream,
                                                  unsigned long long i, double low, double high)
{
    return __dadd_rn(low, __dmul_rn(gnp_random_f64(k0, k1, stream, i), __dsub_rn(high, low)));
}

__device__ __forceinline__ float gnp_standard_normal_f32(unsigned int k0, unsigned int k1,
                                                         unsigned long long stream, unsigned long long i)
{
    unsigned int a, b;
    gnp_words2(k0, k1, stream, i, a, b);
    return gnp_w_standard_normal_f32(a, b);
}

__device__ __forceinline__ double gnp_standard_normal_f64(unsigned int k0, unsigned int k1,
                                                          unsigned long long stream, unsigned long long i)
{
    const gnp_u32x4 r = gnp_philox_block(k0, k1, stream, i);
    return gnp_w_standard_normal_f64(r.x, r.y, r.z, r.w);
}

__device__ __forceinline__ float gnp_normal_f32(unsigned int k0, unsigned int k1, unsigned long long stream,
                                                unsigned long long i, float loc, float scale)
{
    return __fadd_rn(__fmul_rn(gnp_standard_normal_f32(k0, k1, stream, i), scale), loc);
}

__device__ __forceinline__ double gnp_normal_f64(unsigned int k0, unsigned int k1, unsigned long long stream,
                                                 unsigned long long i, double loc, double scale)
{
    return __dadd_rn(__dmul_rn(gnp_standard_normal_f64(k0, k1, stream, i), scale), loc);
}

__device__ __forceinline__ unsigned long long gnp_integers_u64(unsigned int k0, unsigned int k1,
                                                               unsigned long long stream, unsigned long long i,
                                                               unsigned long long low, unsigned long long span)
{
    unsigned int a, b;
    gnp_words2(k0, k1, stream, i, a, b);
    return gnp_w_integers_u64(a, b, low, span);
}
#endif  /* GNP_PHILOX_DEVICE_SOURCE */
"""

_CTYPES = {
    "float32": "float", "float64": "double", "bool": "bool",
    "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "unsigned long long",
}


def _kernel_name(kind: str, dt: np.dtype, ndim: int) -> str:
    return f"gnp_philox_{kind}_{dt.name}_{ndim}d"


def _kernel_source(kind: str, dt: np.dtype, ndim: int) -> str:
    ctype = _CTYPES[dt.name]
    suffix = "f32" if dt == np.float32 else "f64"
    if kind == "integers":
        params = ["unsigned long long low", "unsigned long long span"]
        value = "gnp_integers_u64(k0, k1, stream, i, low, span)"
        if dt.kind == "i":
            value = f"({ctype})(long long){value}"
        else:
            value = f"({ctype}){value}"
    else:
        params = {
            "random": [], "standard_normal": [],
            "uniform": [f"{ctype} low", f"{ctype} high"],
            "normal": [f"{ctype} loc", f"{ctype} scale"],
        }[kind]
        args = "".join(", " + p.split()[-1] for p in params)
        value = f"gnp_{kind}_{suffix}(k0, k1, stream, i{args})"
    dims = []
    for d in range(ndim):
        if d:
            dims.append(f"unsigned long long shape{d}")
        dims += [f"unsigned long long start{d}", f"unsigned long long stride{d}"]
    signature = ",\n    ".join(
        [f"{ctype}* __restrict__ out", "unsigned long long n", "unsigned int k0", "unsigned int k1",
         "unsigned long long stream"] + params + dims)
    if ndim == 0:
        index = "        const unsigned long long i = 0ull;\n"
    else:
        index = "        unsigned long long rem = t, i = 0ull;\n"
        for d in range(ndim - 1, 0, -1):
            index += (f"        i += (start{d} + rem % shape{d}) * stride{d};\n"
                      f"        rem /= shape{d};\n")
        index += "        i += (start0 + rem) * stride0;\n"
    return (
        PHILOX_DEVICE_SOURCE
        + f"""
/* {kind}, {dt.name}, {ndim}-d block: out[t] for block-local C-order index t < n; the element's
   global flat index is sum_d (start_d + j_d) * stride_d with j its block coordinates. */
extern "C" __global__ void {_kernel_name(kind, dt, ndim)}(
    {signature})
{{
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += step) {{
{index}        out[t] = {value};
    }}
}}
"""
    )


def cuda_source(kind: str, dtype: Any, ndim: int) -> str:
    """Return the full CUDA C++ source of the kernel drawing an ``ndim``-d block of ``kind``.

    The kernel is ``extern "C" __global__ void gnp_philox_<kind>_<dtype>_<ndim>d(out, n, k0,
    k1, stream, [params], [shape_d (d >= 1), start_d, stride_d for each d])``: ``out`` the
    C-contiguous block of ``n`` elements, params ``low, high`` / ``loc, scale`` in the output
    type, or ``low, span`` (uint64, see :data:`PHILOX_DEVICE_SOURCE`) for integers; every
    geometry argument is ``unsigned long long``. No ``#include``. The source is also passed to
    :func:`dask_gpunumeric.kernels.cuda.record_source`.
    """
    dt = _resolve_dtype(kind, dtype)
    ndim = operator.index(ndim)
    if ndim < 0:
        raise ValueError(f"ndim must be >= 0, got {ndim}")
    source = _kernel_source(kind, dt, ndim)
    _cuda.record_source(source)
    return source


def _draw_cupy(kind: str, dt: np.dtype, key: tuple[int, int], stream: int,
               runs: list[tuple[int, int, int]], block_shape: tuple[int, ...],
               params: tuple) -> Any:
    """The CuPy block, by the generated kernel of the collapsed geometry ``runs``; ``params``
    as :func:`_check_params` returns them (numpy scalars of the kernel's argument types)."""
    import cupy

    out = cupy.empty(block_shape, dtype=dt)
    if out.size == 0:
        return out
    ndim = len(runs)
    kernel = _cuda.compile_module(cuda_source(kind, dt, ndim)).get_function(
        _kernel_name(kind, dt, ndim))
    geometry = []
    for d, (extent, start, stride) in enumerate(runs):
        geometry += ([_U64(extent)] if d else []) + [_U64(start), _U64(stride)]
    threads = 256
    blocks = min((out.size + threads - 1) // threads, 1 << 20)
    kernel((blocks,), (threads,),
           (out, _U64(out.size), np.uint32(key[0]), np.uint32(key[1]), _U64(stream),
            *params, *geometry))
    return out


# ---------------------------------------------------------------------------------------------
# public entry point


def draw_block(kind: str, key: Sequence[int], stream: int, global_shape: Sequence[int],
               block_offset: Sequence[int], block_shape: Sequence[int], dtype: Any = None,
               params: Sequence[Any] = (), xp: Any = np) -> Any:
    """Draw the block of a random array of ``global_shape`` at ``block_offset``/``block_shape``.

    ``kind`` is one of :data:`KINDS`, ``key`` a pair of uint32 (:func:`seed_to_key`),
    ``stream`` the draw call's stream number, ``dtype`` the output dtype (``None``: float64,
    int64 for integers), ``params`` ``(low, high)`` for uniform/integers (integers: ``[low,
    high)``) or ``(loc, scale)`` for normal. ``xp`` is ``numpy`` (a NumPy array) or ``cupy``
    (a CuPy array, made by one generated CUDA kernel). The values are those of the module's
    stream definition, whatever the blocking.
    """
    dt = _resolve_dtype(kind, dtype)
    params = _check_params(kind, dt, params)
    k0, k1, stream = _check_key_stream(key, stream)
    g, o, b = _check_geometry(global_shape, block_offset, block_shape)
    runs = _runs(g, o, b)
    xp_name = getattr(xp, "__name__", "")
    if xp_name == "cupy":
        return _draw_cupy(kind, dt, (k0, k1), stream, runs, b, params)
    if xp is not np:
        raise TypeError(f"xp must be numpy or cupy, got {xp!r}")
    return _draw_numpy(kind, dt, params, (k0, k1), stream, runs, b)
