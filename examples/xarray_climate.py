"""A small climate analysis with xarray on gnp Arrays, timed against xarray on dask.array.

    python examples/xarray_climate.py [--days N] [--nlat N] [--nlon N] [--blocks N] [--repeat N]

A synthetic daily temperature and precipitation dataset (time x lat x lon, float32) goes through the
same xarray code twice: once with its variables as gnp Arrays (``chunked_array_type="gpunumeric"``) and
once as dask.arrays, both over CuPy blocks when a GPU is present (else NumPy blocks). The analysis:
standardized anomalies, their area-weighted global mean, a 7-day rolling mean, monthly means (resample),
a seasonal climatology (groupby) and a 2x2 coarsened grid. The script checks that both give the same
numbers and prints the median time of each (after one warm-up run), then ``gnp.explain`` of the
anomaly: the fused kernels it runs per block.
"""
from __future__ import annotations

import argparse
import statistics
import time

import dask
import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr

import dask_gpunumeric as gnp


def synthetic_climate(days: int, nlat: int, nlon: int) -> xr.Dataset:
    """Daily temperature (a seasonal cycle, cooler towards the poles, plus noise) and precipitation."""
    rng = np.random.default_rng(0)
    lat = np.linspace(-89.0, 89.0, nlat, dtype=np.float32)
    lon = np.linspace(0.0, 360.0, nlon, endpoint=False, dtype=np.float32)
    day = np.arange(days, dtype=np.float32)
    seasonal = 10 * np.cos(2 * np.pi * day / 365.25)[:, None, None] * np.sign(lat)[None, :, None]
    tas = 288 - 30 * np.abs(np.sin(np.deg2rad(lat)))[None, :, None] + seasonal
    tas = (tas + rng.standard_normal((days, nlat, nlon), dtype=np.float32) * 3).astype(np.float32)
    pr = rng.gamma(2.0, 1.5, (days, nlat, nlon)).astype(np.float32)
    return xr.Dataset(
        {"tas": (("time", "lat", "lon"), tas, {"units": "K"}), "pr": (("time", "lat", "lon"), pr, {"units": "mm/day"})},
        coords={"time": pd.date_range("2000-01-01", periods=days, freq="D"), "lat": lat, "lon": lon,
                "coslat": ("lat", np.cos(np.deg2rad(lat)).astype(np.float32))},
    )


def analysis(ds: xr.Dataset) -> dict[str, xr.Dataset | xr.DataArray]:
    """The climate analysis: lazy results, the same code whatever the arrays inside ``ds``."""
    anomaly = (ds - ds.mean("time")) / ds.std("time")
    return {
        "global anomaly": anomaly.weighted(ds.coslat).mean(("lat", "lon")),
        "7-day rolling mean": ds.tas.rolling(time=7).mean().isel(time=slice(6, None)),
        "monthly means": ds.resample(time="MS").mean(),
        "seasonal climatology": ds.groupby("time.season").mean(),
        "coarse grid": ds.coarsen(lat=2, lon=2, boundary="trim").mean(),
    }


def run(ds: xr.Dataset, sync: callable) -> dict:
    """Compute the whole analysis at once and wait for the device."""
    results = analysis(ds)
    computed = dask.compute(results)[0]
    sync()
    return computed


def timed(ds: xr.Dataset, sync: callable, repeat: int) -> tuple[dict, float]:
    """The results of one run and the median time of ``repeat`` runs after it (the warm-up)."""
    results = run(ds, sync)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run(ds, sync)
        times.append(time.perf_counter() - start)
    return results, statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    backend = gnp.config.backend()
    on_gpu = backend == "cupy"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=3 * 365 if on_gpu else 2 * 365, help="length of the time axis")
    parser.add_argument("--nlat", type=int, default=360 if on_gpu else 90, help="latitudes")
    parser.add_argument("--nlon", type=int, default=720 if on_gpu else 180, help="longitudes")
    parser.add_argument("--blocks", type=int, default=4, help="blocks along time")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs after the warm-up")
    args = parser.parse_args(argv)

    ds = synthetic_climate(args.days, args.nlat, args.nlon)
    chunks = {"time": -(-args.days // args.blocks)}
    on_gnp = ds.chunk(chunks, chunked_array_type="gpunumeric")
    if on_gpu:
        import cupy

        on_dask = ds.copy(data={name: da.from_array(cupy.asarray(v.values), chunks=(chunks["time"], -1, -1))
                                for name, v in ds.data_vars.items()})
        # the weights on the device too (CuPy refuses NumPy operands)
        on_dask = on_dask.assign_coords(coslat=("lat", da.from_array(cupy.asarray(ds.coslat.values))))
        sync = cupy.cuda.Device().synchronize
    else:
        on_dask = ds.chunk(chunks)
        sync = lambda: None  # noqa: E731 - NumPy blocks are done when compute returns

    ours, gnp_seconds = timed(on_gnp, sync, args.repeat)
    try:
        theirs, dask_seconds = timed(on_dask, sync, args.repeat)
    except Exception as exc:  # the baseline's own failure must not hide gnp's result
        theirs, dask_seconds, failure = None, float("nan"), f"{type(exc).__name__}: {exc}".splitlines()[0]
    else:
        failure = None
        for name in ours:
            xr.testing.assert_allclose(ours[name].as_numpy(), theirs[name].as_numpy(), rtol=1e-4, atol=1e-5)
    reference = None if on_gpu else analysis(ds)  # NumPy-backed xarray, checked on the CPU at any size
    for name in reference or ():
        xr.testing.assert_allclose(ours[name].as_numpy(), reference[name], rtol=1e-4, atol=1e-5)

    size = sum(v.nbytes for v in ds.data_vars.values())
    print(f"dataset:        {dict(ds.sizes)}, {size / 2**20:.0f} MiB float32, {args.blocks} blocks along time")
    print(f"blocks:         {backend} ({gnp.ones(1).device})")
    agreement = "gnp and dask.array agree" if failure is None else f"dask.array failed: {failure}"
    print(f"results:        {', '.join(ours)} ({agreement})")
    print(f"xarray + gnp:   {gnp_seconds:.3f} s (median of {args.repeat})")
    print(f"xarray + dask:  {dask_seconds:.3f} s (median of {args.repeat})")
    print(f"speed-up:       {dask_seconds / gnp_seconds:.2f}x")
    print("\nthe standardized anomaly of tas, as gnp runs it:")
    gnp.explain(((on_gnp - on_gnp.mean("time")) / on_gnp.std("time")).tas.data)


if __name__ == "__main__":
    main()
