"""A small climate analysis with xarray on gnp Arrays, timed against xarray on dask.array over the same blocks.

    python examples/xarray_climate.py [--days N] [--nlat N] [--nlon N] [--blocks N] [--repeat N] [--explain]

A synthetic daily temperature and precipitation dataset (time x lat x lon, float32, no missing values) goes
through the same xarray code with its variables as gnp Arrays (``chunked_array_type="gpunumeric"``) and as
dask.arrays, both over CuPy blocks on the GPU when there is one (else NumPy blocks), both persisted there before
timing. The analysis: standardized anomalies, their area-weighted global mean, a 7-day rolling mean, monthly
means (resample), a seasonal climatology (groupby) and a 2x2 coarsened grid.

It runs in two forms. ``analysis`` is the analysis as one would write it. On dask.arrays of CuPy blocks xarray
fails there (pydata/xarray#7721): ``weighted(...).mean()`` and ``rolling(...).mean()`` go through xarray's
``where``/``fillna`` helpers, which put a NumPy NaN or 0 into a CuPy kernel, and CuPy refuses NumPy arrays.
``cupy_safe_analysis`` computes the same numbers (on data without missing values) with operations xarray
supports on CuPy-backed dask.arrays: the weighted mean as a sum of products over the sum of the weights, the
rolling mean as the mean of a constructed window. gnp runs both forms; the dask.array baseline runs both where
it can. Every result is checked against the NumPy-backed xarray result of ``analysis``, and gnp's against
dask.array's; the script prints a table of median times (after one warm-up run), ratios and agreement, and
exits 1 when a result disagrees or the CuPy-safe form fails on dask.array. ``--explain`` adds
``gnp.explain`` of the anomaly: its fused kernels.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from types import ModuleType

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


# --8<-- [start:analysis]
Results = dict[str, xr.Dataset | xr.DataArray]


def anomaly_of(ds: xr.Dataset) -> xr.Dataset:
    """Standardized anomalies: each variable's departure from its mean over time, in standard deviations."""
    return (ds - ds.mean("time")) / ds.std("time")


def summaries(ds: xr.Dataset) -> Results:
    """Monthly means, a seasonal climatology and a coarser grid: the same in both forms of the analysis."""
    return {
        "monthly means": ds.resample(time="MS").mean(),
        "seasonal climatology": ds.groupby("time.season").mean(),
        "coarse grid": ds.coarsen(lat=2, lon=2, boundary="trim").mean(),
    }


def analysis(ds: xr.Dataset) -> Results:
    """The climate analysis as one would write it: lazy results, whatever the arrays inside ``ds``."""
    return {
        "global anomaly": anomaly_of(ds).weighted(ds.coslat).mean(("lat", "lon")),
        "7-day rolling mean": ds.tas.rolling(time=7).mean().isel(time=slice(6, None)),
        **summaries(ds),
    }


def cupy_safe_analysis(ds: xr.Dataset) -> Results:
    """``analysis`` without xarray's NaN-skipping ``where``/``fillna`` helpers, which fail on dask.arrays of
    CuPy blocks: the same numbers for data without missing values."""
    anomaly, weights, area = anomaly_of(ds), ds.coslat, ("lat", "lon")
    return {
        "global anomaly": (anomaly * weights).sum(area, skipna=False)
        / (anomaly.notnull() * weights).sum(area, skipna=False),
        "7-day rolling mean": ds.tas.rolling(time=7).construct("window").isel(time=slice(6, None))
        .mean("window", skipna=False),
        **summaries(ds),
    }
# --8<-- [end:analysis]


FORMS: dict[str, Callable[[xr.Dataset], Results]] = {"as written": analysis, "CuPy-safe": cupy_safe_analysis}


def on_dask(ds: xr.Dataset, time_chunk: int, xp: ModuleType) -> xr.Dataset:
    """``ds`` with its data variables and ``coslat`` as dask.arrays over blocks of ``xp`` (``cupy`` on a GPU,
    ``numpy`` elsewhere), made with ``dask.array.from_array`` so that their meta is ``xp``'s array type too
    (xarray's own ``.chunk()`` declares NumPy blocks whatever the data)."""
    variables = {name: da.from_array(xp.asarray(v.values), chunks=(time_chunk, -1, -1))
                 for name, v in ds.data_vars.items()}
    return ds.copy(data=variables).assign_coords(coslat=("lat", da.from_array(xp.asarray(ds.coslat.values))))


