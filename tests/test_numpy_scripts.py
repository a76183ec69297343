"""NumPy users' scripts that run unchanged on gnp with only the import changed, under the default
configuration (guards warn; nothing allowed): each runs once with ``import numpy as np`` and once with
``import dask_gpunumeric as np``, and what it computed is compared."""
from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any

import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import BACKEND, assert_eq

CG = '''
import numpy as np

n = 32
A = 4.0 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)
b = np.ones(n)
x = np.zeros(n)
r = b - A @ x
p = r
rs = r @ r
tol = 1e-20
iterations = 0
while rs > tol:
    Ap = A @ p
    alpha = rs / (p @ Ap)
    x = x + alpha * p
    r = r - alpha * Ap
    rs_new = r @ r
    p = r + (rs_new / rs) * p
    rs = rs_new
    iterations += 1
print(f"CG converged in {iterations} iterations")
'''

STENCIL = '''
import numpy as np

n = 48
x = np.linspace(0.0, 1.0, n, endpoint=False)
u = np.outer(np.sin(2 * np.pi * x), np.cos(2 * np.pi * x))
for step in range(8):
    u = u + 0.1 * (np.roll(u, 1, 0) + np.roll(u, -1, 0) + np.roll(u, 1, 1) + np.roll(u, -1, 1) - 4 * u)
energy = float((u * u).sum())
print(f"energy {energy:.6f}")
'''

BLACK_SCHOLES = '''
import numpy as np

def erf(z):
    t = 1.0 / (1.0 + 0.3275911 * np.abs(z))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(z) * (1.0 - poly * np.exp(-z * z))

def cnd(d):
    return 0.5 * (1.0 + erf(d / np.sqrt(2.0)))

S = np.linspace(50.0, 150.0, 1000).astype(np.float32)
K = np.full(1000, 100.0, dtype=np.float32)
T = np.linspace(0.1, 2.0, 1000).astype(np.float32)
r, sigma = 0.02, 0.3
d1 = (np.log(S / K) + (r + 0.5 * sigma * sigma) * T) / (sigma * np.sqrt(T))
d2 = d1 - sigma * np.sqrt(T)
call = S * cnd(d1) - K * np.exp(-r * T) * cnd(d2)
put = K * np.exp(-r * T) * cnd(-d2) - S * cnd(-d1)
print(f"mean call {call.mean():.4f}, mean put {put.mean():.4f}")
'''

HISTOGRAM_POLYFIT = '''
import numpy as np

data = np.sin(np.arange(5000) * 0.37) ** 2
counts, edges = np.histogram(data, bins=12, range=(0.0, 1.0))
x = np.linspace(-1.0, 1.0, 200)
y = 3.0 * x**3 - 2.0 * x + 0.5 + 0.01 * np.cos(40 * x)
coef = np.polyfit(x, y, 3)
print(f"fit: {coef[0]:.3f} x^3 + {coef[2]:.3f} x + {coef[3]:.3f}; fullest bin {counts.max()}")
'''

# script -> the names whose values are compared (floats to a tolerance, the rest exactly)
SCRIPTS = {
    "cg": (CG, ["x", "r", "iterations"]),
    "stencil": (STENCIL, ["u", "energy"]),
    "black_scholes": (BLACK_SCHOLES, ["d1", "call", "put"]),
    "histogram_polyfit": (HISTOGRAM_POLYFIT, ["counts", "edges", "coef"]),
}


def run(source: str) -> tuple[dict[str, Any], str]:
    """Run a script; its variables and what it printed."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "<numpy script>", "exec"), namespace)  # noqa: S102 - our own test scripts
    return namespace, out.getvalue()


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_script_runs_unchanged(name):
    source, compared = SCRIPTS[name]
    assert "import numpy as np" in source
    ours_source = source.replace("import numpy as np", "import dask_gpunumeric as np")
    assert gnp.config.get("guards") == "warn"  # the default configuration
    expected, expected_printed = run(source)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours, printed = run(ours_source)
    assert all(issubclass(w.category, (gnp.GuardWarning, gnp.FallbackWarning)) for w in caught), \
        [str(w.message) for w in caught]
    assert printed == expected_printed
    for variable in compared:
        value, reference = ours[variable], expected[variable]
        if isinstance(reference, (int, float)) and not isinstance(reference, np.generic):
            assert type(value) is type(reference) and value == pytest.approx(reference, rel=1e-9), variable
        else:
            assert isinstance(value, gnp.Array), (variable, type(value))
            # CUDA's float32 log/exp/sqrt differ from NumPy's by an ulp, which float64 work downstream keeps
            exact = reference.dtype == np.float64 and BACKEND == "numpy"
            assert_eq(value, reference, rtol=1e-9 if exact else 1e-4, atol=1e-12)
