"""Fused programs: what one fused group computes per block, and the CUDA C++ source of its kernel.

A *program* (``types.Program``) is ``(ndim, input_dtypes, instructions, outputs)`` in SSA form, value ``i``
defined by instruction ``i`` (``types``: ``Load``, ``Scalar``, ``Random``, ``Op``, ``Total``; outputs
``Store`` and ``Reduce``). Ops on totals and scalars are the program's *epilogue*, computed once after the
reductions. ``ProgramBuilder`` makes programs; ``kernels.fused`` runs them (interpreted on NumPy blocks, as the
kernel of ``kernel_source`` on CuPy blocks: full reductions two-stage, finished with the epilogue by the last
thread block; random numbers drawn in registers)."""
from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..ops.reductions import REDUCTIONS
from ..ops.ufuncs import UFUNCS
from .check import ProgramError, check_program
from .helpers import HELPERS
from .philox import PHILOX_DEVICE_SOURCE, words_per_element
from .types import (NP_OF_CTYPE, Load, Op, Program, Random, Reduction, Scalar, Store, c_literal, ctype,
                    dtype_supported, scalar_supported, typed_program)

# --- what the kernels support -------------------------------------------------------------------------


def op_supported(func: str, dtype: np.dtype, kwargs: Mapping[str, Any], operands: Sequence[Any]) -> bool:
    """Can a kernel compute ufunc ``func`` (NumPy's name) with result ``dtype`` element by element, exactly
    as NumPy would? ``operands``: each array operand's dtype, or the scalar itself."""
    return _op_entry(func, dtype, kwargs, operands)[0]


def op_compute(func: str, dtype: np.dtype, kwargs: Mapping[str, Any], operands: Sequence[Any]) -> str | None:
    """``op_supported``, answered with the ``.str`` of the dtype a kernel computes the op in, or None."""
    return _op_entry(func, dtype, kwargs, operands)[1]


def _op_entry(func: str, dtype: Any, kwargs: Mapping[str, Any], operands: Sequence[Any]) -> tuple[bool, str | None]:
    """(supported, the ``.str`` of the compute dtype when supported) of an op: remembered per signature, since
    each optimization asks about every node again and nodes repeat a few signatures. A scalar counts by its
    type, a Python int by its value too (its range matters; a float's value never does, NEP 50)."""
    try:
        key = (func, dtype, tuple(sorted(kwargs.items())) if kwargs else (),
               tuple([o if isinstance(o, (int, np.dtype)) else None for o in operands]),
               tuple(map(type, operands)))
        return _SUPPORTED_OPS[key]
    except KeyError:
        if len(_SUPPORTED_OPS) >= 4096:  # keep it bounded
            _SUPPORTED_OPS.clear()
        entry = _SUPPORTED_OPS[key] = _op_answer(func, dtype, kwargs, operands)
        return entry
    except TypeError:  # something unhashable
        return _op_answer(func, dtype, kwargs, operands)


_SUPPORTED_OPS: dict[tuple, tuple[bool, str | None]] = {}


def _op_answer(func: str, dtype: Any, kwargs: Mapping[str, Any], operands: Sequence[Any]) -> tuple[bool, str | None]:
    if not _op_supported(func, dtype, kwargs, operands):
        return False, None
    return True, compute_dtype(func, dtype, operands).str


def _op_supported(func: str, dtype: np.dtype, kwargs: Mapping[str, Any], operands: Sequence[Any]) -> bool:
    ufunc = UFUNCS.get(func)
    if ufunc is None or not ufunc.rule or not dtype_supported(dtype):
        return False
    if kwargs and not (func == "round" and dict(kwargs) == {"decimals": 0}):
        return False
    if len(operands) != ufunc.arity:
        return False
    for a in operands:
        if not (dtype_supported(a) if isinstance(a, np.dtype) else scalar_supported(a)):
            return False
    compute = compute_dtype(func, dtype, operands)
    if compute is None:
        return False
    if ufunc.operands == "float" and compute.kind != "f":
        return False
    if ufunc.operands == "int" and compute.kind not in "iub":
        return False
    if ufunc.operands == "num" and compute.kind == "b":
        return False
    return True


def creation_supported(kind: str, dtype: np.dtype, params: tuple) -> bool:
    """Creations a kernel can compute per element: random draws and constants."""
    return dtype_supported(dtype) and (kind == "full" and scalar_supported(params[0]) or kind.startswith("random-"))


def compute_dtype(func: str, out: np.dtype, operands: Sequence[Any]) -> np.dtype | None:
    """The dtype a kernel computes ufunc ``func`` in, with result ``out`` on ``operands`` (array dtypes or
    scalars); None where NumPy's rules can't be followed."""
    category = UFUNCS[func].rule
    if category in ("arith", "astype", "where"):
        return np.dtype(out)
    if category == "predicate":
        return np.dtype(_dtype_of(operands[0]))
    common = np.result_type(*[np.empty(0, p) if isinstance(p, np.dtype) else p for p in operands])
    for a in operands:  # Python ints out of the common dtype's range compare specially in NumPy: don't fuse
        if isinstance(a, int) and not isinstance(a, bool) and common.kind in "iu":
            info = np.iinfo(common)
            if not info.min <= a <= info.max:
                return None
    return common


def _dtype_of(probe: Any) -> np.dtype:
    return probe if isinstance(probe, np.dtype) else np.asarray(probe).dtype


# --- building a program -------------------------------------------------------------------------------


