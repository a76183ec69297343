"""Stencil sweeps in a plain fori_loop (users' forms), unroll "auto" against 1 and 4, and JAX:
coeff (a heat step reading a captured coefficient field, rolls) and jacobi (heat.py's copy + interior setitem)."""
import sys, pathlib
ROOT = pathlib.Path.cwd()
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests"), str(ROOT)]
import numpy as np, dask
import _harness as H
from _solvers import heat_step
from heat import jacobi
import dask_gpunumeric as gnp

n, steps = int(sys.argv[2]) if len(sys.argv) > 2 else 16384, 20
form = sys.argv[1]
rng = np.random.default_rng(0)
hu, hc = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
u, c = dask.persist(gnp.asarray(hu), gnp.asarray(hc))
sweep = (lambda w, c, xp: heat_step(w, c, xp)) if form == "coeff" else (lambda w, c, xp: jacobi(w))
runs = []
for unroll in ("auto", 1, 4):
    f = gnp.accelerate(lambda u, c, unroll=unroll: gnp.fori_loop(steps, lambda i, w: sweep(w, c, gnp), u, unroll=unroll))
    runs.append((f"gnp-u{unroll}", lambda f=f: dask.persist(f(u, c))))
mods = H.jax_modules()
if mods is not None:
    jax, jnp = mods
    ju, jc = jax.device_put(hu), jax.device_put(hc)
    jsweep = (lambda w, c: heat_step(w, c, jnp)) if form == "coeff" else (
        lambda w, c: w.at[1:-1, 1:-1].set(0.25 * (w[:-2, 1:-1] + w[2:, 1:-1] + w[1:-1, :-2] + w[1:-1, 2:])))
    for u_ in (1, 4):
        jf = jax.jit(lambda u, c, u_=u_: jax.lax.fori_loop(0, steps, lambda i, w: jsweep(w, c), u, unroll=u_))
        runs.append((f"jax-u{u_}", lambda jf=jf: jf(ju, jc).block_until_ready()))
print(f"{form}: {n}^2 x {steps} in fori_loop, {H.device_name()}")
for name, fn in runs:
    r = H.measure(name, fn, repeat=7, warmup=2, verbose=False)
    print(f"{form} {name:10s} median {r.median_ms:.3f} ms  min {r.min_ms:.3f}  {r.error or ''}", flush=True)
