"""On a GPU: where the plain path's time goes, per workload: build, compute of the built expressions, the whole
plain call, the accelerated call; then a profile of the plain call's host side."""
import sys, time, statistics, pathlib, importlib, cProfile, pstats, io
ROOT = pathlib.Path.cwd()
for p in (ROOT / "benchmarks", ROOT):
    sys.path.insert(0, str(p))
import dask, numpy as np, cupy as cp
import dask_gpunumeric as gnp
gnp.config.set(guards="allow")
def sync(v=None):
    cp.cuda.runtime.deviceSynchronize()
for name in sys.argv[1:]:
    mod = importlib.import_module(name)
    w = [v for v in vars(mod).values() if type(v).__name__ == "Workload"][-1]  # (heat3d_large: its own, the last)
    host = w.inputs(w.gpu_shape)
    opts = {"steps": w.steps} if w.steps is not None else {}
    arrays = dask.persist(*(gnp.asarray(h) for h in host))
    acc = gnp.accelerate(lambda *a: w.compute(gnp, *a, **opts))
    tup = lambda v: v if isinstance(v, tuple) else (v,)
    built = [None]
    def build(): built[0] = tup(w.compute(gnp, *arrays, **opts))
    runs = {"plain": lambda: gnp.compute(*tup(w.compute(gnp, *arrays, **opts))),
            "build": build,
            "compute-built": lambda: gnp.compute(*built[0]),
            "persist-built": lambda: dask.persist(*built[0]),
            "acc": lambda: acc(*arrays)}
    for sysname, run in runs.items():
        for _ in range(3): run(); sync()
        ts = []
        for _ in range(15):
            sync(); t = time.perf_counter(); run(); sync(); ts.append(time.perf_counter() - t)
        print(f"{name:20s} {sysname:14s} {statistics.median(ts)*1e3:8.3f} ms")
    build()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(10): runs["compute-built"](); sync()
    pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18); print(s.getvalue()[-4000:])
    sys.stdout.flush()
