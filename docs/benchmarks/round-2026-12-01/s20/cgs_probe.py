"""Host CPU time per plain call of the setitem-Laplacian CG (30 iterations), as the suite calls it plain.
PYTHONPATH=<tree> python cgs_probe.py [--mode numpy|cupy] [--n 32] [--calls 20] [--profile FILE]"""
import argparse, pathlib, statistics, sys, time
ROOT = pathlib.Path.cwd()
for p in (ROOT / "benchmarks", ROOT / "tests", ROOT):
    sys.path.insert(0, str(p))
import numpy as np
ap = argparse.ArgumentParser()
ap.add_argument("--mode", default="numpy"); ap.add_argument("--n", type=int, default=32)
ap.add_argument("--calls", type=int, default=20); ap.add_argument("--profile", default="")
ap.add_argument("--what", default="cg_setitem")
args = ap.parse_args()
if args.mode == "cupy":
    import launch_host; launch_host.emulate()
    import pytest
    from dask_gpunumeric import backend as _backend
    pytest.MonkeyPatch().setattr(_backend, "gpu_available", lambda: True)
import dask, dask_gpunumeric as gnp
if args.mode == "cupy":
    gnp.config.set(backend="cupy")
import cg_setitem, heat
if args.what == "cg_setitem":
    (b,) = dask.persist(gnp.asarray(cg_setitem.inputs(args.n, args.n)[0]))
    call = lambda: gnp.compute(cg_setitem.cg(gnp, b))
else:
    (u,) = dask.persist(gnp.asarray(np.random.default_rng(0).random((args.n, args.n)).astype(np.float32)))
    call = lambda: gnp.persist(heat.relax(u, sweeps=20))[0]
for _ in range(3):
    call()
if args.profile:
    import cProfile
    cProfile.run("for _ in range(args.calls): call()", args.profile)
times = []
for _ in range(args.calls):
    t = time.thread_time(); call(); times.append((time.thread_time() - t) * 1e3)
print(f"{args.what} {args.mode} n={args.n}: median {statistics.median(times):.2f} ms, min {min(times):.2f} ms (thread CPU)")
