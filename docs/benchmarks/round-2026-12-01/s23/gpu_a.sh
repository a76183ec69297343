#!/usr/bin/env bash
# call A: the #21 target rows, CG unroll variants, CuPy tests of the loop changes
L=$OUT/logs; mkdir -p $L
echo "$1" > $L/commit.txt
nvidia-smi -L > $L/gpu.txt
(GNP_BACKEND=cupy GNP_HYPOTHESIS_EXAMPLES=5 timeout 150 python3 -m pytest -q -p no:cacheprovider -n 16 tests/test_cg_floor.py tests/test_peel.py tests/test_loops.py tests/test_stencil.py tests/test_plain_loops.py > $L/tests_cupy_loops.log 2>&1); tail -3 $L/tests_cupy_loops.log
for b in cg black_scholes heat gray_scott cg_setitem black_scholes_erf; do
  timeout 100 python3 benchmarks/$b.py --repeat 5 --warmup 1 > $L/bench_$b.log 2>&1; awk '/^implementation/{f=1} f&&/^$/{f=0} f' $L/bench_$b.log | sed "s/^/$b /"
done
timeout 60 python3 scratch/s23/cg_unroll.py 8192 1,auto,4,5,6 > $L/cg_unroll.log 2>&1; cat $L/cg_unroll.log
timeout 120 python3 benchmarks/breakdown.py --processes 10 --repeat 10 > $L/mc_fresh.log 2>&1; tail -5 $L/mc_fresh.log
cd $OUT && tar czf logs.tgz logs
