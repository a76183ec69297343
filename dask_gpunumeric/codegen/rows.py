"""Row programs: a fused group whose reductions run over the trailing axes of each block, those axes whole
in it (``row`` instructions, axes kept), with the elementwise work that feeds them and reads their results
broadcast back along the rows: softmax, logsumexp, layer norm as one kernel.

A block is seen as ``nrows`` rows of ``n`` elements (the reduced axes). A value is per element or per row
(``value_classes``): row reductions, inputs of extent 1 along the reduced axes, and ops of those alone are
per row. Row reductions that depend on no other's result share a *pass* over the row (``stages``). The
kernel gives each row ``lanes`` threads (a warp, or a thread block of 256 for long rows): pass after pass it
reads the row's inputs again (from L1/L2, never stored as temporaries), folds, and combines the lanes'
accumulators (warp shuffles, then shared memory across warps, in a fixed order); the row values follow from
them in registers, and a last pass writes the per-element outputs (lane 0 the per-row ones).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ops.reductions import REDUCTIONS
from .check import check_program
from .helpers import HELPERS
from .philox import PHILOX_DEVICE_SOURCE
from .program import fold_identity, instr_code, reduction_folds, scalar_head, value_dtype
from .types import ctype, typed_program

#: threads per row a kernel may give: a warp, or a whole thread block (``lanes_for``)
ROW_LANES = (32, 256)
_THREADS = 256  # threads per thread block (the kernels' __launch_bounds__)

_SHUFFLES = r"""
#ifndef GNP_ROW_SHUFFLES
#define GNP_ROW_SHUFFLES
/* warp shuffles of the accumulator types: those narrower than int travel as int */
template <typename T> struct gnp_lane_word { typedef T type; };
template <> struct gnp_lane_word<bool> { typedef int type; };
template <> struct gnp_lane_word<signed char> { typedef int type; };
template <> struct gnp_lane_word<unsigned char> { typedef int type; };
template <> struct gnp_lane_word<short> { typedef int type; };
template <> struct gnp_lane_word<unsigned short> { typedef int type; };
template <typename T> __device__ __forceinline__ T gnp_shfl_xor(T v, int s)
{ return (T)__shfl_xor_sync(0xffffffffu, (typename gnp_lane_word<T>::type)v, s); }
template <typename T> __device__ __forceinline__ T gnp_shfl_first(T v)
{ return (T)__shfl_sync(0xffffffffu, (typename gnp_lane_word<T>::type)v, 0); }
#endif  /* GNP_ROW_SHUFFLES */
"""


def row_axes(instrs: Sequence[tuple]) -> tuple[int, ...]:
    """The axes a program's row reductions run over (``()``: not a row program)."""
    for ins in instrs:
        if ins[0] == "row":
            return tuple(ins[4])
    return ()


def row_inputs(shapes: Sequence[tuple[int, ...]], axes: Sequence[int], ndim: int) -> tuple[int, ...]:
    """Which of inputs of ``shapes`` (broadcast to ``ndim`` axes) hold one value per row: extent 1 along the
    reduced ``axes``."""
    return tuple(k for k, shape in enumerate(shapes)
                 if all(shape[d - ndim + len(shape)] == 1 for d in axes if d >= ndim - len(shape)))


def lanes_for(n: int) -> int:
    """Threads per row for rows of ``n`` elements: a warp for short rows, a thread block for long ones."""
    return 32 if n <= 256 else 256


def value_classes(instrs: Sequence[tuple], row_inputs: frozenset[int] | Sequence[int]) -> tuple[bool, ...]:
    """Per instruction, whether its value is one per row (True: a row reduction, a load of an input of
    ``row_inputs``, those of extent 1 along the reduced axes, a scalar, an op of those alone) or one per
    element."""
    classes: list[bool] = []
    for ins in instrs:
        tag = ins[0]
        if tag == "load":
            classes.append(ins[1] in row_inputs)
        elif tag == "op":
            classes.append(all(classes[j] for j in ins[4]))
        else:  # scalar, row
            classes.append(True)
    return tuple(classes)


def row_outputs(program: tuple, row_inputs: frozenset[int] | Sequence[int]) -> tuple[tuple[str, np.dtype], ...]:
    """Each output of a row program as ``(kind, dtype)``: kind "element" (a block), "row" (one value per row,
    the reduced axes of length 1) or "flat" (one per row, without the reduced axes)."""
    per_row = value_classes(program.instrs, row_inputs)
    outs = []
    for out in program.outputs:
        ins = program.instrs[out.value]
        kind = "flat" if ins.tag == "row" and not ins.keepdims else "row" if per_row[out.value] else "element"
        outs.append((kind, value_dtype(ins)))
    return tuple(outs)


