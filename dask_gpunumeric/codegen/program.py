"""Fused programs: what one fused group computes per block, and its CUDA C++ kernel.

A *program* is a tokenizable tuple ``(ndim, input_dtypes, instructions, outputs)`` in SSA form: value ``i``
is defined by instruction ``i``:

* ``("load", k, dtype)``: external input ``k`` (broadcast to the block),
* ``("scalar", k, dtype)``: scalar argument ``k`` (its value is a kernel argument, not part of the source),
* ``("random", kind, dtype, slot)``: a Philox draw; scalars ``slot..`` hold key, stream and parameters,
* ``("full", slot, dtype)``: a constant array,
* ``("op", func, dtype, kwargs, args)``: the NumPy/CuPy function ``func`` of values ``args``;
* ``("total", kind, dtype, i, axes, params, keepdims)``: the finished reduction of value ``i`` over every
  axis of a one-block array (``_blocks.reduce_finish`` of its only partial); ops on totals (and scalars) are
  the program's *epilogue*, computed once, after the reductions;

and outputs are ``("store", i)`` (a block of value ``i``; a 0-d or keepdims value for the epilogue's) or
``("reduce", i, kind, axes, dtype, params)`` (the reduction partial of value ``i``, as
``_blocks.reduce_chunk`` makes it).

On NumPy blocks a program is interpreted with the same block functions as unfused tasks (the reference).
On CuPy blocks it becomes one generated kernel: scalar values are kernel arguments, so a program compiles
once per worker whatever the values (and once per launch variant: flat or strided, Philox group, 32-bit or
64-bit positions, which inputs are one element), and values that come back get a kernel specialized to
them, compiled in the background (``_Kernel``); full reductions are two-stage (per-thread-block partials,
then a small final reduction by the last thread block, which also finishes totals and computes the
epilogue); random numbers are drawn in registers, one Philox block per 4/w elements. A launch is one full
wave of thread blocks (``_cuda.wave_blocks``).
"""
from __future__ import annotations

import functools
import hashlib
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from dask._expr import Expr

from .. import config
from ..kernels import blocks as _blocks
from ..kernels.backend import namespace

# --- what the kernels support -------------------------------------------------------------------------

CTYPES = {
    "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "unsigned long long", "float32": "float", "float64": "double",
}

# func -> (arity, category, C++ template). Categories: "arith" computes in the output dtype, "compare"
# in the operands' common dtype with a bool result, "predicate" in the operand's dtype with a bool result.
# Templates use {0}, {1}, ... for operands, {T} for the compute type, {f} for the float-function suffix
# ("f" for float, "" for double). Float-only entries are marked "float"; integer-only "int".
_OPS: dict[str, tuple[int, str, str, str]] = {
    "add": (2, "arith", "any", "({T})({0} + {1})"),
    "subtract": (2, "arith", "any", "({T})({0} - {1})"),
    "multiply": (2, "arith", "any", "({T})({0} * {1})"),
    "true_divide": (2, "arith", "float", "({0} / {1})"),
    "negative": (1, "arith", "num", "({T})(-{0})"),
    "positive": (1, "arith", "num", "({0})"),
    "absolute": (1, "arith", "any", "gnp_abs({0})"),
    "fabs": (1, "arith", "float", "fabs{f}({0})"),
    "square": (1, "arith", "num", "({T})({0} * {0})"),
    "reciprocal": (1, "arith", "float", "(({T})1 / {0})"),
    "sqrt": (1, "arith", "float", "sqrt{f}({0})"),
    "cbrt": (1, "arith", "float", "cbrt{f}({0})"),
    "exp": (1, "arith", "float", "exp{f}({0})"),
    "exp2": (1, "arith", "float", "exp2{f}({0})"),
    "expm1": (1, "arith", "float", "expm1{f}({0})"),
    "log": (1, "arith", "float", "log{f}({0})"),
    "log2": (1, "arith", "float", "log2{f}({0})"),
    "log10": (1, "arith", "float", "log10{f}({0})"),
    "log1p": (1, "arith", "float", "log1p{f}({0})"),
    "sin": (1, "arith", "float", "sin{f}({0})"),
    "cos": (1, "arith", "float", "cos{f}({0})"),
    "tan": (1, "arith", "float", "tan{f}({0})"),
    "arcsin": (1, "arith", "float", "asin{f}({0})"),
    "arccos": (1, "arith", "float", "acos{f}({0})"),
    "arctan": (1, "arith", "float", "atan{f}({0})"),
    "sinh": (1, "arith", "float", "sinh{f}({0})"),
    "cosh": (1, "arith", "float", "cosh{f}({0})"),
    "tanh": (1, "arith", "float", "tanh{f}({0})"),
    "arcsinh": (1, "arith", "float", "asinh{f}({0})"),
    "arccosh": (1, "arith", "float", "acosh{f}({0})"),
    "arctanh": (1, "arith", "float", "atanh{f}({0})"),
    "arctan2": (2, "arith", "float", "atan2{f}({0}, {1})"),
    "hypot": (2, "arith", "float", "hypot{f}({0}, {1})"),
    "copysign": (2, "arith", "float", "copysign{f}({0}, {1})"),
    "power": (2, "arith", "float", "pow{f}({0}, {1})"),
    "floor": (1, "arith", "float", "floor{f}({0})"),
    "ceil": (1, "arith", "float", "ceil{f}({0})"),
    "trunc": (1, "arith", "float", "trunc{f}({0})"),
    "rint": (1, "arith", "float", "rint{f}({0})"),
    "round": (1, "arith", "float", "rint{f}({0})"),
    "degrees": (1, "arith", "float", "({0} * ({T})57.29577951308232)"),
    "rad2deg": (1, "arith", "float", "({0} * ({T})57.29577951308232)"),
    "radians": (1, "arith", "float", "({0} * ({T})0.017453292519943295)"),
    "deg2rad": (1, "arith", "float", "({0} * ({T})0.017453292519943295)"),
    "maximum": (2, "arith", "any", "gnp_maximum({0}, {1})"),
    "minimum": (2, "arith", "any", "gnp_minimum({0}, {1})"),
    "fmax": (2, "arith", "float", "fmax{f}({0}, {1})"),
    "fmin": (2, "arith", "float", "fmin{f}({0}, {1})"),
    "logaddexp": (2, "arith", "float", "gnp_logaddexp({0}, {1})"),
    "sign": (1, "arith", "num", "gnp_sign({0})"),
    "remainder": (2, "arith", "float", "gnp_remainder({0}, {1})"),
    "floor_divide": (2, "arith", "float", "gnp_floor_divide({0}, {1})"),
    "bitwise_and": (2, "arith", "int", "({T})({0} & {1})"),
    "bitwise_or": (2, "arith", "int", "({T})({0} | {1})"),
    "bitwise_xor": (2, "arith", "int", "({T})({0} ^ {1})"),
    "invert": (1, "arith", "int", "gnp_invert({0})"),
    "conjugate": (1, "arith", "any", "({0})"),
    "real": (1, "arith", "any", "({0})"),
    "equal": (2, "compare", "any", "({0} == {1})"),
    "not_equal": (2, "compare", "any", "({0} != {1})"),
    "less": (2, "compare", "any", "({0} < {1})"),
    "less_equal": (2, "compare", "any", "({0} <= {1})"),
    "greater": (2, "compare", "any", "({0} > {1})"),
    "greater_equal": (2, "compare", "any", "({0} >= {1})"),
    "logical_and": (2, "compare", "any", "((bool){0} && (bool){1})"),
    "logical_or": (2, "compare", "any", "((bool){0} || (bool){1})"),
    "logical_xor": (2, "compare", "any", "((bool){0} != (bool){1})"),
    "logical_not": (1, "predicate", "any", "(!(bool){0})"),
    "isnan": (1, "predicate", "any", "gnp_isnan({0})"),
    "isinf": (1, "predicate", "any", "gnp_isinf({0})"),
    "isfinite": (1, "predicate", "any", "gnp_isfinite({0})"),
    "signbit": (1, "predicate", "float", "(copysign{f}(({T})1, {0}) < ({T})0)"),
    "where": (3, "where", "any", "((bool){0} ? {1} : {2})"),
    "astype": (1, "astype", "any", "({0})"),
}

