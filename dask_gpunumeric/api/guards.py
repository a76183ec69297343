"""The three guards of cuNumeric semantics: allowscalar, allowpromotion, allowfetch.

Each guard has a mode: ``"warn"`` (the default: a ``GuardWarning`` subclass, once per call site),
``"error"`` (strict: cuNumeric.jl's behaviour) or ``"allow"`` (silent). Set them globally with
``gnp.config.set(guards="error")`` (or a dict ``{"fetch": "allow"}``, or one guard's setting
``allow_fetch=True``/``"warn"``), or locally with ``with gnp.allowfetch():`` / ``@gnp.allowfetch``, whose
state lives in a ``contextvars.ContextVar`` and so reaches code of other libraries called inside.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np

from .. import config

F = TypeVar("F", bound=Callable[..., Any])

MODES = ("warn", "error", "allow")


class ScalarIndexingError(IndexError):
    """Indexing selected a single element of an Array (one task graph per element) under guard mode "error"."""


class PromotionError(TypeError):
    """An operation implicitly widened an operand's dtype under guard mode "error"."""


class FetchError(TypeError):
    """A lazy Array was implicitly computed into a host value under guard mode "error"."""


class GuardWarning(UserWarning):
    """A guard (allowscalar, allowpromotion, allowfetch) saw what it guards, under its default mode "warn"."""


class ScalarIndexingWarning(GuardWarning):
    """Indexing selected a single element of an Array (or iterated over one)."""


class PromotionWarning(GuardWarning):
    """An operation implicitly widened an operand's dtype."""


class FetchWarning(GuardWarning):
    """A lazy Array was implicitly computed into a host value (``float(x)``, ``if x:``, ``np.asarray(x)``)."""


def _mode(value: Any, setting: str) -> str:
    if value is True or value is False:
        return "allow" if value else "error"
    if value not in MODES:
        raise ValueError(f"gnp.config: {setting} must be one of {MODES} (or True/False), got {value!r}")
    return value


def configured_mode(guard: str) -> str:
    """The global mode of ``guard`` ("scalar", "promotion" or "fetch"): its own ``allow-<guard>`` setting
    when set, else ``guards`` (a mode, or a dict of modes by guard)."""
    own = config.get(f"allow-{guard}")
    if own is not None:
        return _mode(own, f"allow_{guard}")
    value = config.get("guards")
    if isinstance(value, dict):
        return _mode(value.get(guard, "warn"), f"guards[{guard!r}]")
    return _mode(value, "guards")


class _Event(NamedTuple):
    """A guard that fired while an accelerated function (or a loop body) was traced, replayed on each call of its plan;
    ``inside``: the local mode in force there when set inside the traced function (else None: the call's)."""

    switch: _Switch
    message: str
    site: tuple | None
    inside: str | None


class _Local(NamedTuple):
    """A mode set by ``with switch():`` and the recording in force where it was set (a traced function's, or None)."""

    mode: str
    recording: list[_Event] | None


_UNTRACED = {mode: _Local(mode, None) for mode in MODES}  # (the common case, made once)

_RECORDING: contextvars.ContextVar[list[_Event] | None] = contextvars.ContextVar("gnp_guard_events", default=None)


@contextlib.contextmanager
def recorded() -> Iterator[list[_Event]]:
    """Collect the guard checks made inside (``accelerate`` traces a function once and replays them per call)."""
    events: list[_Event] = []
    token = _RECORDING.set(events)
    try:
        yield events
    finally:
        _RECORDING.reset(token)


def tracing() -> bool:
    """Whether guard checks are being recorded (``recorded``: an accelerated function traced)."""
    return _RECORDING.get() is not None


def replay(events: Sequence[_Event]) -> None:
    """Check again the guards recorded while a plan was traced: under the local mode set inside the traced
    function where one was in force, else under the modes in force now."""
    for event in events:
        event.switch.signal(event.message, event.site, event.inside)


