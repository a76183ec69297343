"""Python and NumPy scalars given to an accelerated function, traced by kind rather than by value, so that one
plan serves every value (``gnp.accelerate``).

While a function is traced, such an argument is a ``Param``. Arithmetic among Params and numbers is recorded
and replayed on the host at each call, with Python's and NumPy's own operators (same values, same types).
Where a Param meets an array in an elementwise operation it becomes a 0-d placeholder of the dtype NumPy
converts it to there (NEP 50: Python scalars are weak, NumPy scalars strong; ``elementwise`` picks it), an
input of the plan given each call's value. A use that needs the value itself (``bool``, ``int``, an index,
a shape, a format) refuses (``ValueNeeded``), and the function is traced again with the arguments that value
is computed from by value.
"""
from __future__ import annotations

import hashlib
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..expr import FromGraph
from ..runtime.regions.nodes import Placeholder
from .array import NUMPY_NUMBERS

#: the types of the arguments traced as Params (``np.generic``'s numbers: strong scalars of their dtype)
KINDS = frozenset({bool, int, float, complex, *NUMPY_NUMBERS})


class ValueNeeded(Exception):
    """A traced scalar's value was needed while its function was traced (not a TypeError: code that catches
    those must not take another branch silently)."""


class Param:
    """A scalar argument of an accelerated function while it is traced (or a value computed from such
    arguments): a number of a known type whose value each call gives."""

    __slots__ = ("_trace", "_index", "_value", "_leaves")

    def __init__(self, trace: ScalarTrace, index: int, value: Any, leaves: frozenset[int]) -> None:
        # (the value: for its type's rules only; the leaves: the arguments it is computed from)
        self._trace, self._index, self._value, self._leaves = trace, index, value, leaves

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        self._trace.refuse([self], "this use of a scalar argument needs its value while the function is traced")

    __bool__ = __index__ = __int__ = __float__ = __complex__ = __len__ = __iter__ = __hash__ = _refuse
    __format__ = __str__ = __round__ = __trunc__ = __floor__ = __ceil__ = __array__ = _refuse
    __dask_tokenize__ = __reduce_ex__ = __copy__ = __deepcopy__ = _refuse

    def __repr__(self) -> str:
        return f"<traced {type(self._value).__name__} argument of gnp.accelerate>"

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method != "__call__" or kwargs or not all(type(i) is Param or type(i) in KINDS for i in inputs):
            return NotImplemented  # (an Array among the inputs: its own __array_ufunc__ takes it)
        return self._trace.derived(ufunc, inputs)

    def __array_function__(self, func: Callable, types: Any, args: Any, kwargs: Any) -> Any:
        return NotImplemented


def _operator(func: Callable, reflected: bool = False) -> Callable:
    def apply(self: Param, other: Any) -> Any:
        if type(other) is not Param and type(other) not in KINDS:
            return NotImplemented  # (an Array's reflected operator takes it)
        return self._trace.derived(func, (other, self) if reflected else (self, other))

    return apply


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift"):
    _func = getattr(operator, f"{_name}_" if _name in ("and", "or") else _name)
    setattr(Param, f"__{_name}__", _operator(_func))
    setattr(Param, f"__r{_name}__", _operator(_func, reflected=True))
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(Param, f"__{_name}__", _operator(getattr(operator, _name)))
for _name in ("neg", "pos", "abs", "invert"):
    setattr(Param, f"__{_name}__", lambda self, _f=getattr(operator, _name): self._trace.derived(_f, (self,)))


