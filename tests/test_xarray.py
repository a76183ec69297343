"""gnp Arrays inside xarray objects: the same xarray code on a NumPy-backed Dataset (the reference) and on a
gnp-backed one, locally and on the session's 2-worker cluster. Each result's data is a gnp Array wherever
xarray's own dask path keeps a dask.array, its blocks live on the backend under test, and its values equal
the reference's."""
from __future__ import annotations

import pathlib
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest

import _cupy_like
import dask_gpunumeric as gnp
from conftest import BACKEND
from dask_gpunumeric.backend import namespace

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
import xarray_climate  # noqa: E402  (examples/ is not a package; it needs xarray)

CHUNKS = {"time": 12, "lat": 4}


@pytest.fixture(scope="module")
def climate() -> Any:
    """A small climate-style Dataset (time x lat x lon, daily), NumPy-backed."""
    rng = np.random.default_rng(7)
    shape = (48, 6, 8)
    lat = np.linspace(-75.0, 75.0, 6)
    seasonal = np.cos(np.arange(48) * 2 * np.pi / 24)[:, None, None]
    return xr.Dataset(
        {
            "tas": (("time", "lat", "lon"), 280 + 10 * seasonal + rng.standard_normal(shape), {"units": "K"}),
            "pr": (("time", "lat", "lon"), rng.gamma(2.0, 1.5, shape)),
        },
        coords={"time": pd.date_range("2000-01-01", periods=48, freq="D"), "lat": lat,
                "lon": np.arange(8) * 45.0, "coslat": ("lat", np.cos(np.deg2rad(lat)))},
    )


