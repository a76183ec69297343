"""Probe: the SASS instructions per element of the fused kernels of Black-Scholes, the erf-polynomial
Black-Scholes and one RK4 step, without a GPU (issue #21: the elementwise kernels are bound by instruction issue).

    python benchmarks/kernel_sass.py [--source DIR] [--show NAME]

Each workload's fused kernel, as the library runs it in a steady state (flat blocks, 32-bit positions,
specialized to the workload's scalar constants), is compiled as NVRTC compiles it (``nvcc -std=c++17
-arch=sm_90 -cubin``: optimization and FMA contraction on) and disassembled with ``cuobjdump -sass`` (pip
package ``nvidia-cuda-cuobjdump``). The count is the hot path of one iteration of the grid-stride loop over whole
element groups: from the loop's head through every instruction to the backward branch, taking each branch that
skips a slow path of CUDA's math (a call: IEEE division, reciprocal and square root of extreme operands) and
no other; divided by the elements an iteration computes (4). Prints the count per element, the registers
(``ptxas -v``) and the instruction mix; ``--source`` writes the kernels' sources there; ``--show NAME`` lists
that kernel's hot path.
"""
from __future__ import annotations

import argparse
import collections
import pathlib
import re
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

BENCHMARKS = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(BENCHMARKS.parent), str(BENCHMARKS)]

import black_scholes  # noqa: E402
import black_scholes_erf  # noqa: E402
import rk4  # noqa: E402

ELEMENTS_PER_ITERATION = 4  # codegen.program.UNROLL


def workloads() -> dict[str, tuple[Any, tuple[np.ndarray, ...]]]:
    """Name -> (function of the namespace and arrays, its host inputs)."""
    options = black_scholes.inputs(4096)
    return {"black_scholes": (black_scholes.price, options), "black_scholes_erf": (black_scholes_erf.price, options),
            "rk4_step": (lambda xp, u, v: rk4.rk4(xp, u, v, steps=1), rk4.inputs((4096,)))}


def kernel_source(compute: Any, host: tuple[np.ndarray, ...]) -> tuple[str, str]:
    """The CUDA source and name of the one fused kernel of ``compute`` on ``host``, specialized to its scalars."""
    import dask_gpunumeric as gnp
    from dask_gpunumeric.codegen import program as _program
    from dask_gpunumeric.expr import Bundle
    from dask_gpunumeric.kernels.fused import scalar_args
    from dask_gpunumeric.optimize import explain_groups

    outputs = compute(gnp, *(gnp.asarray(h) for h in host))
    (group,) = explain_groups(Bundle(*(o.expr for o in outputs)))
    program = group.operand("program")
    constants = tuple(scalar_args(program.instrs, group.operand("scalars")))
    return _program.kernel_source(program, "flat", 1, "int", (), constants)


def sass(source: str) -> tuple[list[tuple[int, str]], str]:
    """The SASS instructions (address, text) of a kernel source, and its registers (``ptxas -v``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "kernel.cu"
        path.write_text(source)
        built = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o",
                                str(path.with_suffix(".cubin")), str(path)], capture_output=True, text=True, check=True)
        listing = subprocess.run(["cuobjdump", "-sass", str(path.with_suffix(".cubin"))], capture_output=True,
                                 text=True, check=True).stdout
    registers = ",".join(re.findall(r"Used (\d+) registers", built.stderr))
    found = re.findall(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", listing, re.MULTILINE)
    return [(int(address, 16), text) for address, text in found], registers


def _opcode(text: str) -> tuple[str, str | None, list[str]]:
    """(opcode, guard predicate or None, operands) of an instruction."""
    words = text.split()
    guarded = words[0].startswith("@")
    return words[guarded], words[0] if guarded else None, words[guarded + 1:]


def hot_path(instructions: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """One iteration of the loop over whole element groups (see the module's docstring): its head, from the
    target of its backward branch, to that branch."""
    at = {address: k for k, (address, _) in enumerate(instructions)}
    # the group test: the first guarded branch of the kernel jumps to the whole groups' code
    start = next(int(rest[-1], 16) for _, text in instructions
                 for op, guard, rest in [_opcode(text)] if op.startswith("BRA") and guard is not None)
    path: list[tuple[int, str]] = []
    k = at[start]
    while len(path) < 100_000:
        address, text = instructions[k]
        op, guard, rest = _opcode(text)
        path.append((address, text))
        if op.startswith("BRA"):
            target = int(rest[-1], 16)
            if guard is None:
                k = at[target]
                continue
            if target <= address:  # the loop's backward branch; the head runs from its target to the group test
                head = []
                for a, t in instructions[at[target]:at[start]]:
                    head.append((a, t))
                    if _opcode(t)[0].startswith("BRA"):
                        break
                return head + path
            skipped = [t for _, t in instructions[k + 1:at[target]]]
            if len(skipped) <= 8 and any("CALL" in t for t in skipped):
                k = at[target]
                continue
        k += 1
    raise RuntimeError("no backward branch found")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=pathlib.Path, help="write each kernel's CUDA source into this folder")
    parser.add_argument("--show", help="list this kernel's hot path")
    args = parser.parse_args(argv)
    for name, (compute, host) in workloads().items():
        source, _ = kernel_source(compute, host)
        if args.source:
            args.source.mkdir(parents=True, exist_ok=True)
            (args.source / f"{name}.cu").write_text(source)
        instructions, registers = sass(source)
        path = hot_path(instructions)
        mix = collections.Counter(_opcode(text)[0].split(".")[0] for _, text in path)
        print(f"{name}: {len(path) / ELEMENTS_PER_ITERATION:.1f} SASS instructions per element "
              f"({len(path)} per iteration of {ELEMENTS_PER_ITERATION}), {registers} registers")
        print("  " + ", ".join(f"{op} {count}" for op, count in mix.most_common()))
        if args.show == name:
            print("\n".join(f"  {address:05x} {text}" for address, text in path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
