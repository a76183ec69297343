"""Compile every generated CUDA kernel source in a folder with nvcc, many per translation unit.

    python ci/compile_kernels.py DIR [--batch 80] [--arch sm_90] [--jobs N]

Identical sources compile once. Sources are include-guarded and their kernels have unique names, so a
batch of them is one valid translation unit: nvcc parses the shared device code once per batch instead
of once per kernel. A batch that fails is compiled file by file to name the sources at fault; their
errors and the start of their source are printed. Exits 1 if any source does not compile.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile


def nvcc(paths: list[pathlib.Path], arch: str, extra: list[str]) -> tuple[bool, str]:
    """Compile the concatenation of ``paths`` (one translation unit); (ok, compiler output)."""
    with tempfile.TemporaryDirectory() as tmp:
        unit = pathlib.Path(tmp) / "batch.cu"
        unit.write_text("\n".join(p.read_text() for p in paths))
        done = subprocess.run(
            ["nvcc", "-std=c++17", f"-arch={arch}", *extra, "-c", "-o", str(pathlib.Path(tmp) / "batch.o"), str(unit)],
            capture_output=True, text=True,
        )
    return done.returncode == 0, done.stdout + done.stderr


def compile_batch(paths: list[pathlib.Path], arch: str, extra: list[str]) -> list[tuple[pathlib.Path, str]]:
    """The sources of a batch that fail, each with its compiler output."""
    ok, _ = nvcc(paths, arch, extra)
    if ok:
        return []
    return [(p, out) for p in paths for good, out in [nvcc([p], arch, extra)] if not good]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=pathlib.Path)
    parser.add_argument("--batch", type=int, default=80)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    extra = shlex.split(os.environ.get("GNP_NVCC_FLAGS", ""))

    unique: dict[str, pathlib.Path] = {}
    for path in sorted(args.folder.glob("*.cu")):
        unique.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), path)
    sources = list(unique.values())
    if not sources:
        print(f"ci: no generated kernels in {args.folder}")
        return 0
    batches = [sources[i : i + args.batch] for i in range(0, len(sources), args.batch)]
    version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    print(f"ci: compiling {len(sources)} generated kernels in {len(batches)} batches with {version}", flush=True)
    failed: list[tuple[pathlib.Path, str]] = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for result in pool.map(lambda b: compile_batch(b, args.arch, extra), batches):
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