@pytest.fixture(params=["local", "distributed"])
def scheduler(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test on the local scheduler and again with the 2-worker cluster's client as the scheduler."""
    if request.param == "local":
        yield "local"
        return
    client = request.getfixturevalue("client")
    with client.as_current(), dask.config.set(scheduler="dask.distributed"):
        yield "distributed"


def on_gnp(ds: Any) -> Any:
    return ds.chunk(CHUNKS, chunked_array_type="gpunumeric")


def spread(block: Any) -> Any:
    """Largest minus smallest along the last axis (for apply_ufunc with a core dimension)."""
    return block.max(axis=-1) - block.min(axis=-1)


def soft_clip(block: Any) -> Any:
    """An elementwise function written for NumPy and CuPy blocks alike."""
    return namespace(block).tanh(block / 300.0)


OPERATIONS: dict[str, Callable[[Any], Any]] = {
    "arithmetic": lambda ds: ds.tas * 2 - ds.pr / 3 + 1,
    "broadcast-by-name": lambda ds: ds.tas.transpose("lon", "time", "lat") - ds.tas.mean("lon") * ds.coslat,
    "reduce-named-dims": lambda ds: ds.mean("time") + ds.std(["lat", "lon"]) - ds.max("lon"),
    "reduce-all": lambda ds: ds.sum(),
    "anomaly": lambda ds: (ds - ds.mean("time")) / ds.std("time"),
    "where": lambda ds: ds.tas.where(ds.pr > 2.0),
    "xr-where": lambda ds: xr.where(ds.tas > 280, ds.tas, ds.pr),
    "isel": lambda ds: ds.isel(time=slice(3, 40, 2), lat=[4, 0, 2], lon=[1, 5]),
    "isel-pointwise": lambda ds: ds.isel(lat=xr.DataArray([0, 3, 5], dims="site"),
                                         lon=xr.DataArray([7, 2, 2], dims="site")),
    "sel": lambda ds: ds.sel(time=slice("2000-01-05", "2000-02-03"), lat=slice(-40, 40)),
    "sel-nearest": lambda ds: ds.sel(lon=[44.0, 181.0], method="nearest"),
    "rolling-mean": lambda ds: ds.rolling(time=5).mean(),
    "rolling-centered": lambda ds: ds.tas.rolling(time=4, center=True, min_periods=2).mean(),
    "coarsen-mean": lambda ds: ds.coarsen(lat=2, lon=4).mean(),
    "coarsen-trim": lambda ds: ds.tas.coarsen(time=5, boundary="trim").mean(),
    "groupby-mean": lambda ds: ds.groupby("time.dayofweek").mean(),
    "groupby-anomaly": lambda ds: ds.groupby("time.dayofweek") - ds.groupby("time.dayofweek").mean("time"),
    "resample-mean": lambda ds: ds.resample(time="7D").mean(),
    "weighted-mean": lambda ds: ds.weighted(ds.coslat).mean(("lat", "lon")),
    "weighted-by-array": lambda ds: ds.tas.weighted(ds.pr.isel(time=0, drop=True)).mean("lat"),
    "apply-ufunc": lambda ds: xr.apply_ufunc(soft_clip, ds.tas, dask="parallelized", output_dtypes=[float]),
    "apply-ufunc-core-dim": lambda ds: xr.apply_ufunc(spread, ds, input_core_dims=[["lon"]], dask="parallelized",
                                                      output_dtypes=[float]),
    "concat": lambda ds: xr.concat([ds.isel(time=slice(0, 10)), ds.isel(time=slice(30, 45))], dim="time"),
}


def variables(obj: Any) -> dict[str, Any]:
    """Every variable of a DataArray or Dataset, coordinates included, by name."""
    ds = obj.to_dataset(name="__data__") if isinstance(obj, xr.DataArray) else obj
    return dict(ds.variables)


def check_like_xarray(ours: Any, on_dask: Any, expected: Any) -> None:
    """``ours`` (built on gnp Arrays) holds gnp Arrays where ``on_dask`` (the same code on dask.arrays) holds
    dask.arrays, and computes to ``expected`` (the same code on NumPy) with blocks on the backend under
    test."""
    on_dask_vars, our_vars = variables(on_dask), variables(ours)
    assert our_vars.keys() == on_dask_vars.keys()
    lazy = [name for name, v in on_dask_vars.items() if isinstance(v.data, da.Array)]
    assert lazy, "the operation should give chunked data"
    for name, v in our_vars.items():
        assert isinstance(v.data, gnp.Array) == (name in lazy), (name, type(v.data))
        if name in lazy:
            assert v.data.backend == BACKEND
    computed = ours.compute()
    for name in lazy:
        assert type(variables(computed)[name].data).__module__.split(".")[0] == BACKEND
    xr.testing.assert_allclose(computed.as_numpy(), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("operation", OPERATIONS.values(), ids=OPERATIONS.keys())
def test_operation_like_xarray(climate: Any, scheduler: str, operation: Callable[[Any], Any]) -> None:
    check_like_xarray(operation(on_gnp(climate)), operation(climate.chunk(CHUNKS)), operation(climate))


def test_dataset_chunk_gives_gnp_arrays(climate: Any) -> None:
    ds = on_gnp(climate)
    assert isinstance(ds.tas.data, gnp.Array) and ds.tas.data.backend == BACKEND
    assert ds.chunksizes == climate.chunk(CHUNKS).chunksizes
    assert not isinstance(ds.time.data, gnp.Array)  # index coordinates stay in memory, as with dask
    rechunked = ds.tas.chunk({"lon": 4}, chunked_array_type="gpunumeric")
    assert rechunked.data.chunks == ((12,) * 4, (4, 2), (4, 4))
    assert isinstance(ds.tas.chunk({"lon": 4}).data, gnp.Array)  # the default ("dask") keeps the kind too


def test_dataarray_around_a_gnp_array() -> None:
    x = np.arange(24.0).reshape(4, 6)
    arr = xr.DataArray(gnp.from_array(x, chunks=(2, 3)), dims=("y", "x"))
    out = (arr - arr.mean("x")).sum("y")
    assert isinstance(out.data, gnp.Array)
    expected = (xr.DataArray(x, dims=("y", "x")) - xr.DataArray(x, dims=("y", "x")).mean("x")).sum("y")
    xr.testing.assert_allclose(out.compute().as_numpy(), expected)


def test_chunk_managers_side_by_side(climate: Any) -> None:
    from xarray.namedarray.parallelcompat import get_chunked_array_type

    from dask_gpunumeric.xarray import DaskArrayManager, GpuNumericManager

    ours, theirs = on_gnp(climate), climate.chunk(CHUNKS)
    assert isinstance(get_chunked_array_type(ours.tas.data), GpuNumericManager)
    assert isinstance(get_chunked_array_type(theirs.tas.data), DaskArrayManager)
    assert isinstance((theirs.tas - theirs.tas.mean("time")).data, da.Array)  # dask.array objects unaffected
    mixed = ours.tas + theirs.tas  # gnp adopts the dask.array's blocks
    assert isinstance(mixed.data, gnp.Array)
    # non-index coordinates on two devices (CuPy and NumPy) don't compare equal: xarray drops them
    expected = (climate.tas * 2).drop_vars("coslat")
    xr.testing.assert_allclose(mixed.compute().as_numpy().drop_vars("coslat", errors="ignore"), expected)


def test_register_after_the_registry_was_cleared(climate: Any) -> None:
    from xarray.namedarray.parallelcompat import list_chunkmanagers

    list_chunkmanagers.cache_clear()
    try:
        gnp.xarray.register()
        assert isinstance(on_gnp(climate).tas.data, gnp.Array)
        gnp.xarray.register()  # idempotent
        assert isinstance(on_gnp(climate).tas.mean("time").data, gnp.Array)
    finally:
        list_chunkmanagers.cache_clear()
        gnp.xarray.register()


def test_persist_load_values(climate: Any, scheduler: str) -> None:
    anomaly = (on_gnp(climate) - on_gnp(climate).mean("time")) / on_gnp(climate).std("time")
    expected = (climate - climate.mean("time")) / climate.std("time")
    persisted = anomaly.persist()
    assert isinstance(persisted.tas.data, gnp.Array) and persisted.tas.data.chunks == anomaly.tas.data.chunks
    check_like_xarray(persisted.tas.mean("lat"), expected.tas.chunk(CHUNKS).mean("lat"), expected.tas.mean("lat"))
    values = anomaly.pr.values
    assert isinstance(values, np.ndarray)
    np.testing.assert_allclose(values, expected.pr.values, rtol=1e-10, atol=1e-12)
    loaded = anomaly.load()
    assert type(loaded.tas.data).__module__.split(".")[0] == BACKEND
    xr.testing.assert_allclose(loaded.as_numpy(), expected, rtol=1e-10, atol=1e-12)


def test_fusion_across_xarray_calls(climate: Any) -> None:
    """The anomaly runs as three fused kernels over each block of the data (the mean's pass, the standard
    deviation's pass, and the final subtract-divide), whatever number of calls xarray made to build it."""
    from dask_gpunumeric.api.explain import plan

    ds = on_gnp(climate)
    anomaly = ((ds - ds.mean("time")) / ds.std("time")).tas.data
    fused = plan(anomaly)
    blocks = ds.tas.data.npartitions
    full_block_kernels = [g for g in fused["groups"] if g["blocks"] == blocks]
    assert len(full_block_kernels) == 3, [g["kernel"] for g in fused["groups"]]
    assert all(g["inputs"] <= 3 for g in full_block_kernels)
    with gnp.config.set(fusion=False):
        unfused = plan(anomaly)
    assert fused["tasks"] < unfused["tasks"]
    assert "fused kernel" in gnp.explain(anomaly)


def test_promotion_guard_reaches_xarray(climate: Any) -> None:
    ds = on_gnp(climate)
    single = ds.tas.astype(np.float32)
    with pytest.warns(gnp.PromotionWarning, match="allowpromotion"):
        single + ds.pr
    with gnp.allowpromotion():
        total = single + ds.pr
    xr.testing.assert_allclose(total.compute().as_numpy(), climate.tas.astype(np.float32) + climate.pr)


def test_decode_cf_of_gnp_backed_data(climate: Any) -> None:
    packed = (climate[["pr"]] * 100).astype(np.int16)
    packed.pr.attrs.update(scale_factor=0.01, add_offset=0.0)
    decoded = xr.decode_cf(on_gnp(packed))
    assert isinstance(decoded.pr.data, gnp.Array)
    xr.testing.assert_allclose(decoded.compute().as_numpy(), xr.decode_cf(packed))


# --- files --------------------------------------------------------------------------------------------


@pytest.fixture
def quiet_zarr() -> Iterator[None]:
    """zarr's notes about its format (consolidated metadata, string codecs) are not what these tests are about."""
    pytest.importorskip("zarr")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="zarr")
        warnings.filterwarnings("ignore", message=".*separate the stored chunks.*")
        yield


def anomaly_of(ds: Any) -> Any:
    return (ds - ds.mean("time")) / ds.std("time")


def test_zarr_round_trip(climate: Any, scheduler: str, tmp_path: Any, quiet_zarr: None) -> None:
    climate.chunk({"time": 12}).to_zarr(tmp_path / "in.zarr", zarr_format=2, consolidated=False)
    ds = xr.open_zarr(tmp_path / "in.zarr", chunked_array_type="gpunumeric", consolidated=False)
    assert isinstance(ds.tas.data, gnp.Array) and ds.tas.data.chunks[0] == (12,) * 4
    check_like_xarray(anomaly_of(ds), anomaly_of(climate.chunk({"time": 12})), anomaly_of(climate))
    anomaly_of(ds).to_zarr(tmp_path / "out.zarr", zarr_format=2, consolidated=False)
    written = xr.open_zarr(tmp_path / "out.zarr", consolidated=False).compute()
    xr.testing.assert_allclose(written, anomaly_of(climate), rtol=1e-10, atol=1e-12)


def test_netcdf_round_trip(climate: Any, tmp_path: Any) -> None:
    pytest.importorskip("scipy")
    climate.to_netcdf(tmp_path / "in.nc", engine="scipy")
    ds = xr.open_dataset(tmp_path / "in.nc", chunks={"time": 12}, chunked_array_type="gpunumeric", engine="scipy")
    assert isinstance(ds.tas.data, gnp.Array)
    check_like_xarray(anomaly_of(ds), anomaly_of(climate.chunk({"time": 12})), anomaly_of(climate))
    anomaly_of(ds).to_netcdf(tmp_path / "out.nc", engine="scipy")
    with xr.open_dataset(tmp_path / "out.nc", engine="scipy") as written:
        xr.testing.assert_allclose(written.load(), anomaly_of(climate), rtol=1e-10, atol=1e-12)


def test_open_mfdataset(climate: Any, tmp_path: Any) -> None:
    pytest.importorskip("scipy")
    paths = [tmp_path / "a.nc", tmp_path / "b.nc"]
    xr.save_mfdataset([climate.isel(time=slice(0, 24)), climate.isel(time=slice(24, 48))], paths, engine="scipy")
    # coords="minimal", compat="override": files' shared coordinates taken from the first file, unread (with
    # CuPy blocks, xarray's default comparison of them meets CuPy and gnp arrays together, which it refuses)
    with xr.open_mfdataset(paths, chunked_array_type="gpunumeric", engine="scipy", coords="minimal",
                           compat="override") as ds:
        assert isinstance(ds.tas.data, gnp.Array) and ds.tas.data.chunks[0] == (24, 24)
        xr.testing.assert_allclose(ds.resample(time="7D").mean().compute().as_numpy(),
                                   climate.resample(time="7D").mean())


# --- the example's dask.array baseline on CuPy-like blocks ---------------------------------------------------


def test_cupy_like_blocks_refuse_numpy_operands() -> None:
    """The stand-in refuses what CuPy refuses, also inside dask.array: a NumPy 0-d array as ``where``'s other
    operand, which is what xarray's ``where``/``fillna`` hand to dask.arrays (pydata/xarray#7721)."""
    x = _cupy_like.asarray(np.arange(4.0))
    for mixed in (lambda: x + np.ones(4), lambda: np.where(x > 1, x, np.array(np.nan)),
                  lambda: np.concatenate([x, np.ones(2)])):
        with pytest.raises(TypeError, match="Unsupported type"):
            mixed()
    for value in (x * 2 + np.float32(1), x.sum(), x[0], np.take(x, np.array([0, 2]))):
        assert type(value) is _cupy_like.CupyLikeArray
    blocks = da.from_array(x, chunks=2)
    with pytest.raises(TypeError, match="Unsupported type"):
        da.where(blocks > 1, blocks, np.array(np.nan)).compute()
    np.testing.assert_array_equal(np.asarray(da.where(blocks > 1, blocks, np.nan).compute()), [np.nan, np.nan, 2, 3])


def test_example_baseline_on_cupy_like_blocks() -> None:
    """The example's dask.array baseline (``cupy_safe_analysis`` over ``on_dask``) hands its blocks no NumPy
    array, keeps them CuPy-like, and gives NumPy-backed xarray's results of the analysis as written."""
    ds = xarray_climate.synthetic_climate(75, 6, 8)
    blocks = xarray_climate.on_dask(ds, 20, _cupy_like)
    assert type(blocks.tas.data._meta) is _cupy_like.CupyLikeArray
    results = dask.compute(xarray_climate.cupy_safe_analysis(blocks))[0]
    for name, result in results.items():
        data = [result.data] if isinstance(result, xr.DataArray) else [v.data for v in result.data_vars.values()]
        assert all(type(d) is _cupy_like.CupyLikeArray for d in data), name
    assert xarray_climate.differing(results, xarray_climate.analysis(ds)) == []


@pytest.mark.slow
def test_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The example at a small size: both forms on gnp agree with NumPy, and the CuPy-safe one on dask.array too."""
    assert xarray_climate.main(["--days", "75", "--nlat", "6", "--nlon", "8", "--repeat", "1"]) == 0
    rows = {line.split("  ")[0]: line for line in capsys.readouterr().out.splitlines()}
    assert rows["CuPy-safe"].endswith("gnp = NumPy; dask.array = NumPy; gnp = dask.array")
    assert "gnp = NumPy" in rows["as written"]