class _Switch:
    """A guard usable as ``with switch():``, as ``@switch`` and as ``@switch()``."""

    def __init__(self, name: str, guard: str, error: type[Exception], warning: type[GuardWarning]) -> None:
        self.__name__ = name
        self.guard = guard
        self.error = error
        self.warning = warning
        self._var: contextvars.ContextVar[_Local | None] = contextvars.ContextVar(name, default=None)

    def mode(self) -> str:
        """"warn", "error" or "allow": the local mode (inside ``with switch():``) or else the configured one."""
        local = self._var.get()
        return configured_mode(self.guard) if local is None else local.mode

    def enabled(self) -> bool:
        """True when allowed silently here."""
        return self.mode() == "allow"

    def __call__(self, func: F | None = None, *, enabled: bool = True) -> Any:
        """A context manager (or, given ``func``, a decorated ``func``) in which the guard is "allow"
        (``enabled=False``: "error", to insist on it locally)."""
        mode = "allow" if enabled else "error"
        if func is None:
            return _SwitchContext(self._var, mode)
        return _SwitchContext(self._var, mode)(func)

    def silenced(self) -> bool:
        """Allowed locally and nothing recorded: the common case inside ``with gnp.allowX():``, decided
        without building a message or reading the configuration."""
        local = self._var.get()
        return local is not None and local.mode == "allow" and _RECORDING.get() is None

    def check(self, message: str) -> None:
        """Act on ``message`` (what happened and how to avoid it) as the mode says: nothing, warn once per
        call site, or raise."""
        if self.silenced():
            return
        site = _user_site()
        events = _RECORDING.get()
        if events is not None:
            local = self._var.get()  # (set inside the traced function: its mode holds on every call)
            inside = local.mode if local is not None and local.recording is events else None
            events.append(_Event(self, message, site, inside))
        self.signal(message, site)

    def signal(self, message: str, site: tuple | None, mode: str | None = None) -> None:
        """Warn (at ``site``, the user's line) or raise, as ``mode`` says, by default the mode in force."""
        mode = mode or self.mode()
        if mode == "allow":
            return
        if mode == "error":
            raise self.error(message)
        _warn(message, self.warning, site)

    def __repr__(self) -> str:
        return f"<gnp.{self.__name__}: {self.mode()}>"


class _SwitchContext:
    def __init__(self, var: contextvars.ContextVar[_Local | None], mode: str) -> None:
        self._var = var
        self._mode = mode
        self._untraced = _UNTRACED[mode]
        self._tokens: list[contextvars.Token[_Local | None]] = []

    def __enter__(self) -> None:
        recording = _RECORDING.get()
        self._tokens.append(self._var.set(self._untraced if recording is None else _Local(self._mode, recording)))

    def __exit__(self, *exc: object) -> None:
        self._var.reset(self._tokens.pop())

    def __call__(self, func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _SwitchContext(self._var, self._mode):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def _library_dirs() -> tuple[str, ...]:
    """Folders whose frames are not the user's call site: this package, NumPy, Dask, xarray, contextlib."""
    dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(np.__file__),
            contextlib.__file__, functools.__file__]
    for name in ("dask", "xarray"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(spec.submodule_search_locations)
    return tuple(dirs)


_LIBRARY_DIRS = _library_dirs()


def _user_site() -> tuple | None:
    """(file, line, module globals) of the innermost frame outside the libraries above, or None."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
        frame = frame.f_back
    return None if frame is None else (frame.f_code.co_filename, frame.f_lineno, frame.f_globals)


def warn_at_user_site(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the user's line (the innermost frame outside the libraries)."""
    _warn(message, category, _user_site())


def _warn(message: str, category: type[Warning], site: tuple | None) -> None:
    if site is None:
        warnings.warn(message, category, stacklevel=3)
        return
    filename, lineno, module_globals = site
    registry = module_globals.setdefault("__warningregistry__", {})
    warnings.warn_explicit(message, category, filename, lineno, module_globals.get("__name__"), registry)


allowscalar = _Switch("allowscalar", "scalar", ScalarIndexingError, ScalarIndexingWarning)
allowscalar.__doc__ = "Allow indexing single elements of Arrays (and iterating over them): ``with gnp.allowscalar():``."
allowpromotion = _Switch("allowpromotion", "promotion", PromotionError, PromotionWarning)
allowpromotion.__doc__ = "Allow operations that implicitly widen an operand's dtype: ``with gnp.allowpromotion():``."
allowfetch = _Switch("allowfetch", "fetch", FetchError, FetchWarning)
allowfetch.__doc__ = "Allow implicit computation of lazy Arrays into host values: ``with gnp.allowfetch():``."

_SETTING = "(or set gnp.config.set(guards=\"allow\") / guards=\"error\" for the whole program)"


def _cost(backend: str, one: str) -> str:
    """What one such access costs, true for the backend."""
    if backend == "cupy":
        return f"moves {one} between the GPU and the host per call"
    return f"runs a Dask graph per call for {one}"


def check_scalar_index(shape: tuple[int, ...], index: tuple[Any, ...], action: str, backend: str = "numpy") -> None:
    """Guard ``index`` when it selects one element of an array of ``shape``."""
    if allowscalar.silenced():
        return
    ints = [i for i in index if isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))]
    if shape and len(ints) == len(shape) and len(index) == len(ints):
        allowscalar.check(
            f"{action} a single element of an Array of shape {shape} {_cost(backend, 'one value')}; "
            "use slices or whole-array operations, or allow it with `with gnp.allowscalar():` "
            f"or @gnp.allowscalar {_SETTING}."
        )


