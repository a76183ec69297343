#!/usr/bin/env bash
# call D: heat with a captured coefficient field (auto / 1 / 4 / JAX), then the whole suite on CuPy blocks, verbose
L=$OUT/logs; mkdir -p $L
echo "$1" > $L/commit.txt
timeout 90 python3 scratch/s24/heat_coeff.py 16384  # (the first form of loop_forms.py coeff) > $L/heat_coeff.log 2>&1; grep -E "^(gnp|jax|heat)" $L/heat_coeff.log
(GNP_BACKEND=cupy GNP_HYPOTHESIS_EXAMPLES=5 timeout 470 python3 -m pytest -v -rfE -p no:cacheprovider -n 16 tests > $L/tests_cupy.log 2>&1); grep -E "FAILED|ERROR" $L/tests_cupy.log | head -20; tail -2 $L/tests_cupy.log
cd $OUT && tar czf logs.tgz logs
