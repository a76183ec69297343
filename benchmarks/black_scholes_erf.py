"""Benchmark: Black-Scholes call and put prices whose normal CDF is a polynomial erf approximation
(Abramowitz-Stegun 7.1.26: sign, abs, exp and Horner steps), float32, as users write it (see ``_user_code``).

    python benchmarks/black_scholes_erf.py [--shape N] [--repeat 10] [--warmup 2] [--json PATH]

2**27 options with a GPU, 2**20 without; the inputs are those of ``black_scholes.py``.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

import _user_code
from black_scholes import RATE, VOL, inputs

P = 0.3275911
A1, A2, A3, A4, A5 = 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429
RSQRT2 = 0.7071067811865476


def erf(xp: Any, x: Any) -> Any:
    """erf(x) to 1.5e-7 (Abramowitz-Stegun 7.1.26), odd by its sign."""
    a = xp.abs(x)
    t = 1.0 / (1.0 + P * a)
    y = 1.0 - ((((A5 * t + A4) * t + A3) * t + A2) * t + A1) * t * xp.exp(-a * a)
    return xp.sign(x) * y


def norm_cdf(xp: Any, x: Any) -> Any:
    return 0.5 * (1.0 + erf(xp, x * RSQRT2))


def price(xp: Any, S: Any, K: Any, T: Any, r: float = RATE, v: float = VOL) -> tuple[Any, Any]:
    """Call and put prices."""
    sqrt_t = xp.sqrt(T)
    d1 = (xp.log(S / K) + (r + 0.5 * v * v) * T) / (v * sqrt_t)
    d2 = d1 - v * sqrt_t
    discount = K * xp.exp(-r * T)
    call = S * norm_cdf(xp, d1) - discount * norm_cdf(xp, d2)
    put = discount * norm_cdf(xp, -d2) - S * norm_cdf(xp, -d1)
    return call, put


BLACK_SCHOLES_ERF = _user_code.Workload(
    "black_scholes_erf", "Black-Scholes, erf-polynomial normal CDF, float32", price,
    lambda shape: inputs(int(np.prod(shape))), gpu_shape=(2**27,), cpu_shape=(2**20,), rtol=1e-4)

if __name__ == "__main__":
    sys.exit(_user_code.main(BLACK_SCHOLES_ERF))
