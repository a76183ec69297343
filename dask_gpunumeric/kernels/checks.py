"""Value checks left on the device: a routine's status (cuSOLVER's ``info``) is read when the result is
delivered, not in the middle of the call, since reading it waits for the device.

A task leaves its check with ``check_later``. A delivery (``Delivery``: ``gnp.fetch``, ``compute()``,
``dask.compute``) reads the checks its tasks left in one copy to the host, at its end, and raises the first
failed one's error. A persist (``Deferral``) keeps them with the persisted blocks (``CheckedBlocks``); a later
run reading those blocks leaves them to its own delivery (``checked_block``). Where no delivery collects them
(tasks on a cluster's workers, Dask's threads), a check is read at once, in the task."""
from __future__ import annotations

import contextvars
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..backend import namespace, to_numpy


class Check:
    """A status on the device (zero where the value is good), the error its failure raises and the routine
    that wrote it (``source``, told in a note of the error)."""

    __slots__ = ("status", "error", "message", "source", "passed")

    def __init__(self, status: Any, error: type[Exception], message: str, source: str) -> None:
        self.status, self.error, self.message, self.source = status, error, message, source
        self.passed = False  # read and found good: never read again


_RUN: contextvars.ContextVar[list[Check] | None] = contextvars.ContextVar("gnp_deferred_checks", default=None)


def check_later(check: Check) -> None:
    """Leave ``check`` to the delivery (or persist) of the run in progress in this thread; with none, read it
    now."""
    run = _RUN.get()
    if run is None:
        verify([check])
    else:
        run.append(check)


def verify(checks: Iterable[Check]) -> None:
    """Read the statuses of the checks not passed yet (one copy to the host) and raise the first failed one's
    error."""
    live = [c for c in dict.fromkeys(checks) if not c.passed]  # (a check left twice is read once)
    if not live:
        return
    statuses = [c.status.ravel() for c in live]
    host = to_numpy(statuses[0] if len(statuses) == 1 else namespace(*statuses).concatenate(statuses))
    start = 0
    for check in live:
        if host[start : start + check.status.size].any():
            error = check.error(check.message)
            error.add_note(f"dask_gpunumeric: told by the status of {check.source} on the device, read when its "
                           "result (or a result computed from it) was delivered")
            raise error
        start += check.status.size
    for check in live:
        check.passed = True


class Delivery:
    """A context delivering results: the checks its tasks leave are read at its end; inside another delivery or
    a ``Deferral``, they are left to that one. A run that fails is checked too: a later task may have failed on
    the values of a failed check (NaN from a singular matrix), whose error NumPy would have raised first."""

    __slots__ = ("_checks", "_token")

    def __enter__(self) -> None:
        if _RUN.get() is None:
            self._checks: list[Check] = []
            self._token: contextvars.Token | None = _RUN.set(self._checks)
        else:
            self._token = None

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if self._token is not None:
            _RUN.reset(self._token)
            if self._checks:
                verify(self._checks)


class Deferral:
    """A context keeping the checks its tasks leave in ``checks``, unread: a persist's, which its blocks carry
    (read if the run fails, as in a ``Delivery``)."""

    __slots__ = ("checks", "_token")

    def __enter__(self) -> Deferral:
        self.checks: list[Check] = []
        self._token = _RUN.set(self.checks)
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        _RUN.reset(self._token)
        if kind is not None and self.checks:
            verify(self.checks)


class CheckedBlocks(dict):
    """Persisted blocks by key, with the checks of the run that made them (``checks``), not read yet."""

    def __init__(self, blocks: Mapping, checks: Sequence[Check]) -> None:
        super().__init__(blocks)
        self.checks = tuple(checks)


def with_checks(blocks: dict, checks: Sequence[Check]) -> dict:
    """Persisted blocks carrying ``checks`` (``CheckedBlocks``), or as they are when there are none to carry."""
    live = [c for c in dict.fromkeys(checks) if not c.passed]
    return CheckedBlocks(blocks, live) if live else blocks


def unread_checks(blocks: Mapping) -> tuple[Check, ...]:
    """The checks persisted blocks carry that are not passed yet."""
    checks = getattr(blocks, "checks", ())
    return tuple(c for c in checks if not c.passed) if checks else ()


def checked_block(block: Any, checks: Sequence[Check]) -> Any:
    """A persisted block, its checks left to the run reading it (``check_later``)."""
    for check in checks:
        check_later(check)
    return block
