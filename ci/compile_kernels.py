"""Compile every distinct generated CUDA kernel source in a folder with nvcc, many per translation unit,
batches in parallel.

    python ci/compile_kernels.py DIR [--batch 200] [--arch sm_90] [--jobs N] [--full]

Identical sources compile once (the library names them by the hash of their text; this compares the
text again). Sources are include-guarded and a kernel's name stands for its text, so a batch of sources
that define no kernel name twice is one valid translation unit: nvcc parses the shared device code once
per batch instead of once per kernel. (A module of several kernels, such as the Philox draws', repeats
names that single-kernel sources define too: such sources go to different batches.)
Kernels are compiled at NVVM's -O0 (the front end and code generation: every C++ and code-generation
error, without the optimizer's time) to PTX; the stencil tile kernels (``gnp_pair_``, ``gnp_tiles_``),
whose shared-memory tiles grow with the program, also go through ptxas (``-cubin``, at ptxas's -O0: an
optimizer only removes shared memory), which checks the limit on shared memory (the reductions' shared
arrays are 256 elements); ``--full`` takes every kernel through ptxas. Warning 177 (a variable never
read) is not reported: generated kernels have such variables by design. A batch that fails is compiled
file by file to name the sources at fault; their errors and the start of their source are printed. Exits 1 if
any source does not compile.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile


# Generated kernels declare values they may not read (the index bookkeeping of every variant, scalars kept in
# order): nvcc's unused-variable warning (177) is expected there, and writing it out costs cicc about as much
# time as compiling.
QUIET = ["-diag-suppress=177"]
_KERNEL_NAME = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\([\d, ]+\) )?(\w+)\(')


def batches_of(paths: list[pathlib.Path], size: int) -> list[list[pathlib.Path]]:
    """``paths`` in batches of at most ``size``, no kernel name defined twice in a batch (in order: each
    source joins the first batch with room whose names it does not repeat)."""
    batches: list[tuple[list[pathlib.Path], set[str]]] = []
    for path in paths:
        names = set(_KERNEL_NAME.findall(path.read_text()))
        batch = next((b for b in batches if len(b[0]) < size and not names & b[1]), None)
        if batch is None:
            batches.append(([path], names))
        else:
            batch[0].append(path)
            batch[1].update(names)
    return [paths for paths, _ in batches]


def nvcc(paths: list[pathlib.Path], arch: str, extra: list[str], full: bool) -> tuple[bool, str]:
    """Compile the concatenation of ``paths`` (one translation unit) to device code (``full``: through ptxas)
    or to PTX; (ok, compiler output)."""
    stage = ["-cubin", "-Xptxas", "-O0", "-o", "batch.cubin"] if full else ["-ptx", "-o", "batch.ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        unit = pathlib.Path(tmp) / "batch.cu"
        unit.write_text("\n".join(p.read_text() for p in paths))
        done = subprocess.run(["nvcc", "-std=c++17", f"-arch={arch}", "-Xcicc", "-O0", *QUIET, *extra, *stage,
                               "batch.cu"], capture_output=True, text=True, cwd=tmp)
    return done.returncode == 0, done.stdout + done.stderr


def compile_batch(paths: list[pathlib.Path], arch: str, extra: list[str], full: bool) -> list[tuple[pathlib.Path, str]]:
    """The sources of a batch that fail, each with its compiler output."""
    ok, _ = nvcc(paths, arch, extra, full)
    if ok:
        return []
    return [(p, out) for p in paths for good, out in [nvcc([p], arch, extra, full)] if not good]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=pathlib.Path)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--full", action="store_true", help="every kernel through ptxas, not only the pair kernels")
    args = parser.parse_args(argv)
    extra = shlex.split(os.environ.get("GNP_NVCC_FLAGS", ""))

    unique: dict[str, pathlib.Path] = {}
    for path in sorted(args.folder.glob("*.cu")):
        unique.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), path)
    sources = list(unique.values())
    if not sources:
        print(f"ci: no generated kernels in {args.folder}")
        return 0
    full = [p for p in sources if args.full or "gnp_pair_" in p.read_text() or "gnp_tiles_" in p.read_text()]
    ptx = sorted(set(sources) - set(full))
    batches = [(batch, to_object) for paths, to_object in ((full, True), (ptx, False))
               for batch in batches_of(paths, args.batch)]
    version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(f"ci: compiling {len(sources)} distinct generated kernels ({len(full)} through ptxas, {len(ptx)} to PTX) "
          f"in {len(batches)} batches, {args.jobs} at a time, with {version}", flush=True)
    failed: list[tuple[pathlib.Path, str]] = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for result in pool.map(lambda b: compile_batch(b[0], args.arch, extra, b[1]), batches):
            failed += result
    if not failed:
        print(f"ci: compiled {len(sources)} generated kernels with nvcc -std=c++17 -arch={args.arch}: all OK")
        return 0
    print(f"ci: FAILED: {len(failed)} of {len(sources)} generated kernels did not compile:", file=sys.stderr)
    for n, (path, out) in enumerate(sorted(failed)):
        print(f"ci:   {path}", file=sys.stderr)
        if n < 3:  # the first few in full, so that a CI log shows the error
            print("\n".join("      nvcc| " + line for line in out.splitlines()), file=sys.stderr)
            source = path.read_text().splitlines()[:150]
            print("\n".join(f"      {i + 1:5d}  {line}" for i, line in enumerate(source)), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
