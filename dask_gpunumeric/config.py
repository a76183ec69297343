"""Settings of dask_gpunumeric, kept in Dask's configuration under ``gpunumeric.*``.

>>> import dask_gpunumeric as gnp
>>> with gnp.config.set(backend="numpy"):
...     gnp.config.backend()
'numpy'
"""
from __future__ import annotations

from typing import Any

import dask

from . import backend as _backend

DEFAULTS: dict[str, Any] = {
    "backend": "auto",  # "auto" (CuPy when a GPU is usable), "numpy" or "cupy"
    "chunk-size": "auto",  # "auto": 128 MiB blocks on NumPy, 4 GiB on CuPy (one GPU gains nothing from more blocks, and each costs a task); or bytes / a string like "256MiB"
    # guards (api/guards.py): "warn" (once per call site), "error" or "allow"; or a dict of those by guard
    # ("scalar", "promotion", "fetch"); one guard's own setting (True = "allow", False = "error", or a
    # mode) wins over it when not None
    "guards": "warn",
    "allow-scalar": None,
    "allow-promotion": None,
    "allow-fetch": None,
    "split-every": 8,  # fan-in of tree reductions
    "fusion": True,  # fuse elementwise chains, random draws and reductions into one kernel per block
    "kernel-size": 256,  # at most this many operations per fused kernel (deeper groups are cut in several)
    "specialize": True,  # on CuPy blocks, a fused kernel launched again with the same scalar values is compiled with them as constants
    "stencil-sweeps": "auto",  # stencil sweeps per task: "auto" (halo within 1/8 of a block) or an int
    "stencil-tiles": True,  # on CuPy blocks, runs of stencil sweeps in one kernel through shared memory
    "stencil-tile-sweeps": None,  # the most sweeps per such kernel (None: 8 in 1-d, 4 in 2-d and 3-d; fewer where shared memory or halo work bind)
    "stencil-recompute": False,  # a pointwise field read at shifts computed again by its readers, saving a sweep (off: slower on an H200, docs/benchmarks.md; off, fields of sources alone read nowhere else still are: docs/stencils.md)
    "stencil-quotients": True,  # 0-d quotients of 0-d arrays (CG's alpha = rr / pAp, beta = rr_new / rr) computed once per thread by the stencil kernels reading them, no launch of their own (CG 0.8% faster on the H200: docs/benchmarks.md, s18-cgk2, s19-update)
    "stencil-late-reductions": False,  # a field that only full reductions read moved into a later stencil kernel reading what it reads in place (CG's first sum(b * b) into the b.Ab kernel: one kernel less), the partials summed in another order
    "loop-rotation": "auto",  # fori_loops ending with an elementwise state update start with it (optimize.rotation): "auto" where tile kernels run (CG's p update and p.Ap stencil one kernel), True, False
    "region-lowering": "programs",  # accelerated regions as one task per worker ("programs") or per block ("tasks")
    "region-timeout": "60s",  # how long a region's per-worker task waits for its peers before failing
    "region-transport": "auto",  # between workers: "nccl" (CuPy blocks, a GPU each), "comm" (Dask's comms), "auto"
    # "auto": an accelerated function whose array arguments are in memory runs when called (its kernels
    # queued on the device at once); "lazy": its outputs stay lazy until computed
    "dispatch": "auto",
    # on gnp.cluster's Client, an accelerated call whose blocks are held on known workers runs on them directly,
    # the scheduler out of its path (runtime/direct.py); False: every call through the scheduler
    "cluster": {"direct-calls": True},
}

dask.config.update_defaults({"gpunumeric": DEFAULTS})


def get(key: str) -> Any:
    """The value of one setting, e.g. ``get("allow-scalar")``."""
    # read on every operation (chunk sizes, guards, fusion): straight from Dask's config dict, where
    # defaults and ``set`` keep our settings under their hyphenated names; dask.config.get (which also
    # finds a name written with underscores first, as in a YAML file or an environment variable)
    # only when the name is not there
    try:
        return dask.config.global_config["gpunumeric"][key]
    except (KeyError, TypeError):
        return dask.config.get(f"gpunumeric.{key}")


def values(keys: tuple[str, ...]) -> tuple:
    """The values of several settings, as ``get`` reads each (the optimizer's, on every compute)."""
    try:
        section = dask.config.global_config["gpunumeric"]
        return tuple([section[key] for key in keys])
    except (KeyError, TypeError):
        return tuple([get(key) for key in keys])


def set(**settings: Any) -> dask.config.set:  # noqa: A001 - mirrors dask.config.set
    """Change settings, globally or as a context manager: ``gnp.config.set(backend="numpy")``.

    Keyword names use underscores (``allow_scalar=True``); they map to ``gpunumeric.allow-scalar``.
    """
    unknown = sorted(k for k in settings if k.replace("_", "-") not in DEFAULTS)
    if unknown:
        raise TypeError(f"unknown dask_gpunumeric setting(s) {unknown}; known: {sorted(DEFAULTS)}")
    if "backend" in settings:
        _backend.resolve(settings["backend"])  # validate now, not at first use
    return dask.config.set({f"gpunumeric.{k.replace('_', '-')}": v for k, v in settings.items()})


def backend() -> str:
    """The backend new arrays get: "cupy" when a GPU is usable (or asked for), else "numpy"."""
    return _backend.resolve(get("backend"))


def chunk_bytes(backend_name: str) -> int:
    """Target block size in bytes for "auto" chunking on this backend."""
    value = get("chunk-size")
    if value == "auto":
        return 2**32 if backend_name == "cupy" else 2**27
    return dask.utils.parse_bytes(value)
