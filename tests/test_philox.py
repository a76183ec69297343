"""Tests of the Philox4x32-10 random streams (dask_gpunumeric.kernels.philox) and _cuda helpers."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import sys
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from conftest import compile_check

from dask_gpunumeric.kernels import cuda as _cuda
from dask_gpunumeric.kernels import philox as ph

MASK32 = 0xFFFFFFFF

# Random123 tests/kat_vectors (github.com/DEShawResearch/random123), the "philox4x32 10" lines:
# counter (4 words), key (2 words), expected output (4 words).
KAT_PHILOX4X32_10 = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]

# (kind, dtype, params): every distribution, every float dtype, a spread of integer dtypes
# (uint64 over its full range exercises the span == 2**64 case).
CASES = [
    ("random", "float32", ()),
    ("random", "float64", ()),
    ("uniform", "float32", (-2.5, 4.0)),
    ("uniform", "float64", (-2.5, 4.0)),
    ("standard_normal", "float32", ()),
    ("standard_normal", "float64", ()),
    ("normal", "float32", (3.0, 0.5)),
    ("normal", "float64", (-1.0, 2.0)),
    ("integers", "int64", (-1000, 1000)),
    ("integers", "int8", (-128, 128)),
    ("integers", "uint64", (0, 2**64)),
    ("integers", "bool", (0, 2)),
]
CASE_IDS = [f"{k}-{d}" for k, d, _ in CASES]
INT_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
ALL_KIND_DTYPES = [(k, d) for k in ph.KINDS
                   for d in (INT_DTYPES if k == "integers" else ["float32", "float64"])]
KEY = ph.seed_to_key(20261129)
STREAMS = [0, 7, 2**32 + 5, 2**64 - 1]


def reference(kind: str, dtype: str, params: tuple, key: tuple[int, int], stream: int,
              flat: np.ndarray) -> np.ndarray:
    """The stream definition, written plainly: one Philox evaluation per element."""
    dt = np.dtype(dtype)
    w = {"random": 1, "uniform": 1, "standard_normal": 2, "normal": 2}.get(kind, 2)
    if kind != "integers" and dt == np.float64:
        w *= 2
    flat = np.asarray(flat, dtype=np.uint64).reshape(-1)
    c = flat * np.uint64(w) // np.uint64(4)
    first = flat * np.uint64(w) % np.uint64(4)
    ctr = np.stack([c & np.uint64(MASK32), c >> np.uint64(32),
                    np.full_like(c, stream & MASK32), np.full_like(c, stream >> 32)], axis=-1)
    blocks = ph.philox4x32_10(ctr.astype(np.uint32), key)
    words = [blocks[np.arange(flat.size), (first + np.uint64(t)).astype(np.intp)] for t in range(w)]

    def u53(a, b):
        return ((a >> 5).astype(np.float64) * 67108864.0 + (b >> 6).astype(np.float64)) * 2.0**-53

    if kind == "integers":
        low, high = params
        u = (words[0].astype(np.uint64) << np.uint64(32)) | words[1].astype(np.uint64)
        if high - low < 2**64:
            u = u % np.uint64(high - low)
        return (u + np.uint64(low % 2**64)).astype(dt)
    if kind in ("random", "uniform"):
        if dt == np.float32:
            x = (words[0] >> 8).astype(np.float32) * np.float32(2.0**-24)
        else:
            x = u53(words[0], words[1])
        if kind == "uniform":
            low, high = dt.type(params[0]), dt.type(params[1])
            x = low + (high - low) * x
        return x
    if dt == np.float32:
        u1 = ((words[0] >> 8) + np.uint32(1)).astype(np.float32) * np.float32(2.0**-24)
        u2 = (words[1] >> 8).astype(np.float32) * np.float32(2.0**-24)
        z = np.sqrt(np.float32(-2.0) * np.log(u1)) * np.cos(np.float32(2 * np.pi) * u2)
    else:
        u1 = 1.0 - u53(words[0], words[1])
        u2 = u53(words[2], words[3])
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * np.pi * u2)
    if kind == "normal":
        loc, scale = dt.type(params[0]), dt.type(params[1])
        z = loc + scale * z
    return z


def whole(kind, dtype, params, shape, key=KEY, stream=0):
    return ph.draw_block(kind, key, stream, shape, (0,) * len(shape), shape, dtype, params)


# ------------------------------------------------------------------------------------------------
# Philox itself


@pytest.mark.parametrize("ctr,key,expected", KAT_PHILOX4X32_10)
def test_philox_known_answers(ctr, key, expected):
    out = ph.philox4x32_10(np.array(ctr, dtype=np.uint32), key)
    assert out.dtype == np.uint32
    assert out.tolist() == list(expected)


def test_philox_vectorized_and_broadcast():
    ctrs = np.array([c for c, _, _ in KAT_PHILOX4X32_10], dtype=np.uint32)
    keys = np.array([k for _, k, _ in KAT_PHILOX4X32_10], dtype=np.uint32)
    expected = np.array([e for _, _, e in KAT_PHILOX4X32_10], dtype=np.uint32)
    np.testing.assert_array_equal(ph.philox4x32_10(ctrs, keys), expected)
    # one key against a [2, 3, 4] stack of counters
    grid = np.broadcast_to(ctrs[2], (2, 3, 4))
    out = ph.philox4x32_10(grid, keys[2])
    assert out.shape == (2, 3, 4)
    assert (out == expected[2]).all()


def test_seed_to_key():
    expected = np.random.SeedSequence(12345).generate_state(2, np.uint32).tolist()
    assert ph.seed_to_key(12345) == tuple(expected)
    assert ph.seed_to_key(np.random.SeedSequence(12345)) == tuple(expected)
    k0, k1 = ph.seed_to_key(None)
    assert 0 <= k0 <= MASK32 and 0 <= k1 <= MASK32
    assert ph.seed_to_key(1) != ph.seed_to_key(2)


def test_words_per_element():
    assert ph.words_per_element("random", np.float32) == 1
    assert ph.words_per_element("uniform", "float64") == 2
    assert ph.words_per_element("standard_normal", "float32") == 2
    assert ph.words_per_element("normal", np.float64) == 4
    assert ph.words_per_element("integers", "int8") == 2


# ------------------------------------------------------------------------------------------------
# the stream definition and chunk invariance


@pytest.mark.parametrize("kind,dtype,params", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("stream", [0, 2**32 + 5, 2**64 - 1])
def test_matches_stream_definition(kind, dtype, params, stream):
    shape = (3, 5, 7)
    got = whole(kind, dtype, params, shape, stream=stream)
    want = reference(kind, dtype, params, KEY, stream, np.arange(105)).reshape(shape)
    assert got.dtype == np.dtype(dtype) and got.shape == shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind,dtype,params", CASES, ids=CASE_IDS)
def test_large_flat_indices(kind, dtype, params):
    """Flat indices past 2**32 reach the counter's second word."""
    shape = (2**20, 3, 2**20)
    offset, block = (2**19 + 1, 1, 2**20 - 6), (2, 2, 5)
    got = ph.draw_block(kind, KEY, 3, shape, offset, block, dtype, params)
    idx = np.ix_(*[np.arange(o, o + b, dtype=np.uint64) for o, b in zip(offset, block)])
    flat = idx[0] * np.uint64(3 * 2**20) + idx[1] * np.uint64(2**20) + idx[2]
    np.testing.assert_array_equal(got, reference(kind, dtype, params, KEY, 3, flat).reshape(block))


