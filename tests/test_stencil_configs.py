"""The stencil kernels' compile-time configurations (``TileConfig``: a tile kernel's tile, threads, packs and launch
bounds; ``SweepConfig``: a one-sweep kernel's rows per thread, launch bounds, thread block width and packs, and its own
for kernels reading several buffers at shifts), set where ``benchmarks/stencil_probe.py --variants`` sets them: each gives the default's results bit for bit (emulated CG and Gray-Scott), in kernels
of names of their own (tile kernels whose shared memory the configuration's tiles would overflow, such as
Gray-Scott's four sweeps on 32 x 128, keep the default's), and a configuration a tile kernel cannot have is
refused."""
from __future__ import annotations

from typing import Any

import _cuda_emulator
import numpy as np
import pytest
from conftest import BACKEND, compile_check
from test_cg_floor import cg_loop, rhs
from test_setitem_stencil import borders, overlapping
from test_stencil import counted_tile_kernels, gray_scott

import dask_gpunumeric as gnp
from dask_gpunumeric.codegen import stencil as _stencil_source
from dask_gpunumeric.codegen.check import ProgramError
from dask_gpunumeric.codegen.stencil import kernel_source, tile_source
from dask_gpunumeric.codegen.types import SweepConfig, TileConfig
from dask_gpunumeric.kernels import stencil as _stencil_kernels

pytestmark = pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy",
                                reason="needs g++; CPU runs only")

PAIR = _stencil_kernels.PAIR_TILE_CONFIG  # (the default's: tests set others)
CONFIGS = [(TileConfig(), SweepConfig()), (TileConfig(rows=32, columns=128), SweepConfig(rows=2, min_blocks=6)),
           (TileConfig(rows=16, columns=128, threads=128), SweepConfig(rows=1, min_blocks=8)),
           (TileConfig(rows=64, columns=64, threads=512), SweepConfig()),
           (TileConfig(), SweepConfig(rows=2, min_blocks=6, columns=128)),
           (TileConfig(packed=True), SweepConfig(rows=1, min_blocks=6, packed=True)),
           (TileConfig(rows=32, columns=128, packed=True, min_blocks=6),
            SweepConfig(rows=2, min_blocks=4, columns=64, packed=True)),
           (TileConfig(packed=True, packed_last=True), SweepConfig(rows=1, min_blocks=6, packed=True))]


def run_both(monkeypatch: Any, tile: TileConfig, sweep: SweepConfig, pair: TileConfig | None = None,
             shape: tuple[int, int] = (70, 133), gs_shape: tuple[int, int] = (41, 70)) -> tuple[list[bytes], list[tuple]]:
    """CG (4 iterations, 70 x 133 by default: partial tiles, rows not aligned to packs; its pair kernel) and
    Gray-Scott (4 steps in one tile kernel, 41 x 70 by default) under a configuration (``pair``: of tile kernels of
    two sweeps, None: ``tile``), emulated: the bytes of their results, and the tile kernels launched."""
    launched = counted_tile_kernels(monkeypatch)
    monkeypatch.setattr(_stencil_kernels, "TILE_CONFIG", tile)
    monkeypatch.setattr(_stencil_kernels, "SWEEP_CONFIG", sweep)
    monkeypatch.setattr(_stencil_kernels, "PAIR_TILE_CONFIG", pair)
    b = gnp.from_array(rhs(shape), chunks=shape).persist()
    results = [np.asarray(a) for a in gnp.fetch(gnp.accelerate(cg_loop)(b, 4))]
    un, vn = np.random.default_rng(12).random((2, *gs_shape), dtype=np.float32)
    u, v = gnp.from_array(un), gnp.from_array(vn)
    for _ in range(4):
        u, v = gray_scott(gnp, u, v)
    results += gnp.fetch((u, v))
    return [r.tobytes() for r in results], list(launched)


@pytest.mark.parametrize("tile, sweep", CONFIGS[1:])
def test_configurations_give_the_defaults_bits(tile: TileConfig, sweep: SweepConfig, monkeypatch: Any) -> None:
    default, _ = run_both(monkeypatch, *CONFIGS[0])
    ours, launched = run_both(monkeypatch, tile, sweep)
    assert ours == default
    fits = tile.rows * tile.columns <= 2048  # (Gray-Scott's four sweeps on larger tiles pass 48 KiB of shared memory)
    assert {variant[-1] for variant in launched} == ({tile} if fits else {tile, TileConfig()})


