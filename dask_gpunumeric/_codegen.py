"""Fused programs: what one fused group computes per block, and its CUDA C++ kernel.

A *program* is a tokenizable tuple ``(ndim, input_dtypes, instructions, outputs)`` in SSA form: value ``i``
is defined by instruction ``i``:

* ``("load", k, dtype)``: external input ``k`` (broadcast to the block),
* ``("scalar", k, dtype)``: scalar argument ``k`` (its value is a kernel argument, not part of the source),
* ``("random", kind, dtype, slot)``: a Philox draw; scalars ``slot..`` hold key, stream and parameters,
* ``("full", slot, dtype)``: a constant array,
* ``("op", func, dtype, kwargs, args)``: the NumPy/CuPy function ``func`` of values ``args``;

and outputs are ``("store", i)`` (a block of value ``i``) or ``("reduce", i, kind, axes, dtype, params)``
(the reduction partial of value ``i``, as ``_blocks.reduce_chunk`` makes it).

On NumPy blocks a program is interpreted with the same block functions as unfused tasks (the reference).
On CuPy blocks it becomes one generated kernel: scalar values are kernel arguments, so a program compiles
once per worker whatever the values; full reductions are two-stage (per-thread-block partials, then a
small final reduction); random numbers are drawn in registers, one Philox block per 4/w elements.
"""
from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from dask._expr import Expr

from . import _blocks
from ._backend import namespace

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


def build_program(nodes: Sequence[Expr], stores: Sequence[Expr], reductions: Sequence[Expr]) -> tuple[tuple, list, list]:
    """The program of a group (members in topological order), its external inputs and scalar values."""
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

    for node in nodes:
        if node.__class__.__name__ == "Creation":
            kind, params = node.operand("kind"), node.operand("params")
            slot = len(scalars)
            if kind == "full":
                scalars.append(params[0])
                instrs.append(("full", slot, node.dtype.str))
            else:
                key, stream, dist = params
                scalars.extend([key[0], key[1], stream, *dist])
                instrs.append(("random", kind.removeprefix("random-"), node.dtype.str, slot, len(dist)))
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
    from .random import _philox

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
        else:
            _, func, dt, kwargs, args, _ = ins
            values.append(_blocks.elemwise(func, np.dtype(dt), dict(kwargs), *[values[j] for j in args]))
    return [_output(out, values, shape) for out in program[3]]


def _output(out: tuple, values: list[Any], shape: tuple[int, ...]) -> Any:
    value = values[out[1]]
    if value.shape != shape:
        value = namespace(value).broadcast_to(value, shape)
    if out[0] == "store":
        return value
    _, _, kind, axes, dt, params = out
    return _blocks.reduce_chunk(kind, value, axes, np.dtype(dt), params, ())


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


