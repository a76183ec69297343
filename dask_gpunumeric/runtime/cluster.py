"""Clusters: ``gnp.cluster()`` starts one Dask worker per GPU (dask-cuda's ``LocalCUDACluster``, over UCX
when distributed-ucxx imports, else TCP) or, without a GPU, a ``LocalCluster`` of worker processes with
NumPy blocks. It also knows the workers of the active client, which decide the default partitioning (one
block per worker along the leading axis) and each block's owner (tasks run where their inputs live).
"""
from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..backend import gpu_available


def _new_client_class() -> type:
    import distributed

    from .streams import unbatch_client

    class Client(distributed.Client):
        """A ``distributed.Client`` that also closes the cluster ``gnp.cluster`` started for it, sends to its
        scheduler at once (``streams``) and persists and computes gnp Arrays (``persist``, ``compute``, and ``get``
        for ``dask.compute``) in one update-graph with priorities (``submit``)."""

        _gnp_owned_cluster: Any = None

        def persist(self, collections: Any, optimize_graph: bool = True, **kwargs: Any) -> Any:
            """``distributed.Client.persist``; gnp Arrays alone, with no other arguments, sent as one graph with
            its priorities (``submit``), without Dask's collection machinery."""
            from .submit import is_array, persist

            many = isinstance(collections, (list, tuple))
            arrays = list(collections) if many else [collections]
            if kwargs or not optimize_graph or not arrays or not all(map(is_array, arrays)):
                return super().persist(collections, optimize_graph, **kwargs)

            out = persist(self, arrays, tuple(active_workers()))
            return out if many else out[0]

        def get(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
            """``distributed.Client.get``; what ``dask.compute`` of gnp Arrays alone hands it (``computed_roots``)
            computed as one graph with its priorities, small results pushed, the others' blocks gathered in one
            request and joined here (``pushed.fetch_joined``); anything else distributed's way."""
            from .submit import computed_roots

            roots = None if kwargs or self.asynchronous else computed_roots(dsk)
            if roots is None:
                return super().get(dsk, keys, **kwargs)
            from .pushed import fetch_joined

            return fetch_joined(self, roots, False, tuple(active_workers()))

        def compute(self, collections: Any, *args: Any, **kwargs: Any) -> Any:
            """``distributed.Client.compute``; gnp Arrays alone, with no other arguments, sent as one graph with
            its priorities (``submit``): a Future of each one's value (one-block Arrays: of their block's task)."""
            from ..expr import flat_keys
            from .submit import is_array, submit

            many = isinstance(collections, (list, tuple))
            arrays = list(collections) if many else [collections]
            if args or kwargs or self.asynchronous or not arrays or not all(map(is_array, arrays)):
                return super().compute(collections, *args, **kwargs)
            exprs = [a.expr.finalize_compute() for a in arrays]
            futures = submit(self, exprs, tuple(active_workers()))
            out = [futures[key] for e in exprs for key in flat_keys(e)]  # (one key each)
            return out if many else out[0]

        async def _ensure_connected(self, *args: Any, **kwargs: Any) -> None:
            await super()._ensure_connected(*args, **kwargs)
            unbatch_client(self)

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
      or device ids like ``[0, 1]`` / ``"0,1"``, numbered as this process sees them: under
      ``CUDA_VISIBLE_DEVICES=2,3``, ``n_gpus=2`` and ``[0, 1]`` are GPUs 2 and 3), over ``protocol`` ("ucx"
      when distributed-ucxx imports, else "tcp"; "tls" with a ``security`` that requires encryption), with
      dask-cuda's device-memory limit and spilling to host memory, CuPy blocks and the device buffers Dask
      receives and unspills in one pool, CuPy's (``allocator``; an ``rmm_*`` option chooses dask-cuda's RMM
      setup instead). ``n_workers`` fewer than the GPUs uses the
      first ones; more than the GPUs (for tests, and to measure distribution on one GPU) puts worker ``i`` on
      GPU ``i % n_gpus``, workers named ``0 .. n_workers - 1``, over TCP unless ``protocol`` says otherwise
      (regions then exchange through Dask's comms: NCCL refuses two ranks on one GPU).
    - Without one: a ``LocalCluster`` of ``n_workers`` (default ``n_gpus`` or 2) single-threaded worker
      processes with NumPy blocks, so the same code runs (and is tested) on CPUs.

    A cluster started here listens on the loopback interface only (scheduler, workers and dashboard) unless
    ``host=`` or ``interface=`` says otherwise (``bind_locally``), and its messages leave at once, not in
    distributed's batches of up to 10 ms (``streams.unbatch``: a call waits for no message sent before it).
    Other keyword arguments go to the cluster. The Client is the default scheduler while it lives, and works
    as a context manager: leaving the ``with`` block closes it and the cluster started for it.
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
    gpu = gpu_available()
    if gpu:
        devices = gpu_devices(n_gpus)
        shared = n_workers is not None and n_workers > len(devices)
        # workers sharing a GPU talk over TCP unless asked: UCX's CUDA IPC between them fails to map memory
        options = {"CUDA_VISIBLE_DEVICES": ",".join(devices), "protocol": _protocol(protocol, security, gpu=not shared),
                   **cluster_kwargs}
        if shared:
            new = _shared_gpu_cluster_class()(n_workers=n_workers, **options)
        else:
            from dask_cuda import LocalCUDACluster

            new = LocalCUDACluster(n_workers=n_workers, **options)
    else:
        workers = n_workers or (n_gpus if isinstance(n_gpus, int) else 2)
        new = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       protocol=_protocol(protocol, security, gpu=False), **cluster_kwargs)
    out = _new_client_class()(new)
    out._gnp_owned_cluster = new
    from .streams import unbatch

    unbatch(out)  # its scheduler and workers send at once too
    if gpu:
        from .allocator import CupyPoolForRmm, shares_cupy_pool

        if shares_cupy_pool(cluster_kwargs):
            out.register_plugin(CupyPoolForRmm())  # one allocator for CuPy blocks and Dask's device buffers
    return out


