"""One Jacobi sweep (copy + interior setitem) on one block, plain and in fori_loop(unroll=1), at several sizes:
NumPy's values, no illegal address."""
import sys, pathlib
ROOT = pathlib.Path.cwd()
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]
import numpy as np
from heat import jacobi
import dask_gpunumeric as gnp
for n in (24, 500, 512, 600, 1000, 4096, 16384):
    h = np.random.default_rng(n).random((n, n), dtype=np.float32)
    u = gnp.asarray(h).persist()
    r1 = jacobi(h); r5 = h
    for _ in range(5): r5 = jacobi(r5)
    a = gnp.fetch(jacobi(u))
    b = gnp.fetch(gnp.fori_loop(5, lambda i, w: jacobi(w), u, unroll=1))
    print(n, u.numblocks, float(np.abs(a - r1).max()), float(np.abs(b - r5).max()), flush=True)