def check_iteration(shape: tuple[int, ...], backend: str = "numpy") -> None:
    """Guard iteration over an Array."""
    allowscalar.check(
        f"iterating over an Array of shape {shape} indexes it one row at a time and "
        f"{_cost(backend, 'each row')}; use whole-array operations, or allow it with "
        f"`with gnp.allowscalar():` {_SETTING}."
    )


def _precision(dtype: np.dtype) -> int:
    """Bytes per real number (a complex number holds two): float32 -> complex64 is no widening."""
    return dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize


def widened(operand_dtypes: list[np.dtype], common: np.dtype) -> list[np.dtype]:
    """The (non-boolean) operand dtypes that ``common`` is wider than."""
    return [d for d in operand_dtypes if d.kind != "b" and _precision(common) > _precision(d)]


def check_promotion(op: str, operand_dtypes: list[np.dtype], common: np.dtype, scalars: Sequence[Any] = ()) -> None:
    """Guard an operation whose ``common`` dtype is wider than one of the (non-boolean) array operands'
    dtypes; ``scalars`` are its other operands, named in the message when they are NumPy scalars (whose
    dtype counts, unlike a Python number's)."""
    widened_dtypes = widened(operand_dtypes, common)
    if not widened_dtypes or allowpromotion.silenced():
        return
    names = [f"{d} array" for d in operand_dtypes]
    names += [f"a {type(s).__module__}.{type(s).__name__} scalar" for s in scalars if isinstance(s, np.generic)]
    allowpromotion.check(
        f"{op}: operands ({', '.join(names)}) are implicitly promoted to {common}, which widens "
        f"{', '.join(str(d) for d in widened_dtypes)}; convert explicitly with .astype({str(common)!r}) "
        "(or make the other operand narrower, e.g. np.float32(...) or a Python number), "
        f"or allow it with `with gnp.allowpromotion():` {_SETTING}."
    )


def check_fetch(what: str, backend: str = "numpy") -> None:
    """Guard an implicit computation of a lazy Array into a host value; ``what`` names the conversion."""
    if allowfetch.silenced():
        return
    where = ("waits for the computation and copies its result from the GPU to the host" if backend == "cupy"
             else "computes the lazy expression on the spot (its blocks are NumPy arrays on the host)")
    allowfetch.check(
        f"{what} {where}; fetch explicitly with gnp.fetch(x) (or x.item()), or allow it with "
        f"`with gnp.allowfetch():` {_SETTING}."
    )


def describe(x: Any) -> str:
    """A stable description of an Array for messages (the same at every iteration of a loop)."""
    return f"a lazy {x.ndim}-d {x.dtype} Array"