class ScalarTrace:
    """The Params of one trace: the arguments', then those computed from them (each ``(function, operands)``,
    a Param operand by its index), with the type each had, and the placeholders the arrays met."""

    def __init__(self, signature: str, values: Sequence[Any]) -> None:
        self.signature = signature
        self.needed: set[int] = set()  # the arguments whose values a refused use needed
        self.steps: list[tuple[Callable, tuple] | None] = []
        self.kinds: list[type] = []
        self.inputs: dict[tuple[int, np.dtype, str], Placeholder] = {}
        self._known: dict[tuple, Param] = {}  # derived Params by computation
        self.leaves = [self._new(None, v, frozenset({k})) for k, v in enumerate(values)]

    def _new(self, step: tuple[Callable, tuple] | None, value: Any, leaves: frozenset[int]) -> Param:
        self.steps.append(step)
        self.kinds.append(type(value))
        return Param(self, len(self.steps) - 1, value, leaves)

    def refuse(self, params: Sequence[Param], what: str) -> None:
        """Raise ``ValueNeeded`` for a use of ``params`` that needs values: the arguments they are computed
        from are then traced by value."""
        self.needed.update(*(p._leaves for p in params))
        raise ValueNeeded(f"gnp.accelerate: {what}; traced by value instead")

    def derived(self, func: Callable, operands: Sequence[Any]) -> Param:
        """The Param of ``func(*operands)``: computed now for its type, and at each call for its value; the
        same computation written again (``0.5 * dt`` per stage of a step) is the same Param."""
        step = (func, tuple((True, o._index) if type(o) is Param else (False, o) for o in operands))
        key = (func, tuple(o if ref else (type(o), np.asarray(o).tobytes()) for ref, o in step[1]))  # (-0.0 apart)
        known = self._known.get(key)
        if known is not None:
            return known
        params = [o for o in operands if type(o) is Param]
        value = func(*[o._value if type(o) is Param else o for o in operands])
        if type(value) not in KINDS:  # (a tuple of results, an object)
            self.refuse(params, f"{func!r} of scalar arguments gave a {type(value).__name__}")
        known = self._known[key] = self._new(step, value, frozenset().union(*(p._leaves for p in params)))
        return known

    def placeholder(self, param: Param, dtype: np.dtype, backend: str) -> Placeholder:
        """The 0-d placeholder of ``param`` converted to ``dtype`` on ``backend`` blocks."""
        key = (param._index, dtype, backend)
        found = self.inputs.get(key)
        if found is None:
            found = self.inputs[key] = Placeholder(f"scalar{len(self.inputs)}", self.signature, (), dtype, backend)
        return found

    def scalars(self) -> Scalars:
        """What a call needs to make the placeholders' arguments from its scalar arguments."""
        derived = [(step[0], step[1], kind) for step, kind in zip(self.steps, self.kinds) if step is not None]
        return Scalars(derived, [(k, dtype, backend, self.kinds[k] is int) for k, dtype, backend in self.inputs])


class Scalars:
    """A plan's scalar inputs: how each call's scalar arguments make them."""

    def __init__(self, derived: list[tuple[Callable, tuple, type]], inputs: list[tuple[int, np.dtype, str, bool]]
                 ) -> None:
        self.derived, self.inputs = derived, inputs
        self._last: tuple[tuple, list[FromGraph] | None] = ((), None)  # the latest call's values and arguments

    def arguments(self, leaves: Sequence[Any]) -> list[FromGraph] | None:
        """The 0-d arguments of the plan's scalar placeholders for these scalar arguments; None where the plan
        cannot take them (a computed value of another type than traced, an error computing one, an int that
        the dtype it meets does not hold exactly): a plan by value then gives NumPy's answer (or error). Values
        repeated from the latest call (a constant of the caller's) give its arguments again."""
        key = tuple(map(repr, leaves))  # (by type and value, -0.0 apart from 0.0)
        last = self._last
        if last[0] == key:
            return last[1]
        arguments = self._arguments(leaves)
        self._last = (key, arguments)
        return arguments

    def _arguments(self, leaves: Sequence[Any]) -> list[FromGraph] | None:
        values = list(leaves)
        try:
            for func, operands, kind in self.derived:
                value = func(*[values[o] if ref else o for ref, o in operands])
                if type(value) is not kind:
                    return None
                values.append(value)
            arguments = []
            for k, dtype, backend, exact in self.inputs:
                value = np.asarray(values[k], dtype)[()]
                if exact and int(value) != values[k]:
                    return None
                token = hashlib.sha1(b"%s|%s" % (dtype.str.encode(), value.tobytes())).hexdigest()[:32]
                name = f"scalar-{token}"
                # the block a NumPy scalar on either backend: kernels take it as an argument (kernels.fused)
                arguments.append(FromGraph.of({(name,): value}, name, (), dtype, backend))
        except (ArithmeticError, ValueError, TypeError):
            return None
        return arguments