class ProgramBuilder:
    """Builds a program one instruction at a time (each method returns the value it defines): external
    inputs are loaded once each (named by the caller), scalar values are collected in order."""

    def __init__(self) -> None:
        self.instrs: list[tuple] = []
        self.inputs: list[str] = []  # the names of the external inputs, in load order
        self.scalars: list[Any] = []
        self._loaded: dict[str, int] = {}
        self._dtypes: list[str] = []

    def _add(self, ins: tuple) -> int:
        self.instrs.append(ins)
        return len(self.instrs) - 1

    def load(self, name: str, dtype: np.dtype) -> int:
        """The value of external input ``name`` (loaded at its first use)."""
        if name not in self._loaded:
            self.inputs.append(name)
            self._dtypes.append(_dtype_str(dtype))
            self._loaded[name] = self._add(_typed(Load, ("load", len(self.inputs) - 1, _dtype_str(dtype))))
        return self._loaded[name]

    def scalar(self, value: Any) -> int:
        """A scalar operand (a kernel argument)."""
        self.scalars.append(value)
        instrs = self.instrs
        instrs.append(_typed(Scalar, ("scalar", len(self.scalars) - 1, _scalar_dtype_str(value))))
        return len(instrs) - 1

    def full(self, value: Any, dtype: np.dtype) -> int:
        """A constant array of ``value``."""
        self.scalars.append(value)
        return self._add(_typed(Scalar, ("full", len(self.scalars) - 1, _dtype_str(dtype))))

    def random(self, kind: str, dtype: np.dtype, key: Sequence[int], stream: int, params: Sequence[Any]) -> int:
        """A Philox draw of ``kind`` (``codegen.philox.KINDS``)."""
        slot = len(self.scalars)
        self.scalars.extend([key[0], key[1], stream, *params])
        return self._add(_typed(Random, ("random", kind, _dtype_str(dtype), slot, len(params))))

    def op(self, func: str, dtype: np.dtype, kwargs: Mapping[str, Any], args: Sequence[int],
           operands: Sequence[Any], compute: str | None = None) -> int:
        """Ufunc ``func`` of values ``args`` (``operands``: their array dtypes or scalars, for its compute dtype,
        unless ``compute`` gives that dtype's ``.str``: ``op_compute``'s answer)."""
        if not compute:
            compute = op_compute(func, dtype, kwargs, operands) or compute_dtype(func, dtype, operands).str
        instrs = self.instrs  # (not through _add: one call less per node of every fused group)
        instrs.append(_typed(Op, ("op", func, _DTYPE_STRS.get(dtype) or _dtype_str(dtype),
                                  tuple(sorted(kwargs.items())) if kwargs else (), tuple(args), compute)))
        return len(instrs) - 1

    def total(self, kind: str, dtype: np.dtype, value: int, axes: tuple[int, ...], params: tuple,
              keepdims: bool) -> int:
        """The finished reduction ``kind`` of ``value`` over every axis (of a one-block array)."""
        return self._add(_typed(Reduction, ("total", value, _dtype_str(dtype), kind, axes, params, keepdims)))

    def row(self, kind: str, dtype: np.dtype, value: int, axes: tuple[int, ...], params: tuple,
            keepdims: bool = True) -> int:
        """The reduction ``kind`` of ``value`` over trailing ``axes`` (whole in the block): one value per row
        (``codegen.rows``), its axes kept unless it is only stored."""
        return self._add(_typed(Reduction, ("row", value, _dtype_str(dtype), kind, axes, params, bool(keepdims))))

    def program(self, ndim: int, stores: Sequence[int], reductions: Sequence[tuple]) -> Program:
        """The program storing values ``stores``, then reducing per ``reductions``: ``(value, kind, axes,
        dtype, params)`` each."""
        outputs = [_typed(Store, ("store", i)) for i in stores]
        outputs += [_typed(Reduction, ("reduce", i, _dtype_str(dt), kind, axes, params, False))
                    for i, kind, axes, dt, params in reductions]
        return Program(ndim, tuple(self._dtypes), tuple(self.instrs), tuple(outputs))


# a typed instruction made from its fields at C speed (a NamedTuple's own constructor is Python code; the
# builder makes one per node of every fused group)
_typed = tuple.__new__


_DTYPE_STRS: dict[Any, str] = {}
_SCALAR_DTYPE_STRS: dict[type, str] = {}


def _dtype_str(dtype: Any) -> str:
    """``np.dtype(dtype).str``, looked up once per dtype (programs are built per node of every optimization)."""
    try:
        return _DTYPE_STRS[dtype]
    except KeyError:
        text = _DTYPE_STRS[dtype] = np.dtype(dtype).str
        return text
    except TypeError:  # unhashable
        return np.dtype(dtype).str


def _scalar_dtype_str(value: Any) -> str:
    """``np.asarray(value).dtype.str``: by type, except Python ints (their dtype depends on their value)."""
    kind = type(value)
    text = _SCALAR_DTYPE_STRS.get(kind)
    if text is None:
        text = np.asarray(value).dtype.str
        if kind in (bool, float) or issubclass(kind, np.generic):
            _SCALAR_DTYPE_STRS[kind] = text
    return text


def describe(program: tuple) -> str:
    """Op words of a program, for key names and explain(): e.g. "random-multiply-exp-sum"."""
    seen: list[str] = []
    for ins in program.instrs:
        if ins.tag == "op":
            word = _op_word(ins.func)
        elif ins.tag == "random":
            word = "random"
        elif ins.tag in ("total", "row"):
            word = ins.kind
        else:
            continue
        if word not in seen:
            seen.append(word)
            if len(seen) == 4:  # the first four words name it: the rest of a long program is not read
                return "-".join(seen)
    for out in program.outputs:
        if out.tag == "reduce" and out.kind not in seen:
            seen.append(out.kind)
    return "-".join(seen[:4]) or "fused"


