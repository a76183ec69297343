"""The expression nodes a region is made of besides the optimized graph's: the placeholders of a traced
function's arguments, and loops (``gnp.fori_loop``/``gnp.while_loop``) with their outputs."""
from __future__ import annotations

import functools
import hashlib
from typing import Any

import numpy as np

from ...expr import ArrayExpr, cached


class Placeholder(ArrayExpr):
    """Argument ``i`` of an accelerated function while it is traced: metadata only, no tasks (computing it, or
    anything made from it, raises ``TracedValueError``: ``runtime.compile``)."""

    _parameters = ["i", "signature", "chunks", "dtype", "backend"]
    has_value = False

    @cached
    def _funcname(self) -> str:
        return f"arg{self.operand('i')}"

    def _layer(self) -> dict:
        return {}


class Loop(ArrayExpr):
    """A loop: ``body`` (a Plan over placeholders for the state, the iteration number of a fori_loop, and the
    loop invariants) repeated ``count`` times, or while its condition holds (at most ``count`` times; None:
    no bound). Operands: the initial state, the condition on it (while_loop), then the invariants. Its
    results are ``LoopOutput`` nodes; it is lowered only as a step of a region's programs (``build``)."""

    _parameters = ["body", "count", "n_state", "kind"]
    body: Any  # the loop body's Plan (``plan.Plan``)
    chunks = ()
    dtype = np.dtype(bool)
    backend = "numpy"

    def __dask_tokenize__(self) -> str:
        if not self._determ_token:
            text = "|".join([self.kind, repr(self.count), self.body.token, *(o._name for o in self.args)])
            self._determ_token = hashlib.sha1(text.encode()).hexdigest()
        return self._determ_token

    @functools.cached_property
    def _funcname(self) -> str:
        return f"{self.kind}-loop"


    @property
    def is_while(self) -> bool:
        return self.kind == "while"

    @property
    def state(self) -> list[ArrayExpr]:
        return self.args[: self.n_state]

    @property
    def flag(self) -> ArrayExpr:
        """cond(initial state) of a while_loop."""
        return self.args[self.n_state]

    @property
    def invariants(self) -> list[ArrayExpr]:
        return self.args[self.n_state + self.is_while :]


class LoopOutput(ArrayExpr):
    """Element ``k`` of a loop's final state."""

    _parameters = ["loop", "k"]

    @functools.cached_property
    def _funcname(self) -> str:
        return self.loop._funcname

    @property
    def _state(self) -> Placeholder:
        return self.loop.body.inputs[self.operand("k")]

    @functools.cached_property
    def chunks(self) -> tuple:
        return self._state.chunks

    @functools.cached_property
    def dtype(self) -> np.dtype:
        return self._state.dtype

    @functools.cached_property
    def backend(self) -> str:
        return self._state.backend
