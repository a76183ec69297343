"""Benchmark: Black-Scholes call and put prices of n float32 options, against the copy bandwidth.

    python benchmarks/black_scholes.py [--n N] [--repeat 10] [--warmup 2] [--json PATH]

Three input arrays (price, strike, years) and scalar rate and volatility give two output arrays. The
inputs live on the device before timing; outputs stay there (``gnp.persist``), so every system is timed
from device arrays to device arrays. Side by side:

- ``gnp``: ``gnp.accelerate``-decorated pricing (one fused kernel per block for both outputs); its
  arguments are in memory, so the call runs at once and returns device arrays, as JAX's ``jit`` does;
  ``gnp-auto``: the same function undecorated, lazy, then ``gnp.persist`` (automatic fusion of both
  outputs together; building the expressions, the cached graph and the run, without ``dask.persist``'s own
  per-call work); ``gnp-unfused``: the same with fusion off; with a GPU, ``gnp-kernel``: the fused kernel alone,
  launched directly on the input arrays (what the Python around it costs is gnp minus gnp-kernel);
- ``dask.array+cupy`` (or ``+numpy`` without a GPU) with the threaded scheduler, ``jax-jit`` where JAX is
  installed, ``cupynumeric`` where cuPyNumeric is;
- with a GPU: ``cupy`` (eager), and ``copy``: one device copy of as many bytes as the inputs read plus the
  outputs written (the memory floor); ``x copy`` is each time over that floor (target for gnp: <= 1.3).

Every system's first 4096 call and put prices (but the kernel's alone) are checked against NumPy in
float64. ``weak_scaling`` and ``jax_sharded`` give ``benchmarks/weak_scaling.py`` the same pricing at 2**27
options per worker.
"""
from __future__ import annotations

import argparse
import functools
import pathlib
import sys

import numpy as np

import _harness as H

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

RATE, VOL = 0.02, 0.30
A = (0.31938153, -0.356563782, 1.781477937, -1.821255978, 1.330274429)
RSQRT2PI = 0.3989422804014327


def price(xp, S, K, T, r=RATE, v=VOL):
    """Call and put prices (CUDA SDK formula, polynomial normal CDF) in any NumPy-like namespace."""
    def cnd(d):
        k = 1.0 / (1.0 + 0.2316419 * xp.abs(d))
        w = RSQRT2PI * xp.exp(-0.5 * d * d) * (k * (A[0] + k * (A[1] + k * (A[2] + k * (A[3] + k * A[4])))))
        return xp.where(d > 0, 1.0 - w, w)

    sqrt_t = xp.sqrt(T)
    d1 = (xp.log(S / K) + (r + 0.5 * v * v) * T) / (v * sqrt_t)
    d2 = d1 - v * sqrt_t
    discount = K * xp.exp(-r * T)
    call = S * cnd(d1) - discount * cnd(d2)
    put = discount * (1.0 - cnd(d2)) - S * (1.0 - cnd(d1))
    return call, put


def inputs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.uniform(5.0, 30.0, n).astype(np.float32), rng.uniform(1.0, 100.0, n).astype(np.float32),
            rng.uniform(0.25, 10.0, n).astype(np.float32))


CHECKED = 4096  # options checked against NumPy in float64
TOLERANCE = 0.1  # prices are up to 100: float32 rounding stays far below


def prices_check(host: tuple[np.ndarray, np.ndarray, np.ndarray]):
    """A check of (call, put) of any system: their first ``CHECKED`` options against NumPy in float64."""
    reference = price(np, *(h[:CHECKED].astype(np.float64) for h in host))

    def check(value):
        err = max(float(np.max(np.abs(H.to_host(out[:CHECKED]) - ref))) for out, ref in zip(value, reference))
        return err < TOLERANCE, f"max |err| {err:.1e}"

    return check