@pytest.mark.parametrize("columns", [136, 138])
def test_packed_kernels_give_the_defaults_bits(columns: int, monkeypatch: Any) -> None:
    """CG's one-sweep and pair kernels and Gray-Scott's tile kernel moving four columns per thread as packs (the last
    sweeps' shared reads too, with ``packed_last``), on rows aligned to packs (136 and 72 columns: the packs inside,
    the edges one by one) and not (138, 74), an odd number of rows (a thread's last row past the end): the default's
    bits."""
    shapes = {"shape": (69, columns), "gs_shape": (41, columns - 64)}
    default, _ = run_both(monkeypatch, *CONFIGS[0], **shapes)
    for tile, sweep in CONFIGS[-3:]:
        assert run_both(monkeypatch, tile, sweep, tile, **shapes)[0] == default


@pytest.mark.parametrize("update", [borders, overlapping], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, chunks", [((13, 40), (13, 20)), ((21, 72), 72)])
def test_packed_setitem_updates_give_the_defaults_bits(update: Any, dtype: Any, shape: tuple, chunks: Any,
                                                       monkeypatch: Any) -> None:
    """Setitem updates (sweeps restricted to regions, reading at shifts, blocks with halos) under the packed
    configurations: the default's bits."""
    _cuda_emulator.emulated_cupy(monkeypatch)
    g_host, h_host = (np.random.default_rng(seed).standard_normal(shape).astype(dtype) for seed in (3, 4))
    results = []
    for tile, sweep in (CONFIGS[0], *CONFIGS[-3:]):
        monkeypatch.setattr(_stencil_kernels, "TILE_CONFIG", tile)
        monkeypatch.setattr(_stencil_kernels, "SWEEP_CONFIG", sweep)
        monkeypatch.setattr(_stencil_kernels, "PAIR_TILE_CONFIG", tile)
        g, h = gnp.from_array(g_host, chunks=chunks), gnp.from_array(h_host, chunks=chunks)
        results.append(np.asarray(gnp.fetch(update(gnp, g, h))).tobytes())
    assert results[1:] == results[:1] * 3


def test_tile_configurations_checked() -> None:
    """Thread blocks of whole warps, each a whole number of the tile's rows of whole warps; a kernel asking L2 for
    its next tile's rows compiles (nvcc)."""
    b = gnp.from_array(rhs((70, 133)), chunks=(70, 133)).persist()
    with pytest.MonkeyPatch.context() as monkeypatch:
        launched = counted_tile_kernels(monkeypatch)
        gnp.fetch(gnp.accelerate(cg_loop)(b, 3))
    codes, links, index, edges, stored, _ = launched[0]
    assert "__launch_bounds__(512, 4)" in tile_source(codes, links, index, edges, stored, TileConfig(threads=512))[0]
    assert "__launch_bounds__(256, 6)" in tile_source(codes, links, index, edges, stored, TileConfig(min_blocks=6))[0]
    prefetching = tile_source(codes, links, index, edges, stored, PAIR._replace(prefetch_next=True))[0]
    assert "gnp_prefetch_l2(" in prefetching
    compile_check(prefetching)  # (sm_90's bulk prefetch: the emulator does without it)
    for bad in (TileConfig(threads=100), TileConfig(columns=48), TileConfig(columns=128, threads=64),
                TileConfig(columns=64, threads=96), TileConfig(min_blocks=-1)):
        with pytest.raises(ProgramError, match="tile configuration"):
            tile_source(codes, links, index, edges, stored, bad)


def test_sweeps_reading_several_buffers_at_shifts_configured_apart(monkeypatch: Any) -> None:
    """CG with ``stencil-recompute`` (its ``p`` update and ``p.Ap`` stencil one flat kernel, reading ``r`` and ``p``
    at shifts) under ``SHIFTED_SWEEP_CONFIG``: the default's bits, that kernel under the shifted configuration and
    the others under ``SWEEP_CONFIG``; a thread block width that does not divide the block is refused."""
    default, _ = run_both(monkeypatch, *CONFIGS[0])
    shifted = SweepConfig(rows=1, min_blocks=8, columns=64)
    monkeypatch.setattr(_stencil_kernels, "SHIFTED_SWEEP_CONFIG", shifted)
    compiled, emulated = [], _stencil_kernels._kernel

    def kernel(code: tuple, index: str, edges: tuple, config: SweepConfig = SweepConfig()) -> Any:
        compiled.append((code, config))
        return emulated(code, index, edges, config)

    monkeypatch.setattr(_stencil_kernels, "_kernel", kernel)
    b = gnp.from_array(rhs((70, 133)), chunks=(70, 133)).persist()
    with gnp.config.set(**{"stencil-recompute": True}):
        results = [np.asarray(a).tobytes() for a in gnp.fetch(gnp.accelerate(cg_loop)(b, 4))]
    assert results == default[:len(results)]
    configs = {config for _, config in compiled}
    assert shifted in configs and _stencil_kernels.SWEEP_CONFIG in configs
    code = next(code for code, config in compiled if config == shifted)
    for bad in (SweepConfig(columns=96), SweepConfig(combine_ahead=-1), SweepConfig(combine_ahead=65)):
        with pytest.raises(ProgramError, match="sweep configuration"):
            kernel_source(code, "int", None, bad)


def test_pair_tile_configuration(monkeypatch: Any) -> None:
    """The default's own shape for tile kernels of two sweeps (CG's pair), the default's bits: pairs launched with
    it, longer runs (Gray-Scott's) with ``TILE_CONFIG``."""
    default, _ = run_both(monkeypatch, *CONFIGS[0])
    ours, launched = run_both(monkeypatch, *CONFIGS[0], PAIR)
    assert ours == default
    assert {(len(variant[0]), variant[-1]) for variant in launched} == {(2, PAIR), (4, CONFIGS[0][0])}


def test_packed_last_pair_kernel_gives_the_defaults_bits(monkeypatch: Any) -> None:
    """CG's pair kernel on the default pair tiles (64 x 128) with its ``p.Ap`` sweep packed (``packed_last``), on a
    grid with whole tiles inside the reductions' target (140 x 264: the tile at (64, 128) and its halo are inside),
    at the default's 5 blocks per multiprocessor or compiled for 6, and asking L2 for each next tile's rows first
    (``prefetch_next``; nothing on the emulator but its index arithmetic): the default's bits."""
    shapes = {"shape": (140, 264), "gs_shape": (41, 72)}
    default, _ = run_both(monkeypatch, *CONFIGS[0], PAIR, **shapes)
    for pair in (PAIR._replace(packed_last=True), PAIR._replace(packed_last=True, min_blocks=6),
                 PAIR._replace(prefetch_next=True), PAIR._replace(packed_last=True, min_blocks=5, prefetch_next=True)):
        ours, launched = run_both(monkeypatch, *CONFIGS[0], pair, **shapes)
        assert ours == default
        assert pair in {variant[-1] for variant in launched}


def test_partials_ahead_give_the_defaults_bits(monkeypatch: Any) -> None:
    """CG's update kernel (one sweep: x, r and r.r) with its last thread block loading its partials 8 or 3 at a time
    (``combine_ahead``) or one at a time, on enough thread blocks (``WAVES`` raised: 375 of 256 threads) that
    threads of the last block combine two partials each: the same bits; the kernel compiles with nvcc."""
    monkeypatch.setattr(_stencil_kernels, "WAVES", 100)
    shapes = {"shape": (600, 600), "gs_shape": (41, 72)}
    tile, sweep = CONFIGS[5]
    default, _ = run_both(monkeypatch, tile, sweep, PAIR, **shapes)
    sources: list[str] = []

    def recorded(*variant: Any) -> tuple[str, str]:
        sources.append(kernel_source(*variant)[0])
        return kernel_source(*variant)

    monkeypatch.setattr(_stencil_source, "kernel_source", recorded)
    for ahead in (8, 3):
        assert run_both(monkeypatch, tile, sweep._replace(combine_ahead=ahead), PAIR, **shapes)[0] == default
    compile_check(min({s for s in sources if "gnp_stencil_" in s and "3 * (blockDim.x" in s}, key=len))


def test_pair_kernel_partials_ahead_give_the_defaults_bits(monkeypatch: Any) -> None:
    """CG's pair kernel (``p``, ``Ap``, ``p.Ap`` on tiles) with its last block loading its partials 8 at a time
    (``TileConfig.combine_ahead``), on tiles small enough (8 x 32) for 400 thread blocks: its bits without; on the
    default pair tiles, it compiles with nvcc."""
    monkeypatch.setattr(_stencil_kernels, "WAVES", 100)
    shapes = {"shape": (600, 600), "gs_shape": (41, 72)}
    pair = TileConfig(rows=8, columns=32)
    tile, sweep = CONFIGS[5]
    ours, launched = run_both(monkeypatch, tile, sweep, pair._replace(combine_ahead=8), **shapes)
    assert ours == run_both(monkeypatch, tile, sweep, pair, **shapes)[0]
    assert pair._replace(combine_ahead=8) in {variant[-1] for variant in launched}
    for bad in (pair._replace(combine_ahead=-1), pair._replace(combine_ahead=65)):
        with pytest.raises(ProgramError, match="tile configuration"):
            tile_source(*launched[0][:5], bad)
    compile_check(tile_source(*launched[0][:5], PAIR._replace(combine_ahead=8))[0])
