"""The elementwise functions (ufuncs): one entry each, the one place to add or change one.

An entry names the NumPy (and CuPy) function blocks compute with (an ``Elemwise`` node's op), the gnp
functions made of it, its arity, and, where a fused kernel can compute it,
how: its dtype rule, the operand dtypes the kernel takes, and its C++ template (with the ``__device__``
helper it needs, if any). The NumPy result dtype of each call is NumPy's own (``api.elementwise``).
"""
from __future__ import annotations

from typing import NamedTuple


class Ufunc(NamedTuple):
    """One elementwise function.

    ``rule`` (empty: no kernel computes it; blocks call NumPy/CuPy): "arith" computes in the output dtype,
    "compare" in the operands' common dtype with a bool result, "predicate" in the operand's dtype with a
    bool result, "where" selects, "astype" converts. ``operands``: the compute dtypes a kernel takes ("any",
    "float", "num": not bool, "int": integers and bool). ``template``: C++ with ``{0}``, ``{1}``, ... for the
    operands, ``{T}`` for the compute type, ``{f}`` for the float-function suffix ("f" for float, "" for
    double); ``helper``: C++ ``__device__`` functions the template calls. (The Python operators are
    ``Array``'s, in ``api.array``.)"""

    numpy: str
    names: tuple[str, ...]
    arity: int
    rule: str = ""
    operands: str = "any"
    template: str = ""
    helper: str = ""


def _calls(entries: str, arity: int, rule: str = "arith", operands: str = "float", prefix: str = "",
           suffix: str = "{f}") -> list[Ufunc]:
    """Functions that are a call of a C++ function (default: CUDA's libm function, ``sin{f}``): "numpy" or
    "numpy:c-name" each; the C name is also gnp's other name (``acos`` for ``arccos``)."""
    ufuncs = []
    for entry in entries.split():
        numpy, _, c = entry.partition(":")
        args = ", ".join(f"{{{k}}}" for k in range(arity))
        ufuncs.append(Ufunc(numpy, (c, numpy) if c else (numpy,), arity, rule, operands,
                            f"{prefix}{c or numpy}{suffix}({args})"))
    return ufuncs


def _infix(rule: str, operands: str, entries: dict[str, str], cast: str = "") -> list[Ufunc]:
    """Binary functions that are a C++ infix operator: ``{numpy: operator}``."""
    return [Ufunc(numpy, (numpy,), 2, rule, operands, f"{cast}({{0}} {op} {{1}})") for numpy, op in entries.items()]


def _block_only(entries: str, arity: int) -> list[Ufunc]:
    """Functions no kernel computes (blocks call NumPy/CuPy): "numpy" or "numpy:other-name" each."""
    return [Ufunc(numpy, (names, numpy) if names else (numpy,), arity)
            for numpy, _, names in (entry.partition(":") for entry in entries.split())]