def main(argv=None) -> int:
    cp = H.cupy_gpu()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=H.parse_int, default=2**27 if cp is not None else 2**20)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    n = args.n

    import dask
    import dask.array as da

    import dask_gpunumeric as gnp

    host = inputs(n)
    gS, gK, gT = dask.persist(*(gnp.from_array(h) for h in host))
    accelerated = gnp.accelerate(lambda S, K, T: price(gnp, S, K, T))

    def run_gnp(fn):
        return gnp.persist(*fn(gS, gK, gT))

    def unfused():
        with gnp.config.set(fusion=False):
            return run_gnp(lambda *a: price(gnp, *a))

    def fused_kernel(device_inputs):
        """The one fused kernel of both outputs, launched on the device arrays without any scheduling."""
        from dask_gpunumeric.kernels import fused as _fused
        from dask_gpunumeric.expr import Bundle
        from dask_gpunumeric.optimize import explain_groups

        (fused,) = explain_groups(Bundle(*(o.expr for o in price(gnp, gS, gK, gT))))
        by_name = {a.expr._name: d for a, d in zip((gS, gK, gT), device_inputs)}
        inputs = [by_name[a._name] for a in fused.inputs]
        index = (0,) * fused.ndim
        args = (fused.operand("program"), fused.operand("scalars"), *fused.geometry(index), inputs)
        return lambda: _fused.run_cuda(*args)

    xp = np if cp is None else cp
    device = [xp.asarray(h) for h in host]
    dS, dK, dT = dask.persist(*(da.from_array(d, chunks=gS.chunks) for d in device), scheduler="threads")
    runs = [("gnp", lambda: accelerated(gS, gK, gT)), ("gnp-auto", lambda: run_gnp(lambda *a: price(gnp, *a))),
            ("gnp-unfused", unfused),
            (H.dask_array_system(), lambda: dask.persist(*price(da, dS, dK, dT), scheduler="threads"))]
    modules = H.jax_modules()
    if modules is not None:
        jax, jnp = modules
        jS, jK, jT = (jax.device_put(h) for h in host)
        jitted = jax.jit(lambda S, K, T: price(jnp, S, K, T))
        runs.append(("jax-jit", lambda: [o.block_until_ready() for o in jitted(jS, jK, jT)]))
    cn = H.cupynumeric_module()
    if cn is not None:
        cS, cK, cT = (cn.asarray(h) for h in host)
        runs.append(("cupynumeric", lambda: price(cn, cS, cK, cT)))
    floor_name = None
    if cp is not None:
        if gS.numblocks == (1,):
            runs.append(("gnp-kernel", fused_kernel(device)))
        runs.append(("cupy", lambda: price(cp, *device)))
        nbytes = 5 * 4 * n  # three inputs read, two outputs written
        src = cp.empty(nbytes // 2, dtype=cp.uint8)
        dst = cp.empty_like(src)
        runs.append(("copy", lambda: cp.copyto(dst, src)))
        floor_name = "copy"

    print(f"Black-Scholes benchmark: n = {n} float32 options, gnp backend {gnp.config.backend()}, "
          f"{H.device_name()}", flush=True)
    check = prices_check(host)
    results = []
    for name, fn in runs:
        r = H.measure(name, fn, repeat=args.repeat, warmup=args.warmup,
                      check=None if name in ("copy", "gnp-kernel") else check)
        r.value = r.detail or None  # the outputs themselves are device arrays: show the check instead
        results.append(r)
    params = {"n": n, "dtype": "float32", "bytes_moved": 20 * n, "floor": floor_name}
    report = H.make_report("black_scholes", results, baseline="gnp", params=params, value_name="check")
    H.print_floor_ratios(results, floor_name)
    return H.finish(report, args.json)


OPTIONS_PER_WORKER = 2**27


def weak_scaling(k: int, scale: int):
    """(system, run, check) for ``benchmarks/weak_scaling.py`` on the active cluster of ``k`` workers:
    ``OPTIONS_PER_WORKER // scale`` options per worker, inputs persisted first, outputs persisted. ``run(i)``
    folds ``i`` into the rate so that no run reuses another's result, and returns the outputs."""
    import dask.array as da

    import dask_gpunumeric as gnp

    n = k * OPTIONS_PER_WORKER // scale
    rng = gnp.random.default_rng(0)
    S, K, T = H.persisted(rng.uniform(5.0, 30.0, n, dtype=np.float32), rng.uniform(1.0, 100.0, n, dtype=np.float32),
                          rng.uniform(0.25, 10.0, n, dtype=np.float32))
    check = prices_check(tuple(H.to_host(x[:CHECKED]) for x in (S, K, T)))
    accelerated = gnp.accelerate(lambda S, K, T, r: price(gnp, S, K, T, r=r))
    rate = lambda i: RATE + 1e-6 * i  # noqa: E731

    def run_unfused(i: int) -> tuple:
        with gnp.config.set(fusion=False):
            return H.persisted(*price(gnp, S, K, T, r=rate(i)))

    dS, dK, dT = (x.to_dask_array() for x in (S, K, T))  # the same blocks, on the same workers
    # the rate as a 0-d array: one accelerated plan serves every run
    yield "gnp", lambda i: H.persisted(*accelerated(S, K, T, gnp.asarray(np.float32(rate(i))))), check
    yield "gnp-unfused", run_unfused, check
    yield H.dask_array_system(), lambda i: H.persisted(*price(da, dS, dK, dT, r=rate(i))), check


def jax_sharded(devices: list, scale: int):
    """(run, check) of the pricing under ``jax.jit``, inputs and outputs sharded over ``devices`` (same size
    per device as ``weak_scaling``); needs JAX."""
    jax, jnp = H.jax_modules()
    n = len(devices) * OPTIONS_PER_WORKER // scale
    blocks = H.jax_row_sharding(devices)

    @functools.partial(jax.jit, out_shardings=(blocks, blocks, blocks))
    def draw(key):
        kS, kK, kT = jax.random.split(key, 3)
        return (jax.random.uniform(kS, (n,), jnp.float32, 5.0, 30.0),
                jax.random.uniform(kK, (n,), jnp.float32, 1.0, 100.0),
                jax.random.uniform(kT, (n,), jnp.float32, 0.25, 10.0))

    S, K, T = draw(jax.random.PRNGKey(0))
    priced = jax.jit(lambda S, K, T, r: price(jnp, S, K, T, r=r), out_shardings=(blocks, blocks))
    check = prices_check(tuple(np.asarray(x[:CHECKED]) for x in (S, K, T)))
    return (lambda i: [out.block_until_ready() for out in priced(S, K, T, RATE + 1e-6 * i)]), check


if __name__ == "__main__":
    sys.exit(main())
