"""The CUDA C++ device functions that fused kernels (``codegen.program``, ``codegen.rows``) and stencil kernels
(``codegen.stencil``) call for NumPy's semantics: ufunc helpers (``ops.ufuncs``' own among them), the partial
reads of two-stage reductions, and the packs of consecutive elements of flat loops."""
from __future__ import annotations

from ..ops.ufuncs import UFUNCS

HELPERS = r"""
#ifndef GNP_FUSED_HELPERS
#define GNP_FUSED_HELPERS
/* a thread-block partial, read by the last block after the others' fences: from L2 (never a stale L1
   line), as plain loads where CUDA has them (they pipeline; volatile ones do not) */
template <typename T> __device__ __forceinline__ T gnp_partial(const T* p) { return *(const volatile T*)p; }
__device__ __forceinline__ double gnp_partial(const double* p) { return __ldcg(p); }
__device__ __forceinline__ float gnp_partial(const float* p) { return __ldcg(p); }
__device__ __forceinline__ long long gnp_partial(const long long* p) { return __ldcg(p); }
__device__ __forceinline__ unsigned long long gnp_partial(const unsigned long long* p) { return __ldcg(p); }
__device__ __forceinline__ int gnp_partial(const int* p) { return __ldcg(p); }
__device__ __forceinline__ unsigned int gnp_partial(const unsigned int* p) { return __ldcg(p); }
template <typename T> __device__ __forceinline__ bool gnp_isnan(T x) { return x != x; }
template <typename T> __device__ __forceinline__ bool gnp_isinf(T x) { return x == x && (x - x) != (x - x); }
template <typename T> __device__ __forceinline__ bool gnp_isfinite(T x) { return (x - x) == (x - x); }
__device__ __forceinline__ bool gnp_isinf(bool x) { return false; }
__device__ __forceinline__ bool gnp_isfinite(bool x) { return true; }
template <typename T> __device__ __forceinline__ T gnp_abs(T x) { return x < (T)0 ? (T)(-x) : x; }
__device__ __forceinline__ float gnp_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double gnp_abs(double x) { return fabs(x); }
__device__ __forceinline__ bool gnp_abs(bool x) { return x; }
template <typename T> __device__ __forceinline__ T gnp_maximum(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a >= b ? a : b)); }
template <typename T> __device__ __forceinline__ T gnp_minimum(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a <= b ? a : b)); }
template <typename T> __device__ __forceinline__ T gnp_sign(T x) { return x != x ? x : (T)((x > (T)0) - (x < (T)0)); }
/* the same values for floats, as selects of constants (no integer difference converted back) */
__device__ __forceinline__ float gnp_sign(float x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x == x ? 0.0f : x; }
__device__ __forceinline__ double gnp_sign(double x) { return x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : x == x ? 0.0 : x; }
template <typename T> __device__ __forceinline__ T gnp_invert(T x) { return (T)~x; }
__device__ __forceinline__ bool gnp_invert(bool x) { return !x; }
__device__ __forceinline__ float gnp_logaddexp(float x, float y) {
    if (x == y) return x + 0.693147180559945309f;
    const float d = x - y;
    return d > 0.0f ? x + log1pf(expf(-d)) : (d <= 0.0f ? y + log1pf(expf(d)) : d);
}
__device__ __forceinline__ double gnp_logaddexp(double x, double y) {
    if (x == y) return x + 0.693147180559945309;
    const double d = x - y;
    return d > 0.0 ? x + log1p(exp(-d)) : (d <= 0.0 ? y + log1p(exp(d)) : d);
}
/* NumPy's npy_divmod for floats */
template <typename T> __device__ __forceinline__ T gnp_remainder(T a, T b) {
    if (b == (T)0) return fmod(a, b);
    T mod = fmod(a, b);
    if (mod != (T)0) { if ((b < (T)0) != (mod < (T)0)) mod += b; }
    else mod = copysign((T)0, b);
    return mod;
}
template <typename T> __device__ __forceinline__ T gnp_floor_divide(T a, T b) {
    if (b == (T)0) return a / b;
    T mod = fmod(a, b);
    T div = (a - mod) / b;
    if (mod != (T)0) { if ((b < (T)0) != (mod < (T)0)) div -= (T)1; }
    T floordiv;
    if (div != (T)0) { floordiv = floor(div); if (div - floordiv > (T)0.5) floordiv += (T)1; }
    else floordiv = copysign((T)0, a / b);
    return floordiv;
}
__device__ __forceinline__ unsigned int gnp_word(const gnp_u32x4 r, int j)
{ return j == 0 ? r.x : j == 1 ? r.y : j == 2 ? r.z : r.w; }
/* four consecutive elements, moved by one vector access (two for 8-byte types) where the array is aligned to
   it: fewer load, store and address instructions than four scalar accesses */
template <typename T> struct alignas(4 * sizeof(T) < 16 ? 4 * sizeof(T) : 16) gnp_pack4 { T v[4]; };
template <typename T> __device__ __forceinline__ bool gnp_packable(const T* p)
{ return ((unsigned long long)p & (alignof(gnp_pack4<T>) - 1)) == 0; }
/* a pack stored to global memory at p (aligned to it): of 4-byte elements as one vector store, which NVVM does not
   always make of the pack's assignment (it split a stencil tile kernel's into four scalar stores) */
template <typename T> __device__ __forceinline__ void gnp_store_pack(T* p, const gnp_pack4<T>& v) {
#if defined(__CUDA_ARCH__)
    if constexpr (sizeof(T) == 4) {
        const uint4 w = __builtin_bit_cast(uint4, v);
        asm("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
            :: "l"(__cvta_generic_to_global(p)), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w));
        return;
    }
#endif
    *(gnp_pack4<T>*)p = v;
}
""" + "".join(u.helper for u in UFUNCS.values()) + """#endif  /* GNP_FUSED_HELPERS */
"""
