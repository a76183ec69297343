"""Reproducibility: the same program gives bit-identical results run after run for the same chunking
(reductions combine partials in a fixed order, whatever order the blocks finish in), on the local
schedulers and on a cluster; random streams are bit-identical across chunkings, schedulers, worker counts
and (on a GPU machine) between NumPy and CuPy blocks, fused into kernels or not."""
from __future__ import annotations

import dask
import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import to_host
from dask_gpunumeric.backend import gpu_available


def _bits(value) -> bytes:
    return np.ascontiguousarray(to_host(value)).tobytes()


def program(seed: int) -> dict[str, gnp.Array]:
    """Reductions of several kinds over random data in uneven blocks (several partials per output)."""
    rng = gnp.random.default_rng(seed)
    chunks = ((70, 64, 64, 90, 12), (16, 16, 8))
    x = rng.standard_normal((300, 40), chunks=chunks)
    u = rng.random((300, 40), chunks=chunks)
    return {
        "sum": gnp.sum(gnp.exp(x) * u),
        "mean": gnp.mean(x * x, axis=0),
        "var": gnp.var(x + u, axis=1),
        "std": gnp.std(x),
        "cumsum": gnp.cumsum(x * u, axis=0),
        "max": gnp.max(gnp.abs(x - 0.5), axis=1),
        "argmin": gnp.argmin(x, axis=0),
        "prod": gnp.prod(1 + u / 1000),
    }


def _run(scheduler=None) -> dict[str, bytes]:
    names = list(program(0))
    values = dask.compute(*program(0).values(), scheduler=scheduler)
    return {name: _bits(v) for name, v in zip(names, values)}


def test_bit_identical_run_to_run():
    first = _run()
    for scheduler in (None, None, "threads", "sync"):
        assert _run(scheduler) == first, scheduler


def test_bit_identical_on_a_cluster(client):
    local = _run()
    with client.as_current(), dask.config.set(scheduler="dask.distributed"):
        assert _run() == local
        assert _run() == local


def _draws(rng: gnp.random.Generator, chunks, backend=None) -> list[gnp.Array]:
    """Every distribution in float32 and float64, each once as drawn and once fused into a kernel."""
    shape = (37, 23)
    kw = {"chunks": chunks, "backend": backend}
    out = []
    for dtype in (np.float32, np.float64):
        out += [rng.random(shape, dtype=dtype, **kw), rng.uniform(-2, 3, shape, dtype=dtype, **kw),
                rng.standard_normal(shape, dtype=dtype, **kw), rng.normal(1, 4, shape, dtype=dtype, **kw)]
    out.append(rng.integers(-5, 1000, shape, **kw))
    return out + [gnp.abs(d) for d in out]  # the same draws inside fused kernels


@pytest.mark.parametrize("chunks", [(37, 23), (5, 23), (7, (1, 11, 11)), ((0, 30, 7), (23,))])
def test_random_streams_identical_across_chunkings_and_schedulers(chunks, client):
    expected = [_bits(d) for d in dask.compute(*_draws(gnp.random.default_rng(2024), (37, 23)), scheduler="sync")]
    draws = _draws(gnp.random.default_rng(2024), chunks)
    assert [_bits(d) for d in dask.compute(*draws, scheduler="threads")] == expected
    with client.as_current(), dask.config.set(scheduler="dask.distributed"):  # 2 workers
        assert [_bits(d) for d in dask.compute(*draws)] == expected


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs a GPU: compares NumPy blocks with CuPy blocks")
@pytest.mark.parametrize("chunks", [(37, 23), (7, (1, 11, 11))])
def test_random_streams_identical_on_both_backends(chunks):
    on_host = dask.compute(*_draws(gnp.random.default_rng(7), chunks, backend="numpy"))
    on_device = dask.compute(*_draws(gnp.random.default_rng(7), chunks, backend="cupy"))
    assert all(type(d).__module__.startswith("cupy") for d in on_device)
    # uniform and integer draws are bit-identical; normals go through log and cos, whose last bits differ
    # between CUDA's libdevice and NumPy (relatively most near cos's zeros): equal to the dtype's rounding
    normal = {2, 3, 6, 7}
    for i, (device, host) in enumerate(zip(on_device, on_host)):
        if i % 9 in normal:
            tol = 1e-5 if host.dtype == np.float32 else 1e-12
            np.testing.assert_allclose(device.get(), host, rtol=tol, atol=tol)
        else:
            assert _bits(device) == _bits(host), i
