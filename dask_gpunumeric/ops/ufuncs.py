"""The elementwise functions (ufuncs): one entry each, the one place to add or change one.

An entry names the NumPy (and CuPy) function blocks compute with (an ``Elemwise`` node's op), the gnp
functions made of it, its arity, the Python operators that call it, and, where a fused kernel can compute it,
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
    double); ``helper``: C++ ``__device__`` functions the template calls. ``operators``: Python operator
    names ("add": ``__add__``, ``__radd__``, ``__iadd__``) that call ``names[0]``."""

    numpy: str
    names: tuple[str, ...]
    arity: int
    rule: str = ""
    operands: str = "any"
    template: str = ""
    operators: tuple[str, ...] = ()
    helper: str = ""


UFUNCS: dict[str, Ufunc] = {u.numpy: u for u in (
    Ufunc('absolute', ('abs', 'absolute'), 1, 'arith', 'any', 'gnp_abs({0})', operators=('abs',)),
    Ufunc('arccos', ('acos', 'arccos'), 1, 'arith', 'float', 'acos{f}({0})'),
    Ufunc('arccosh', ('acosh', 'arccosh'), 1, 'arith', 'float', 'acosh{f}({0})'),
    Ufunc('arcsin', ('asin', 'arcsin'), 1, 'arith', 'float', 'asin{f}({0})'),
    Ufunc('arcsinh', ('asinh', 'arcsinh'), 1, 'arith', 'float', 'asinh{f}({0})'),
    Ufunc('arctan', ('atan', 'arctan'), 1, 'arith', 'float', 'atan{f}({0})'),
    Ufunc('arctanh', ('atanh', 'arctanh'), 1, 'arith', 'float', 'atanh{f}({0})'),
    Ufunc('invert', ('bitwise_invert', 'invert'), 1, 'arith', 'int', 'gnp_invert({0})', operators=('invert',)),
    Ufunc('ceil', ('ceil',), 1, 'arith', 'float', 'ceil{f}({0})'),
    Ufunc('conjugate', ('conj', 'conjugate'), 1, 'arith', 'any', '({0})'),
    Ufunc('cos', ('cos',), 1, 'arith', 'float', 'cos{f}({0})'),
    Ufunc('cosh', ('cosh',), 1, 'arith', 'float', 'cosh{f}({0})'),
    Ufunc('exp', ('exp',), 1, 'arith', 'float', 'exp{f}({0})'),
    Ufunc('expm1', ('expm1',), 1, 'arith', 'float', 'expm1{f}({0})'),
    Ufunc('floor', ('floor',), 1, 'arith', 'float', 'floor{f}({0})'),
    Ufunc('imag', ('imag',), 1),
    Ufunc('isfinite', ('isfinite',), 1, 'predicate', 'any', 'gnp_isfinite({0})'),
    Ufunc('isinf', ('isinf',), 1, 'predicate', 'any', 'gnp_isinf({0})'),
    Ufunc('isnan', ('isnan',), 1, 'predicate', 'any', 'gnp_isnan({0})'),
    Ufunc('log', ('log',), 1, 'arith', 'float', 'log{f}({0})'),
    Ufunc('log1p', ('log1p',), 1, 'arith', 'float', 'log1p{f}({0})'),
    Ufunc('log2', ('log2',), 1, 'arith', 'float', 'log2{f}({0})'),
    Ufunc('log10', ('log10',), 1, 'arith', 'float', 'log10{f}({0})'),
    Ufunc('logical_not', ('logical_not',), 1, 'predicate', 'any', '(!(bool){0})'),
    Ufunc('negative', ('negative',), 1, 'arith', 'num', '({T})(-{0})', operators=('neg',)),
    Ufunc('positive', ('positive',), 1, 'arith', 'num', '({0})', operators=('pos',)),
    Ufunc('real', ('real',), 1, 'arith', 'any', '({0})'),
    Ufunc('reciprocal', ('reciprocal',), 1, 'arith', 'float', '(({T})1 / {0})'),
    Ufunc('sign', ('sign',), 1, 'arith', 'num', 'gnp_sign({0})'),
    Ufunc('signbit', ('signbit',), 1, 'predicate', 'float', '(copysign{f}(({T})1, {0}) < ({T})0)'),
    Ufunc('sin', ('sin',), 1, 'arith', 'float', 'sin{f}({0})'),
    Ufunc('sinh', ('sinh',), 1, 'arith', 'float', 'sinh{f}({0})'),
    Ufunc('square', ('square',), 1, 'arith', 'num', '({T})({0} * {0})'),
    Ufunc('sqrt', ('sqrt',), 1, 'arith', 'float', 'sqrt{f}({0})'),
    Ufunc('tan', ('tan',), 1, 'arith', 'float', 'tan{f}({0})'),
    Ufunc('tanh', ('tanh',), 1, 'arith', 'float', 'tanh{f}({0})'),
    Ufunc('trunc', ('trunc',), 1, 'arith', 'float', 'trunc{f}({0})'),
    Ufunc('exp2', ('exp2',), 1, 'arith', 'float', 'exp2{f}({0})'),
    Ufunc('cbrt', ('cbrt',), 1, 'arith', 'float', 'cbrt{f}({0})'),
    Ufunc('fabs', ('fabs',), 1, 'arith', 'float', 'fabs{f}({0})'),
    Ufunc('rint', ('rint',), 1, 'arith', 'float', 'rint{f}({0})'),
    Ufunc('degrees', ('degrees',), 1, 'arith', 'float', '({0} * ({T})57.29577951308232)'),
    Ufunc('radians', ('radians',), 1, 'arith', 'float', '({0} * ({T})0.017453292519943295)'),
    Ufunc('deg2rad', ('deg2rad',), 1, 'arith', 'float', '({0} * ({T})0.017453292519943295)'),
    Ufunc('rad2deg', ('rad2deg',), 1, 'arith', 'float', '({0} * ({T})57.29577951308232)'),
    Ufunc('sinc', ('sinc',), 1),
    Ufunc('fix', ('fix',), 1),
    Ufunc('add', ('add',), 2, 'arith', 'any', '({T})({0} + {1})', operators=('add',)),
    Ufunc('arctan2', ('atan2', 'arctan2'), 2, 'arith', 'float', 'atan2{f}({0}, {1})'),
    Ufunc('bitwise_and', ('bitwise_and',), 2, 'arith', 'int', '({T})({0} & {1})', operators=('and',)),
    Ufunc('left_shift', ('bitwise_left_shift', 'left_shift'), 2, operators=('lshift',)),
    Ufunc('bitwise_or', ('bitwise_or',), 2, 'arith', 'int', '({T})({0} | {1})', operators=('or',)),
    Ufunc('right_shift', ('bitwise_right_shift', 'right_shift'), 2, operators=('rshift',)),
    Ufunc('bitwise_xor', ('bitwise_xor',), 2, 'arith', 'int', '({T})({0} ^ {1})', operators=('xor',)),
    Ufunc('copysign', ('copysign',), 2, 'arith', 'float', 'copysign{f}({0}, {1})'),
    Ufunc('true_divide', ('divide', 'true_divide'), 2, 'arith', 'float', '({0} / {1})', operators=('truediv',)),
    Ufunc('equal', ('equal',), 2, 'compare', 'any', '({0} == {1})', operators=('eq',)),
    Ufunc('floor_divide', ('floor_divide',), 2, 'arith', 'float', 'gnp_floor_divide({0}, {1})', operators=('floordiv',)),
    Ufunc('greater', ('greater',), 2, 'compare', 'any', '({0} > {1})', operators=('gt',)),
    Ufunc('greater_equal', ('greater_equal',), 2, 'compare', 'any', '({0} >= {1})', operators=('ge',)),
    Ufunc('hypot', ('hypot',), 2, 'arith', 'float', 'hypot{f}({0}, {1})'),
    Ufunc('less', ('less',), 2, 'compare', 'any', '({0} < {1})', operators=('lt',)),
    Ufunc('less_equal', ('less_equal',), 2, 'compare', 'any', '({0} <= {1})', operators=('le',)),
    Ufunc('logaddexp', ('logaddexp',), 2, 'arith', 'float', 'gnp_logaddexp({0}, {1})'),
    Ufunc('logical_and', ('logical_and',), 2, 'compare', 'any', '((bool){0} && (bool){1})'),
    Ufunc('logical_or', ('logical_or',), 2, 'compare', 'any', '((bool){0} || (bool){1})'),
    Ufunc('logical_xor', ('logical_xor',), 2, 'compare', 'any', '((bool){0} != (bool){1})'),
    Ufunc('maximum', ('maximum',), 2, 'arith', 'any', 'gnp_maximum({0}, {1})'),
    Ufunc('minimum', ('minimum',), 2, 'arith', 'any', 'gnp_minimum({0}, {1})'),
    Ufunc('multiply', ('multiply',), 2, 'arith', 'any', '({T})({0} * {1})', operators=('mul',)),
    Ufunc('nextafter', ('nextafter',), 2),
    Ufunc('not_equal', ('not_equal',), 2, 'compare', 'any', '({0} != {1})', operators=('ne',)),
    Ufunc('power', ('pow', 'power'), 2, 'arith', 'float', 'pow{f}({0}, {1})', operators=('pow',)),
    Ufunc('remainder', ('remainder', 'mod'), 2, 'arith', 'float', 'gnp_remainder({0}, {1})', operators=('mod',)),
    Ufunc('subtract', ('subtract',), 2, 'arith', 'any', '({T})({0} - {1})', operators=('sub',)),
    Ufunc('fmod', ('fmod',), 2),
    Ufunc('fmax', ('fmax',), 2, 'arith', 'float', 'fmax{f}({0}, {1})'),
    Ufunc('fmin', ('fmin',), 2, 'arith', 'float', 'fmin{f}({0}, {1})'),
    Ufunc('float_power', ('float_power',), 2),
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
    Ufunc('heaviside', ('heaviside',), 2),
    Ufunc('ldexp', ('ldexp',), 2),
    Ufunc('gcd', ('gcd',), 2),
    Ufunc('lcm', ('lcm',), 2),
    Ufunc('where', (), 3, 'where', 'any', '((bool){0} ? {1} : {2})'),
    Ufunc('clip', (), 3),
    Ufunc('round', (), 1, 'arith', 'float', 'rint{f}({0})'),
    Ufunc('astype', (), 1, 'astype', 'any', '({0})'),
)}

#: Operator name ("add", "eq", "neg", ...) -> the gnp function it calls.
OPERATORS: dict[str, str] = {op: u.names[0] for u in UFUNCS.values() for op in u.operators}

#: gnp function name -> the NumPy/CuPy function blocks compute it with (the functions with an API of their
#: own, such as ``where`` and ``round``, under their NumPy name).
BLOCK_FUNCTION: dict[str, str] = {
    **{name: u.numpy for u in UFUNCS.values() for name in u.names},
    **{u.numpy: u.numpy for u in UFUNCS.values() if not u.names},
}


def fusable(func: str) -> bool:
    """Whether a fused kernel can compute the NumPy function ``func``."""
    return func in UFUNCS and bool(UFUNCS[func].rule)
