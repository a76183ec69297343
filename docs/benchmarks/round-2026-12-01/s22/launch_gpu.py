"""On a GPU: the accelerated Black-Scholes and Monte-Carlo calls' host time: to the first launch, run_cuda itself,
the whole call (no sync), then a profile of the calls (the device synchronised between them)."""
import sys, time, statistics, pathlib, cProfile, pstats, io
ROOT = pathlib.Path.cwd()
for p in (ROOT / "benchmarks", ROOT / "examples", ROOT):
    sys.path.insert(0, str(p))
import dask, numpy as np, cupy as cp
import dask_gpunumeric as gnp
from dask_gpunumeric.kernels import fused
import black_scholes as bs, monte_carlo as mc
marks = []
orig = fused.run_cuda
def rc(*a, **k):
    marks.append(time.perf_counter())
    out = orig(*a, **k)
    marks.append(time.perf_counter())
    return out
fused.run_cuda = rc
host = bs.inputs(2**27)
gS, gK, gT = dask.persist(*(gnp.from_array(h) for h in host))
acc = gnp.accelerate(lambda S, K, T: bs.price(gnp, S, K, T))
calls = {"black_scholes": lambda: acc(gS, gK, gT), "monte_carlo": lambda: gnp.fetch(mc.monte_carlo(2**30, 10.0))}
for name, call in calls.items():
    for _ in range(5): call(); cp.cuda.runtime.deviceSynchronize()
    pre, run, whole = [], [], []
    for _ in range(100):
        cp.cuda.runtime.deviceSynchronize(); marks.clear()
        t = time.perf_counter(); out = call(); e = time.perf_counter()
        if marks:
            pre.append((marks[0] - t) * 1e6); run.append((marks[1] - marks[0]) * 1e6)
        whole.append((e - t) * 1e6)
        del out
    cp.cuda.runtime.deviceSynchronize()
    print(f"{name}: to run_cuda {statistics.median(pre) if pre else -1:.1f} us, run_cuda {statistics.median(run) if run else -1:.1f} us, whole call {statistics.median(whole):.1f} us (no sync), launches seen {len(pre)}")
    pr = cProfile.Profile()
    for _ in range(100):
        cp.cuda.runtime.deviceSynchronize(); pr.enable(); out = call(); pr.disable(); del out
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30); print(s.getvalue())
    sys.stdout.flush()
