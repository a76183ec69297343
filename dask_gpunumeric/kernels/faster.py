"""The faster of our kernel and the library's routine for one kind of call, measured on the device the first time
that kind of call comes (both run and timed with events, a synchronization once per kind and process), then
always the same one: the plan takes our kernels only where they win on the device at hand."""
from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

TIMED_RUNS = 3  # of each, after one to warm up (module loading, memory pools): the fastest counts

_ours_won: dict[Hashable, bool] = {}
_lock = threading.Lock()


def faster(key: Hashable, ours: Callable[[], Any], library: Callable[[], Any]) -> Any:
    """The result of ``ours()`` where it was measured faster than ``library()`` for calls of ``key`` (same
    device, dtype and sizes), else of ``library()``; the first call of ``key`` measures both."""
    won = _ours_won.get(key)
    if won is None:
        with _lock:  # one measurement at a time: two would time each other
            won = _ours_won.get(key)
            if won is None:
                won = _ours_won[key] = ours_faster(ours, library)
    return ours() if won else library()


def ours_faster(ours: Callable[[], Any], library: Callable[[], Any]) -> bool:
    """Whether ``ours`` takes less device time than ``library`` (the fastest of ``TIMED_RUNS`` each)."""
    import cupy

    best = []
    for run in (ours, library):
        run()
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        times = []
        for _ in range(TIMED_RUNS):
            start.record()
            run()
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop))
        best.append(min(times))
    return best[0] < best[1]
