"""Host time per plain call of the setitem CG (or --what heat / cg) on emulated CuPy blocks whose kernels do
nothing: the Python a call costs, split into building the expression and gnp.compute.
PYTHONPATH=<tree> python cgs_host.py [--n 32] [--calls 30] [--what cg_setitem|cg] [--profile FILE]"""
import argparse, pathlib, statistics, sys, time
ROOT = pathlib.Path.cwd()
for p in (ROOT / "benchmarks", ROOT / "tests", ROOT):
    sys.path.insert(0, str(p))
ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=32); ap.add_argument("--calls", type=int, default=30)
ap.add_argument("--what", default="cg_setitem"); ap.add_argument("--profile", default="")
args = ap.parse_args()
import launch_host; launch_host.emulate()
import pytest, _cuda_emulator
from dask_gpunumeric import backend as _backend
patch = pytest.MonkeyPatch()
patch.setattr(_backend, "gpu_available", lambda: True)
patch.setattr(_cuda_emulator.EmulatedKernel if hasattr(_cuda_emulator, "EmulatedKernel") else _cuda_emulator.CompiledKernel,
              "__call__", lambda self, *a, **k: None)
import dask, dask_gpunumeric as gnp
gnp.config.set(backend="cupy")
import cg_setitem, cg
mod = cg_setitem if args.what == "cg_setitem" else None
(b,) = dask.persist(gnp.asarray(cg_setitem.inputs(args.n, args.n)[0]))
build = (lambda: cg_setitem.cg(gnp, b)) if args.what == "cg_setitem" else (lambda: cg_setitem.cg(gnp, b, laplacian=cg.laplacian))
for _ in range(3):
    gnp.compute(build())
if args.profile:
    import cProfile
    cProfile.run("for _ in range(args.calls): gnp.compute(build())", args.profile)
tb, tc = [], []
for _ in range(args.calls):
    t = time.thread_time(); e = build(); t1 = time.thread_time(); gnp.compute(e); t2 = time.thread_time()
    tb.append((t1 - t) * 1e3); tc.append((t2 - t1) * 1e3)
print(f"{args.what} n={args.n}: build {statistics.median(tb):.2f} ms, compute {statistics.median(tc):.2f} ms (thread CPU, medians)")