@st.composite
def grids(draw):
    """A 2-D or 3-D global shape and, per dimension, the boundaries of a chunking."""
    shape = tuple(draw(st.lists(st.integers(0, 11), min_size=2, max_size=3)))
    bounds = []
    for n in shape:
        cuts = draw(st.sets(st.integers(1, max(n - 1, 1)), max_size=3)) if n > 1 else set()
        bounds.append([0, *sorted(cuts), n])
    return shape, bounds


@pytest.mark.parametrize("kind,dtype,params", CASES, ids=CASE_IDS)
@settings(max_examples=25, deadline=None)
@given(grid=grids(), stream=st.sampled_from(STREAMS))
def test_chunk_invariance(kind, dtype, params, grid, stream):
    shape, bounds = grid
    full = whole(kind, dtype, params, shape, stream=stream)
    assembled = np.zeros(shape, dtype=full.dtype)
    for cell in itertools.product(*[list(zip(b[:-1], b[1:])) for b in bounds]):
        offset = tuple(lo for lo, _ in cell)
        block = tuple(hi - lo for lo, hi in cell)
        part = ph.draw_block(kind, KEY, stream, shape, offset, block, dtype, params)
        assert part.shape == block and part.dtype == full.dtype
        assembled[tuple(slice(lo, hi) for lo, hi in cell)] = part
    np.testing.assert_array_equal(assembled, full)