_HELPERS = r"""
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
#endif  /* GNP_FUSED_HELPERS */
"""


def dtype_supported(dtype: np.dtype) -> bool:
    """Dtypes the generated kernels handle (no complex, no float16, native byte order only)."""
    return np.dtype(dtype).name in CTYPES and np.dtype(dtype).isnative


def _scalar_supported(value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return True
    if isinstance(value, (int, np.integer)):
        return -(2**63) <= int(value) < 2**64
    return isinstance(value, (float, np.floating)) and dtype_supported(np.asarray(value).dtype)


def elemwise_supported(node: Expr) -> bool:
    """Can a kernel compute this Elemwise node element by element, exactly as NumPy would?"""
    func = node.operand("op")
    if func not in _OPS or not dtype_supported(node.dtype):
        return False
    if node.operand("kwargs") and not (func == "round" and node.operand("kwargs") == {"decimals": 0}):
        return False
    arity, _, kinds, _ = _OPS[func]
    args = node.args
    if len(args) != arity:
        return False
    for a in args:
        if hasattr(a, "dtype") and hasattr(a, "chunks"):
            if not dtype_supported(a.dtype):
                return False
        elif not _scalar_supported(a):
            return False
    compute = _op_compute_dtype(node)
    if compute is None:
        return False
    if kinds == "float" and compute.kind != "f":
        return False
    if kinds == "int" and compute.kind not in "iub":
        return False
    if kinds == "num" and compute.kind == "b":
        return False
    return True


def creation_supported(node: Expr) -> bool:
    """Creations a kernel can compute per element: random draws and constants."""
    kind = node.operand("kind")
    return dtype_supported(node.dtype) and (kind == "full" and _scalar_supported(node.operand("params")[0])
                                            or kind.startswith("random-"))


def _probe_dtype(arg: Any) -> Any:
    return arg.dtype if hasattr(arg, "chunks") else arg


def _op_compute_dtype(node: Expr) -> np.dtype | None:
    """The dtype an Elemwise node's kernel computes in (None where NumPy's rules can't be followed)."""
    func = node.operand("op")
    return _compute_dtype(func, _OPS[func][1], node.dtype, [_probe_dtype(a) for a in node.args], node.args)


def _compute_dtype(func: str, category: str, out: np.dtype, probes: list[Any], args: Sequence[Any]) -> np.dtype | None:
    if category in ("arith", "astype"):
        return np.dtype(out)
    if category == "where":
        return np.dtype(out)
    if category == "predicate":
        return np.dtype(_dtype_of(probes[0]))
    common = np.result_type(*[np.empty(0, p) if isinstance(p, np.dtype) else p for p in probes])
    for a in args:  # Python ints out of the common dtype's range compare specially in NumPy: don't fuse
        if isinstance(a, int) and not isinstance(a, bool) and common.kind in "iu":
            info = np.iinfo(common)
            if not info.min <= a <= info.max:
                return None
    return common


def _dtype_of(probe: Any) -> np.dtype:
    return probe if isinstance(probe, np.dtype) else np.asarray(probe).dtype


# --- building a program from a group -----------------------------------------------------------------


def build_program(nodes: Sequence[Expr], stores: Sequence[Expr], reductions: Sequence[Expr],
                  totals: Sequence[Expr] = (), epilogue: Sequence[Expr] = ()) -> tuple[tuple, list, list]:
    """The program of a group (members in topological order; then its totals and the elementwise nodes on
    them, in topological order), its external inputs and scalar values."""
    index: dict[str, int] = {}
    instrs: list[tuple] = []
    inputs: list[Expr] = []
    input_slot: dict[str, int] = {}
    scalars: list[Any] = []

    def value_of(arg: Any) -> int:
        if hasattr(arg, "chunks"):
            if arg._name in index:
                return index[arg._name]
            if arg._name not in input_slot:
                input_slot[arg._name] = len(inputs)
                inputs.append(arg)
            instrs.append(("load", input_slot[arg._name], arg.dtype.str))
            index[arg._name] = len(instrs) - 1  # load once
            return index[arg._name]
        scalars.append(arg)
        instrs.append(("scalar", len(scalars) - 1, np.asarray(arg).dtype.str))
        return len(instrs) - 1

    for node in (*nodes, *totals, *epilogue):
        kind = node.__class__.__name__
        if kind == "Creation":
            kind, params = node.operand("kind"), node.operand("params")
            slot = len(scalars)
            if kind == "full":
                scalars.append(params[0])
                instrs.append(("full", slot, node.dtype.str))
            else:
                key, stream, dist = params
                scalars.extend([key[0], key[1], stream, *dist])
                instrs.append(("random", kind.removeprefix("random-"), node.dtype.str, slot, len(dist)))
        elif kind == "Reduction":
            instrs.append(("total", node.operand("kind"), node.dtype.str, index[node.array._name],
                           node.operand("axes"), node.operand("params"), node.operand("keepdims")))
        else:
            args = tuple(value_of(a) for a in node.args)
            kwargs = tuple(sorted(node.operand("kwargs").items()))
            instrs.append(("op", node.operand("op"), node.dtype.str, kwargs, args, _op_compute_dtype(node).str))
        index[node._name] = len(instrs) - 1
    outputs = [("store", index[n._name]) for n in stores]
    for r in reductions:
        outputs.append(("reduce", index[r.array._name], r.operand("kind"), r.operand("axes"), r.dtype.str,
                        r.operand("params")))
    ndim = nodes[-1].ndim
    program = (ndim, tuple(a.dtype.str for a in inputs), tuple(instrs), tuple(outputs))
    return program, inputs, scalars


def describe(program: tuple) -> str:
    """Op words of a program, for key names and explain(): e.g. "random-multiply-exp-sum"."""
    words = []
    for ins in program[2]:
        if ins[0] == "op":
            words.append("".join(c for c in ins[1] if c.isalpha()))  # dashboard prefixes are letters
        elif ins[0] == "random":
            words.append("random")
        elif ins[0] == "total":
            words.append(ins[1])
    words += [out[2] for out in program[3] if out[0] == "reduce"]
    seen: list[str] = []
    for w in words:
        if w not in seen:
            seen.append(w)
    return "-".join(seen[:4]) or "fused"


# --- NumPy path: interpret ----------------------------------------------------------------------------


def run_numpy(program: tuple, scalars: Sequence[Any], offset: tuple[int, ...], shape: tuple[int, ...],
              global_shape: tuple[int, ...], inputs: Sequence[Any], backend: str) -> list[Any]:
    """Evaluate a program on one block with the unfused block functions; returns the outputs."""
    from ..kernels import philox as _philox

    xp = namespace(*inputs) if inputs else (np if backend == "numpy" else __import__("cupy"))
    values: list[Any] = []
    for ins in program[2]:
        tag = ins[0]
        if tag == "load":
            values.append(inputs[ins[1]])
        elif tag == "scalar":
            values.append(scalars[ins[1]])
        elif tag == "full":
            values.append(xp.full(shape, scalars[ins[1]], dtype=np.dtype(ins[2])))
        elif tag == "random":
            kind, dt, slot, nparams = ins[1], np.dtype(ins[2]), ins[3], ins[4]
            key = (scalars[slot], scalars[slot + 1])
            values.append(_philox.draw_block(kind, key, scalars[slot + 2], global_shape, offset, shape, dt,
                                             tuple(scalars[slot + 3 : slot + 3 + nparams]), xp=xp))
        elif tag == "total":
            _, kind, dt, i, axes, params, keepdims = ins
            partial = _blocks.reduce_chunk(kind, _block_of(values[i], shape), axes, np.dtype(dt), params, ())
            values.append(_blocks.reduce_finish(kind, partial, axes, keepdims, np.dtype(dt), params))
        else:
            _, func, dt, kwargs, args, _ = ins
            values.append(_blocks.elemwise(func, np.dtype(dt), dict(kwargs), *[values[j] for j in args]))
    finished = epilogue_values(program[2])
    return [values[out[1]] if out[1] in finished else _output(out, values, shape) for out in program[3]]


def _block_of(value: Any, shape: tuple[int, ...]) -> Any:
    """A value as a whole block (a broadcast load or scalar spread over it)."""
    return value if value.shape == shape else namespace(value).broadcast_to(value, shape)


def _output(out: tuple, values: list[Any], shape: tuple[int, ...]) -> Any:
    value = _block_of(values[out[1]], shape)
    if out[0] == "store":
        return value
    _, _, kind, axes, dt, params = out
    return _blocks.reduce_chunk(kind, value, axes, np.dtype(dt), params, ())


@functools.lru_cache(maxsize=256)
def epilogue_values(instrs: tuple) -> dict[int, int]:
    """The values of a program computed once after its totals (the totals and the ops on them), each with
    its number of axes, all of length 1: 0, or the array's for a total with keepdims (and what it
    broadcasts with)."""
    after: dict[int, int] = {}
    for i, ins in enumerate(instrs):
        if ins[0] == "total":
            after[i] = len(ins[4]) if ins[6] else 0
        elif ins[0] == "op" and any(j in after for j in ins[4]):
            after[i] = max(after.get(j, 0) for j in ins[4])
    return after


# --- CUDA path: generate, compile, launch -------------------------------------------------------------


def _ctype(dt: str | np.dtype) -> str:
    return CTYPES[np.dtype(dt).name]


def _acc_dtype(kind: str, value_dt: np.dtype, out_dt: np.dtype, params: tuple) -> np.dtype:
    if kind in ("sum", "prod"):
        return np.dtype(np.float64) if np.dtype(out_dt).kind == "f" else np.dtype(out_dt)
    if kind == "mean":
        return np.dtype(np.float64) if np.dtype(params[0]).kind == "f" else np.dtype(params[0])
    if kind in ("all", "any"):
        return np.dtype(bool)
    return np.dtype(value_dt)


_IDENTITY = {"sum": "0", "mean": "0", "prod": "1", "all": "true", "any": "false"}
_COMBINE = {
    "sum": "{a} + {b}", "mean": "{a} + {b}", "prod": "{a} * {b}", "all": "{a} && {b}", "any": "{a} || {b}",
    "min": "gnp_minimum({a}, {b})", "max": "gnp_maximum({a}, {b})",
}


def _minmax_identity(kind: str, dt: np.dtype) -> str:
    if dt.kind == "f":
        return ("(1.0/0.0)" if kind == "min" else "(-1.0/0.0)")
    if dt.kind == "b":
        return "true" if kind == "min" else "false"
    info = np.iinfo(dt)
    value = info.max if kind == "min" else info.min
    return f"(({_ctype(dt)}){value}{'ull' if dt.kind == 'u' else 'll'})" if value != -(2**63) else "(-9223372036854775807ll - 1)"


def kernel_source(program: tuple, mode: str, group: int, index: str = "long long",
                  singles: tuple[int, ...] = (), constants: tuple = ()) -> tuple[str, str]:
    """CUDA C++ source and kernel name of a program. ``mode`` is "flat" (every input is the block's shape
    and contiguous, or a single element: the inputs ``singles``, read at 0) or "strided"; ``group``
    elements per iteration (1, 2 or 4) share one Philox block (only with flat mode and a block contiguous
    in the global array); ``index`` is the C type of positions in the block ("int" where they fit: 32-bit
    loop arithmetic, divisions by the block's shape included; global positions, which key random draws,
    and strides stay 64-bit).

    Full reductions (``_folds``) are finished in the same launch: each thread block writes its partial, and
    the last thread block to finish (a ticket counter) combines the partials in block order (so the result
    does not depend on timing) into the one-element output ``fin<k>`` of a partial, or into a total, then
    computes the epilogue from the totals into its one-element outputs, and resets the ticket.

    ``constants``, where given, are the scalar arguments (``scalar_args``) of one set of scalar values: the
    kernel is specialized to them, each an exact constant of the source instead of a parameter (nvcc folds
    them into the instructions; the arithmetic, and so every result bit, is the same)."""
    from .check import ProgramError, check_program
    from ..kernels.philox import PHILOX_DEVICE_SOURCE

    check_program(program, mode, group, index, singles)  # only our names and integers become source
    ndim, input_dtypes, instrs, outputs = program
    params: list[str] = []
    for k, dt in enumerate(input_dtypes):
        params.append(f"const {_ctype(dt)}* __restrict__ in{k}")
    finals = _finals(program)
    params += [final_param(program, k) if k in finals  # else a block (or the epilogue's one element)
               else f"{_ctype(_value_dtype(instrs[out[1]]))}* __restrict__ out{k}" for k, out in enumerate(outputs)]
    params += fold_params(program)
    scalars = _scalar_params(instrs)
    if constants and len(constants) != len(scalars):
        raise ProgramError(f"{len(constants)} constants for {len(scalars)} scalar parameters")
    literals = tuple(c_literal(ct, v) for (ct, _), v in zip(scalars, constants))
    if not constants:
        params += [f"const {ct} {name}" for ct, name in scalars]
    params += [f"const {index} n", "const long long goff"]
    if mode == "strided":
        for d in range(ndim):
            params += [f"const {index} shape{d}", f"const long long gstride{d}"]
        for k in range(len(input_dtypes)):
            params += [f"const long long istride{k}_{d}" for d in range(ndim)]

    key = (program, mode, group, index, singles, literals) if literals else (program, mode, group, index, singles)
    name = "gnp_fused_" + hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    variant = _Variant(mode, group, index, frozenset(singles))
    body = [f"    const {ct} {name} = {text};" for (ct, name), text in zip(scalars, literals)]
    body += accumulators(program)
    body.append(f"    const {index} nthreads = ({index})gridDim.x * blockDim.x;")
    # (in Philox groups, where the draws' words are registers of the group's block: elsewhere a product
    # would draw its block again, unless nvcc noticed)
    values = _uniform_products(program, group, constants) if constants and group > 1 else {}
    if group > 1:
        body += _grouped_loop(program, variant, values)
    elif mode == "flat":
        body += _unrolled_loop(program, variant, values)
    else:
        indent = "        "
        body += [f"    for ({index} t = ({index})blockIdx.x * blockDim.x + threadIdx.x; t < n; t += nthreads) {{",
                 f"{indent}{index} rem = t;", f"{indent}long long gi = goff;"]
        for k in range(len(input_dtypes)):
            body.append(f"{indent}long long o{k} = 0;")
        for d in range(ndim - 1, -1, -1):
            body.append(f"{indent}{{ const {index} c = rem % shape{d}; rem /= shape{d}; gi += c * gstride{d};")
            for k in range(len(input_dtypes)):
                body.append(f"{indent}  o{k} += c * istride{k}_{d};")
            body.append(f"{indent}}}")
        body += [indent + line for line in _element_code(program, variant, {}, values)]
        body.append("    }")
    body += finish(program)
    source = (
        PHILOX_DEVICE_SOURCE + _HELPERS
        + f'\nextern "C" __global__ void __launch_bounds__(256) {name}(\n    ' + ",\n    ".join(params) + ")\n{\n"
        + "\n".join(body) + "\n}\n"
    )
    return source, name


class _Fold(NamedTuple):
    """A reduction over every element that a kernel finishes itself: value ``value`` folded with ``kind``
    in an accumulator of dtype ``acc``, ending as the one-element partial of output ``output`` (a full
    "reduce"; in dtype ``final``: a mean's sum dtype) or as the value of "total" instruction ``total``."""

    value: int
    kind: str
    acc: np.dtype
    final: np.dtype
    output: int | None
    total: int | None


@functools.lru_cache(maxsize=256)
def _folds(program: tuple) -> tuple[_Fold, ...]:
    """The full reductions of a program: its outputs that reduce over every axis, then its totals."""
    ndim, _, instrs, outputs = program
    folds = [_Fold(out[1], out[2], _acc_dtype(out[2], _value_dtype(instrs[out[1]]), np.dtype(out[4]), out[5]),
                   _final_dtype(out), k, None)
             for k, out in enumerate(outputs) if out[0] == "reduce" and tuple(out[3]) == tuple(range(ndim))]
    folds += [_Fold(ins[3], ins[1], _acc_dtype(ins[1], _value_dtype(instrs[ins[3]]), np.dtype(ins[2]), ins[5]),
                    np.dtype(ins[2]), None, j)
              for j, ins in enumerate(instrs) if ins[0] == "total"]
    return tuple(folds)


def _finals(program: tuple) -> frozenset[int]:
    """The outputs of a program that are full reductions finished in the launch (their one-element results)."""
    return frozenset(fold.output for fold in _folds(program) if fold.output is not None)


class _Variant(NamedTuple):
    """How a kernel of a program is specialised (see ``kernel_source``)."""

    mode: str
    group: int
    index: str
    singles: frozenset[int]


def _element_code(program: tuple, variant: _Variant, partial: dict[int, str],
                  values: Mapping[int, str] | None = None) -> list[str]:
    """The statements computing one element ``t`` (global index ``gi``): every instruction but the
    epilogue's, then each fold's value folded into its accumulator (``partial[f]``, where given, instead
    of ``acc<f>``) and each other output stored. ``values`` gives the value of some instructions instead
    of their own code (registers already holding loads, ``_uniform_products``)."""
    _, _, instrs, outputs = program
    after = epilogue_values(instrs)
    lines = [f"const {_ctype(ins[2])} v{i} = {values[i]};" if values and i in values
             else _instr_code(i, ins, instrs, variant.mode, variant.group, variant.singles)
             for i, ins in enumerate(instrs) if i not in after]
    lines += fold_statements(program, partial)
    folded = _finals(program)
    lines += [f"out{k}[t] = v{out[1]};" for k, out in enumerate(outputs) if k not in folded and out[1] not in after]
    return lines


UNROLL = 4  # elements per thread per iteration of a flat kernel without Philox groups


def _unrolled_loop(program: tuple, variant: _Variant, values: Mapping[int, str]) -> list[str]:
    """The flat loop, ``UNROLL`` elements per thread per iteration, a thread block's width apart (loads
    stay coalesced): where all of them are inside the block, every input load of all of them is issued
    before any arithmetic, so that a memory-bound kernel keeps several loads in flight per thread."""
    _, _, instrs, _ = program
    index = variant.index
    loads = [i for i, ins in enumerate(instrs) if ins[0] == "load"]
    lines = [f"    for ({index} base = ({index})blockIdx.x * blockDim.x * {UNROLL} + threadIdx.x; base < n; "
             f"base += nthreads * {UNROLL}) {{",
             f"        if (base + {UNROLL - 1} * ({index})blockDim.x < n) {{"]
    for u in range(UNROLL):
        lines.append(f"            const {index} t{u} = base + {u} * ({index})blockDim.x;")
        for i in loads:
            k = instrs[i][1]
            lines.append(f"            const {_ctype(instrs[i][2])} ld{i}_{u} = "
                         f"in{k}[{0 if k in variant.singles else f't{u}'}];")
    for u in range(UNROLL):
        lines += ["            {", f"                const {index} t = t{u};", "                const long long gi = goff + t;"]
        element = _element_code(program, variant, {}, {**values, **{i: f"ld{i}_{u}" for i in loads}})
        lines += ["                " + line for line in element]
        lines.append("            }")
    lines += ["        } else {",
              f"            for ({index} t = base; t < n; t += blockDim.x) {{",
              "                const long long gi = goff + t;"]
    lines += ["                " + line for line in _element_code(program, variant, {}, values)]
    lines += ["            }", "        }", "    }"]
    return lines


PHILOX_STEPS = 2  # groups per thread per iteration of a grouped loop: their Philox blocks are drawn together


def _grouped_loop(program: tuple, variant: _Variant, values: Mapping[int, str]) -> list[str]:
    """The flat loop over groups of ``group`` consecutive global elements that share Philox blocks (group
    ``g0 + lg``, ``lg`` counted from the block's first, ``lead`` elements of which lie before the block): the
    draws are made once per group. Each thread takes ``PHILOX_STEPS`` groups a grid apart per iteration and
    draws all their Philox blocks first (independent chains of multiplies that the multiprocessor overlaps);
    where all of the iteration's groups lie inside the block, its elements skip the bounds checks. float32
    sums fold an iteration in float before adding it to the float64 accumulator."""
    _, _, instrs, _ = program
    group, index, steps = variant.group, variant.index, PHILOX_STEPS
    partial = {f: f"p{f}" for f, fold in enumerate(_folds(program))
               if fold.kind in ("sum", "mean") and _value_dtype(instrs[fold.value]) == np.float32
               and fold.acc == np.float64}
    randoms = [(i, ins) for i, ins in enumerate(instrs) if ins[0] == "random"]
    lines = [f"    const long long g0 = goff / {group};",
             f"    const {index} lead = ({index})(goff - g0 * {group}), groups = (lead + n + {group - 1}) / {group};",
             f"    for ({index} lg0 = ({index})blockIdx.x * blockDim.x + threadIdx.x; lg0 < groups; "
             f"lg0 += nthreads * {steps}) {{"]
    for q in range(steps):  # a step past the last group draws a block it does not use
        lines += [f"        const gnp_u32x4 r{i}_{q} = gnp_philox_block(s{ins[3]}, s{ins[3] + 1}, s{ins[3] + 2}, "
                  f"(unsigned long long)(((g0 + lg0 + {q} * nthreads) * {group * _words(ins)}) / 4));"
                  for i, ins in randoms]
    lines += [f"        float {p} = 0.0f;" for p in partial.values()]
    element = _element_code(program, variant, partial, values)
    last = f"(lg0 + {steps - 1} * nthreads) * {group} - lead + {group}"
    for check, head in ((False, f"if (lg0 * {group} - lead >= 0 && {last} <= n) {{"), (True, "} else {")):
        lines.append("        " + head)
        for q in range(steps):
            lines.append("            {" if not check or q == 0 else f"            if (lg0 + {q} * nthreads < groups) {{")
            lines += [f"                const {index} lg = lg0 + {q} * nthreads;", "                const long long g = g0 + lg;"]
            lines += [f"                const gnp_u32x4 r{i} = r{i}_{q};" for i, _ in randoms]
            lines += ["                #pragma unroll", f"                for (int j = 0; j < {group}; ++j) {{",
                      f"                    const {index} t = lg * {group} - lead + j;"]
            if check:
                lines.append("                    if (t < 0 || t >= n) continue;")
            lines.append(f"                    const long long gi = g * {group} + j;")
            lines += ["                    " + line for line in element]
            lines += ["                }", "            }"]
    lines.append("        }")
    for f, p in partial.items():
        lines.append(f"        acc{f} = acc{f} + (double){p};")
    lines.append("    }")
    return lines


#: (thread in block, threads per block, block, blocks) of a one-dimensional launch
LINEAR_IDS = ("threadIdx.x", "blockDim.x", "blockIdx.x", "gridDim.x")


def final_param(program: tuple, k: int) -> str:
    """The kernel parameter of output ``k``, a full reduction finished in the launch: its one-element result."""
    return f"{_ctype(_final_dtype(program[3][k]))}* __restrict__ fin{k}"


def fold_params(program: tuple) -> list[str]:
    """The kernel parameters of a program's folds besides their results: each fold's thread-block partials
    ``part<f>`` and the ticket counter."""
    folds = _folds(program)
    return [f"{_ctype(fold.acc)}* __restrict__ part{f}" for f, fold in enumerate(folds)] + [
        "unsigned int* __restrict__ ticket"] * bool(folds)


def accumulators(program: tuple) -> list[str]:
    """Each thread's accumulator ``acc<f>`` of each fold, at its identity."""
    return [f"    {_ctype(fold.acc)} acc{f} = {_identity(fold.kind, fold.acc)};" for f, fold in enumerate(_folds(program))]


def fold_statements(program: tuple, partial: dict[int, str] | None = None) -> list[str]:
    """The statements folding each fold's value ``v<i>`` into its accumulator (``partial[f]``, a float, where
    given, instead of ``acc<f>``)."""
    partial = partial or {}
    lines = []
    for f, fold in enumerate(_folds(program)):
        acc = partial.get(f, f"acc{f}")
        ct = "float" if f in partial else _ctype(fold.acc)
        lines.append(f"{acc} = {_COMBINE[fold.kind].format(a=acc, b=f'({ct})v{fold.value}')};")
    return lines


def finish(program: tuple, ids: tuple[str, str, str, str] = LINEAR_IDS) -> list[str]:
    """Thread-block partials of the folds, then the last thread block's final combine, its one-element
    outputs and the epilogue. ``ids`` name the linear thread and block numbers of the launch
    (``LINEAR_IDS``: a one-dimensional one), of 256 threads per block."""
    folds = _folds(program)
    if not folds:
        return []
    thread, threads, block, blocks = ids
    lines: list[str] = []
    for f, fold in enumerate(folds):
        lines += [f"    __shared__ {_ctype(fold.acc)} sh{f}[256];", f"    sh{f}[{thread}] = acc{f};"]
    lines += _block_tree(folds, thread, threads)
    lines.append("    __shared__ bool last;")
    lines.append(f"    if ({thread} == 0) {{")
    lines += [f"        part{f}[{block}] = sh{f}[0];" for f in range(len(folds))]
    lines += ["        __threadfence();", f"        last = atomicAdd(ticket, 1u) == {blocks} - 1;", "    }",
              "    __syncthreads();", "    if (!last) return;"]
    for f, fold in enumerate(folds):
        ct = _ctype(fold.acc)
        combine = _COMBINE[fold.kind].format(a=f"a{f}", b=f"gnp_partial(part{f} + i)")
        lines += [f"    {ct} a{f} = {_identity(fold.kind, fold.acc)};", "    #pragma unroll 8",
                  f"    for (unsigned int i = {thread}; i < {blocks}; i += {threads}) a{f} = {combine};",
                  f"    sh{f}[{thread}] = a{f};"]
    lines += _block_tree(folds, thread, threads)
    lines.append(f"    if ({thread} == 0) {{")
    lines += [f"        fin{fold.output}[0] = ({_ctype(fold.final)})sh{f}[0];"
              for f, fold in enumerate(folds) if fold.output is not None]
    lines += ["        " + line for line in _epilogue_code(program)]
    lines += ["        *ticket = 0u;", "    }"]
    return lines


def _epilogue_code(program: tuple) -> list[str]:
    """The statements of the epilogue, in the last thread block's first thread once the folds are combined
    (``sh<f>[0]``): each total finished as ``_blocks.reduce_finish`` does (a mean divided by the element
    count), the ops on totals and scalars, and the stores of their one-element outputs."""
    _, _, instrs, outputs = program
    after = epilogue_values(instrs)
    if not after:
        return []
    totals = {fold.total: f for f, fold in enumerate(_folds(program)) if fold.total is not None}
    lines = ["{"]
    for i, ins in enumerate(instrs):
        if i in totals:
            _, kind, dt, _, _, params, _ = ins
            value = f"sh{totals[i]}[0]"
            if kind == "mean":
                value = f"(({_ctype(params[0])}){value} / ({_ctype(params[0])})n)"
            lines.append(f"    const {_ctype(dt)} v{i} = ({_ctype(dt)}){value};")
        elif i in after or ins[0] in ("scalar", "full"):
            lines.append("    " + _instr_code(i, ins, instrs, "flat", 1))
    lines += [f"    out{k}[0] = v{out[1]};" for k, out in enumerate(outputs) if out[1] in after]
    return [*lines, "}"]


def _block_tree(folds: Sequence[_Fold], thread: str, threads: str) -> list[str]:
    """Combine ``sh<f>[0..threads)`` into ``sh<f>[0]`` (a fixed-order tree)."""
    lines = ["    __syncthreads();", f"    for (int s = {threads} / 2; s > 0; s >>= 1) {{", f"        if ({thread} < s) {{"]
    for f, fold in enumerate(folds):
        combine = _COMBINE[fold.kind].format(a=f"sh{f}[{thread}]", b=f"sh{f}[{thread} + s]")
        lines.append(f"            sh{f}[{thread}] = {combine};")
    lines += ["        }", "        __syncthreads();", "    }"]
    return lines


def _final_dtype(out: tuple) -> np.dtype:
    """The dtype of a full reduction's one-element result (a mean keeps its sum in the mean's sum dtype)."""
    return np.dtype(out[5][0]) if out[2] == "mean" else np.dtype(out[4])


def record_sources(program: tuple, scalars: Sequence[Any]) -> None:
    """With ``GNP_KERNEL_DUMP_DIR`` set (CI), write every kernel variant of a program there (and the one
    specialized to these scalar values), so that nvcc compiles what the test suite generated even on
    machines without a GPU."""
    import os

    from ..kernels import cuda as _cuda

    if not os.environ.get("GNP_KERNEL_DUMP_DIR"):
        return
    singles = tuple(range(len(program[1])))
    variants = [("flat", 1, ()), ("strided", 1, ()), ("flat", 1, singles)]
    if _philox_group(program[2]):
        variants.append(("flat", _philox_group(program[2]), ()))
    for mode, group, single in variants:
        for index in ("int", "long long"):
            _cuda.record_source(kernel_source(program, mode, group, index, single)[0])
    constants = tuple(scalar_args(program[2], scalars))
    if constants:
        _cuda.record_source(kernel_source(program, *variants[-1][:2], "int", (), constants)[0])


def _words(ins: tuple) -> int:
    from ..kernels.philox import words_per_element

    return words_per_element(ins[1], np.dtype(ins[2]))


def _value_dtype(ins: tuple) -> np.dtype:
    return np.dtype(ins[2])


def _identity(kind: str, acc: np.dtype) -> str:
    if kind in ("min", "max"):
        return _minmax_identity(kind, acc)
    return f"({_ctype(acc)}){_IDENTITY[kind]}"


@functools.lru_cache(maxsize=256)
def _scalar_ctypes(instrs: tuple) -> dict[int, str]:
    """Kernel argument type of each scalar slot."""
    types: dict[int, str] = {}
    for ins in instrs:
        if ins[0] == "scalar":
            types[ins[1]] = _ctype(ins[2])
        elif ins[0] == "full":
            types[ins[1]] = _ctype(ins[2])
        elif ins[0] == "random":
            slot, dt = ins[3], np.dtype(ins[2])
            types[slot] = types[slot + 1] = "unsigned int"
            types[slot + 2] = "unsigned long long"
            param_type = "unsigned long long" if ins[1] == "integers" else _ctype(dt)
            for p in range(ins[4]):
                types[slot + 3 + p] = param_type
    return types


def _instr_code(i: int, ins: tuple, instrs: Sequence[tuple], mode: str, group: int,
                singles: frozenset[int] = frozenset(), prefix: str = "") -> str:
    """The statement of instruction ``i`` for one element (``t``; ``gi`` global), in a kernel of ``mode``
    and Philox ``group`` whose flat inputs ``singles`` hold one element; its scalar parameters (``s<k>``,
    ``c<j>_<type>``) named with ``prefix`` (two sweeps of a stencil kernel have their own)."""
    tag = ins[0]
    if tag == "load":
        k, ct = ins[1], _ctype(ins[2])
        where = f"o{k}" if mode == "strided" else "0" if k in singles else "t"
        return f"const {ct} v{i} = in{k}[{where}];"
    if tag in ("scalar", "full"):
        return f"const {_ctype(ins[2])} v{i} = {prefix}s{ins[1]};"
    if tag == "random":
        return f"const {_ctype(ins[2])} v{i} = {_random_code(i, ins, group)};"
    _, func, dt, _, args, compute = ins
    category, template = _OPS[func][1], _OPS[func][3]
    out_dt, compute = np.dtype(dt), np.dtype(compute)
    ct = _ctype(compute)
    if category == "astype" and _value_dtype(instrs[args[0]]).kind == "f" and out_dt.kind in "iu" and out_dt.itemsize < 8:
        operands = [f"({ct})(long long)v{args[0]}"]  # as NumPy: through int64, wrapping
    else:
        operands = [f"v{j}" if cast is None else prefix + _cast_name(j, cast) if instrs[j][0] in ("scalar", "full")
                    else f"({cast})v{j}" for j, cast in _operand_casts(ins)]
    f = "f" if compute == np.float32 else ""
    expr = template.format(*operands, T=ct, f=f)
    return f"const {_ctype(out_dt)} v{i} = ({_ctype(out_dt)}){expr};"


def _operand_casts(ins: tuple) -> list[tuple[int, str | None]]:
    """Each operand of an op instruction with the C type it is converted to (None: used as it is)."""
    _, func, _, _, args, compute = ins
    ct = _ctype(compute)
    if _OPS[func][1] == "where":
        return [(args[0], None), (args[1], ct), (args[2], ct)]
    return [(j, ct) for j in args]


def _cast_name(j: int, ctype: str) -> str:
    return f"c{j}_{ctype.replace(' ', '_')}"


@functools.lru_cache(maxsize=256)
def _scalar_casts(instrs: tuple) -> list[tuple[int, str]]:
    """(scalar instruction, C type) for each type a scalar operand is computed in: each is a kernel
    argument of its own, converted on the host (a conversion in the kernel, which nvcc may repeat for
    every element rather than keep a register, runs on a slow pipe for float64 to float32)."""
    casts: dict[tuple[int, str], None] = {}
    for ins in instrs:
        if ins[0] == "op":
            for j, cast in _operand_casts(ins):
                if cast is not None and instrs[j][0] in ("scalar", "full"):
                    casts[(j, cast)] = None
    return list(casts)


def _cast_arg(scalars: Sequence[Any], instrs: Sequence[tuple], j: int, ctype: str) -> Any:
    """The value of scalar instruction ``j`` as its own C type, then converted to ``ctype`` (what ``(ctype)v``
    gives in C: NumPy's casts round the same way)."""
    own = _NP_OF_CTYPE[_ctype(instrs[j][2])].type(scalars[instrs[j][1]])
    return _NP_OF_CTYPE[ctype].type(own)


def _random_words(i: int, ins: tuple, group: int) -> list[str]:
    """The expressions of the Philox words of random instruction ``i`` for one element."""
    slot, w = ins[3], _words(ins)
    if group > 1:
        # this element's words inside the group's Philox block r{i}: j * w on when the group fills the block
        base = f"j * {w}" if group * w == 4 else f"(int)((gi * {w}) & 3)"
        return [f"gnp_word(r{i}, {base} + {off})" for off in range(w)]
    block = f"gnp_philox_block(s{slot}, s{slot + 1}, s{slot + 2}, (unsigned long long)((gi * {w}) / 4))"
    return [f"gnp_word({block}, (int)((gi * {w}) & 3) + {off})" for off in range(w)]


def _random_code(i: int, ins: tuple, group: int) -> str:
    kind, dt, slot = ins[1], np.dtype(ins[2]), ins[3]
    words = _random_words(i, ins, group)
    suffix = "f32" if dt == np.float32 else "f64"
    if kind in ("random", "uniform"):
        r = f"gnp_u32_to_f32({words[0]})" if dt == np.float32 else f"gnp_u64_to_f64({words[0]}, {words[1]})"
        if kind == "random":
            return r
        lo, hi = f"s{slot + 3}", f"s{slot + 4}"
        sub = "__fsub_rn" if dt == np.float32 else "__dsub_rn"
        return _rn_affine(dt, r, f"{sub}({hi}, {lo})", lo)
    if kind in ("standard_normal", "normal"):
        z = f"gnp_w_standard_normal_{suffix}({', '.join(words)})"
        if kind == "standard_normal":
            return z
        return _rn_affine(dt, z, f"s{slot + 4}", f"s{slot + 3}")
    value = f"gnp_w_integers_u64({words[0]}, {words[1]}, s{slot + 3}, s{slot + 4})"
    return f"({_ctype(dt)})(long long){value}" if dt.kind == "i" else f"({_ctype(dt)}){value}"


def _uniform_products(program: tuple, group: int, constants: tuple) -> dict[int, str]:
    """For a kernel specialized to ``constants``: the float32 products ``c * u`` of a constant and a float32
    ``random`` draw ``u = m * 2**-24`` (``m`` the 24-bit integer of a Philox word), each as ``(c * 2**-24) * m``
    where ``c * 2**-24`` is exact: the same real number, so the same rounding (fused with what follows as
    before), one multiply less per element."""
    instrs = program[2]
    values = {name: value for (_, name), value in zip(_scalar_params(instrs), constants)}
    products = {}
    for i, ins in enumerate(instrs):
        if ins[0] != "op" or ins[1] != "multiply" or np.dtype(ins[5]) != np.float32:
            continue
        for a, b in (ins[4], ins[4][::-1]):
            draw, scalar = instrs[a], instrs[b]
            if (draw[0] == "random" and draw[1] == "random" and np.dtype(draw[2]) == np.float32
                    and scalar[0] in ("scalar", "full")):
                c = np.float32(values[_cast_name(b, "float")])
                scaled = c * np.float32(2.0**-24)
                if np.isfinite(c) and scaled * np.float32(2.0**24) == c:
                    word = _random_words(a, draw, group)[0]
                    products[i] = f"(float)({c_literal('float', scaled)} * __uint2float_rn(({word}) >> 8))"
                break
    return products


def _rn_affine(dt: np.dtype, x: str, scale: str, offset: str) -> str:
    """``offset + x * scale`` rounded after each operation (never an FMA), as the Philox stream defines."""
    if dt == np.float32:
        return f"__fadd_rn({offset}, __fmul_rn({x}, {scale}))"
    return f"__dadd_rn({offset}, __dmul_rn({x}, {scale}))"


#: Blocks of fewer elements than this are indexed with 32-bit ints (the margin: grid-stride loops step past
#: the end by up to a grid's threads times the elements each handles per step).
INT_INDEX_LIMIT = 2**31 - 2**26


def _launch_geometry(program: tuple, inputs: Sequence[Any], offset: tuple[int, ...], shape: tuple[int, ...],
                     global_shape: tuple[int, ...]) -> tuple[_Variant, list[Any]]:
    """The kernel variant of one launch (mode, Philox group, index type, single-element inputs) and its
    geometry arguments."""
    ndim = program[0]
    gstrides = [math.prod(global_shape[d + 1 :]) for d in range(ndim)]
    goff = sum(o * s for o, s in zip(offset, gstrides))
    size = math.prod(shape)
    shape = tuple(shape)
    index, to_index = ("int", np.int32) if size < INT_INDEX_LIMIT else ("long long", np.int64)
    flat = all((a.size == 1) or (a.shape == shape and a.flags.c_contiguous) for a in inputs)
    contiguous_in_global = shape[1:] == tuple(global_shape[1:])
    philox = _philox_group(program[2])
    if flat and (contiguous_in_global or not philox):
        # flat mode keys random draws by goff + t: only right when the block is contiguous in the global
        # array; otherwise the strided mode maps each element to its global index
        singles = frozenset(k for k, a in enumerate(inputs) if a.size == 1)
        return _Variant("flat", philox or 1, index, singles), [to_index(size), np.int64(goff)]
    geometry: list[Any] = [to_index(size), np.int64(goff)]
    for d in range(ndim):
        geometry += [to_index(shape[d]), np.int64(gstrides[d])]
    for a in inputs:
        lead = ndim - a.ndim
        for d in range(ndim):
            if d < lead or a.shape[d - lead] == 1:
                geometry.append(np.int64(0))
            else:
                geometry.append(np.int64(a.strides[d - lead] // a.itemsize))
    return _Variant("strided", 1, index, frozenset()), geometry


@functools.lru_cache(maxsize=256)
def _philox_group(instrs: tuple) -> int:
    """Elements that share one Philox block in a flat kernel of these instructions (0: no random draws)."""
    randoms = [ins for ins in instrs if ins[0] == "random"]
    return 4 // max(_words(ins) for ins in randoms) if randoms else 0


def run_cuda(program: tuple, scalars: Sequence[Any], offset: tuple[int, ...], shape: tuple[int, ...],
             global_shape: tuple[int, ...], inputs: Sequence[Any]) -> list[Any]:
    """Run a program on one block of CuPy arrays with its generated kernel (one launch); returns the outputs.
    What depends on the program alone (the kernel, its grid, its scalar arguments for given values) is
    made once (``_kernel``); the per-block partials of full reductions live in a per-stream workspace."""
    import cupy

    ndim, input_dtypes, instrs, outputs = program
    inputs = [a if a.dtype == dt else a.astype(dt) for a, dt in zip(inputs, input_dtypes)]
    size = math.prod(shape)
    if not size:  # nothing to launch: the block functions give empty outputs (and totals of nothing)
        return run_numpy(program, scalars, offset, shape, global_shape, inputs, "cupy")
    variant, geometry = _launch_geometry(program, inputs, offset, shape, global_shape)
    kernel = _kernel(program, variant)
    launch = kernel.launch(scalars)
    per_thread = variant.group * PHILOX_STEPS if variant.group > 1 else UNROLL if variant.mode == "flat" else 1
    blocks = max(1, min(-(-size // (per_thread * _THREADS)), launch.max_blocks))
    after = epilogue_values(instrs)
    bufs, results = [], []
    for k, out in enumerate(outputs):
        if k in kernel.finals:
            result, buffer = final_buffer(program, k, size)
            bufs.append(buffer)
            results.append(result)
        else:
            value_shape = (1,) * after[out[1]] if out[1] in after else shape
            bufs.append(cupy.empty(value_shape, dtype=_value_dtype(instrs[out[1]])))
            results.append(bufs[-1])
    bufs += fold_buffers(program, blocks)
    launch.function((blocks,), (_THREADS,), (*inputs, *bufs, *launch.args, *geometry))
    # a reduction over some axes: of the stored block, once the kernel has written it
    return [_blocks.reduce_chunk(out[2], r, out[3], np.dtype(out[4]), out[5], ())
            if out[0] == "reduce" and k not in kernel.finals else r for k, (out, r) in enumerate(zip(outputs, results))]


def final_buffer(program: tuple, k: int, size: int) -> tuple[dict[str, Any], Any]:
    """The result of output ``k``, a full reduction over ``size`` elements finished in the launch, as the partial
    ``_blocks.reduce_chunk`` gives, and the one-element device array the kernel writes it to (``fin<k>``)."""
    import cupy

    out = program[3][k]
    final = cupy.empty((1,) * program[0], dtype=_final_dtype(out))
    return ({"s": final, "n": size} if out[2] == "mean" else {"v": final}), final


def fold_buffers(program: tuple, blocks: int) -> list[Any]:
    """The kernel arguments of a launch of ``blocks`` thread blocks for its folds' partials and the ticket
    (``fold_params``), in the current stream's workspace."""
    folds = _folds(program)
    if not folds:
        return []
    workspace = _workspace()
    return [*workspace.partials(blocks, [fold.acc for fold in folds]), workspace.ticket]


_THREADS = 256  # threads per block: the kernels' __launch_bounds__ and shared-memory trees assume it


class _Workspace:
    """Device memory that the kernels launched on one stream share, one launch after another (a stream runs
    its launches in order): the zeroed counter with which full reductions find their last thread block
    (each kernel resets it to zero when it finishes), and room for the thread blocks' partials."""

    def __init__(self) -> None:
        import cupy

        self.ticket = cupy.zeros(1, dtype=np.uint32)
        self._room = cupy.empty(0, dtype=np.uint8)

    def partials(self, blocks: int, dtypes: Sequence[np.dtype]) -> list[Any]:
        """Pointers (kernel arguments) to an array of ``blocks`` partials of each of ``dtypes`` (of at most 8
        bytes each)."""
        import cupy

        count = len(dtypes)
        need = 8 * blocks * count
        if self._room.nbytes < need:
            self._room = cupy.empty(need, dtype=np.uint8)  # the old room is freed in stream order
        base = self._room.data.ptr
        return [np.uintp(base + 8 * blocks * j) for j in range(count)]


@functools.lru_cache(maxsize=None)
def _workspace_for(device: int, stream: int) -> _Workspace:
    return _Workspace()


def _workspace() -> _Workspace:
    """The workspace of the current device and stream."""
    import cupy

    return _workspace_for(cupy.cuda.Device().id, cupy.cuda.get_current_stream().ptr)


_NP_OF_CTYPE = {v: np.dtype(k) for k, v in CTYPES.items()}


def _scalar_arg(scalars: Sequence[Any], k: int, ctype: str, instrs: Sequence[tuple]) -> Any:
    """The kernel argument of scalar slot ``k``: random parameters converted as the Philox stream
    defines them; other values cast to their C type."""
    for ins in instrs:
        if ins[0] == "random" and ins[3] + 3 <= k < ins[3] + 3 + ins[4]:
            from ..kernels import philox as _philox

            slot = ins[3]
            converted = _philox._check_params(ins[1], np.dtype(ins[2]), scalars[slot + 3 : slot + 3 + ins[4]])
            return converted[k - slot - 3]
    return _NP_OF_CTYPE[ctype].type(scalars[k])


def scalar_args(instrs: Sequence[tuple], scalars: Sequence[Any]) -> list[Any]:
    """The scalar kernel arguments of a program's instructions for these scalar values: each slot as its
    C type (``s<k>``), then each scalar operand converted to the type it is computed in."""
    types = _scalar_ctypes(instrs)
    return ([_scalar_arg(scalars, k, types[k], instrs) for k in sorted(types)]
            + [_cast_arg(scalars, instrs, j, ct) for j, ct in _scalar_casts(instrs)])


@functools.lru_cache(maxsize=256)
def _scalar_params(instrs: tuple) -> tuple[tuple[str, str], ...]:
    """(C type, name) of each scalar parameter of a kernel, in the order of ``scalar_args``."""
    return (tuple((ct, f"s{k}") for k, ct in sorted(_scalar_ctypes(instrs).items()))
            + tuple((ct, _cast_name(j, ct)) for j, ct in _scalar_casts(instrs)))


def c_literal(ctype: str, value: Any) -> str:
    """``value`` as an exact C++ constant of C type ``ctype``: floats in hexadecimal (their bits where not
    finite), integers through their two's-complement bits."""
    dt = _NP_OF_CTYPE[ctype]
    v = dt.type(value)
    if dt.kind == "b":
        return "true" if v else "false"
    if dt.kind == "f":
        if np.isfinite(v):
            return float(v).hex() + ("f" if ctype == "float" else "")
        return (f"__uint_as_float({int(v.view(np.uint32)):#x}u)" if ctype == "float"
                else f"__longlong_as_double({int(v.view(np.int64))}ll)")
    return f"({ctype}){int(v) % 2 ** (8 * dt.itemsize)}ull"


class _Launch(NamedTuple):
    """What a launch of a program variant with one set of scalar values calls: the compiled function, the
    most thread blocks worth launching (one full wave), and the scalar arguments."""

    function: Any
    max_blocks: int
    args: tuple


class _ValueSet:
    """The launches of a kernel with one set of scalar values: how many so far, what they call, and the
    compilation of a kernel specialized to the values, while it runs (or whether one was tried)."""

    __slots__ = ("launches", "launch", "pending", "tried")

    def __init__(self, launch: _Launch) -> None:
        self.launches, self.launch, self.pending, self.tried = 0, launch, None, False


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

    def __init__(self, program: tuple, variant: _Variant) -> None:
        from ..kernels import cuda as _cuda

        self._program, self._variant = program, variant
        self.finals = _finals(program)
        self._generic = _cuda.compile_function(*self._source(()), _THREADS)
        self._values: dict[tuple, _ValueSet] = {}
        self._specialized = 0

    def _source(self, constants: tuple) -> tuple[str, str]:
        variant = self._variant
        return kernel_source(self._program, variant.mode, variant.group, variant.index,
                             tuple(sorted(variant.singles)), constants)

    def launch(self, scalars: Sequence[Any]) -> _Launch:
        """The launch for these scalar values (remembered by value and type: 1 and 1.0 are equal in Python)."""
        key = tuple((type(v), v) for v in scalars)
        values = self._values.get(key)
        if values is None:
            if len(self._values) >= self._REMEMBERED:
                self._values.clear()
                self._specialized = 0
            values = self._values[key] = _ValueSet(_Launch(*self._generic, tuple(scalar_args(self._program[2], scalars))))
        values.launches += 1
        if values.pending is not None and values.pending.done():
            self._finish_specialization(values)
        elif (not values.tried and values.launch.args and values.launches >= self.SPECIALIZE_AFTER
              and self._specialized < self.MAX_SPECIALIZED and config.get("specialize")):
            from ..kernels import cuda as _cuda

            values.tried = True
            self._specialized += 1
            values.pending = _cuda.compile_in_background(*self._source(values.launch.args), _THREADS)
        return values.launch

    @staticmethod
    def _finish_specialization(values: _ValueSet) -> None:
        pending, values.pending = values.pending, None
        error = pending.exception()
        if error is None:
            values.launch = _Launch(*pending.result(), ())
        else:  # a generated source nvcc compiles in CI: a bug, but the generic kernel gives the same results
            warnings.warn(f"dask_gpunumeric: a kernel specialized to its scalar values did not compile ({error}); "
                          "the generic kernel runs instead. Please report this; gnp.config.set(specialize=False) "
                          "turns specialization off.", RuntimeWarning, stacklevel=3)


@functools.lru_cache(maxsize=256)
def _kernel(program: tuple, variant: _Variant) -> _Kernel:
    """The compiled kernel of a program variant (compiled once per process; CuPy also caches on disk)."""
    return _Kernel(program, variant)


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
