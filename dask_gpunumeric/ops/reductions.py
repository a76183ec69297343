"""The reductions: one entry each, the one place to add or change one.

An entry names the reduction (a ``Reduction`` node's kind), whether fused kernels compute its per-block
partials (``fusable``), and for those how: the accumulator dtype, its C++ identity and the C++ combine of
two accumulators. The partial/combine/finish of blocks are ``kernels.blocks.reduce_*``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np


def _widened(value: np.dtype, out: np.dtype, params: tuple) -> np.dtype:
    """float64 for a float result, else the result dtype (sum, prod)."""
    return np.dtype(np.float64) if np.dtype(out).kind == "f" else np.dtype(out)


def _mean_sum(value: np.dtype, out: np.dtype, params: tuple) -> np.dtype:
    """float64 for a float sum dtype (``params[0]``), else that dtype."""
    return np.dtype(np.float64) if np.dtype(params[0]).kind == "f" else np.dtype(params[0])


def _boolean(value: np.dtype, out: np.dtype, params: tuple) -> np.dtype:
    return np.dtype(bool)


def _value(value: np.dtype, out: np.dtype, params: tuple) -> np.dtype:
    return np.dtype(value)


class Reduction(NamedTuple):
    """One reduction. ``accumulator(value_dtype, out_dtype, params)``: the dtype a kernel accumulates in;
    ``identity``: its C++ identity ("" for the extreme value of the accumulator's dtype, as min and max
    start from); ``combine``: C++ of two accumulators ``{a}``, ``{b}`` (empty: not fusable)."""

    name: str
    accumulator: Callable[[np.dtype, np.dtype, tuple], np.dtype] = _value
    identity: str = ""
    combine: str = ""

    @property
    def fusable(self) -> bool:
        """Whether fused kernels compute its partials."""
        return bool(self.combine)


REDUCTIONS: dict[str, Reduction] = {r.name: r for r in (
    Reduction("sum", _widened, "0", "{a} + {b}"),
    Reduction("mean", _mean_sum, "0", "{a} + {b}"),
    Reduction("prod", _widened, "1", "{a} * {b}"),
    Reduction("all", _boolean, "true", "{a} && {b}"),
    Reduction("any", _boolean, "false", "{a} || {b}"),
    Reduction("min", _value, "", "gnp_minimum({a}, {b})"),
    Reduction("max", _value, "", "gnp_maximum({a}, {b})"),
    Reduction("var"),
    Reduction("argmin"),
    Reduction("argmax"),
)}

#: The reductions whose partials fused kernels compute.
FUSABLE = frozenset(r.name for r in REDUCTIONS.values() if r.fusable)
