import sys, functools, re
sys.path.insert(0, "benchmarks"); sys.path.insert(0, "tests")
import numpy as np, dask_gpunumeric as gnp, pytest
import _cuda_emulator, cg, _iterative
mp = pytest.MonkeyPatch(); _cuda_emulator.emulated_cupy(mp)
gnp.config.set(guards="allow")
n = 64
b = cg.inputs(n, n)[0]
arr = gnp.asarray(b).persist()
for unroll in ["auto", 1]:
    loop = functools.partial(gnp.fori_loop, unroll=unroll)
    f = lambda salt, *a: _iterative._run(cg.CG, gnp, loop, salt, a, 30)
    with gnp.config.set(dispatch="lazy"):
        text = str(gnp.explain(gnp.accelerate(f)(gnp.asarray(np.float32(0)), arr)))
    iters = int(re.search(r"fori_loop \((\d+) iterations\)", text).group(1))
    total = 0.0
    for m in re.finditer(r"stencil group .*?\n  floor: ([\d,]+) B", text):
        line = text[m.start():m.end()]
        bytes_ = int(m.group(1).replace(",", ""))
        total += bytes_ * (iters if "each iteration" in line else 1)
    for m in re.finditer(r"per block: reads ([\d,]+) B, writes ([\d,]+) B", text):
        total += int(m.group(1).replace(",", "")) + int(m.group(2).replace(",", ""))
    vec = n * n * 4
    print(unroll, "loop iterations", iters, "vectors", total / vec, "ms at 4.2TB/s for 8192^2:", total / vec * 8192**2 * 4 / 4.2e12 * 1e3)
