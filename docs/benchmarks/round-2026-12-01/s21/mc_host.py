"""Host time of the Monte-Carlo example on emulated CuPy blocks whose kernels do nothing: until its first launch, and the whole call (2^30 samples). Run from a tree root: PYTHONPATH=. python mc_host.py"""
import sys, time, statistics, pathlib
ROOT = pathlib.Path.cwd()
for p in (ROOT / "benchmarks", ROOT / "tests", ROOT, ROOT / "examples"):
    sys.path.insert(0, str(p))
import launch_host; launch_host.emulate()
import pytest
from dask_gpunumeric import backend as _backend
pytest.MonkeyPatch().setattr(_backend, "gpu_available", lambda: True)
import dask_gpunumeric as gnp
gnp.config.set(backend="cupy")
import monte_carlo as mc
from dask_gpunumeric.kernels import fused
first = []
orig = fused.run_cuda
def rc(*a, **k):
    if not first: first.append(time.perf_counter())
    return orig(*a, **k)
fused.run_cuda = rc
import dask_gpunumeric.kernels.fused as F
n = 2**30
for _ in range(5): gnp.fetch(mc.monte_carlo(n, 10.0))
tf, tt = [], []
for _ in range(200):
    first.clear(); t = time.perf_counter(); gnp.fetch(mc.monte_carlo(n, 10.0)); e = time.perf_counter()
    if first: tf.append((first[0]-t)*1e6)
    tt.append((e-t)*1e6)
print(f"to first launch {statistics.median(tf) if tf else float('nan'):.0f} us, whole call {statistics.median(tt):.0f} us, launches seen {bool(tf)}")
import cProfile, pstats
cProfile.run("for _ in range(200): gnp.fetch(mc.monte_carlo(n, 10.0))", "/tmp/mc.prof")
pstats.Stats("/tmp/mc.prof").sort_stats("cumulative").print_stats(30)