def kernel_source(program: tuple, mode: str, group: int) -> tuple[str, str]:
    """CUDA C++ source and kernel name of a program. ``mode`` is "flat" (every input is the block's shape
    and contiguous, or a single element) or "strided"; ``group`` elements per iteration (1, 2 or 4) share
    one Philox block (only with flat mode and a block contiguous in the global array).

    A full reduction is finished in the same launch: each thread block writes its partial, and the last
    thread block to finish (a ticket counter) combines the partials in block order (so the result does
    not depend on timing) into the final one-element output ``fin<k>``, and resets the ticket."""
    from ._program_check import check_program
    from .random._philox import PHILOX_DEVICE_SOURCE

    check_program(program, mode, group)  # only our names and integers become source
    ndim, input_dtypes, instrs, outputs = program
    full_reductions = _full_reductions(program)
    params: list[str] = []
    for k, dt in enumerate(input_dtypes):
        params.append(f"const {_ctype(dt)}* __restrict__ in{k}")
    for k, out in enumerate(outputs):
        if k in full_reductions:
            params += reduction_params(program, [k])
        else:
            params.append(f"{_ctype(_value_dtype(instrs[out[1]]))}* __restrict__ out{k}")
    if full_reductions:
        params.append("unsigned int* __restrict__ ticket")
    scalar_types = _scalar_ctypes(instrs)
    for k, ct in sorted(scalar_types.items()):
        params.append(f"const {ct} s{k}")
    params += [f"const {ct} {_cast_name(j, ct)}" for j, ct in _scalar_casts(instrs)]
    params += ["const long long n", "const long long goff"]
    if mode == "strided":
        for d in range(ndim):
            params += [f"const long long shape{d}", f"const long long gstride{d}"]
        for k in range(len(input_dtypes)):
            params += [f"const long long istride{k}_{d}" for d in range(ndim)]
    if mode == "flat":
        params += [f"const bool single{k}" for k in range(len(input_dtypes))]

    name = "gnp_fused_" + hashlib.sha256(repr((program, mode, group)).encode()).hexdigest()[:16]
    body: list[str] = accumulators(program, full_reductions)
    body.append("    const long long nthreads = (long long)gridDim.x * blockDim.x;")
    if group > 1:
        body += _grouped_loop(program, full_reductions, group)
    elif mode == "flat":
        body += _unrolled_loop(program, full_reductions)
    else:
        body.append("    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += nthreads) {")
        indent = "        "
        if mode == "strided":
            body.append(f"{indent}long long rem = t, gi = goff;")
            for k in range(len(input_dtypes)):
                body.append(f"{indent}long long o{k} = 0;")
            for d in range(ndim - 1, -1, -1):
                body.append(f"{indent}{{ const long long c = rem % shape{d}; rem /= shape{d}; gi += c * gstride{d};")
                for k in range(len(input_dtypes)):
                    body.append(f"{indent}  o{k} += c * istride{k}_{d};")
                body.append(f"{indent}}}")
        else:
            body.append(f"{indent}const long long gi = goff + t;")
        body += [indent + line for line in _element_code(program, full_reductions, mode, 1, {})]
        body.append("    }")
    body += finish_reductions(program, full_reductions)
    source = (
        PHILOX_DEVICE_SOURCE + _HELPERS
        + f'\nextern "C" __global__ void __launch_bounds__(256) {name}(\n    ' + ",\n    ".join(params) + ")\n{\n"
        + "\n".join(body) + "\n}\n"
    )
    return source, name


def _full_reductions(program: tuple) -> list[int]:
    """Indices of the outputs that reduce over every axis (finished in the kernel)."""
    ndim, outputs = program[0], program[3]
    return [k for k, o in enumerate(outputs) if o[0] == "reduce" and tuple(o[3]) == tuple(range(ndim))]


def _element_code(program: tuple, full_reductions: list[int], mode: str, group: int,
                  partial: dict[int, str], loaded: dict[int, str] | None = None) -> list[str]:
    """The statements computing one element ``t`` (global index ``gi``): every instruction, then each
    output stored or folded into its accumulator (``partial[k]``, where given, instead of ``acc<k>``).
    ``loaded`` names registers already holding the values of load instructions."""
    _, _, instrs, outputs = program
    lines = [f"const {_ctype(ins[2])} v{i} = {loaded[i]};" if loaded and i in loaded
             else _instr_code(i, ins, instrs, mode, group) for i, ins in enumerate(instrs)]
    for k, out in enumerate(outputs):
        if k in full_reductions:
            lines.append(fold(program, k, partial.get(k)))
        else:
            lines.append(f"out{k}[t] = v{out[1]};")
    return lines


UNROLL = 4  # elements per thread per iteration of a flat kernel without Philox groups


def _unrolled_loop(program: tuple, full_reductions: list[int]) -> list[str]:
    """The flat loop, ``UNROLL`` elements per thread per iteration, a thread block's width apart (loads
    stay coalesced): where all of them are inside the block, every input load of all of them is issued
    before any arithmetic, so that a memory-bound kernel keeps several loads in flight per thread."""
    _, _, instrs, _ = program
    loads = [i for i, ins in enumerate(instrs) if ins[0] == "load"]
    lines = [f"    for (long long base = (long long)blockIdx.x * blockDim.x * {UNROLL} + threadIdx.x; base < n; "
             f"base += nthreads * {UNROLL}) {{",
             f"        if (base + {UNROLL - 1} * (long long)blockDim.x < n) {{"]
    for u in range(UNROLL):
        lines.append(f"            const long long t{u} = base + {u} * (long long)blockDim.x;")
        for i in loads:
            k = instrs[i][1]
            lines.append(f"            const {_ctype(instrs[i][2])} ld{i}_{u} = in{k}[single{k} ? 0 : t{u}];")
    for u in range(UNROLL):
        lines += ["            {", f"                const long long t = t{u};", "                const long long gi = goff + t;"]
        element = _element_code(program, full_reductions, "flat", 1, {}, {i: f"ld{i}_{u}" for i in loads})
        lines += ["                " + line for line in element]
        lines.append("            }")
    lines += ["        } else {",
              "            for (long long t = base; t < n; t += blockDim.x) {",
              "                const long long gi = goff + t;"]
    lines += ["                " + line for line in _element_code(program, full_reductions, "flat", 1, {})]
    lines += ["            }", "        }", "    }"]
    return lines