def gpu_devices(n_gpus: int | Sequence[int] | str | None) -> list[str]:
    """The GPUs of a cluster as the parent's ``CUDA_VISIBLE_DEVICES`` names them (ids or UUIDs): all visible
    ones (None), the first ``n_gpus`` (a count), or those at the given positions in what this process sees
    (device ids as CuPy numbers them here, a list or ``"0,1"``)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        seen = [d.strip() for d in visible.split(",") if d.strip()]
    else:
        import cupy

        seen = [str(i) for i in range(cupy.cuda.runtime.getDeviceCount())]
    if n_gpus is None:
        return seen
    if isinstance(n_gpus, int):
        if n_gpus < 1:
            raise ValueError(f"gnp.cluster: n_gpus must be at least 1, got {n_gpus}")
        return seen[:n_gpus]
    ids = n_gpus.split(",") if isinstance(n_gpus, str) else list(n_gpus)
    try:
        return [seen[int(i)] for i in ids]
    except (ValueError, IndexError):
        raise ValueError(f"gnp.cluster: n_gpus={n_gpus!r} names devices this process does not see; it sees "
                         f"{len(seen)} GPU(s), numbered 0 to {len(seen) - 1}") from None


def shared_devices(devices: Sequence[Any], n_workers: int) -> list[list[Any]]:
    """The ``CUDA_VISIBLE_DEVICES`` of each of ``n_workers`` workers on ``devices``: worker ``i`` on device
    ``i % len(devices)``, the others following it (as dask-cuda orders them, so that peers stay visible)."""
    return [[*devices[i % len(devices):], *devices[: i % len(devices)]] for i in range(n_workers)]


def _shared_gpu_cluster_class() -> type:
    from dask_cuda import LocalCUDACluster

    class SharedGPUCluster(LocalCUDACluster):
        """A ``LocalCUDACluster`` with more workers than GPUs: worker ``i`` (named ``i``) on GPU
        ``i % n_gpus`` (``shared_devices``), its spec made by dask-cuda for that device."""

        def new_worker_spec(self) -> dict:
            number = min(set(range(len(self.worker_spec) + 1)) - set(self.worker_spec))
            devices, held = self.cuda_visible_devices, self.worker_spec
            mine = shared_devices(devices, number + 1)[number]
            # dask-cuda names a new worker by the first of its devices that no worker has: show it this
            # worker's device order with every other device taken
            self.cuda_visible_devices, self.worker_spec = mine, dict.fromkeys(mine[1:])
            try:
                ((_, spec),) = super().new_worker_spec().items()
            finally:
                self.cuda_visible_devices, self.worker_spec = devices, held
            return {number: spec}

    return SharedGPUCluster


_memberships: dict[tuple[int, str], Any] = {}


def active_workers() -> list[str]:
    """Addresses of the workers of the default distributed client, in a stable order (by worker name, numbers
    in numeric order: GPU ids for dask-cuda); empty when no client is active. The scheduler publishes its
    workers whenever they change (``membership``): a call asks it nothing."""
    if "distributed" not in sys.modules:
        return []
    import distributed

    if _surely_none(distributed, in_task=False):
        return []
    try:
        client = distributed.default_client()
    except ValueError:
        return []
    if client.asynchronous:  # its calls return coroutines: the workers it last heard of
        workers = client.scheduler_info()["workers"]
        return sorted(workers, key=lambda address: (worker_order(workers[address].get("name")), address))
    key = (id(client), client.scheduler.address)  # the address too: a new client may reuse an old id
    membership = _memberships.get(key)
    if membership is None:
        from .membership import Membership

        membership = _memberships[key] = Membership(client)
    return [address for address, name in sorted(membership.workers, key=lambda w: (worker_order(w[1]), w[0]))]


def worker_order(name: Any) -> tuple:
    """Sort key of a worker name: numbers (ints, or strings of digits) first in numeric order, then others by
    their text (so worker 10 comes after worker 9)."""
    text = str(name)
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


def client_active() -> bool:
    """Whether ``distributed.get_client()`` would find a client (Dask's default scheduler is then that
    cluster): in a worker's task, or with a current or default client. Cheaper than asking it."""
    if "distributed" not in sys.modules:
        return False
    import distributed

    if _surely_none(distributed, in_task=True):
        return False
    for probe in (distributed.get_worker, lambda: distributed.Client.current(allow_global=True)):
        try:
            probe()
            return True
        except ValueError:
            pass
    return False


def _surely_none(distributed: Any, in_task: bool) -> bool:
    """True when distributed has no client here (none current, none registered) and, ``in_task``, this is no
    worker's task: read from its module state, where asking it (an exception raised and caught) costs
    microseconds on every call; False (ask it) where those names are not distributed's."""
    current = getattr(distributed.client, "_current_client", None)
    registered = getattr(distributed.client, "_global_clients", None)
    if current is None or registered is None or current.get() is not None or registered:
        return False
    worker = getattr(distributed.worker, "_worker_cvar", None) if in_task else None
    return not in_task or worker is not None and worker.get(None) is None


def owner(index: Sequence[int], numblocks: Sequence[int], n_workers: int) -> int:
    """The worker (0..n_workers-1) owning a block: blocks in C order split into equal contiguous runs,
    so with one block per worker along the leading axis block i belongs to worker i."""
    total = 1
    flat = 0
    for i, n in zip(index, numblocks):
        flat = flat * n + i
        total *= n
    return flat * n_workers // max(total, 1)
