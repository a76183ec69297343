"""Tokens of expressions: an exact text form of the plain values that operands are, hashed into a node's
name without going through Dask's generic tokenizer; and ``cached``, the lock-free cached property nodes use."""
from __future__ import annotations

import functools
import hashlib
import operator
import struct
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
from dask._expr import Expr

_NAME = operator.attrgetter("_name")

_PLAIN = (str, int, float, complex, bool, type(None), slice, np.dtype, np.generic)


# the types operands mostly are, the most met first (isinstance tries them in order; a bool is an int)
_OWN_OPERANDS = (Expr, str, np.dtype, dict, float, int, tuple, type(None), np.generic)


class cached:  # noqa: N801 - used like functools.cached_property
    """``functools.cached_property`` without its lock (Python 3.11 takes one on the first access of every
    value, and expressions are made on every operation a user writes; 3.12 dropped it): the value is
    computed once and kept in the instance's ``__dict__``, where later lookups find it first."""

    def __init__(self, func: Callable[[Any], Any]) -> None:
        self.func = func
        self.attrname = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.attrname = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__[self.attrname] = self.func(instance)
        return value


_INT = frozenset({int, bool})  # (a bool's repr is never an int's: True, not 1)

# texts of tuples of ints (and of tuples of those: chunks) by identity, each kept with its tuple (so that the
# id is not reused): the chunks of new nodes are mostly the same objects (normalize_chunks' cache, a parent's
# chunks), and writing out the lengths of hundreds of blocks takes microseconds
_INT_TUPLE_TEXT: dict[int, tuple[tuple, str]] = {}
_INT_TUPLE_TEXT_SIZE = 256


def _sequence_text(value: tuple | list) -> str | None:
    if type(value) is tuple:
        known = _INT_TUPLE_TEXT.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        if _INT.issuperset(map(type, value)):  # shapes, an axis's chunks, flags: the common case
            text = f"tuple{value!r}"
            _keep(value, text)
            return text
    parts = [_TEXT.get(type(v), _plain_repr)(v) for v in value]  # _plain_repr, a call less per element
    if None in parts:
        return None
    text = f"{type(value).__name__}({','.join(parts)})"
    if type(value) is tuple and value and all(_kept(v) for v in value):  # chunks: a tuple of those kept
        _keep(value, text)
    return text


def _kept(value: Any) -> bool:
    """Whether the text of ``value`` is kept by identity."""
    known = _INT_TUPLE_TEXT.get(id(value))
    return known is not None and known[0] is value


def _keep(value: tuple, text: str) -> None:
    """Keep the text of ``value``, an immutable tuple, by identity."""
    if len(_INT_TUPLE_TEXT) >= _INT_TUPLE_TEXT_SIZE:
        _INT_TUPLE_TEXT.clear()
    _INT_TUPLE_TEXT[id(value)] = (value, text)


def keep_text(value: tuple) -> None:
    """Keep the text of a tuple by identity, as that of tuples of ints: for an immutable plan (ints, slices,
    None and tuples of them) that many nodes share, written out once (until the kept texts are cleared)."""
    if not _kept(value):
        text = _sequence_text(value)
        if text is not None:
            _keep(value, text)


def _dict_text(value: dict) -> str | None:
    if not value:
        return "dict()"
    parts = [(_TEXT.get(type(k), _plain_repr)(k), _TEXT.get(type(v), _plain_repr)(v)) for k, v in value.items()]
    return None if any(None in p for p in parts) else "dict(" + ",".join(f"{k}={v}" for k, v in parts) + ")"


@functools.lru_cache(maxsize=1024)
def _dtype_text(value: np.dtype) -> str:
    # .str names byte order, kind, size and datetime unit (not the fields of a structured dtype)
    return f"dtype:{value.str}" if value.names is None else f"{type(value).__name__}:{value!r}"


def _function_text(func: types.FunctionType) -> str | None:
    """A function that its module names (what pickle, and so Dask's tokenize, writes of it: a reference) as
    that name; None for others (lambdas, local functions, ``__main__``'s: Dask's tokenize reads their code)."""
    module, qualname = func.__module__, func.__qualname__
    found: Any = sys.modules.get(module) if module != "__main__" else None
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return f"function:{module}.{qualname}" if found is func else None