def _grouped_loop(program: tuple, full_reductions: list[int], group: int) -> list[str]:
    """The flat loop over groups of ``group`` consecutive global elements that share Philox blocks: the
    draws are made once per group; whole groups inside the block skip the per-element bounds checks, and
    float32 sums fold a group in float before adding it to the float64 accumulator."""
    _, _, instrs, outputs = program
    partial = {k: f"p{k}" for k in full_reductions
               if outputs[k][2] in ("sum", "mean") and _value_dtype(instrs[outputs[k][1]]) == np.float32
               and _reduce_acc(outputs[k], instrs) == np.float64}
    lines = [f"    const long long g0 = goff / {group}, g1 = (goff + n + {group - 1}) / {group};",
             "    for (long long g = g0 + (long long)blockIdx.x * blockDim.x + threadIdx.x; g < g1; g += nthreads) {"]
    for i, ins in enumerate(instrs):
        if ins[0] == "random":
            w = _words(ins)
            lines.append(f"        const gnp_u32x4 r{i} = gnp_philox_block(s{ins[3]}, s{ins[3] + 1}, s{ins[3] + 2}, "
                         f"(unsigned long long)((g * {group * w}) / 4));")
    lines += [f"        float {p} = 0.0f;" for p in partial.values()]
    lines.append(f"        const long long t0 = g * {group} - goff;")
    element = _element_code(program, full_reductions, "flat", group, partial)
    for check, head in ((False, "if (t0 >= 0 && t0 + {G} <= n) {{"), (True, "}} else {{")):
        lines.append("        " + head.format(G=group))
        lines += ["            #pragma unroll", f"            for (int j = 0; j < {group}; ++j) {{",
                  "                const long long t = t0 + j;"]
        if check:
            lines.append("                if (t < 0 || t >= n) continue;")
        lines.append(f"                const long long gi = g * {group} + j;")
        lines += ["                " + line for line in element]
        lines.append("            }")
    lines.append("        }")
    for k, p in partial.items():
        lines.append(f"        acc{k} = acc{k} + (double){p};")
    lines.append("    }")
    return lines


def reduction_params(program: tuple, full_reductions: Sequence[int]) -> list[str]:
    """Kernel parameters of full reductions: per reduction ``k``, the thread blocks' partials ``out<k>`` and
    the one-element result ``fin<k>`` (the kernel takes one ``ticket`` counter besides)."""
    instrs, outputs = program[2], program[3]
    return [p for k in full_reductions for p in (f"{_ctype(_reduce_acc(outputs[k], instrs))}* __restrict__ out{k}",
                                                  f"{_ctype(_final_dtype(outputs[k]))}* __restrict__ fin{k}")]


def accumulators(program: tuple, full_reductions: Sequence[int]) -> list[str]:
    """Each thread's accumulator ``acc<k>`` of each full reduction, at its identity."""
    instrs, outputs = program[2], program[3]
    return [f"    {_ctype(_reduce_acc(outputs[k], instrs))} acc{k} = "
            f"{_reduce_identity(outputs[k], _reduce_acc(outputs[k], instrs))};" for k in full_reductions]


def fold(program: tuple, k: int, partial: str | None = None) -> str:
    """The statement folding value ``v<i>`` of full reduction ``k`` into its accumulator (``partial``, a
    float, where given, else ``acc<k>``)."""
    instrs, out = program[2], program[3][k]
    acc = partial or f"acc{k}"
    ct = "float" if partial else _ctype(_reduce_acc(out, instrs))
    return f"{acc} = {_COMBINE[out[2]].format(a=acc, b=f'({ct})v{out[1]}')};"


#: (thread in block, threads per block, block, blocks) of a one-dimensional launch
LINEAR_IDS = ("threadIdx.x", "blockDim.x", "blockIdx.x", "gridDim.x")


