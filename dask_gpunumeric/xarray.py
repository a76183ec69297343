"""``gnp.xarray``: gnp Arrays inside xarray objects (the chunk manager and its registration)."""
from .integrations.xarray import DaskArrayManager, DaskIndexingAdapter, GpuNumericManager, register

__all__ = ["DaskArrayManager", "DaskIndexingAdapter", "GpuNumericManager", "register"]