def stages(instrs: Sequence[tuple]) -> tuple[int, ...]:
    """Per instruction, the pass after which its value is known: 0 for what needs no row reduction, a row
    reduction's is one more than its operand's."""
    out: list[int] = []
    for ins in instrs:
        tag = ins[0]
        if tag == "op":
            out.append(max((out[j] for j in ins[4]), default=0))
        elif tag == "row":
            out.append(out[ins[1]] + 1)
        else:
            out.append(0)
    return tuple(out)


def _closure(instrs: Sequence[tuple], roots: Sequence[int], per_element: Sequence[bool]) -> list[int]:
    """The per-element instructions that values ``roots`` need (per-row values are known), in order."""
    needed: set[int] = set()
    stack = [r for r in roots if per_element[r]]
    while stack:
        i = stack.pop()
        if i in needed:
            continue
        needed.add(i)
        if instrs[i].tag == "op":
            stack += [j for j in instrs[i].args if per_element[j]]
    return sorted(needed)


def kernel_source(program: tuple, lanes: int, index: str = "long long", row_inputs: tuple[int, ...] = (),
                  constants: tuple = ()) -> tuple[str, str]:
    """CUDA C++ source and kernel name of a row program, for rows of ``lanes`` threads each (``ROW_LANES``),
    positions of C type ``index``, and inputs ``row_inputs`` holding one value per row (extent 1 along the
    reduced axes); ``constants`` as in ``codegen.program.kernel_source``.

    Parameters: the inputs, the outputs (a block, or one value per row: ``value_classes``), the scalars,
    ``nrows`` and ``n`` (rows, and elements per row), the block's shape and each input's element stride
    per axis (0 where it broadcasts)."""
    check_program(program, "rows", lanes, index, row_inputs)  # only our names and integers become source
    program = typed_program(program)
    ndim, input_dtypes, instrs, outputs = program
    axes = row_axes(instrs)
    first = axes[0]
    per_row = value_classes(instrs, frozenset(row_inputs))
    per_element = [not c for c in per_row]
    stage = stages(instrs)
    name, head, scalar_lines, struct = scalar_head(instrs, (program, "rows", lanes, index, row_inputs), "gnp_rows_",
                                                   constants)
    params = [f"const {ctype(dt)}* __restrict__ in{k}" for k, dt in enumerate(input_dtypes)]
    params += [f"{ctype(value_dtype(instrs[out.value]))}* __restrict__ out{k}" for k, out in enumerate(outputs)]
    params += [*head, f"const {index} nrows", f"const {index} n"]
    params += [f"const {index} shape{d}" for d in range(ndim)]
    params += [f"const long long istride{k}_{d}" for k in range(len(input_dtypes)) for d in range(ndim)]

    def element_offsets(used: Sequence[int]) -> list[str]:
        """The offsets ``e<k>`` of element ``j`` of the row in the per-element inputs loaded by ``used``."""
        loads = sorted({instrs[i].input for i in used if instrs[i].tag == "load"})
        if len(axes) == 1:
            return [f"const long long e{k} = r{k} + (long long)j * istride{k}_{first};" for k in loads]
        lines = [f"long long e{k} = r{k};" for k in loads] + [f"{{ {index} rem = j;"]
        for d in reversed(axes):
            lines.append(f"  {{ const {index} c = rem % shape{d}; rem /= shape{d};"
                         + "".join(f" e{k} += c * istride{k}_{d};" for k in loads) + " }")
        return [*lines, "}"]

    def element_loop(roots: Sequence[int], tail: list[str]) -> list[str]:
        """A loop of the row's lanes over its elements computing the per-element values ``roots`` need, then
        ``tail`` at each element."""
        used = _closure(instrs, roots, per_element)
        return [f"for ({index} j = lane; active && j < n; j += {lanes}) {{",
                *("  " + line for line in element_offsets(used)), *("  " + code(i, "e") for i in used),
                *("  " + line for line in tail), "}"]

    def code(i: int, where: str) -> str:
        ins = instrs[i]
        if ins.tag == "load":
            value = f"in{ins.input}[{where}{ins.input}]"
            if where == "r":  # an inactive row (past the last) reads nothing
                value = f"active ? {value} : ({ctype(ins.dtype)})0"
            return f"const {ctype(ins.dtype)} v{i} = {value};"
        return instr_code(i, ins, instrs, "rows", 1)

    def row_values(s: int) -> list[str]:
        """The per-row values known after pass ``s``, but the row reductions."""
        return [code(i, "r") for i, ins in enumerate(instrs)
                if per_row[i] and stage[i] == s and ins.tag in ("load", "op")]

    body = [*scalar_lines, *("    " + code(i, "r") for i, ins in enumerate(instrs) if ins.tag == "scalar")]
    body += [f"    const {index} lane = ({index})threadIdx.x % {lanes}, per_block = {_THREADS // lanes};",
             f"    for ({index} base = ({index})blockIdx.x * per_block; base < nrows; "
             f"base += ({index})gridDim.x * per_block) {{",
             f"        const {index} row = base + ({index})threadIdx.x / {lanes};",
             "        const bool active = row < nrows;"]
    inner = []
    # the row's offset in each input
    inner += [f"long long r{k} = 0;" for k in range(len(input_dtypes))]
    if first:
        inner.append(f"{{ {index} rem = row;")
        for d in range(first - 1, -1, -1):
            inner.append(f"  {{ const {index} c = rem % shape{d}; rem /= shape{d};"
                         + "".join(f" r{k} += c * istride{k}_{d};" for k in range(len(input_dtypes))) + " }")
        inner.append("}")
    inner += row_values(0)
    last = max(stage)
    shared = 0
    for s in range(1, last + 1):
        reductions = [i for i, ins in enumerate(instrs) if ins.tag == "row" and stage[i] == s]
        folds = [(i, fold) for i in reductions for fold in reduction_folds(
            instrs[i].value, instrs[i].kind, instrs, np.dtype(instrs[i].dtype), instrs[i].params, None, i,
            np.dtype(instrs[i].dtype))]
        accs = [f"a{shared + f}" for f in range(len(folds))]
        inner += [f"{ctype(fold.acc)} {a} = {fold_identity(fold.kind, fold.acc)};" for a, (_, fold) in zip(accs, folds)]
        inner += element_loop([instrs[i].value for i in reductions], [
            f"{a} = " + REDUCTIONS[fold.kind].fold_combine.format(a=a, b=f"({ctype(fold.acc)})v{instrs[i].value}") + ";"
            for a, (i, fold) in zip(accs, folds)])
        inner += _combine_lanes(folds, accs, lanes, shared)
        shared += len(folds)
        for i in reductions:
            ins = instrs[i]
            template = REDUCTIONS[ins.kind].total
            results = [a for a, (j, _) in zip(accs, folds) if j == i]
            value = template.format(*results, S=ctype(ins.params[0]) if "{S}" in template else "")
            inner.append(f"const {ctype(ins.dtype)} v{i} = ({ctype(ins.dtype)}){value};")
        inner += row_values(s)
    stored = [(k, out.value) for k, out in enumerate(outputs) if per_element[out.value]]
    if stored:
        inner += element_loop([v for _, v in stored], [f"out{k}[(long long)row * n + j] = v{v};" for k, v in stored])
    rows = [(k, out.value) for k, out in enumerate(outputs) if per_row[out.value]]
    if rows:
        inner += ["if (active && lane == 0) {", *(f"  out{k}[row] = v{v};" for k, v in rows), "}"]
    body += ["        " + line for line in inner]
    body.append("    }")
    source = (PHILOX_DEVICE_SOURCE + HELPERS + _SHUFFLES + struct
              + f'\nextern "C" __global__ void __launch_bounds__({_THREADS}) {name}(\n    ' + ",\n    ".join(params)
              + ")\n{\n" + "\n".join(body) + "\n}\n")
    return source, name


