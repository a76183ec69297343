#!/usr/bin/env bash
# call C: the whole suite on CuPy blocks at HEAD, Gray-Scott "auto" against unroll 4, BS and CG rows
L=$OUT/logs; mkdir -p $L
echo "$1" > $L/commit.txt
nvidia-smi -L > $L/gpu.txt
(GNP_BACKEND=cupy GNP_HYPOTHESIS_EXAMPLES=5 timeout 360 python3 -m pytest -q -p no:cacheprovider -n 16 tests > $L/tests_cupy.log 2>&1); tail -4 $L/tests_cupy.log
for u in auto 4 auto 4; do
  timeout 60 python3 benchmarks/gray_scott.py --repeat 5 --warmup 1 --unroll $u > $L/bench_gray_scott_u$u.log 2>&1; awk '/^implementation/{f=1} f&&/^$/{f=0} f' $L/bench_gray_scott_u$u.log | grep -E "^(gnp|jax)" | sed "s/^/gs-u$u /"
done
for b in black_scholes cg; do
  timeout 100 python3 benchmarks/$b.py --repeat 5 --warmup 1 > $L/bench_$b.log 2>&1; awk '/^implementation/{f=1} f&&/^$/{f=0} f' $L/bench_$b.log | sed "s/^/$b /"
done
cd $OUT && tar czf logs.tgz logs
