"""Monte-Carlo estimate and hand kernel in fresh processes, alternating kernel compile options.
python mc_ab.py ROUNDS VARIANT... (VARIANT: fmad | nofmad)"""
import pathlib, statistics, subprocess, sys
root = pathlib.Path(__file__).resolve().parents[2]
script = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; import dask_gpunumeric.kernels.cuda as C; "
          "C.COMPILE_OPTIONS = ('--std=c++17', '--fmad=false') if sys.argv[5] == 'nofmad' else C.COMPILE_OPTIONS; "
          "import breakdown as B; import monte_carlo as mc, dask_gpunumeric as gnp; n, r = int(sys.argv[3]), int(sys.argv[4]); "
          "f = lambda: gnp.fetch(mc.monte_carlo(n, 10.0)); f(); f(); hand = B.hand_written(n); "
          "print(B.median_ms(f, r), B.median_ms(hand, r), B.median_ms(f, r))")
rows = {v: [] for v in sys.argv[2:]}
for k in range(int(sys.argv[1])):
    for v in sys.argv[2:]:
        out = subprocess.run([sys.executable, "-c", script, str(root / "benchmarks"), str(root / "examples"), str(2**30), "10", v],
                             capture_output=True, text=True, check=True).stdout.split()
        rows[v].append(tuple(float(x) for x in out[-3:]))
        print(f"{k} {v}: estimate {rows[v][-1][0]:.3f}, hand {rows[v][-1][1]:.3f}, estimate again {rows[v][-1][2]:.3f}", flush=True)
for v, r in rows.items():
    print(f"{v}: median estimate {statistics.median(x[0] for x in r):.3f} (again {statistics.median(x[2] for x in r):.3f}), hand {statistics.median(x[1] for x in r):.3f}")