UFUNCS: dict[str, Ufunc] = {u.numpy: u for u in (
    *_calls("arccos:acos arccosh:acosh arcsin:asin arcsinh:asinh arctan:atan arctanh:atanh ceil cos cosh exp expm1 "
            "floor log log1p log2 log10 sin sinh sqrt tan tanh trunc exp2 cbrt fabs rint", 1),
    *_calls("arctan2:atan2 copysign hypot fmax fmin power:pow", 2),
    *_calls("isfinite isinf isnan", 1, "predicate", "any", prefix="gnp_", suffix=""),
    *_calls("absolute:abs", 1, "arith", "any", prefix="gnp_", suffix=""),
    *_calls("sign", 1, "arith", "num", prefix="gnp_", suffix=""),
    *_calls("maximum minimum", 2, "arith", "any", prefix="gnp_", suffix=""),
    *_calls("floor_divide logaddexp", 2, prefix="gnp_", suffix=""),
    *_infix("arith", "any", {"add": "+", "subtract": "-", "multiply": "*"}, cast="({T})"),
    *_infix("arith", "int", {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}, cast="({T})"),
    *_infix("compare", "any", {"equal": "==", "not_equal": "!=", "greater": ">", "greater_equal": ">=", "less": "<",
                               "less_equal": "<="}),
    *_block_only("imag sinc fix", 1),
    *_block_only("left_shift:bitwise_left_shift right_shift:bitwise_right_shift nextafter fmod float_power "
                 "heaviside ldexp gcd lcm", 2),
    *(Ufunc(numpy, (numpy,), 1, 'arith', 'float', f'({{0}} * ({{T}}){factor})') for numpy, factor in (
        ('degrees', 57.29577951308232), ('radians', 0.017453292519943295), ('deg2rad', 0.017453292519943295),
        ('rad2deg', 57.29577951308232))),
    Ufunc('invert', ('bitwise_invert', 'invert'), 1, 'arith', 'int', 'gnp_invert({0})'),
    Ufunc('logical_not', ('logical_not',), 1, 'predicate', 'any', '(!(bool){0})'),
    Ufunc('negative', ('negative',), 1, 'arith', 'num', '({T})(-{0})'),
    Ufunc('positive', ('positive',), 1, 'arith', 'num', '({0})'),
    Ufunc('real', ('real',), 1, 'arith', 'any', '({0})'),
    Ufunc('conjugate', ('conj', 'conjugate'), 1, 'arith', 'any', '({0})'),
    Ufunc('reciprocal', ('reciprocal',), 1, 'arith', 'float', '(({T})1 / {0})'),
    Ufunc('signbit', ('signbit',), 1, 'predicate', 'float', '(copysign{f}(({T})1, {0}) < ({T})0)'),
    Ufunc('square', ('square',), 1, 'arith', 'num', '({T})({0} * {0})'),
    Ufunc('true_divide', ('divide', 'true_divide'), 2, 'arith', 'float', '({0} / {1})'),
    Ufunc('logical_and', ('logical_and',), 2, 'compare', 'any', '((bool){0} && (bool){1})'),
    Ufunc('logical_or', ('logical_or',), 2, 'compare', 'any', '((bool){0} || (bool){1})'),
    Ufunc('logical_xor', ('logical_xor',), 2, 'compare', 'any', '((bool){0} != (bool){1})'),
    Ufunc('remainder', ('remainder', 'mod'), 2, 'arith', 'float', 'gnp_remainder({0}, {1})'),
    Ufunc('logaddexp2', ('logaddexp2',), 2, 'arith', 'float', 'gnp_logaddexp2({0}, {1})', helper=r"""
/* NumPy's npy_logaddexp2: log2(2**x + 2**y) */
__device__ __forceinline__ float gnp_logaddexp2(float x, float y) {
    if (x == y) return x + 1.0f;
    const float d = x - y;
    return d > 0.0f ? x + 1.442695040888963407359924681001892137f * log1pf(exp2f(-d))
                    : (d <= 0.0f ? y + 1.442695040888963407359924681001892137f * log1pf(exp2f(d)) : d);
}
__device__ __forceinline__ double gnp_logaddexp2(double x, double y) {
    if (x == y) return x + 1.0;
    const double d = x - y;
    return d > 0.0 ? x + 1.442695040888963407359924681001892137 * log1p(exp2(-d))
                   : (d <= 0.0 ? y + 1.442695040888963407359924681001892137 * log1p(exp2(d)) : d);
}
"""),
    Ufunc('where', (), 3, 'where', 'any', '((bool){0} ? {1} : {2})'),
    Ufunc('clip', (), 3),
    Ufunc('round', (), 1, 'arith', 'float', 'rint{f}({0})'),
    Ufunc('astype', (), 1, 'astype', 'any', '({0})'),
)}

#: gnp function name -> the NumPy/CuPy function blocks compute it with (the functions with an API of their
#: own, such as ``where`` and ``round``, under their NumPy name).
BLOCK_FUNCTION: dict[str, str] = {
    **{name: u.numpy for u in UFUNCS.values() for name in u.names},
    **{u.numpy: u.numpy for u in UFUNCS.values() if not u.names},
}


def fusable(func: str) -> bool:
    """Whether a fused kernel can compute the NumPy function ``func``."""
    return func in UFUNCS and bool(UFUNCS[func].rule)