@functools.lru_cache(maxsize=1024)
def _op_word(func: str) -> str:
    return "".join(c for c in func if c.isalpha())  # dashboard prefixes are letters


@functools.lru_cache(maxsize=256)
def epilogue_values(instrs: tuple) -> dict[int, int]:
    """The values of a program computed once after its totals (the totals and the ops on them), each with
    its number of axes, all of length 1: 0, or the array's for a total with keepdims (and what it
    broadcasts with)."""
    after: dict[int, int] = {}
    for i, ins in enumerate(instrs):
        if ins.tag == "total":
            after[i] = len(ins.axes) if ins.keepdims else 0
        elif ins.tag == "op" and any(j in after for j in ins.args):
            after[i] = max(after.get(j, 0) for j in ins.args)
    return after


def _acc_dtype(kind: str, value_dt: np.dtype, out_dt: np.dtype, params: tuple) -> np.dtype:
    return REDUCTIONS[kind].accumulator(value_dt, out_dt, params)


def _extreme_identity(kind: str, dt: np.dtype) -> str:
    """The identity of min (the largest value of ``dt``) or max (the smallest)."""
    if dt.kind == "f":
        return ("(1.0/0.0)" if kind == "min" else "(-1.0/0.0)")
    if dt.kind == "b":
        return "true" if kind == "min" else "false"
    info = np.iinfo(dt)
    value = info.max if kind == "min" else info.min
    return f"(({ctype(dt)}){value}{'ull' if dt.kind == 'u' else 'll'})" if value != -(2**63) else "(-9223372036854775807ll - 1)"


def kernel_source(program: tuple, mode: str, group: int, index: str = "long long",
                  singles: tuple[int, ...] = (), constants: tuple = ()) -> tuple[str, str]:
    """CUDA C++ source and kernel name of a program. ``mode`` is "flat" (every input is the block's shape
    and contiguous, or a single element: the inputs ``singles``, read at 0; their elements moved in packs of
    consecutive ones where aligned), "spread" (flat, for blocks with an input that does not start at a
    multiple of 16 bytes: each thread's elements a thread block's width apart) or "strided"; ``group``
    elements per iteration (1, 2 or 4) share one Philox block (only with flat mode and a block contiguous
    in the global array); ``index`` is the C type of positions in the block ("int" where they fit: 32-bit
    loop arithmetic, divisions by the block's shape included; global positions, which key random draws,
    and strides stay 64-bit).

    Full reductions (``program_folds``) are finished in the same launch: each thread block writes its partial, and
    the last thread block to finish (a ticket counter) combines the partials in block order (so the result
    does not depend on timing) into the one-element output ``fin<k>`` of a partial, or into a total, then
    computes the epilogue from the totals into its one-element outputs, and resets the ticket.

    ``constants``, where given, are the scalar arguments (``scalar_args``) of one set of scalar values: the
    kernel is specialized to them, each an exact constant of the source instead of a parameter (nvcc folds
    them into the instructions; the arithmetic, and so every result bit, is the same). Without them, the
    scalars are parameters, gathered in one struct (``scalar_struct``) where they are many."""
    check_program(program, mode, group, index, singles)  # only our names and integers become source
    program = typed_program(program)
    ndim, input_dtypes, instrs, outputs = program
    params: list[str] = []
    for k, dt in enumerate(input_dtypes):
        params.append(f"const {ctype(dt)}* __restrict__ in{k}")
    finals = final_outputs(program)
    for k, out in enumerate(outputs):  # a full reduction's results, else a block (or the epilogue's one element)
        params += (final_params(program, k) if k in finals
                   else [f"{ctype(value_dtype(instrs[out.value]))}* __restrict__ out{k}"])
    params += fold_params(program)
    key = (program, mode, group, index, singles)
    name, head, scalar_lines, struct = scalar_head(instrs, key, "gnp_fused_", constants)
    params += [*head, f"const {index} n", "const long long goff"]
    if mode == "strided":
        for d in range(ndim):
            params += [f"const {index} shape{d}", f"const long long gstride{d}"]
        for k in range(len(input_dtypes)):
            params += [f"const long long istride{k}_{d}" for d in range(ndim)]

    variant = Variant(mode, group, index, frozenset(singles))
    body = [*scalar_lines, *accumulators(program)]
    body.append(f"    const {index} nthreads = ({index})gridDim.x * blockDim.x;")
    # (in Philox groups, where the draws' words are registers of the group's block: elsewhere a product
    # would draw its block again, unless nvcc noticed)
    values = _uniform_products(program, group, constants) if constants and group > 1 else {}
    if group > 1:
        body += _grouped_loop(program, variant, values)
    elif mode in ("flat", "spread"):
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
        PHILOX_DEVICE_SOURCE + HELPERS + struct
        + f'\nextern "C" __global__ void __launch_bounds__(256) {name}(\n    ' + ",\n    ".join(params) + ")\n{\n"
        + "\n".join(body) + "\n}\n"
    )
    return source, name