def finish_reductions(program: tuple, full_reductions: Sequence[int], ids: tuple[str, ...] = LINEAR_IDS) -> list[str]:
    """Thread-block partials of the full reductions, then the last thread block's final combine; ``ids``
    name the linear thread and block numbers of the launch (``LINEAR_IDS``), of 256 threads per block."""
    if not full_reductions:
        return []
    thread, threads, block, blocks = ids
    _, _, instrs, outputs = program
    lines: list[str] = []
    for k in full_reductions:
        out = outputs[k]
        acc = _reduce_acc(out, instrs)
        lines += [f"    __shared__ {_ctype(acc)} sh{k}[256];", f"    sh{k}[{thread}] = acc{k};"]
    lines += _block_tree(program, full_reductions, thread, threads)
    lines.append("    __shared__ bool last;")
    lines.append(f"    if ({thread} == 0) {{")
    lines += [f"        out{k}[{block}] = sh{k}[0];" for k in full_reductions]
    lines += ["        __threadfence();", f"        last = atomicAdd(ticket, 1u) == {blocks} - 1;", "    }",
              "    __syncthreads();", "    if (!last) return;"]
    for k in full_reductions:
        out = outputs[k]
        acc = _reduce_acc(out, instrs)
        ct = _ctype(acc)
        combine = _COMBINE[out[2]].format(a=f"a{k}", b=f"((volatile {ct}*)out{k})[i]")
        lines += [f"    {ct} a{k} = {_reduce_identity(out, acc)};",
                  f"    for (unsigned int i = {thread}; i < {blocks}; i += {threads}) a{k} = {combine};",
                  f"    sh{k}[{thread}] = a{k};"]
    lines += _block_tree(program, full_reductions, thread, threads)
    lines.append(f"    if ({thread} == 0) {{")
    lines += [f"        fin{k}[0] = ({_ctype(_final_dtype(outputs[k]))})sh{k}[0];" for k in full_reductions]
    lines += ["        *ticket = 0u;", "    }"]
    return lines


def _block_tree(program: tuple, full_reductions: Sequence[int], thread: str, threads: str) -> list[str]:
    """Combine ``sh<k>[0..threads)`` into ``sh<k>[0]`` (a fixed-order tree)."""
    outputs = program[3]
    lines = ["    __syncthreads();", f"    for (int s = {threads} / 2; s > 0; s >>= 1) {{", f"        if ({thread} < s) {{"]
    for k in full_reductions:
        combine = _COMBINE[outputs[k][2]].format(a=f"sh{k}[{thread}]", b=f"sh{k}[{thread} + s]")
        lines.append(f"            sh{k}[{thread}] = {combine};")
    lines += ["        }", "        __syncthreads();", "    }"]
    return lines


def _final_dtype(out: tuple) -> np.dtype:
    """The dtype of a full reduction's one-element result (a mean keeps its sum in the mean's sum dtype)."""
    return np.dtype(out[5][0]) if out[2] == "mean" else np.dtype(out[4])


