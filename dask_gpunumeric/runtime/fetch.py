"""``gnp.fetch``: compute explicitly and copy to the host; on the local scheduler straight from the compiled
graph (cached), without the collection machinery of ``dask.compute``."""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import dask
import dask.base
import dask.callbacks

from ..backend import to_numpy
from ..kernels.blocks import concatenate_grid
from ..kernels.checks import Deferral, Delivery, verify, with_checks
from .cluster import client_active
from .compile import CompiledGraph, compiled_outputs, placement_workers
from .faults import check_result_fits
from .schedule import in_this_thread, local_scheduler, run_in_order
from .submit import is_array, persist, submit


def fetch(x: Any) -> Any:
    """Compute and copy to the host, explicitly: a 0-d Array becomes a Python number, an n-d Array a NumPy
    array; a tuple or list of Arrays is computed together (shared work done once)."""
    if isinstance(x, (list, tuple)):
        check_result_fits([a.expr for a in x if is_array(a)], to_host=True, call="gnp.fetch")
        joined = _compute_on_cluster(x, host=True) if x and all(map(is_array, x)) and not _jointly_local(x) else None
        if joined is not None:
            return type(x)(map(_host, joined))
        with Delivery():
            values = _compute_many_local(x) if _jointly_local(x) else dask.compute(*x)
            return type(x)(_host(v) for v in values)
    if not is_array(x):
        return x
    check_result_fits([x.expr], to_host=True, call="gnp.fetch")
    if _local_scheduler(x):
        with Delivery():  # device checks read after the copy to the host, which waits for the device anyway
            return _host(_compute_local(x))
    joined = _compute_on_cluster([x], host=True)
    return _host(x.compute() if joined is None else joined[0])


def _local_scheduler(x: Any) -> bool:
    """True when ``x`` would run on Dask's local scheduler (no distributed client or other scheduler set):
    at once when no scheduler is set and no client is active, else as ``dask.base.get_scheduler`` says."""
    settings = dask.config.global_config  # what dask.config.get reads (these names have no "_" or "-" to vary)
    if settings.get("scheduler") is None and settings.get("get") is None and not client_active():
        return True
    return dask.base.get_scheduler(collections=[x]) is x.__dask_scheduler__


def _compute_local(x: Any) -> Any:
    """``x.compute()`` on the local scheduler without the collection machinery of ``dask.compute``: the
    optimized graph of the array (cached for pure computations) straight to the scheduler."""
    graph, ((key,),) = compiled_outputs([x.expr], finalized=True)  # one key: one block, or a Finalize's
    return _run_local(x, graph, [key])[0]


def _jointly_local(xs: Sequence[Any]) -> bool:
    """True when ``xs`` are gnp Arrays (at least one) of one backend that run on the local scheduler: what
    ``_compute_many_local`` computes as ``dask.compute`` would (anything else is left to ``dask.compute``)."""
    return (len(xs) > 0 and all(map(is_array, xs)) and len({a.backend for a in xs}) == 1
            and _local_scheduler(xs[0]))


def _compute_many_local(xs: Sequence[Any]) -> list:
    """``dask.compute(*xs)`` of Arrays on the local scheduler without the collection machinery of
    ``dask.compute``: their finalized trees optimized together (one compiled graph, cached; shared work
    done once), as ``dask.compute`` optimizes them, straight to the scheduler."""
    graph, keys = compiled_outputs([a.expr for a in xs], finalized=True)
    return _run_local(xs[0], graph, [key for (key,) in keys])  # one key each (one block, or a Finalize's)


def _run_local(x: Any, graph: CompiledGraph, keys: list) -> list:
    if in_this_thread(graph, sequential=x.backend == "cupy") and not dask.callbacks.Callback.active:
        # a handful of tasks, CuPy blocks (whose scheduler is one thread launching kernels) or work that threads
        # cannot shorten (``threads_gain``): run them in order, in this thread (with Dask callbacks, such as a
        # progress bar, active: on Dask's local scheduler, which calls them)
        return run_in_order(graph.graph, graph.schedule(), keys)
    return x.__dask_scheduler__(dict(graph.graph), keys)


def compute_now(x: Any) -> Any:
    """``x.compute()`` as ``compute_many_now`` computes it, or None to leave it to ``dask.compute``."""
    values = compute_many_now([x], call="compute()")
    return None if values is None else values[0]


def compute_many_now(xs: Sequence[Any], call: str) -> list | None:
    """``dask.compute(*xs)`` of Arrays of one backend (at least one), straight from their jointly compiled graph when
    they run on the local scheduler (as ``gnp.fetch`` does, the results left where they are), or their blocks joined
    here when they run on a distributed client (``_compute_on_cluster``), or None to leave it to ``dask.compute``.
    ``call`` names what the user called, for the message when the results cannot fit."""
    if not _local_scheduler(xs[0]):
        return _compute_on_cluster(xs, host=False)
    check_result_fits([x.expr for x in xs], to_host=False, call=call)
    with Delivery():
        return _compute_many_local(xs)


def _compute_on_cluster(xs: Sequence[Any], host: bool) -> list | None:
    """``dask.compute(*xs)`` on a synchronous distributed client (on the host for ``gnp.fetch``: ``host``): one
    graph, small one-block results pushed to this client, the other blocks gathered in one request and joined here
    (``pushed.fetch_joined``); None on another scheduler."""
    client = _synchronous_client(xs[0])
    if client is None:
        return None
    from .pushed import fetch_joined

    return fetch_joined(client, [x.expr for x in xs], host, placement_workers())