@pytest.mark.parametrize("kind,dtype,params", CASES, ids=CASE_IDS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_any_block_is_a_slice(kind, dtype, params, data):
    shape = tuple(data.draw(st.lists(st.integers(1, 9), min_size=2, max_size=3), label="shape"))
    offset = tuple(data.draw(st.integers(0, n - 1)) for n in shape)
    block = tuple(data.draw(st.integers(0, n - o)) for n, o in zip(shape, offset))
    part = ph.draw_block(kind, KEY, 1, shape, offset, block, dtype, params)
    full = whole(kind, dtype, params, shape, stream=1)
    np.testing.assert_array_equal(part, full[tuple(slice(o, o + b) for o, b in zip(offset, block))])


@pytest.mark.parametrize("kind,dtype,params", [CASES[0], CASES[5], CASES[8]],
                         ids=[CASE_IDS[0], CASE_IDS[5], CASE_IDS[8]])
def test_blocks_larger_than_a_piece(kind, dtype, params):
    """Blocks cut into several pieces internally (long runs, many rows) still agree."""
    for shape, offset, block in [((3, 70001), (1, 7), (2, 69990)),
                                 ((100003, 3), (2, 1), (100000, 2))]:
        full = whole(kind, dtype, params, shape)
        part = ph.draw_block(kind, KEY, 0, shape, offset, block, dtype, params)
        np.testing.assert_array_equal(
            part, full[tuple(slice(o, o + b) for o, b in zip(offset, block))])


def test_zero_d_and_zero_size():
    x = ph.draw_block("standard_normal", KEY, 4, (), (), (), np.float64)
    assert x.shape == () and x.dtype == np.float64
    assert x == whole("standard_normal", np.float64, (), (6, 2), stream=4)[0, 0]
    assert x == reference("standard_normal", "float64", (), KEY, 4, np.zeros(1))[0]
    for shape, offset, block in [((4, 5), (1, 0), (0, 5)), ((4, 5), (2, 5), (2, 0)), ((0, 3), (0, 0), (0, 3))]:
        e = ph.draw_block("integers", KEY, 0, shape, offset, block, np.int16, (0, 9))
        assert e.shape == block and e.dtype == np.int16


def test_streams_and_seeds_differ():
    a = whole("random", np.float64, (), (1000,), stream=0)
    np.testing.assert_array_equal(a, whole("random", np.float64, (), (1000,), stream=0))
    b = whole("random", np.float64, (), (1000,), stream=1)
    c = whole("random", np.float64, (), (1000,), key=ph.seed_to_key(1), stream=0)
    assert not np.isin(a, b).any() and not np.isin(a, c).any()
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.15


# ------------------------------------------------------------------------------------------------
# distributions

N = 10**6


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_random_and_uniform_distribution(dtype):
    x = whole("random", dtype, (), (N,))
    assert x.min() >= 0 and x.max() < 1
    assert abs(x.mean(dtype=np.float64) - 0.5) < 2e-3
    assert abs(x.var(dtype=np.float64) - 1 / 12) < 2e-3
    assert np.unique(x).size > 0.96 * N  # float32: ~3% birthday repeats among 2**24 values
    low, high = -2.5, 4.0
    u = whole("uniform", dtype, (low, high), (N,))
    assert u.min() >= low and u.max() < high
    assert abs(u.mean(dtype=np.float64) - 0.75) < 0.015
    assert abs(u.var(dtype=np.float64) - 6.5**2 / 12) < 0.05
    hist = np.histogram(u, bins=10, range=(low, high))[0] / N
    assert np.abs(hist - 0.1).max() < 3e-3


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_distribution(dtype):
    z = whole("standard_normal", dtype, (), (N,)).astype(np.float64)
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 5e-3 and abs(z.var() - 1) < 1e-2
    assert abs(np.mean(np.abs(z) < 1) - 0.682689) < 3e-3
    assert abs(np.mean(z**3)) < 2e-2 and abs(np.mean(z**4) - 3) < 5e-2
    y = whole("normal", dtype, (3.0, 0.5), (N,), stream=9).astype(np.float64)
    assert abs(y.mean() - 3.0) < 5e-3 and abs(y.std() - 0.5) < 5e-3


def test_integers_distribution():
    x = whole("integers", np.int8, (-3, 7), (N,))
    assert x.dtype == np.int8 and x.min() == -3 and x.max() == 6
    np.testing.assert_allclose(np.bincount(x.astype(np.int64) + 3) / N, 0.1, atol=3e-3)
    big = whole("integers", np.int64, (-(2**62), 2**62), (N,))
    assert big.min() >= -(2**62) and big.max() < 2**62
    assert (big < 0).mean() == pytest.approx(0.5, abs=3e-3)
    full = whole("integers", np.uint64, (0, 2**64), (N,))
    assert (full >= 2**63).mean() == pytest.approx(0.5, abs=3e-3)
    flags = whole("integers", bool, (0, 2), (N,))
    assert flags.dtype == np.bool_ and flags.mean() == pytest.approx(0.5, abs=3e-3)


# ------------------------------------------------------------------------------------------------
# bad input


def test_bad_input():
    with pytest.raises(ValueError, match="high <= low"):
        ph.draw_block("integers", KEY, 0, (3,), (0,), (3,), np.int64, (5, 5))
    with pytest.raises(ValueError, match="high <= low"):
        ph.draw_block("integers", KEY, 0, (3,), (0,), (3,), np.int64, (5, 2))
    with pytest.raises(TypeError, match=r"random\(\) supports float32 and float64 dtypes, got int32"):
        ph.draw_block("random", KEY, 0, (3,), (0,), (3,), np.int32)
    with pytest.raises(TypeError, match=r"standard_normal\(\) supports float32 and float64 dtypes, got float16"):
        ph.cuda_source("standard_normal", np.float16, 1)
    with pytest.raises(TypeError, match=r"integers\(\) supports integer and bool dtypes, got float64"):
        ph.words_per_element("integers", np.float64)
    with pytest.raises(ValueError, match="out of bounds for int8"):
        ph.draw_block("integers", KEY, 0, (3,), (0,), (3,), np.int8, (0, 129))
    with pytest.raises(ValueError, match="scale < 0"):
        ph.draw_block("normal", KEY, 0, (3,), (0,), (3,), np.float64, (0.0, -1.0))
    with pytest.raises(ValueError, match="unknown random kind"):
        ph.words_per_element("gamma", np.float64)
    with pytest.raises(ValueError, match="not inside"):
        ph.draw_block("random", KEY, 0, (4, 4), (2, 0), (3, 4), np.float64)
    with pytest.raises(ValueError, match="stream"):
        ph.draw_block("random", KEY, -1, (4,), (0,), (4,), np.float64)
    with pytest.raises(TypeError, match="parameters"):
        ph.draw_block("uniform", KEY, 0, (4,), (0,), (4,), np.float64, (1.0,))
    with pytest.raises(TypeError, match="xp must be numpy or cupy"):
        ph.draw_block("random", KEY, 0, (4,), (0,), (4,), np.float64, xp=object())


# ------------------------------------------------------------------------------------------------
# CUDA sources (compiled with nvcc, no GPU needed) and the _cuda helpers

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def test_cuda_source_shape():
    assert "gnp_philox4x32_10" in ph.PHILOX_DEVICE_SOURCE
    assert "gnp_u32_to_f32" in ph.PHILOX_DEVICE_SOURCE and "gnp_u64_to_f64" in ph.PHILOX_DEVICE_SOURCE
    for kind, dtype in ALL_KIND_DTYPES:
        for ndim in range(4):
            src = ph.cuda_source(kind, dtype, ndim)
            assert not re.search(r"^\s*#\s*include", src, re.MULTILINE)
            assert f'extern "C" __global__ void gnp_philox_{kind}_{dtype}_{ndim}d(' in src
            assert src.startswith(ph.PHILOX_DEVICE_SOURCE)
            for d in range(ndim + 1):
                assert (f"unsigned long long start{d}" in src) == (d < ndim)


@pytest.mark.slow
@needs_nvcc
def test_cuda_sources_compile_with_nvcc():
    """Every (kind, dtype, ndim) kernel: all of them in one translation unit (the device
    functions are include-guarded), then each kind's 0-d and 3-d source on its own."""
    sources = [ph.cuda_source(k, d, n) for k, d in ALL_KIND_DTYPES for n in range(4)]
    compile_check("\n".join(sources))
    for kind in ph.KINDS:
        for ndim in (0, 3):
            compile_check(ph.cuda_source(kind, "int32" if kind == "integers" else "float32", ndim))


@needs_nvcc
def test_nvcc_compile_check_reports_errors():
    with pytest.raises(RuntimeError, match="gnp_no_such_function"):
        _cuda.nvcc_compile_check('extern "C" __global__ void k(float* o) { o[0] = gnp_no_such_function(); }')


def test_record_source_dumps_once(tmp_path, monkeypatch):
    monkeypatch.setenv("GNP_KERNEL_DUMP_DIR", str(tmp_path / "kernels"))
    src = ph.cuda_source("uniform", np.float32, 2)
    path = tmp_path / "kernels" / (_cuda.source_digest(src)[:16] + ".cu")
    assert path.read_text() == src
    ph.cuda_source("uniform", np.float32, 2)
    _cuda.record_source(src)
    assert os.listdir(tmp_path / "kernels") == [path.name]
    monkeypatch.delenv("GNP_KERNEL_DUMP_DIR")
    _cuda.record_source("// not written anywhere")
    assert os.listdir(tmp_path / "kernels") == [path.name]


# an H200 (CuPy's getDeviceProperties): 132 multiprocessors of 64 Ki registers, 2048 threads, 32 blocks and
# 228 KiB of shared memory each, 1 KiB of it reserved per block
H200 = {"warpSize": 32, "regsPerMultiprocessor": 65536, "maxThreadsPerMultiProcessor": 2048,
        "maxBlocksPerMultiProcessor": 32, "sharedMemPerMultiprocessor": 233472, "reservedSharedMemPerBlock": 1024,
        "multiProcessorCount": 132}


@pytest.mark.parametrize("regs,shared,threads,blocks", [
    (48, 2056, 256, 5),  # the fused Monte-Carlo kernel as ncu saw it: 5 blocks of 256 threads (not 8)
    (38, 2056, 256, 6),  # the fused Black-Scholes kernel: 1216 registers a warp, rounded up to 1280
    (32, 0, 256, 8),  # thread-limited: 2048 threads
    (64, 0, 256, 4),
    (72, 0, 256, 3),  # 2304 registers a warp: 7 warps per quarter of the register file
    (255, 0, 256, 1),
    (16, 0, 32, 32),  # block-limited
    (16, 100 * 1024, 256, 2),  # shared-memory-limited (with the reserved KiB per block)
    (0, 0, 128, 16),
])
def test_resident_blocks(regs, shared, threads, blocks):
    assert _cuda.resident_blocks(regs, shared, threads, H200) == blocks


def test_wave_blocks_is_a_full_wave(monkeypatch):
    """Multiprocessors x resident blocks of the compiled kernel (its registers and shared memory)."""
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=0))))
    monkeypatch.setattr(_cuda, "_device_properties", lambda device: H200)
    kernel = types.SimpleNamespace(num_regs=48, shared_size_bytes=2056)
    assert _cuda.wave_blocks(kernel, 256) == 132 * 5