# tokens by their node's token text: user code builds the same nodes call after call (the same names), and
# hashing a short text costs several times a lookup of it; long texts (the chunks of thousands of blocks) are
# not kept, so that the cache stays small
TOKENS: dict[str | tuple, str] = {}
_TOKENS_SIZE = 2**15  # (a node keeps two: its text and its parts; a 50-step RK4 loop builds 3,900 nodes)
_KEPT_TEXT_LENGTH = 1024


def text_token(text: str) -> str:
    """The token of a node whose token text is ``text``: the first 32 hex digits of its SHA-1 (kept in
    ``TOKENS`` for the next node of the same text, where the text is short)."""
    if len(text) > _KEPT_TEXT_LENGTH:
        return hashlib.sha1(text.encode()).hexdigest()[:32]
    token = TOKENS.get(text)
    if token is None:
        token = hashlib.sha1(text.encode()).hexdigest()[:32]
        if len(TOKENS) >= _TOKENS_SIZE:
            TOKENS.clear()
        TOKENS[text] = token
    return token


def kept_token(parts: tuple[str | None, ...], text: str) -> str:
    """The token of ``text`` (``text_token``), which is written from the strings of ``parts``, kept in ``TOKENS``
    under ``parts`` too (where the text is short) for the next node built alike: a tuple of strings made before
    hashes faster than their text joined anew (their hashes are kept), on every operation users write. (A tuple
    is never equal to a text; each kind of node writes its text from parts of its own shape.)"""
    token = text_token(text)
    if len(text) <= _KEPT_TEXT_LENGTH:
        TOKENS[parts] = token
    return token


# texts of the Python floats met before (a loop's constants), by value: never a zero or a NaN, whose equal values
# may have other bits
FLOAT_TEXT: dict[float, str] = {}
_FLOAT_TEXT_SIZE = 1024


def float_text(value: float) -> str:
    """The text of a Python float: its exact bits (``repr`` is "nan" for every NaN)."""
    text = FLOAT_TEXT.get(value)
    if text is None:
        text = f"float:{struct.pack('<d', value).hex()}"
        if value and value == value:
            if len(FLOAT_TEXT) >= _FLOAT_TEXT_SIZE:
                FLOAT_TEXT.clear()
            FLOAT_TEXT[value] = text
    return text


# exact type -> text form, for the types operands mostly are (others are added as they are met)
_TEXT: dict[type, Callable[[Any], str | None]] = {
    int: lambda v: f"int:{v!r}",
    str: lambda v: f"str:{v!r}",
    float: float_text,
    bool: lambda v: f"bool:{v!r}",
    type(None): lambda v: "NoneType:None",
    tuple: _sequence_text,
    list: _sequence_text,
    dict: _dict_text,
    types.FunctionType: _function_text,
}


def _numpy_inexact_text(value: np.inexact) -> str:
    return f"{type(value).__name__}:{value.tobytes().hex()}"  # (exact bits, as of any float below)


def _numpy_number_text(value: np.number | np.bool_) -> str:
    return f"{type(value).__name__}:{value!r}"


def _plain_repr(value: Any) -> str | None:
    """An exact text form of small plain values (what tokens are made of), or None for anything else."""
    text = _TEXT.get(type(value))
    if text is not None:
        return text(value)
    if isinstance(value, Expr):
        _TEXT[type(value)] = _NAME  # (no Python frame)
        return value._name
    if isinstance(value, np.dtype):
        _TEXT[type(value)] = _dtype_text
        return _dtype_text(value)
    if isinstance(value, (np.number, np.bool_)):  # NumPy's numbers, as the branches below write them, per type
        text = _TEXT[type(value)] = _numpy_inexact_text if isinstance(value, np.inexact) else _numpy_number_text
        return text(value)
    if isinstance(value, (float, complex)):  # (subclasses; NumPy's numbers are written above)
        return f"{type(value).__name__}:{np.asarray(value).tobytes().hex()}"
    if isinstance(value, _PLAIN):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, (tuple, list)):
        return _sequence_text(value)
    if isinstance(value, dict):
        return _dict_text(value)
    return None
