"""CG 8192^2 x30 accelerated under fori_loop unroll 1, 2, 3 (rounds alternate), checksums' bits; JAX alongside."""
import sys, time, statistics, dataclasses, itertools
sys.path.insert(0, "benchmarks")
import numpy as np, dask
import dask_gpunumeric as gnp
import _harness as H, _iterative, cg
n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
unrolls = [u if u == "auto" else int(u) for u in (sys.argv[2] if len(sys.argv) > 2 else "1,2,3").split(",")]
host = cg.CG.inputs(n, n)
arrays = list(dask.persist(*(gnp.asarray(h) for h in host)))
runners = {}
for u in unrolls:
    it = dataclasses.replace(cg.CG, unroll=u)
    runners[f"gnp-u{u}"] = _iterative.gnp_runner(it, 30, arrays)
mods = H.jax_modules()
if mods is not None:
    for u in (1,):
        it = dataclasses.replace(cg.CG, unroll=u)
        runners[f"jax-u{u}"] = _iterative.jax_runner(it, 30, [mods[0].device_put(h) for h in host])
times = {k: [] for k in runners}
vals = {}
for k, r in runners.items():
    for i in range(3):
        vals[k] = r(i)
    H.sync()
for rnd in range(4):
    for k, r in runners.items():
        for i in range(5):
            H.sync(); t = time.perf_counter(); r(i); H.sync(); times[k].append(time.perf_counter() - t)
for k in runners:
    print(f"{k:10s} median {statistics.median(times[k])*1e3:8.3f} ms  min {min(times[k])*1e3:8.3f}  checksum {float(vals[k]).hex()}", flush=True)