# ------------------------------------------------------------------------------------------------
# the CuPy path against the NumPy path (needs a GPU)

GPU_GEOMETRIES = [
    ((), (), ()),
    ((1000003,), (17,), (999983,)),
    ((37, 41), (3, 5), (30, 33)),
    ((37, 41), (3, 0), (30, 41)),
    ((9, 10, 11), (1, 2, 3), (7, 6, 5)),
    ((9, 10, 11), (4, 0, 0), (5, 10, 11)),
    ((2**20, 3, 2**20), (2**19 + 1, 1, 2**20 - 6), (2, 2, 5)),
    ((8, 0, 3), (0, 0, 0), (8, 0, 3)),
]


def _cupy_with_gpu():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as exc:  # noqa: BLE001 - any CUDA failure means "no usable GPU"
        pytest.skip(f"no usable CUDA device: {exc}")
    return cupy


@pytest.mark.gpu
@pytest.mark.parametrize("kind,dtype,params", CASES, ids=CASE_IDS)
def test_cupy_matches_numpy(kind, dtype, params):
    cupy = _cupy_with_gpu()
    for stream in (0, 2**64 - 1):
        for shape, offset, block in GPU_GEOMETRIES:
            want = ph.draw_block(kind, KEY, stream, shape, offset, block, dtype, params)
            got = ph.draw_block(kind, KEY, stream, shape, offset, block, dtype, params, xp=cupy)
            assert isinstance(got, cupy.ndarray) and got.shape == block and got.dtype == want.dtype
            got = cupy.asnumpy(got)
            if kind in ("standard_normal", "normal"):
                # log/cos differ by a few ulp between CUDA and NumPy (max 5 seen on 2**24 H200 draws)
                # (|loc| covers the cancellation in loc + scale * z)
                loc = params[0] if params else 0.0
                spacing = np.spacing((np.abs(want) + abs(loc)).astype(dtype))
                assert (np.abs(got - want) <= 16 * spacing).all()
            else:
                np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
