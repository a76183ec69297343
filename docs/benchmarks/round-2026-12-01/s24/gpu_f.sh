#!/usr/bin/env bash
# call F: stencil sweeps in a plain fori_loop (coefficient field; copy + setitem), the loop tests, the setitem CG's plain path split
L=$OUT/logs; mkdir -p $L
echo "$1" > $L/commit.txt
for f in jacobi coeff; do timeout 60 python3 scratch/s24/loop_forms.py $f 16384 > $L/loop_$f.log 2>&1; grep -E "^$f " $L/loop_$f.log; done
(GNP_BACKEND=cupy GNP_HYPOTHESIS_EXAMPLES=5 timeout 60 python3 -m pytest -q -p no:cacheprovider -n 16 tests/test_peel.py > $L/tests_cupy_peel.log 2>&1); tail -1 $L/tests_cupy_peel.log
timeout 60 python3 docs/benchmarks/round-2026-12-01/s22/plain_gpu.py cg_setitem > $L/plain_gpu.log 2>&1; grep -E "^cg_setitem " $L/plain_gpu.log
cd $OUT && tar czf logs.tgz logs
