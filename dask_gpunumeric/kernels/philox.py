"""Counter-based random numbers: Philox4x32-10, with identical streams on NumPy and CUDA blocks.

Each element is a function of (key, stream, flat index) alone, so the numbers do not depend on the chunking,
the number of devices or the backend. The stream's definition, the contract both backends implement, is in
docs/architecture.md ("The random stream"). Here: the key from a seed, the NumPy generator of a block
(``draw_block``, vectorized over runs of consecutive flat indices), and the CuPy one (one generated kernel per
``(kind, dtype, ndim)``, its source from ``codegen.philox``).
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Sequence

import numpy as np

from ..codegen import philox as _source
from ..codegen.philox import KINDS, N_PARAMS, PHILOX_DEVICE_SOURCE, kernel_name, resolve_dtype, words_per_element
from . import cuda as _cuda

__all__ = [
    "KINDS",
    "PHILOX_DEVICE_SOURCE",
    "cuda_source",
    "draw_block",
    "philox4x32_10",
    "seed_to_key",
    "words_per_element",
]

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10

_MASK32 = 0xFFFFFFFF
_U64 = np.uint64
_F32_2M24 = np.float32(2.0**-24)
_F64_2M53 = 2.0**-53
_F32_TWO_PI = np.float32(2.0 * np.pi)
_F64_TWO_PI = 2.0 * np.pi
#: Philox counters per piece of a NumPy block (keeps the work arrays in cache).
_CHUNK = 1 << 14



# ---------------------------------------------------------------------------------------------
# keys, kinds, dtypes, parameters


def seed_to_key(seed: int | np.random.SeedSequence | None) -> tuple[int, int]:
    """Return the Philox key ``(k0, k1)`` of a seed.

    ``seed`` is an int ``>= 0``, a ``numpy.random.SeedSequence``, or ``None`` for fresh OS
    entropy. The key is ``SeedSequence(seed).generate_state(2, numpy.uint32)``.
    """
    if type(seed) is int:  # the common case, made on every draw: remembered
        return _int_seed_key(seed)
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    k0, k1 = seq.generate_state(2, np.uint32)
    return int(k0), int(k1)


@functools.lru_cache(maxsize=1024)
def _int_seed_key(seed: int) -> tuple[int, int]:
    k0, k1 = np.random.SeedSequence(seed).generate_state(2, np.uint32)
    return int(k0), int(k1)


def check_params(kind: str, dt: np.dtype, params: Sequence[Any]) -> tuple:
    """Validate ``params`` and return them as the kernel takes them.

    Floats: values of the output dtype. Integers: ``(low mod 2**64, (high - low) mod 2**64)``
    as ``numpy.uint64`` (a span of 0 meaning ``2**64``).
    """
    params = tuple(params)
    if len(params) != N_PARAMS[kind]:
        raise TypeError(f"{kind}() takes {N_PARAMS[kind]} parameters, got {len(params)}")
    if kind in ("uniform", "normal"):
        p0, p1 = dt.type(params[0]), dt.type(params[1])
        if kind == "normal" and p1 < 0:
            raise ValueError("scale < 0")
        if kind == "uniform":
            with np.errstate(over="ignore", invalid="ignore"):
                span = p1 - p0
            if not np.isfinite(span):
                raise OverflowError(f"uniform(): high - low is not finite in {dt}")
        return (p0, p1)
    if kind == "integers":
        low, high = operator.index(params[0]), operator.index(params[1])
        if high <= low:
            raise ValueError("high <= low")
        lo_bound, hi_bound = (0, 1) if dt.kind == "b" else (np.iinfo(dt).min, np.iinfo(dt).max)
        if low < lo_bound:
            raise ValueError(f"low is out of bounds for {dt}")
        if high - 1 > hi_bound:
            raise ValueError(f"high is out of bounds for {dt}")
        return (_U64(low % 2**64), _U64((high - low) % 2**64))
    return ()


def _check_key_stream(key: Sequence[int], stream: int) -> tuple[int, int, int]:
    k0, k1 = (operator.index(k) for k in key)
    stream = operator.index(stream)
    if not (0 <= k0 <= _MASK32 and 0 <= k1 <= _MASK32):
        raise ValueError(f"key words must be uint32, got {key!r}")
    if not 0 <= stream < 2**64:
        raise ValueError(f"stream must be in [0, 2**64), got {stream}")
    return k0, k1, stream


# ---------------------------------------------------------------------------------------------
# NumPy Philox


def _philox_rounds(x0: np.ndarray, x1: np.ndarray, x2: np.ndarray, x3: np.ndarray,
                   k0: Any, k1: Any) -> None:
    """Apply the 10 Philox4x32 rounds in place to uint64 arrays holding 32-bit words.

    ``k0``/``k1`` are uint64 scalars or arrays broadcastable to the words.
    """
    p0 = np.empty_like(x0)
    p1 = np.empty_like(x0)
    for r in range(PHILOX_ROUNDS):
        if r:
            k0 = (k0 + _U64(PHILOX_W0)) & _U64(_MASK32)
            k1 = (k1 + _U64(PHILOX_W1)) & _U64(_MASK32)
        np.multiply(x0, _U64(PHILOX_M0), out=p0)
        np.multiply(x2, _U64(PHILOX_M1), out=p1)
        # (x0, x1, x2, x3) <- (hi(p1) ^ x1 ^ k0, lo(p1), hi(p0) ^ x3 ^ k1, lo(p0))
        np.right_shift(p1, _U64(32), out=x0)
        x0 ^= x1
        x0 ^= k0
        np.right_shift(p0, _U64(32), out=x2)
        x2 ^= x3
        x2 ^= k1
        np.bitwise_and(p1, _U64(_MASK32), out=x1)
        np.bitwise_and(p0, _U64(_MASK32), out=x3)


def philox4x32_10(counter: np.ndarray, key: np.ndarray | Sequence[int]) -> np.ndarray:
    """Philox4x32-10 (Random123) of ``counter`` (``[..., 4]`` uint32) under ``key``.

    ``key`` is a ``[..., 2]`` array or a pair of ints; it broadcasts against the counters'
    leading dimensions. Returns the ``[..., 4]`` uint32 output blocks.
    """
    counter = np.asarray(counter)
    key = np.asarray(key)
    if counter.shape[-1:] != (4,) or key.shape[-1:] != (2,):
        raise ValueError("counter must have shape [..., 4] and key shape [..., 2]")
    if (key < 0).any() or (key > _MASK32).any() or (counter < 0).any() or (counter > _MASK32).any():
        raise ValueError("counter and key words must be uint32")
    shape = np.broadcast_shapes(counter.shape[:-1], key.shape[:-1])
    ctr = np.broadcast_to(counter, shape + (4,)).reshape(-1, 4).astype(_U64)
    k = np.broadcast_to(key, shape + (2,)).reshape(-1, 2).astype(_U64)
    x = [np.ascontiguousarray(ctr[:, j]) for j in range(4)]
    _philox_rounds(*x, k[:, 0], k[:, 1])
    return np.stack(x, axis=-1).astype(np.uint32).reshape(shape + (4,))


def _counter_blocks(counters: np.ndarray, key: tuple[int, int], stream: int) -> np.ndarray:
    """The ``[N, 4]`` uint32 Philox output for the uint64 counters ``c`` of one stream."""
    x0 = counters & _U64(_MASK32)
    x1 = counters >> _U64(32)
    x2 = np.full_like(counters, stream & _MASK32)
    x3 = np.full_like(counters, stream >> 32)
    _philox_rounds(x0, x1, x2, x3, _U64(key[0]), _U64(key[1]))
    out = np.empty((counters.size, 4), dtype=np.uint32)
    for j, x in enumerate((x0, x1, x2, x3)):
        out[:, j] = x
    return out


# ---------------------------------------------------------------------------------------------
# block geometry


def _check_geometry(global_shape: Sequence[int], block_offset: Sequence[int],
                    block_shape: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    g = tuple(operator.index(n) for n in global_shape)
    o = tuple(operator.index(n) for n in block_offset)
    b = tuple(operator.index(n) for n in block_shape)
    if not len(g) == len(o) == len(b):
        raise ValueError(f"global_shape {g}, block_offset {o} and block_shape {b} differ in ndim")
    if any(n < 0 for n in g + b) or any(oi < 0 or oi + bi > gi for gi, oi, bi in zip(g, o, b)):
        raise ValueError(f"block at {o} of shape {b} is not inside global shape {g}")
    if int(np.prod(g, dtype=object)) >= 2**63:
        raise ValueError(f"global shape {g} has 2**63 or more elements")
    return g, o, b


def _runs(g: tuple[int, ...], o: tuple[int, ...],
          b: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """Collapse a block into ``(block_extent, global_start, global_stride)`` per dimension.

    The trailing dimensions that the block covers whole merge with the first one it does not
    into one dimension of consecutive flat indices (stride 1), so the result has at least one
    and at most ``ndim`` dimensions; the global flat index of the block's element with
    coordinates ``j`` is ``sum((start_d + j_d) * stride_d)``.
    """
    strides = [1] * len(g)
    for d in range(len(g) - 2, -1, -1):
        strides[d] = strides[d + 1] * g[d + 1]
    d0 = max(len(g) - 1, 0)
    while d0 > 0 and b[d0] == g[d0]:
        d0 -= 1
    run_len = int(np.prod(b[d0:], dtype=object))
    run_start = o[d0] * strides[d0] if g else 0
    return [(b[d], o[d], strides[d]) for d in range(d0)] + [(run_len, run_start, 1)]


def _row_starts(runs: list[tuple[int, int, int]]) -> np.ndarray:
    """The uint64 global flat index of the first element of each run (C order of the rows)."""
    *outer, (_, run_start, _) = runs
    starts = np.full((), run_start, dtype=_U64)
    for extent, start, stride in outer:
        starts = starts[..., None] + (np.arange(extent, dtype=_U64) + _U64(start)) * _U64(stride)
    return starts.reshape(-1)


def _element_words(starts: np.ndarray, run_len: int, w: int, key: tuple[int, int],
                   stream: int) -> np.ndarray:
    """The ``[rows, run_len, w]`` uint32 words of the runs of ``run_len`` flat indices from
    each of ``starts``; Philox is evaluated once per counter a run needs."""
    per = 4 // w  # elements per Philox output block
    first = starts // _U64(per)
    offset = (starts % _U64(per)) * _U64(w)
    n_counters = int(((starts + _U64(run_len - 1)) // _U64(per) - first).max()) + 1
    counters = first[:, None] + np.arange(n_counters, dtype=_U64)
    words = _counter_blocks(counters.reshape(-1), key, stream).reshape(starts.size, 4 * n_counters)
    need = run_len * w
    offsets = np.unique(offset)
    if offsets.size == 1:
        o = int(offsets[0])
        sel = words[:, o:o + need]
    else:
        sel = np.empty((starts.size, need), dtype=np.uint32)
        for o in offsets.tolist():
            rows = offset == o
            sel[rows] = words[rows, o:o + need]
    return sel.reshape(starts.size, run_len, w)


def _draw_numpy(kind: str, dt: np.dtype, params: tuple, key: tuple[int, int], stream: int,
                runs: list[tuple[int, int, int]], block_shape: tuple[int, ...]) -> np.ndarray:
    """The NumPy block, computed in pieces of about :data:`_CHUNK` Philox counters."""
    out = np.empty(block_shape, dtype=dt)
    if out.size == 0:
        return out
    w = words_per_element(kind, dt)
    starts = _row_starts(runs)
    run_len = runs[-1][0]
    rows = out.reshape(starts.size, run_len)
    piece = _CHUNK * 4 // w  # elements per piece
    if run_len >= piece:
        for r in range(starts.size):
            for j in range(0, run_len, piece):
                n = min(piece, run_len - j)
                words = _element_words(starts[r:r + 1] + _U64(j), n, w, key, stream)
                rows[r:r + 1, j:j + n] = _transform(kind, dt, params, words)
    else:
        step = piece // run_len
        for r in range(0, starts.size, step):
            words = _element_words(starts[r:r + step], run_len, w, key, stream)
            rows[r:r + step] = _transform(kind, dt, params, words)
    return out


# ---------------------------------------------------------------------------------------------
# NumPy transforms (word -> number); each float operation rounded in the output dtype


def _u53(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x = (a >> 5).astype(np.float64)
    x *= 67108864.0
    x += b >> 6
    x *= _F64_2M53
    return x


def _random(dt: np.dtype, words: list[np.ndarray]) -> np.ndarray:
    if dt == np.float32:
        return (words[0] >> 8).astype(np.float32) * _F32_2M24
    return _u53(words[0], words[1])


def _standard_normal(dt: np.dtype, words: list[np.ndarray]) -> np.ndarray:
    if dt == np.float32:
        u1 = ((words[0] >> 8) + np.uint32(1)).astype(np.float32) * _F32_2M24
        u2 = (words[1] >> 8).astype(np.float32) * _F32_2M24
        two_pi, minus_two = _F32_TWO_PI, np.float32(-2.0)
    else:
        u1 = 1.0 - _u53(words[0], words[1])
        u2 = _u53(words[2], words[3])
        two_pi, minus_two = _F64_TWO_PI, -2.0
    np.log(u1, out=u1)
    u1 *= minus_two
    np.sqrt(u1, out=u1)
    u2 *= two_pi
    np.cos(u2, out=u2)
    u1 *= u2
    return u1


def _transform(kind: str, dt: np.dtype, params: tuple, element_words: np.ndarray) -> np.ndarray:
    """The numbers of ``kind`` from ``[..., w]`` words (``[...]`` shaped result)."""
    words = [element_words[..., j] for j in range(element_words.shape[-1])]
    if kind == "random":
        return _random(dt, words)
    if kind == "uniform":
        low, high = params
        x = _random(dt, words)
        x *= high - low
        x += low
        return x
    if kind == "standard_normal":
        return _standard_normal(dt, words)
    if kind == "normal":
        loc, scale = params
        x = _standard_normal(dt, words)
        x *= scale
        x += loc
        return x
    low, span = params
    u = (words[0].astype(_U64) << _U64(32)) | words[1]
    if span:
        u %= span
    u += low
    return u.astype(dt)


def cuda_source(kind: str, dtype: Any, ndim: int) -> str:
    """``codegen.philox.cuda_source``, also written for CI (``cuda.record_source``)."""
    source = _source.cuda_source(kind, dtype, ndim)
    _cuda.record_source(source)
    return source


def _draw_cupy(kind: str, dt: np.dtype, key: tuple[int, int], stream: int,
               runs: list[tuple[int, int, int]], block_shape: tuple[int, ...],
               params: tuple) -> Any:
    """The CuPy block, by the generated kernel of the collapsed geometry ``runs``; ``params``
    as :func:`check_params` returns them (numpy scalars of the kernel's argument types)."""
    import cupy

    out = cupy.empty(block_shape, dtype=dt)
    if out.size == 0:
        return out
    ndim = len(runs)
    threads = 256
    kernel = _cuda.compile_function(cuda_source(kind, dt, ndim), kernel_name(kind, dt, ndim), threads)[0]
    geometry = []
    for d, (extent, start, stride) in enumerate(runs):
        geometry += ([_U64(extent)] if d else []) + [_U64(start), _U64(stride)]
    blocks = min((out.size + threads - 1) // threads, 1 << 20)
    kernel((blocks,), (threads,),
           (out, _U64(out.size), np.uint32(key[0]), np.uint32(key[1]), _U64(stream),
            *params, *geometry))
    return out


# ---------------------------------------------------------------------------------------------
# public entry point


def draw_block(kind: str, key: Sequence[int], stream: int, global_shape: Sequence[int],
               block_offset: Sequence[int], block_shape: Sequence[int], dtype: Any = None,
               params: Sequence[Any] = (), xp: Any = np) -> Any:
    """Draw the block of a random array of ``global_shape`` at ``block_offset``/``block_shape``.

    ``kind`` is one of :data:`KINDS`, ``key`` a pair of uint32 (:func:`seed_to_key`),
    ``stream`` the draw call's stream number, ``dtype`` the output dtype (``None``: float64,
    int64 for integers), ``params`` ``(low, high)`` for uniform/integers (integers: ``[low,
    high)``) or ``(loc, scale)`` for normal. ``xp`` is ``numpy`` (a NumPy array) or ``cupy``
    (a CuPy array, made by one generated CUDA kernel). The values are those of the module's
    stream definition, whatever the blocking.
    """
    dt = resolve_dtype(kind, dtype)
    params = check_params(kind, dt, params)
    k0, k1, stream = _check_key_stream(key, stream)
    g, o, b = _check_geometry(global_shape, block_offset, block_shape)
    runs = _runs(g, o, b)
    xp_name = getattr(xp, "__name__", "")
    if xp_name == "cupy":
        return _draw_cupy(kind, dt, (k0, k1), stream, runs, b, params)
    if xp is not np:
        raise TypeError(f"xp must be numpy or cupy, got {xp!r}")
    return _draw_numpy(kind, dt, params, (k0, k1), stream, runs, b)
