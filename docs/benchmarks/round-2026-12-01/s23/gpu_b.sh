#!/usr/bin/env bash
# call B: the whole suite on CuPy blocks, the user-code rows, Black-Scholes' host gap
L=$OUT/logs; mkdir -p $L
echo "$1" > $L/commit.txt
(GNP_BACKEND=cupy GNP_HYPOTHESIS_EXAMPLES=5 timeout 330 python3 -m pytest -q -p no:cacheprovider -n 16 tests > $L/tests_cupy.log 2>&1); tail -4 $L/tests_cupy.log
for b in rk4 advection histogram_stats heat3d heat3d_large softmax least_squares rk4_large; do
  timeout 60 python3 benchmarks/$b.py --repeat 5 --warmup 1 > $L/bench_$b.log 2>&1; awk '/^implementation/{f=1} f&&/^$/{f=0} f' $L/bench_$b.log | sed "s/^/$b /"
done
timeout 60 python3 benchmarks/host_gap.py black_scholes cg > $L/host_gap.log 2>&1; tail -6 $L/host_gap.log
timeout 90 python3 docs/benchmarks/round-2026-12-01/s22/plain_gpu.py cg_setitem advection > $L/plain_gpu.log 2>&1; grep -E "^(cg_setitem|advection) " $L/plain_gpu.log
cd $OUT && tar czf logs.tgz logs
