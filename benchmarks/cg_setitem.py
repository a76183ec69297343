"""Benchmark: conjugate gradients whose 2-D Laplacian is written with setitem updates, float32, 30
iterations in a Python loop, as users write it (see ``_user_code``); JAX runs its nearest form,
``.at[].add``.

    python benchmarks/cg_setitem.py [--shape 8192,8192] [--steps 30] [--repeat 10] [--warmup 2] [--json PATH]

8192 x 8192 with a GPU, 256 x 256 without; the right-hand side is that of ``cg.py``.
"""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import _user_code
from cg import initial, inputs, step


def laplacian(g: Any, xp: Any) -> Any:
    """-Laplacian of ``g`` with zero Dirichlet boundaries, neighbour by neighbour."""
    y = 4 * g
    y[1:, :] -= g[:-1, :]
    y[:-1, :] -= g[1:, :]
    y[:, 1:] -= g[:, :-1]
    y[:, :-1] -= g[:, 1:]
    return y


def laplacian_at(g: Any, xp: Any) -> Any:
    """``laplacian`` for JAX, which has no setitem."""
    y = 4 * g
    y = y.at[1:, :].add(-g[:-1, :])
    y = y.at[:-1, :].add(-g[1:, :])
    y = y.at[:, 1:].add(-g[:, :-1])
    return y.at[:, :-1].add(-g[:, 1:])


def cg(xp: Any, b: Any, steps: int = 30, laplacian: Callable[[Any, Any], Any] = laplacian) -> Any:
    """``steps`` iterations of ``cg.py``'s CG, in a Python loop, for laplacian(x) = b from x = 0."""
    state = initial((b,), xp)
    for _ in range(steps):
        state = step(state, xp, laplacian)
    return state[0]


CG_SETITEM = _user_code.Workload(
    "cg_setitem", "CG, 2-D Laplacian by setitem updates, float32", cg, lambda shape: inputs(*shape),
    gpu_shape=(8192, 8192), cpu_shape=(256, 256), rtol=1e-3, steps=30,
    jax_compute=functools.partial(cg, laplacian=laplacian_at))

if __name__ == "__main__":
    sys.exit(_user_code.main(CG_SETITEM))