def _combine_lanes(folds: Sequence[tuple], accs: Sequence[str], lanes: int, shared: int) -> list[str]:
    """Every lane of a row gets the combination of the row's accumulators ``accs``, the same in all lanes and
    in a fixed order: a butterfly of warp shuffles, then (a thread block per row) the warps' results through
    shared memory (``sh<f>``, numbered from ``shared`` on)."""
    lines = ["for (int s = 16; s > 0; s >>= 1) {"]
    for a, (_, fold) in zip(accs, folds):
        # (every lane shuffles: the combine may not evaluate its second operand, as || does not)
        lines += [f"  const {ctype(fold.acc)} o{a} = gnp_shfl_xor({a}, s);",
                  f"  {a} = " + REDUCTIONS[fold.kind].fold_combine.format(a=a, b=f"o{a}") + ";"]
    lines.append("}")
    if lanes == 32:
        # (a butterfly of a commutative combine gives every lane the same value but for the sign of zeros)
        return lines + [f"{a} = gnp_shfl_first({a});" for a in accs]
    warps = lanes // 32
    for f, (a, (_, fold)) in enumerate(zip(accs, folds), start=shared):
        lines += [f"__shared__ {ctype(fold.acc)} sh{f}[{warps}];", f"if (lane % 32 == 0) sh{f}[lane / 32] = {a};"]
    lines.append("__syncthreads();")
    for f, (a, (_, fold)) in enumerate(zip(accs, folds), start=shared):
        lines.append(f"{a} = sh{f}[0];")
        lines += [f"{a} = " + REDUCTIONS[fold.kind].fold_combine.format(a=a, b=f"sh{f}[{w}]") + ";"
                  for w in range(1, warps)]
    return lines + ["__syncthreads();"]  # before the next row's lanes write the shared words again