def _synchronous_client(x: Any) -> Any:
    """The synchronous distributed client ``x`` computes on, or None (another scheduler)."""
    if "distributed" not in sys.modules:
        return None
    import distributed

    client = getattr(dask.base.get_scheduler(collections=[x]), "__self__", None)
    return client if isinstance(client, distributed.Client) and not client.asynchronous else None


def persist_now(x: Any) -> dict | None:
    """The blocks of ``x.persist()`` by key, straight from the compiled graph when ``x`` runs on the local
    scheduler (values), or sent to a synchronous distributed client as one graph (``submit``: futures), or None
    to leave it to ``dask.persist``."""
    if not _local_scheduler(x):
        client = _synchronous_client(x)
        return None if client is None else submit(client, [x.expr], placement_workers())
    graph, (keys,) = compiled_outputs([x.expr], finalized=False)
    with Deferral() as deferral:
        values = _run_local(x, graph, keys)
    return with_checks(dict(zip(keys, values)), deferral.checks)


def persist_many_now(xs: Sequence[Any]) -> list | None:
    """``dask.persist(*xs)`` of Arrays of one backend (at least one): on the local scheduler ``persist_many_local``,
    on a synchronous distributed client sent as one graph (``submit.persist``), else None to leave it to
    ``dask.persist``."""
    if _local_scheduler(xs[0]):
        return persist_many_local(xs)
    client = _synchronous_client(xs[0])
    return None if client is None else persist(client, xs, placement_workers())


class CollectionScheduler:
    """A backend's local scheduler (``schedule.local_scheduler``), which also persists: ``dask.persist`` hands
    a scheduler with a ``persist`` method the collections themselves (the protocol distributed's Client
    follows), so that persisting Arrays runs their jointly compiled graph (cached) without Dask's expression
    machinery (collecting, simplifying and lowering the whole tree again on every call)."""

    def __init__(self, get: Callable[..., Any]) -> None:
        self.get = get

    def __call__(self, dsk: Any, keys: Any, **kwargs: Any) -> Any:
        with Delivery():  # dask.compute
            return self.get(dsk, keys, **kwargs)

    # Dask refuses ``dask.compute(a, b)`` of collections whose default schedulers differ. Ours is Dask's local
    # threaded scheduler with our ordering and memory handling, and runs any graph: it stands in for
    # ``dask.threaded.get`` (dask.array's and dask.dataframe's default) and for the other backend's, so that
    # mixing gnp Arrays with those collections computes on the first collection's scheduler, as in Dask.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, CollectionScheduler) or other is dask.threaded.get

    def __hash__(self) -> int:
        return hash(dask.threaded.get)

    def persist(self, collections: Sequence[Any], optimize_graph: bool = True, **kwargs: Any) -> list:
        """The collections persisted, as ``dask.persist`` makes them (Arrays of one tree optimized together)."""
        ours = [c for c in collections if is_array(c)]
        if kwargs or not optimize_graph or dask.callbacks.Callback.active or len({a.backend for a in ours}) != 1:
            return list(dask.base.persist(*collections, scheduler=self.get, optimize_graph=optimize_graph,
                                          **kwargs))
        if len(ours) == len(collections):
            return persist_many_local(collections)
        # among other collections: ours persisted together here and the others by Dask, which would make each of
        # ours a graph apart (Arrays sharing a fused kernel name its tasks alike, one graph's overwriting another's)
        mine = iter(persist_many_local(ours))
        theirs = iter(dask.base.persist(*(c for c in collections if not is_array(c)), scheduler=self.get))
        return [next(mine) if is_array(c) else next(theirs) for c in collections]


def persist_many_local(arrays: Sequence[Any]) -> list:
    """``dask.persist(*arrays)`` of Arrays of one backend on the local scheduler without the collection machinery of
    ``dask.persist``: their trees optimized together (one compiled graph, cached; shared work done once), run straight
    on the scheduler, each Array rebuilt on its blocks (carrying the device checks its tasks left unread)."""
    graph, per_array = compiled_outputs([a.expr for a in arrays], finalized=False)
    keys = [k for ks in per_array for k in ks]
    with Deferral() as deferral:
        values = dict(zip(keys, _run_local(arrays[0], graph, keys)))
    checks = deferral.checks
    if len(arrays) > 1:  # which array a check belongs to is not known: read them now
        verify(checks)
    out = []
    for a, ks in zip(arrays, per_array):
        rebuild, state = a.__dask_postpersist__()
        out.append(rebuild(with_checks({k: values[k] for k in ks}, checks), *state))
    return out


_COLLECTION_SCHEDULERS = {backend: CollectionScheduler(local_scheduler(backend)) for backend in ("cupy", "numpy")}


def collection_scheduler(backend: str) -> CollectionScheduler:
    """The scheduler an Array of ``backend`` names as its own (``__dask_scheduler__``)."""
    return _COLLECTION_SCHEDULERS[backend]


def _host(value: Any) -> Any:
    host = to_numpy(value)
    return host.item() if host.ndim == 0 else host