def record_sources(program: tuple) -> None:
    """With ``GNP_KERNEL_DUMP_DIR`` set (CI), write every kernel variant of a program there, so that nvcc
    compiles what the test suite generated even on machines without a GPU."""
    import os

    from . import _cuda

    if not os.environ.get("GNP_KERNEL_DUMP_DIR"):
        return
    randoms = [ins for ins in program[2] if ins[0] == "random"]
    variants = [("flat", 1), ("strided", 1)]
    if randoms:
        variants.append(("flat", 4 // max(_words(ins) for ins in randoms)))
    for mode, group in variants:
        _cuda.record_source(kernel_source(program, mode, group)[0])


def _words(ins: tuple) -> int:
    from .random._philox import words_per_element

    return words_per_element(ins[1], np.dtype(ins[2]))


def _value_dtype(ins: tuple) -> np.dtype:
    return np.dtype(ins[2])


def _reduce_acc(out: tuple, instrs: Sequence[tuple]) -> np.dtype:
    return _acc_dtype(out[2], _value_dtype(instrs[out[1]]), np.dtype(out[4]), out[5])


def _reduce_identity(out: tuple, acc: np.dtype) -> str:
    kind = out[2]
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


def _instr_code(i: int, ins: tuple, instrs: Sequence[tuple], mode: str, group: int) -> str:
    tag = ins[0]
    if tag == "load":
        k, ct = ins[1], _ctype(ins[2])
        where = f"o{k}" if mode == "strided" else f"(single{k} ? 0 : t)"
        return f"const {ct} v{i} = in{k}[{where}];"
    if tag in ("scalar", "full"):
        return f"const {_ctype(ins[2])} v{i} = s{ins[1]};"
    if tag == "random":
        return f"const {_ctype(ins[2])} v{i} = {_random_code(i, ins, group)};"
    _, func, dt, _, args, compute = ins
    category, template = _OPS[func][1], _OPS[func][3]
    out_dt, compute = np.dtype(dt), np.dtype(compute)
    ct = _ctype(compute)
    if category == "astype" and _value_dtype(instrs[args[0]]).kind == "f" and out_dt.kind in "iu" and out_dt.itemsize < 8:
        operands = [f"({ct})(long long)v{args[0]}"]  # as NumPy: through int64, wrapping
    else:
        operands = [f"v{j}" if cast is None else _cast_name(j, cast) if instrs[j][0] in ("scalar", "full")
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


def _random_code(i: int, ins: tuple, group: int) -> str:
    kind, dt, slot = ins[1], np.dtype(ins[2]), ins[3]
    w = _words(ins)
    k0, k1, st = f"s{slot}", f"s{slot + 1}", f"s{slot + 2}"
    if group > 1:
        # this element's words inside the group's Philox block r{i}: j * w on when the group fills the block
        base = f"j * {w}" if group * w == 4 else f"(int)((gi * {w}) & 3)"
        word = lambda off: f"gnp_word(r{i}, {base} + {off})"  # noqa: E731
    else:
        block = f"gnp_philox_block({k0}, {k1}, {st}, (unsigned long long)((gi * {w}) / 4))"
        base = f"(int)((gi * {w}) & 3)"
        word = lambda off: f"gnp_word({block}, {base} + {off})"  # noqa: E731
    words = [word(o) for o in range(w)]
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


def _rn_affine(dt: np.dtype, x: str, scale: str, offset: str) -> str:
    """``offset + x * scale`` rounded after each operation (never an FMA), as the Philox stream defines."""
    if dt == np.float32:
        return f"__fadd_rn({offset}, __fmul_rn({x}, {scale}))"
    return f"__dadd_rn({offset}, __dmul_rn({x}, {scale}))"


def _launch_geometry(program: tuple, inputs: Sequence[Any], offset: tuple[int, ...], shape: tuple[int, ...],
                     global_shape: tuple[int, ...]) -> tuple[str, int, list[Any]]:
    """Mode ("flat"/"strided"), Philox group size and the geometry arguments of one launch."""
    ndim = program[0]
    gstrides = [int(np.prod(global_shape[d + 1 :])) for d in range(ndim)]
    goff = sum(o * s for o, s in zip(offset, gstrides))
    size = int(np.prod(shape))
    flat = all(
        (a.size == 1) or (tuple(a.shape) == tuple(shape) and a.flags.c_contiguous) for a in inputs
    )
    contiguous_in_global = all(shape[d] == global_shape[d] for d in range(1, ndim))
    randoms = [ins for ins in program[2] if ins[0] == "random"]
    group = 1
    if flat and contiguous_in_global and randoms:
        group = 4 // max(_words(ins) for ins in randoms)
    if flat and (contiguous_in_global or not randoms):
        # flat mode keys random draws by goff + t: only right when the block is contiguous in the global
        # array; otherwise the strided mode maps each element to its global index
        return "flat", group, [np.int64(size), np.int64(goff)] + [np.bool_(a.size == 1) for a in inputs]
    geometry: list[Any] = [np.int64(size), np.int64(goff)]
    for d in range(ndim):
        geometry += [np.int64(shape[d]), np.int64(gstrides[d])]
    for a in inputs:
        lead = ndim - a.ndim
        for d in range(ndim):
            if d < lead or a.shape[d - lead] == 1:
                geometry.append(np.int64(0))
            else:
                geometry.append(np.int64(a.strides[d - lead] // a.itemsize))
    return "strided", 1, geometry


def run_cuda(program: tuple, scalars: Sequence[Any], offset: tuple[int, ...], shape: tuple[int, ...],
             global_shape: tuple[int, ...], inputs: Sequence[Any]) -> list[Any]:
    """Run a program on one block of CuPy arrays with its generated kernel (one launch); returns the outputs."""
    import cupy

    ndim, input_dtypes, instrs, outputs = program
    inputs = [a if a.dtype == np.dtype(dt) else a.astype(dt) for a, dt in zip(inputs, input_dtypes)]
    size = math.prod(shape)
    if not size:
        return [_empty_output(out, instrs, shape) for out in outputs]
    mode, group, geometry = _launch_geometry(program, inputs, offset, shape, global_shape)
    kernel, grid_limit = _kernel(program, mode, group)
    per_thread = group if group > 1 else UNROLL if mode == "flat" else 1
    blocks = max(1, min(-(-size // (per_thread * _THREADS)), grid_limit))
    full = _full_reductions(program)
    bufs, results = [], []
    for k, out in enumerate(outputs):
        if k in full:
            partial, buffers = reduction_buffers(program, k, blocks, size)
            bufs += buffers
            results.append(partial)
        else:
            bufs.append(cupy.empty(shape, dtype=_value_dtype(instrs[out[1]])))
            results.append(bufs[-1])
    if full:
        bufs.append(ticket())
    types = _scalar_ctypes(instrs)
    args = [*inputs, *bufs, *(_scalar_arg(scalars, k, types[k], instrs) for k in sorted(types)),
            *(_cast_arg(scalars, instrs, j, ct) for j, ct in _scalar_casts(instrs)), *geometry]
    kernel((blocks,), (_THREADS,), tuple(args))
    return [r if k in full or out[0] == "store" else _blocks.reduce_chunk(out[2], r, out[3], np.dtype(out[4]), out[5], ())
            for k, (out, r) in enumerate(zip(outputs, results))]


def reduction_buffers(program: tuple, k: int, blocks: int, size: int) -> tuple[dict[str, Any], list[Any]]:
    """The partial (as ``_blocks.reduce_chunk`` gives it) a launch of ``blocks`` thread blocks leaves for full
    reduction ``k`` over ``size`` elements, and the kernel arguments it is written through."""
    import cupy

    instrs, out = program[2], program[3][k]
    final = cupy.empty((1,) * program[0], dtype=_final_dtype(out))
    partial = {"s": final, "n": size} if out[2] == "mean" else {"v": final}
    return partial, [cupy.empty(blocks, dtype=_reduce_acc(out, instrs)), final]


def _empty_output(out: tuple, instrs: Sequence[tuple], shape: tuple[int, ...]) -> Any:
    """An output of a program on an empty block, as the unfused block functions give it."""
    import cupy

    empty = cupy.empty(shape, dtype=_value_dtype(instrs[out[1]]))
    if out[0] == "store":
        return empty
    return _blocks.reduce_chunk(out[2], empty, out[3], np.dtype(out[4]), out[5], ())


_THREADS = 256  # threads per block: the kernels' __launch_bounds__ and shared-memory trees assume it


@functools.lru_cache(maxsize=None)
def _ticket_for(device: int, stream: int) -> Any:
    import cupy

    return cupy.zeros(1, dtype=np.uint32)


def ticket() -> Any:
    """The zeroed counter full reductions use to find their last thread block, one per device and stream
    (launches on one stream run in order; each kernel resets it to zero when it finishes)."""
    import cupy

    return _ticket_for(cupy.cuda.Device().id, cupy.cuda.get_current_stream().ptr)


_NP_OF_CTYPE = {v: np.dtype(k) for k, v in CTYPES.items()}


def _scalar_arg(scalars: Sequence[Any], k: int, ctype: str, instrs: Sequence[tuple]) -> Any:
    """The kernel argument of scalar slot ``k``: random parameters converted as the Philox stream
    defines them; other values cast to their C type."""
    for ins in instrs:
        if ins[0] == "random" and ins[3] + 3 <= k < ins[3] + 3 + ins[4]:
            from .random import _philox

            slot = ins[3]
            converted = _philox._check_params(ins[1], np.dtype(ins[2]), scalars[slot + 3 : slot + 3 + ins[4]])
            return converted[k - slot - 3]
    return _NP_OF_CTYPE[ctype].type(scalars[k])


@functools.lru_cache(maxsize=256)
def _kernel(program: tuple, mode: str, group: int) -> tuple[Any, int]:
    """The compiled kernel of a program variant (compiled once per process; CuPy also caches on disk), and
    the most thread blocks worth launching: as many as the device keeps resident at once."""
    from . import _cuda

    source, name = kernel_source(program, mode, group)
    function = _cuda.compile_module(source).get_function(name)
    return function, resident_blocks(function)


def resident_blocks(function: Any) -> int:
    """How many thread blocks of 256 threads of a compiled kernel the current device keeps resident at once
    (the most worth launching with grid-stride loops)."""
    import cupy

    try:
        per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(function.ptr, _THREADS, 0)
    except AttributeError:  # a CuPy without the occupancy call
        per_sm = 2048 // _THREADS
    return _multiprocessors(cupy.cuda.Device().id) * max(1, per_sm)


@functools.lru_cache(maxsize=None)
def _multiprocessors(device: int) -> int:
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"]


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