def scalar_head(instrs: tuple, key: tuple, prefix: str, constants: tuple) -> tuple[str, list[str], list[str], str]:
    """What a kernel of these instructions makes of its scalars: its name (``prefix`` and a hash of ``key`` and
    the constants), its scalar parameters, the statements declaring each scalar in the body (from a parameter,
    a field of the struct, or the constant of ``constants``: see ``kernel_source``) and the struct's
    declaration ("" where there is none)."""
    scalars = scalar_params(instrs)
    if constants and len(constants) != len(scalars):
        raise ProgramError(f"{len(constants)} constants for {len(scalars)} scalar parameters")
    kept = kept_parameters(instrs, constants)
    literals = tuple(None if k in kept else c_literal(ct, v) for k, ((ct, _), v) in enumerate(zip(scalars, constants)))
    name = prefix + hashlib.sha256(repr((*key, literals) if literals else key).encode()).hexdigest()[:16]
    params: list[str] = []
    declaration = ""
    if not constants and scalar_struct(instrs) is not None:
        struct = f"gnp_scalars_{name[len(prefix):]}"
        params.append(f"const {struct} sp")
        literals = tuple(f"sp.{n}" for _, n in scalars)
        declaration = f"\nstruct {struct} {{ {' '.join(f'{ct} {n};' for ct, n in scalars)} }};\n"
        return name, params, [f"    const {ct} {n} = {text};" for (ct, n), text in zip(scalars, literals)], declaration
    params += [f"const {scalars[k][0]} {scalars[k][1]}" for k in (kept if constants else range(len(scalars)))]
    lines = [f"    const {ct} {n} = {text};" for (ct, n), text in zip(scalars, literals) if text is not None]
    return name, params, lines, declaration


def kept_parameters(instrs: tuple, constants: tuple) -> tuple[int, ...]:
    """The positions of the scalar parameters (``scalar_params``) that a kernel specialized to ``constants`` still
    takes as parameters, with these values (``kernels.fused`` passes them): its floating-point zeros. NVVM compiles
    ``x > c ? x : c`` of a constant ``c`` to ``max(x, c)`` (``<``: ``min``), which for a zero ``c`` loses its
    sign (``where(x > -0.0, x, -0.0)`` is -0.0 at x = +0.0 in NumPy, ``max`` gives +0.0)."""
    if not constants:
        return ()
    return tuple(k for k, ((ct, _), v) in enumerate(zip(scalar_params(instrs), constants))
                 if NP_OF_CTYPE[ct].kind == "f" and v == 0)


class _Fold(NamedTuple):
    """A simple reduction over every element that a kernel finishes itself: value ``value`` folded with
    ``kind`` in an accumulator of dtype ``acc``, ending as field ``field`` of the one-element partial of
    output ``output`` (a full "reduce", written to ``fin``, in dtype ``final``: a mean's sum dtype) or in
    the value of "total" instruction ``total``. A reduction may fold several (``ops.reductions``)."""

    value: int
    kind: str
    acc: np.dtype
    final: np.dtype
    output: int | None
    total: int | None
    field: str = "v"
    fin: str = ""


def reduction_folds(value: int, kind: str, instrs: Sequence[tuple], out_dt: np.dtype, params: tuple,
                     output: int | None, total: int | None, final: np.dtype) -> list[_Fold]:
    """The folds of reduction ``kind`` of value ``value``: one per simple reduction of its partial."""
    reduction = REDUCTIONS[kind]
    value_dt = value_dtype(instrs[value])
    single = len(reduction.folds) == 1
    folds = []
    for part, field in zip(reduction.folds, reduction.fields):
        acc = _acc_dtype(part, value_dt, out_dt, params)
        fin = "" if output is None else f"fin{output}" if single else f"fin{output}_{field}"
        folds.append(_Fold(value, part, acc, final if single else acc, output, total, field, fin))
    return folds


@functools.lru_cache(maxsize=256)
def program_folds(program: tuple) -> tuple[_Fold, ...]:
    """The full reductions of a program: its outputs that reduce over every axis, then its totals."""
    ndim, _, instrs, outputs = program
    folds = [fold for k, out in enumerate(outputs) if out.tag == "reduce" and tuple(out.axes) == tuple(range(ndim))
             for fold in reduction_folds(out.value, out.kind, instrs, np.dtype(out.dtype), out.params, k, None, final_dtype(out))]
    folds += [fold for j, ins in enumerate(instrs) if ins.tag == "total"
              for fold in reduction_folds(ins.value, ins.kind, instrs, np.dtype(ins.dtype), ins.params, None, j, np.dtype(ins.dtype))]
    return tuple(folds)


def final_outputs(program: tuple) -> frozenset[int]:
    """The outputs of a program that are full reductions finished in the launch (their one-element results)."""
    return frozenset(fold.output for fold in program_folds(program) if fold.output is not None)


class Variant(NamedTuple):
    """How a kernel of a program is specialised (see ``kernel_source``)."""

    mode: str
    group: int
    index: str
    singles: frozenset[int]


def _element_code(program: tuple, variant: Variant, partial: dict[int, str],
                  values: Mapping[int, str] | None = None, store: str = "out{k}[t]") -> list[str]:
    """The statements computing one element ``t`` (global index ``gi``): every instruction but the
    epilogue's, then each fold's value folded into its accumulator (``partial[f]``, where given, instead
    of ``acc<f>``) and each other output stored (into ``store`` of output ``k``). ``values`` gives the value of
    some instructions instead of their own code (registers already holding loads, ``_uniform_products``)."""
    _, _, instrs, outputs = program
    after = epilogue_values(instrs)
    lines = [f"const {ctype(ins.dtype)} v{i} = {values[i]};" if values and i in values
             else instr_code(i, ins, instrs, variant.mode, variant.group, variant.singles)
             for i, ins in enumerate(instrs) if i not in after]
    lines += fold_statements(program, partial)
    lines += [f"{store.format(k=k)} = v{outputs[k].value};" for k in stored_outputs(program)]
    return lines