def run(ds: xr.Dataset, form: Callable[[xr.Dataset], Results], sync: Callable[[], None]) -> Results:
    """Compute every result of ``form`` on ``ds`` at once and wait for the device."""
    computed = dask.compute(form(ds))[0]
    sync()
    return computed


def timed(ds: xr.Dataset, form: Callable[[xr.Dataset], Results], sync: Callable[[], None],
          repeat: int) -> tuple[Results, float]:
    """The results of one run (the warm-up) and the median time of ``repeat`` runs after it."""
    results = run(ds, form, sync)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run(ds, form, sync)
        times.append(time.perf_counter() - start)
    return results, statistics.median(times)


def differing(results: Results, expected: Results) -> list[str]:
    """The names of the results that differ from ``expected`` by more than float32 rounding."""
    names = []
    for name, value in results.items():
        try:
            xr.testing.assert_allclose(value.as_numpy(), expected[name].as_numpy(), rtol=1e-4, atol=1e-5)
        except AssertionError:
            names.append(name)
    return names


def agreement(ours: Results, theirs: Results | None, reference: Results) -> tuple[str, bool]:
    """How gnp's results, dask.array's (None when it failed) and NumPy's compare, and whether all that ran agree."""
    checks = {"gnp = NumPy": differing(ours, reference)}
    if theirs is not None:
        checks["dask.array = NumPy"] = differing(theirs, reference)
        checks["gnp = dask.array"] = differing(ours, theirs)
    words = [claim if not bad else f"{claim} NOT for {', '.join(bad)}" for claim, bad in checks.items()]
    return "; ".join(words), not any(checks.values())


def table(rows: list[list[str]]) -> str:
    """The rows under their headers, in columns."""
    rows = [["analysis", "xarray + gnp", "xarray + dask.array", "dask / gnp", "agreement"], *rows]
    widths = [max(len(cell) for cell in column) for column in zip(*rows)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def main(argv: list[str] | None = None) -> int:
    backend = gnp.config.backend()
    on_gpu = backend == "cupy"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=3 * 365 if on_gpu else 2 * 365, help="length of the time axis")
    parser.add_argument("--nlat", type=int, default=180 if on_gpu else 90, help="latitudes")
    parser.add_argument("--nlon", type=int, default=360 if on_gpu else 180, help="longitudes")
    parser.add_argument("--blocks", type=int, default=4, help="blocks along time")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs after the warm-up")
    parser.add_argument("--explain", action="store_true", help="print gnp.explain of the standardized anomaly")
    args = parser.parse_args(argv)

    if on_gpu:
        import cupy as xp

        sync = xp.cuda.Device().synchronize
    else:
        xp = np
        sync = lambda: None  # noqa: E731 - NumPy blocks are done when compute returns
    ds = synthetic_climate(args.days, args.nlat, args.nlon)
    time_chunk = -(-args.days // args.blocks)
    with_gnp = ds.chunk({"time": time_chunk}, chunked_array_type="gpunumeric").persist()
    with_dask = on_dask(ds, time_chunk, xp).persist()
    sync()
    reference = analysis(ds)  # NumPy-backed xarray

    rows, passed = [], True
    for label, form in FORMS.items():
        ours, gnp_seconds = timed(with_gnp, form, sync, args.repeat)
        try:
            theirs, dask_seconds = timed(with_dask, form, sync, args.repeat)
        except Exception as exc:  # noqa: BLE001 - the baseline's failure is a result to show, not to hide gnp's
            theirs, failure = None, f"failed: {type(exc).__name__}: {exc}".splitlines()[0][:70]
            times = [f"{gnp_seconds:.3f} s", failure, "-"]
        else:
            times = [f"{gnp_seconds:.3f} s", f"{dask_seconds:.3f} s", f"{dask_seconds / gnp_seconds:.2f}x"]
        words, agree = agreement(ours, theirs, reference)
        rows.append([label, *times, words])
        passed &= agree and (theirs is not None or form is analysis)  # only the form as written may fail

    size = sum(v.nbytes for v in ds.data_vars.values())
    print(f"dataset: {dict(ds.sizes)}, {size / 2**20:.0f} MiB float32 in {args.blocks} blocks along time, on "
          f"{backend} blocks ({gnp.ones(1).device}); median of {args.repeat} runs after a warm-up")
    print(f"results: {', '.join(reference)}\n")
    print(table(rows))
    if args.explain:
        print("\nthe standardized anomaly of tas, as gnp runs it:")
        print(gnp.explain(anomaly_of(with_gnp).tas.data))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
