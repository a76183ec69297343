"""CUDA C++ of the Philox4x32-10 stream (defined in ``kernels.philox``): the ``__device__`` functions fused
kernels draw with (``PHILOX_DEVICE_SOURCE``), and the kernel drawing one block of a distribution."""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .types import ctype as _ctype

#: The distributions of the stream definition.
KINDS = ("random", "uniform", "standard_normal", "normal", "integers")
#: The parameters each distribution takes.
N_PARAMS = {"random": 0, "uniform": 2, "standard_normal": 0, "normal": 2, "integers": 2}
_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def check_kind(kind: str) -> None:
    """Raise ``ValueError`` unless ``kind`` is one of ``KINDS``."""
    if kind not in N_PARAMS:
        raise ValueError(f"unknown random kind {kind!r}; expected one of {KINDS}")


def resolve_dtype(kind: str, dtype: Any) -> np.dtype:
    """The output dtype of ``kind`` (``None``: float64, or int64 for integers), validated."""
    check_kind(kind)
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
    dt = resolve_dtype(kind, dtype)
    if kind in ("random", "uniform"):
        return 1 if dt == np.float32 else 2
    if kind in ("standard_normal", "normal"):
        return 2 if dt == np.float32 else 4
    return 2


#: The ``__device__`` functions of the stream, include-guarded (sources may be concatenated).
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

def kernel_name(kind: str, dt: np.dtype, ndim: int) -> str:
    return f"gnp_philox_{kind}_{dt.name}_{ndim}d"


def _kernel_source(kind: str, dt: np.dtype, ndim: int) -> str:
    ctype = _ctype(dt)
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
extern "C" __global__ void {kernel_name(kind, dt, ndim)}(
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
    geometry argument is ``unsigned long long``. No ``#include``.
    """
    dt = resolve_dtype(kind, dtype)
    ndim = operator.index(ndim)
    if ndim < 0:
        raise ValueError(f"ndim must be >= 0, got {ndim}")
    return _kernel_source(kind, dt, ndim)