def test_wave_blocks_match_the_driver():
    """The occupancy arithmetic of ``_cuda.resident_blocks`` against the driver's, for compiled kernels (a
    ``RawKernel`` from ``get_function``: its driver function is ``.kernel``)."""
    cupy = _cupy_with_gpu()
    sms = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"]
    for kind, dtype in (("random", "float32"), ("normal", "float64"), ("integers", "int64")):
        kernel = _cuda.compile_module(ph.cuda_source(kind, dtype, 2)).get_function(ph.kernel_name(kind, np.dtype(dtype), 2))
        for threads in (256, 128):
            per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, threads, 0)
            assert _cuda.wave_blocks(kernel, threads) == sms * per_sm, (kind, threads, kernel.num_regs)


@pytest.mark.gpu
def test_cuda_sources_compile_with_nvrtc():
    """Every (kind, dtype, ndim) kernel, in one NVRTC translation unit through compile_module."""
    _cupy_with_gpu()
    names = [(k, d, n) for k, d in ALL_KIND_DTYPES for n in range(4)]
    module = _cuda.compile_module("\n".join(ph.cuda_source(k, d, n) for k, d, n in names))
    for kind, dtype, ndim in names:
        assert module.get_function(f"gnp_philox_{kind}_{dtype}_{ndim}d") is not None
    assert _cuda.compile_module("\n".join(ph.cuda_source(k, d, n) for k, d, n in names)) is module
