"""``ci/compile_kernels.py``'s batches: the nvcc check of every generated kernel compiles many sources per
translation unit, which is valid only when no kernel name is defined twice in a batch."""
from __future__ import annotations

import pathlib
import shutil
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "ci"))
import compile_kernels  # noqa: E402 - ci/ holds the script


def _source(folder: pathlib.Path, file: str, *kernels: str) -> pathlib.Path:
    path = folder / file
    path.write_text("\n".join(f'extern "C" __global__ void __launch_bounds__(256) {k}(float* a)\n{{ a[0] = 1; }}'
                              if i % 2 else f'extern "C" __global__ void {k}(float* a)\n{{ a[0] = 1; }}'
                              for i, k in enumerate(kernels)))
    return path


def test_batches_never_repeat_a_kernel_name(tmp_path: pathlib.Path) -> None:
    module = _source(tmp_path, "m.cu", "gnp_philox_a", "gnp_philox_b", "gnp_philox_c")
    singles = [_source(tmp_path, f"s{i}.cu", f"gnp_fused_{i}") for i in range(5)]
    repeats = [_source(tmp_path, "ra.cu", "gnp_philox_a"), _source(tmp_path, "rc.cu", "gnp_philox_c")]
    paths = [module, *singles[:2], *repeats, *singles[2:]]
    batches = compile_kernels.batches_of(paths, 3)
    assert sorted(p for b in batches for p in b) == sorted(paths)  # every source once
    assert all(len(b) <= 3 for b in batches)
    for b in batches:
        names = [n for p in b for n in compile_kernels._KERNEL_NAME.findall(p.read_text())]
        assert len(names) == len(set(names)), b
    assert module in batches[0] and repeats[0] not in batches[0] and repeats[1] not in batches[0]
    assert len(batches) == 3  # 8 sources of at most 3 a batch, the repeats placed after the module's batch


def test_kernels_bounded_by_blocks_per_multiprocessor_are_named(tmp_path: pathlib.Path) -> None:
    """A tile kernel compiled with and without its blocks-per-multiprocessor bound has one name and two texts:
    the two sources go to different batches (one batch would define the name twice and fail)."""
    bounded = tmp_path / "b.cu"
    bounded.write_text('extern "C" __global__ void __launch_bounds__(256, 5) gnp_tiles_x(float* a)\n{ a[0] = 1; }')
    plain = _source(tmp_path, "p.cu", "gnp_tiles_x")
    assert compile_kernels._KERNEL_NAME.findall(bounded.read_text()) == ["gnp_tiles_x"]
    batches = compile_kernels.batches_of([bounded, plain], 10)
    assert sorted(map(len, batches)) == [1, 1]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_a_batch_reports_only_the_sources_that_do_not_compile(tmp_path: pathlib.Path) -> None:
    """A source with an error is named with nvcc's message, the batch's other sources are not; unused variables
    (which generated kernels have by design) are no failure and not reported."""
    unused = tmp_path / "u.cu"
    unused.write_text('extern "C" __global__ void gnp_fused_u(float* a)\n{ const int unread = 3; a[0] = 1; }')
    wrong = tmp_path / "w.cu"
    wrong.write_text('extern "C" __global__ void gnp_fused_w(float* a)\n{ const int unread = 3; a[0] = undeclared; }')
    failed = compile_kernels.compile_batch([unused, wrong], "sm_90", [], False)
    assert [path for path, _ in failed] == [wrong]
    assert "undeclared" in failed[0][1] and "never referenced" not in failed[0][1], failed[0][1]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_sources_through_ptxas_fail_over_the_shared_memory_limit(tmp_path: pathlib.Path) -> None:
    """A tile kernel's shared memory over the static limit (48 KiB) passes the front end and fails in ptxas, which
    the tile kernels go through (PTX alone does not check it)."""
    tiles = tmp_path / "t.cu"
    tiles.write_text('extern "C" __global__ void gnp_tiles_big(float* a)\n'
                     '{ __shared__ float t[16384]; t[threadIdx.x] = a[threadIdx.x]; __syncthreads(); a[0] = t[1]; }')
    assert compile_kernels.nvcc([tiles], "sm_90", [], False)[0]
    ok, out = compile_kernels.nvcc([tiles], "sm_90", [], True)
    assert not ok and "shared" in out, out
