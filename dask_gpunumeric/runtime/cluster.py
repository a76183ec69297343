"""Clusters: ``gnp.cluster()`` starts one Dask worker per GPU (dask-cuda's ``LocalCUDACluster``, over UCX
when distributed-ucxx imports, else TCP) or, without a GPU, a ``LocalCluster`` of worker processes with
NumPy blocks. It also knows the workers of the active client, which decide the default partitioning (one
block per worker along the leading axis) and each block's owner (tasks run where their inputs live).
"""
from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..kernels.backend import gpu_available


def _new_client_class() -> type:
    import distributed

    class Client(distributed.Client):
        """A ``distributed.Client`` that also closes the cluster ``gnp.cluster`` started for it."""

        _gnp_owned_cluster: Any = None

        def close(self, *args: Any, **kwargs: Any) -> Any:
            result = super().close(*args, **kwargs)
            if self._gnp_owned_cluster is not None:
                cluster, self._gnp_owned_cluster = self._gnp_owned_cluster, None
                cluster.close()
            return result

    return Client


LOOPBACK = "127.0.0.1"
_DASHBOARD_PORT = 8787


def _protocol(protocol: str | None, security: Any, gpu: bool) -> str:
    """The protocol asked for; else TLS when ``security`` requires encryption, else UCX between GPUs when
    distributed-ucxx imports, else TCP."""
    if protocol is not None:
        return protocol
    if security is True or getattr(security, "require_encryption", False):
        return "tls"
    return "ucx" if gpu and importlib.util.find_spec("distributed_ucxx") is not None else "tcp"


def bind_locally(cluster_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Cluster arguments with the scheduler, workers and dashboard on the loopback interface unless they name
    a ``host`` or an ``interface``: a port alone (``dashboard_address=":0"``) is taken on the scheduler's host,
    not on every interface as Dask would."""
    out = dict(cluster_kwargs)
    if out.get("interface") is not None:
        return out
    host = out.get("host") or LOOPBACK
    out["host"] = host
    dashboard = out.get("dashboard_address", _DASHBOARD_PORT)
    if dashboard is not None and "," not in str(dashboard) and not str(dashboard).rpartition(":")[0]:
        port = str(dashboard).rpartition(":")[2]
        out["dashboard_address"] = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return out


def cluster(n_gpus: int | Sequence[int] | str | None = None, *, client: Any = None, address: str | None = None,
            protocol: str | None = None, n_workers: int | None = None, security: Any = None,
            **cluster_kwargs: Any) -> Any:
    """Start (or connect to) a cluster and return a connected ``distributed.Client``.

    - ``client=`` or ``address=``: use an existing cluster (a multi-node dask-cuda cluster, say); with
      ``security=`` (a ``distributed.security.Security``) for a cluster that requires TLS.
    - With a GPU: ``LocalCUDACluster`` with one worker per visible GPU, or per GPU of ``n_gpus`` (a count,
      or device ids like ``[0, 1]`` / ``"0,1"``), over ``protocol`` ("ucx" when distributed-ucxx imports,
      else "tcp"; "tls" with a ``security`` that requires encryption), with dask-cuda's device-memory limit
      and spilling to host memory.
    - Without one: a ``LocalCluster`` of ``n_workers`` (default ``n_gpus`` or 2) single-threaded worker
      processes with NumPy blocks, so the same code runs (and is tested) on CPUs.

    A cluster started here listens on the loopback interface only (scheduler, workers and dashboard) unless
    ``host=`` or ``interface=`` says otherwise (``bind_locally``). Other keyword arguments go to the cluster.
    The Client is the default scheduler while it lives, and works as a context manager: leaving the ``with``
    block closes it and the cluster started for it.
    """
    try:
        import distributed
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError('gnp.cluster() needs the distributed package: pip install ".[distributed]" '
                                  '(a CPU cluster and its dashboard) or ".[cuda13]" (GPUs) from a clone of '
                                  'dask_gpunumeric', name=e.name) from None

    if client is not None:
        return client
    if address is not None:
        return distributed.Client(address, security=security)
    cluster_kwargs = bind_locally(cluster_kwargs)
    if security is not None:
        cluster_kwargs["security"] = security
    if gpu_available():
        from dask_cuda import LocalCUDACluster

        devices = n_gpus
        if isinstance(devices, int):
            import cupy

            devices = list(range(min(devices, cupy.cuda.runtime.getDeviceCount())))
        if isinstance(devices, (list, tuple)):
            devices = ",".join(str(d) for d in devices)
        new = LocalCUDACluster(CUDA_VISIBLE_DEVICES=devices, protocol=_protocol(protocol, security, gpu=True),
                               **gpu_memory_defaults(cluster_kwargs))
    else:
        workers = n_workers or (n_gpus if isinstance(n_gpus, int) else 2)
        new = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       protocol=_protocol(protocol, security, gpu=False), **cluster_kwargs)
    out = _new_client_class()(new)
    out._gnp_owned_cluster = new
    return out


def gpu_memory_defaults(cluster_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The options of a ``LocalCUDACluster`` with one allocator for both CuPy blocks and the buffers Dask
    moves and unspills: RMM's asynchronous pool (``rmm_async``, CuPy allocating through RMM), where RMM imports
    and no ``rmm_*`` option is given. Otherwise CuPy's own pool keeps the memory of blocks spilled to host,
    and bringing them back through RMM (as distributed does once RMM imports) runs out of device memory."""
    if any(key.startswith("rmm_") for key in cluster_kwargs) or importlib.util.find_spec("rmm") is None:
        return cluster_kwargs
    return {**cluster_kwargs, "rmm_async": True, "rmm_allocator_external_lib_list": ["cupy"]}


_WORKERS_TTL_S = 2.0
_workers_cache: dict[tuple[int, str], tuple[float, list[str]]] = {}


def active_workers() -> list[str]:
    """Addresses of the workers of the default distributed client, in a stable order (by worker name, so
    GPU ids for dask-cuda); empty when no client is active. Asked of the scheduler at most every 2 s."""
    if "distributed" not in sys.modules:
        return []
    import distributed

    try:
        client = distributed.default_client()
    except ValueError:
        return []
    now = time.monotonic()
    key = (id(client), client.scheduler.address)  # the address too: a new client may reuse an old id
    cached = _workers_cache.get(key)
    if cached is not None and now - cached[0] < _WORKERS_TTL_S:
        return cached[1]
    info = client.scheduler_info(n_workers=-1)["workers"]
    workers = [addr for addr, _ in sorted(info.items(), key=lambda kv: (str(kv[1].get("name")), kv[0]))]
    _workers_cache[key] = (now, workers)
    return workers


def client_active() -> bool:
    """Whether ``distributed.get_client()`` would find a client (Dask's default scheduler is then that
    cluster): in a worker's task, or with a current or default client. Cheaper than asking it."""
    if "distributed" not in sys.modules:
        return False
    import distributed

    for probe in (distributed.get_worker, lambda: distributed.Client.current(allow_global=True)):
        try:
            probe()
            return True
        except ValueError:
            pass
    return False


def owner(index: Sequence[int], numblocks: Sequence[int], n_workers: int) -> int:
    """The worker (0..n_workers-1) owning a block: blocks in C order split into equal contiguous runs,
    so with one block per worker along the leading axis block i belongs to worker i."""
    total = 1
    flat = 0
    for i, n in zip(index, numblocks):
        flat = flat * n + i
        total *= n
    return flat * n_workers // max(total, 1)