def stored_outputs(program: tuple) -> list[int]:
    """The outputs of a program that a kernel stores element by element (not folds, not the epilogue's)."""
    _, _, instrs, outputs = program
    after, folded = epilogue_values(instrs), final_outputs(program)
    return [k for k, out in enumerate(outputs) if k not in folded and out.value not in after]


UNROLL = 4  # elements per thread per iteration of a flat kernel without Philox groups


def _unrolled_loop(program: tuple, variant: Variant, values: Mapping[int, str]) -> list[str]:
    """The flat loop, ``UNROLL`` elements per thread per iteration: consecutive ones (``_packed_loop``), or a
    thread block's width apart (``_spread_loop``) in mode "spread" (blocks with an input off the packs'
    alignment) and where the program folds elements into sums (in the order they have always been summed)."""
    spread = variant.mode == "spread" or program_folds(program)
    return (_spread_loop if spread else _packed_loop)(program, variant, values)


def _packed_loop(program: tuple, variant: Variant, values: Mapping[int, str]) -> list[str]:
    """The flat loop over ``UNROLL`` consecutive elements per thread per iteration, each input and output moved
    as one pack (``gnp_pack4``: one vector load or store, and one address, for the four elements) where every
    array is aligned to its pack; elements past the last whole pack, and every element where an array is not
    aligned (a view into a larger array), run one by one. An input of one element is read once, before the
    loop."""
    _, _, instrs, outputs = program
    index, singles = variant.index, variant.singles
    loads = [(i, ins.input, ctype(ins.dtype)) for i, ins in enumerate(instrs) if ins.tag == "load"]
    stores = [(k, ctype(value_dtype(instrs[outputs[k].value]))) for k in stored_outputs(program)]
    packable = [f"gnp_packable(in{k})" for _, k, _ in loads if k not in singles] + [f"gnp_packable(out{k})" for k, _ in stores]
    lines = [f"    const {ct} ld{i} = in{k}[0];" for i, k, ct in loads if k in singles]
    # (the packs of a thread start below ``whole``: one comparison per iteration)
    lines += [f"    const {index} whole = {' && '.join(packable) or 'true'} ? n - {UNROLL - 1} : 0;",
              f"    for ({index} base = (({index})blockIdx.x * blockDim.x + threadIdx.x) * {UNROLL}; base < n; "
              f"base += nthreads * {UNROLL}) {{",
              "        if (base < whole) {"]
    lines += [f"            const gnp_pack4<{ct}> ld{i} = *(const gnp_pack4<{ct}>*)(in{k} + base);"
              for i, k, ct in loads if k not in singles]
    lines += [f"            gnp_pack4<{ct}> st{k};" for k, ct in stores]
    for u in range(UNROLL):
        lines += ["            {", f"                const {index} t = base + {u};",
                  "                const long long gi = goff + t;"]
        held = {i: f"ld{i}" if k in singles else f"ld{i}.v[{u}]" for i, k, _ in loads}
        lines += ["                " + line for line in _element_code(program, variant, {}, {**values, **held},
                                                                      f"st{{k}}.v[{u}]")]
        lines.append("            }")
    lines += [f"            *(gnp_pack4<{ct}>*)(out{k} + base) = st{k};" for k, ct in stores]
    lines += ["        } else {", "            #pragma unroll 1",
              f"            for ({index} t = base; t < n && t < base + {UNROLL}; ++t) {{",
              "                const long long gi = goff + t;"]
    held = {i: f"ld{i}" for i, k, _ in loads if k in singles}
    lines += ["                " + line for line in _element_code(program, variant, {}, {**values, **held})]
    lines += ["            }", "        }", "    }"]
    return lines


