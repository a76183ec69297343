#!/usr/bin/env bash
# call E: the #21 target rows in one run at HEAD, the loop tests on CuPy blocks, Black-Scholes' host gap
L=$OUT/logs; mkdir -p $L
echo "$1" > $L/commit.txt
nvidia-smi -L > $L/gpu.txt
(GNP_BACKEND=cupy GNP_HYPOTHESIS_EXAMPLES=5 timeout 100 python3 -m pytest -q -p no:cacheprovider -n 16 tests/test_peel.py tests/test_loops.py tests/test_cg_floor.py > $L/tests_cupy_loops.log 2>&1); tail -2 $L/tests_cupy_loops.log
for b in black_scholes heat gray_scott cg cg_setitem black_scholes_erf; do
  timeout 70 python3 benchmarks/$b.py --repeat 5 --warmup 1 > $L/bench_$b.log 2>&1; awk '/^implementation/{f=1} f&&/^$/{f=0} f' $L/bench_$b.log | grep -vE "^(-|\(x)" | grep -vE "unfused|dask.array|^cupy " | sed "s/^/$b /"
done
timeout 110 python3 benchmarks/breakdown.py --processes 10 --repeat 10 > $L/mc_fresh.log 2>&1; tail -4 $L/mc_fresh.log
timeout 40 python3 benchmarks/host_gap.py black_scholes > $L/host_gap.log 2>&1; tail -2 $L/host_gap.log
cd $OUT && tar czf logs.tgz logs