def _spread_loop(program: tuple, variant: Variant, values: Mapping[int, str]) -> list[str]:
    """The flat loop, ``UNROLL`` elements per thread per iteration, a thread block's width apart (loads
    stay coalesced): where all of them are inside the block, every input load of all of them is issued
    before any arithmetic, so that a memory-bound kernel keeps several loads in flight per thread."""
    _, _, instrs, _ = program
    index = variant.index
    loads = [i for i, ins in enumerate(instrs) if ins.tag == "load"]
    lines = [f"    for ({index} base = ({index})blockIdx.x * blockDim.x * {UNROLL} + threadIdx.x; base < n; "
             f"base += nthreads * {UNROLL}) {{",
             f"        if (base + {UNROLL - 1} * ({index})blockDim.x < n) {{"]
    for u in range(UNROLL):
        lines.append(f"            const {index} t{u} = base + {u} * ({index})blockDim.x;")
        for i in loads:
            k = instrs[i].input
            lines.append(f"            const {ctype(instrs[i].dtype)} ld{i}_{u} = "
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


def _grouped_loop(program: tuple, variant: Variant, values: Mapping[int, str]) -> list[str]:
    """The flat loop over groups of ``group`` consecutive global elements that share Philox blocks (group
    ``g0 + lg``, ``lg`` counted from the block's first, ``lead`` elements of which lie before the block): the
    draws are made once per group. Each thread takes ``PHILOX_STEPS`` groups a grid apart per iteration and
    draws all their Philox blocks first (independent chains of multiplies that the multiprocessor overlaps);
    where all of the iteration's groups lie inside the block, its elements skip the bounds checks. float32
    sums fold an iteration in float before adding it to the float64 accumulator."""
    _, _, instrs, _ = program
    group, index, steps = variant.group, variant.index, PHILOX_STEPS
    partial = {f: f"p{f}" for f, fold in enumerate(program_folds(program))
               if fold.kind in ("sum", "mean") and value_dtype(instrs[fold.value]) == np.float32
               and fold.acc == np.float64}
    randoms = [(i, ins) for i, ins in enumerate(instrs) if ins.tag == "random"]
    lines = [f"    const long long g0 = goff / {group};",
             f"    const {index} lead = ({index})(goff - g0 * {group}), groups = (lead + n + {group - 1}) / {group};",
             f"    for ({index} lg0 = ({index})blockIdx.x * blockDim.x + threadIdx.x; lg0 < groups; "
             f"lg0 += nthreads * {steps}) {{"]
    for q in range(steps):  # a step past the last group draws a block it does not use
        lines += [f"        const gnp_u32x4 r{i}_{q} = gnp_philox_block(s{ins.slot}, s{ins.slot + 1}, s{ins.slot + 2}, "
                  f"(unsigned long long)(((g0 + lg0 + {q} * nthreads) * {group * philox_words(ins)}) / 4));"
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


def final_params(program: tuple, k: int) -> list[str]:
    """The kernel parameters of output ``k``, a full reduction finished in the launch: its one-element
    results (one per fold)."""
    return [f"{ctype(fold.final)}* __restrict__ {fold.fin}" for fold in program_folds(program) if fold.output == k]


def fold_params(program: tuple) -> list[str]:
    """The kernel parameters of a program's folds besides their results: each fold's thread-block partials
    ``part<f>`` and the ticket counter."""
    folds = program_folds(program)
    return [f"{ctype(fold.acc)}* __restrict__ part{f}" for f, fold in enumerate(folds)] + [
        "unsigned int* __restrict__ ticket"] * bool(folds)


def accumulators(program: tuple) -> list[str]:
    """Each thread's accumulator ``acc<f>`` of each fold, at its identity."""
    return [f"    {ctype(fold.acc)} acc{f} = {fold_identity(fold.kind, fold.acc)};" for f, fold in enumerate(program_folds(program))]


def fold_statements(program: tuple, partial: dict[int, str] | None = None) -> list[str]:
    """The statements folding each fold's value ``v<i>`` into its accumulator (``partial[f]``, a float, where
    given, instead of ``acc<f>``)."""
    partial = partial or {}
    lines = []
    for f, fold in enumerate(program_folds(program)):
        acc = partial.get(f, f"acc{f}")
        ct = "float" if f in partial else ctype(fold.acc)
        lines.append(f"{acc} = {REDUCTIONS[fold.kind].fold_combine.format(a=acc, b=f'({ct})v{fold.value}')};")
    return lines


def finish(program: tuple, ids: tuple[str, str, str, str] = LINEAR_IDS, size: int = 256, ahead: int = 0) -> list[str]:
    """Thread-block partials of the folds, then the last thread block's final combine, its one-element
    outputs and the epilogue. ``ids`` name the linear thread and block numbers of the launch
    (``LINEAR_IDS``: a one-dimensional one), of at most ``size`` threads per block. ``ahead``: each thread of
    the last block loads that many of its partials before it combines them, in the same order (0: one at a time,
    each load waiting for the previous combine: a chain of L2 round trips while the rest of the device idles)."""
    folds = program_folds(program)
    if not folds:
        return []
    thread, threads, block, blocks = ids
    lines: list[str] = []
    for f, fold in enumerate(folds):
        lines += [f"    __shared__ {ctype(fold.acc)} sh{f}[{size}];", f"    sh{f}[{thread}] = acc{f};"]
    lines += _block_tree(folds, thread, threads)
    lines.append("    __shared__ bool last;")
    lines.append(f"    if ({thread} == 0) {{")
    lines += [f"        part{f}[{block}] = sh{f}[0];" for f in range(len(folds))]
    lines += ["        __threadfence();", f"        last = atomicAdd(ticket, 1u) == {blocks} - 1;", "    }",
              "    __syncthreads();", "    if (!last) return;"]
    for f, fold in enumerate(folds):
        lines += [f"    {ctype(fold.acc)} a{f} = {fold_identity(fold.kind, fold.acc)};",
                  *_combine_partials(fold, f, ids, ahead), f"    sh{f}[{thread}] = a{f};"]
    lines += _block_tree(folds, thread, threads)
    lines.append(f"    if ({thread} == 0) {{")
    lines += [f"        {fold.fin}[0] = ({ctype(fold.final)})sh{f}[0];"
              for f, fold in enumerate(folds) if fold.output is not None]
    lines += ["        " + line for line in _epilogue_code(program)]
    lines += ["        *ticket = 0u;", "    }"]
    return lines


def _combine_partials(fold: _Fold, f: int, ids: tuple[str, str, str, str], ahead: int) -> list[str]:
    """The last thread block's loop combining fold ``f``'s partials into ``a<f>``: each thread those ``threads``
    apart from its own, in order (``finish``; ``ahead``: loaded that many at a time before they are combined)."""
    thread, threads, _, blocks = ids
    if not ahead:
        combine = REDUCTIONS[fold.kind].fold_combine.format(a=f"a{f}", b=f"gnp_partial(part{f} + i)")
        return ["    #pragma unroll 8", f"    for (unsigned int i = {thread}; i < {blocks}; i += {threads}) a{f} = {combine};"]
    combine = REDUCTIONS[fold.kind].fold_combine.format(a=f"a{f}", b=f"g{f}[k]")
    inside = f"i + k * {threads} < {blocks}"
    return [f"    for (unsigned int i = {thread}; i < {blocks}; i += {ahead} * {threads}) {{",
            f"        {ctype(fold.acc)} g{f}[{ahead}];", "        #pragma unroll",
            f"        for (unsigned int k = 0; k < {ahead}; ++k) if ({inside}) g{f}[k] = gnp_partial(part{f} + i + k * {threads});",
            "        #pragma unroll", f"        for (unsigned int k = 0; k < {ahead}; ++k) if ({inside}) a{f} = {combine};",
            "    }"]


def _epilogue_code(program: tuple) -> list[str]:
    """The statements of the epilogue, in the last thread block's first thread once the folds are combined
    (``sh<f>[0]``): each total finished as ``_blocks.reduce_finish`` does (``ops.reductions``: a mean divided
    by the element count), the ops on totals and scalars, and the stores of their one-element outputs."""
    _, _, instrs, outputs = program
    after = epilogue_values(instrs)
    if not after:
        return []
    totals: dict[int, list[str]] = {}
    for f, fold in enumerate(program_folds(program)):
        if fold.total is not None:
            totals.setdefault(fold.total, []).append(f"sh{f}[0]")
    lines = ["{"]
    for i, ins in enumerate(instrs):
        if i in totals:
            template = REDUCTIONS[ins.kind].total
            value = template.format(*totals[i], S=ctype(ins.params[0]) if "{S}" in template else "")
            lines.append(f"    const {ctype(ins.dtype)} v{i} = ({ctype(ins.dtype)}){value};")
        elif i in after or ins.tag in ("scalar", "full"):
            lines.append("    " + instr_code(i, ins, instrs, "flat", 1))
    lines += [f"    out{k}[0] = v{out.value};" for k, out in enumerate(outputs) if out.value in after]
    return [*lines, "}"]


def _block_tree(folds: Sequence[_Fold], thread: str, threads: str) -> list[str]:
    """Combine ``sh<f>[0..threads)`` into ``sh<f>[0]`` (a fixed-order tree)."""
    lines = ["    __syncthreads();", f"    for (int s = {threads} / 2; s > 0; s >>= 1) {{", f"        if ({thread} < s) {{"]
    for f, fold in enumerate(folds):
        combine = REDUCTIONS[fold.kind].fold_combine.format(a=f"sh{f}[{thread}]", b=f"sh{f}[{thread} + s]")
        lines.append(f"            sh{f}[{thread}] = {combine};")
    lines += ["        }", "        __syncthreads();", "    }"]
    return lines


def final_dtype(out: tuple) -> np.dtype:
    """The dtype of a full reduction's one-element result (a mean keeps its sum in the mean's sum dtype)."""
    return np.dtype(out.params[0]) if out.kind == "mean" else np.dtype(out.dtype)


def philox_words(ins: tuple) -> int:
    """The Philox words one element of random instruction ``ins`` takes."""
    return words_per_element(ins.kind, np.dtype(ins.dtype))


def value_dtype(ins: tuple) -> np.dtype:
    return np.dtype(ins.dtype)


def fold_identity(kind: str, acc: np.dtype) -> str:
    """The C++ identity of fold ``kind`` in accumulator dtype ``acc``."""
    identity = REDUCTIONS[kind].identity
    return f"({ctype(acc)}){identity}" if identity else _extreme_identity(kind, acc)


@functools.lru_cache(maxsize=256)
def scalar_ctypes(instrs: tuple) -> dict[int, str]:
    """Kernel argument type of each scalar slot."""
    types: dict[int, str] = {}
    for ins in instrs:
        if ins.tag == "scalar":
            types[ins.slot] = ctype(ins.dtype)
        elif ins.tag == "full":
            types[ins.slot] = ctype(ins.dtype)
        elif ins.tag == "random":
            slot, dt = ins.slot, np.dtype(ins.dtype)
            types[slot] = types[slot + 1] = "unsigned int"
            types[slot + 2] = "unsigned long long"
            param_type = "unsigned long long" if ins.kind == "integers" else ctype(dt)
            for p in range(ins.nparams):
                types[slot + 3 + p] = param_type
    return types


def instr_code(i: int, ins: tuple, instrs: Sequence[tuple], mode: str, group: int,
                singles: frozenset[int] = frozenset(), prefix: str = "") -> str:
    """The statement of instruction ``i`` for one element (``t``; ``gi`` global), in a kernel of ``mode``
    and Philox ``group`` whose flat inputs ``singles`` hold one element; its scalar parameters (``s<k>``,
    ``c<j>_<type>``) named with ``prefix`` (two sweeps of a stencil kernel have their own)."""
    tag = ins.tag
    if tag == "load":
        k, ct = ins.input, ctype(ins.dtype)
        where = f"o{k}" if mode == "strided" else "0" if k in singles else "t"
        return f"const {ct} v{i} = in{k}[{where}];"
    if tag in ("scalar", "full"):
        return f"const {ctype(ins.dtype)} v{i} = {prefix}s{ins.slot};"
    if tag == "random":
        return f"const {ctype(ins.dtype)} v{i} = {_random_code(i, ins, group)};"
    _, func, dt, _, args, compute = ins
    category, template = UFUNCS[func].rule, UFUNCS[func].template
    out_dt, compute = np.dtype(dt), np.dtype(compute)
    ct = ctype(compute)
    if category == "astype" and value_dtype(instrs[args[0]]).kind == "f" and out_dt.kind in "iu" and out_dt.itemsize < 8:
        operands = [f"({ct})(long long)v{args[0]}"]  # as NumPy: through int64, wrapping
    else:
        operands = [f"v{j}" if cast is None else prefix + cast_name(j, cast) if instrs[j].tag in ("scalar", "full")
                    else f"({cast})v{j}" for j, cast in _operand_casts(ins)]
    f = "f" if compute == np.float32 else ""
    expr = template.format(*operands, T=ct, f=f)
    return f"const {ctype(out_dt)} v{i} = ({ctype(out_dt)}){expr};"


def _operand_casts(ins: tuple) -> list[tuple[int, str | None]]:
    """Each operand of an op instruction with the C type it is converted to (None: used as it is)."""
    _, func, _, _, args, compute = ins
    ct = ctype(compute)
    if UFUNCS[func].rule == "where":
        return [(args[0], None), (args[1], ct), (args[2], ct)]
    return [(j, ct) for j in args]


def cast_name(j: int, ctype: str) -> str:
    return f"c{j}_{ctype.replace(' ', '_')}"


@functools.lru_cache(maxsize=256)
def scalar_casts(instrs: tuple) -> list[tuple[int, str]]:
    """(scalar instruction, C type) for each type a scalar operand is computed in: each is a kernel
    argument of its own, converted on the host (a conversion in the kernel, which nvcc may repeat for
    every element rather than keep a register, runs on a slow pipe for float64 to float32)."""
    casts: dict[tuple[int, str], None] = {}
    for ins in instrs:
        if ins.tag == "op":
            for j, cast in _operand_casts(ins):
                if cast is not None and instrs[j].tag in ("scalar", "full"):
                    casts[(j, cast)] = None
    return list(casts)


def _random_words(i: int, ins: tuple, group: int) -> list[str]:
    """The expressions of the Philox words of random instruction ``i`` for one element."""
    slot, w = ins.slot, philox_words(ins)
    if group > 1:
        # this element's words inside the group's Philox block r{i}: j * w on when the group fills the block
        base = f"j * {w}" if group * w == 4 else f"(int)((gi * {w}) & 3)"
        return [f"gnp_word(r{i}, {base} + {off})" for off in range(w)]
    block = f"gnp_philox_block(s{slot}, s{slot + 1}, s{slot + 2}, (unsigned long long)((gi * {w}) / 4))"
    return [f"gnp_word({block}, (int)((gi * {w}) & 3) + {off})" for off in range(w)]


def _random_code(i: int, ins: tuple, group: int) -> str:
    kind, dt, slot = ins.kind, np.dtype(ins.dtype), ins.slot
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
    return f"({ctype(dt)})(long long){value}" if dt.kind == "i" else f"({ctype(dt)}){value}"


def _uniform_products(program: tuple, group: int, constants: tuple) -> dict[int, str]:
    """For a kernel specialized to ``constants``: the float32 products ``c * u`` of a constant and a float32
    ``random`` draw ``u = m * 2**-24`` (``m`` the 24-bit integer of a Philox word), each as ``(c * 2**-24) * m``
    where ``c * 2**-24`` is exact: the same real number, so the same rounding (fused with what follows as
    before), one multiply less per element."""
    instrs = program.instrs
    values = {name: value for (_, name), value in zip(scalar_params(instrs), constants)}
    products = {}
    for i, ins in enumerate(instrs):
        if ins.tag != "op" or ins.func != "multiply" or np.dtype(ins.compute) != np.float32:
            continue
        for a, b in (ins.args, ins.args[::-1]):
            draw, scalar = instrs[a], instrs[b]
            if (draw.tag == "random" and draw.kind == "random" and np.dtype(draw.dtype) == np.float32
                    and scalar.tag in ("scalar", "full")):
                c = np.float32(values[cast_name(b, "float")])
                scaled = c * np.float32(2.0**-24)
                if c and np.isfinite(c) and scaled * np.float32(2.0**24) == c:  # (a zero: a parameter still)
                    word = _random_words(a, draw, group)[0]
                    products[i] = f"(float)({c_literal('float', scaled)} * __uint2float_rn(({word}) >> 8))"
                break
    return products


def _rn_affine(dt: np.dtype, x: str, scale: str, offset: str) -> str:
    """``offset + x * scale`` rounded after each operation (never an FMA), as the Philox stream defines."""
    if dt == np.float32:
        return f"__fadd_rn({offset}, __fmul_rn({x}, {scale}))"
    return f"__dadd_rn({offset}, __dmul_rn({x}, {scale}))"


@functools.lru_cache(maxsize=256)
def philox_group(instrs: tuple) -> int:
    """Elements that share one Philox block in a flat kernel of these instructions (0: no random draws)."""
    randoms = [ins for ins in instrs if ins.tag == "random"]
    return 4 // max(philox_words(ins) for ins in randoms) if randoms else 0


#: Scalar parameters beyond this many travel as one struct (``scalar_struct``): the host converts a launch's
#: arguments one by one, and a long program's hundred scalars take longer to launch than to compute.
PACKED_SCALARS = 8


@functools.lru_cache(maxsize=256)
def scalar_struct(instrs: tuple) -> np.dtype | None:
    """The layout of the one struct argument of a kernel's scalar parameters (C's: NumPy's aligned structured
    dtype, fields named and ordered as ``scalar_params``), where they are more than ``PACKED_SCALARS``; else None
    (each scalar an argument of its own)."""
    params = scalar_params(instrs)
    if len(params) <= PACKED_SCALARS:
        return None
    return np.dtype({"names": [n for _, n in params], "formats": [NP_OF_CTYPE[ct] for ct, _ in params]}, align=True)


@functools.lru_cache(maxsize=256)
def scalar_params(instrs: tuple) -> tuple[tuple[str, str], ...]:
    """(C type, name) of each scalar parameter of a kernel, in the order of ``scalar_args``."""
    return (tuple((ct, f"s{k}") for k, ct in sorted(scalar_ctypes(instrs).items()))
            + tuple((ct, cast_name(j, ct)) for j, ct in scalar_casts(instrs)))
