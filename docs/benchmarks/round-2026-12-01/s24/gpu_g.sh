#!/usr/bin/env bash
# call G: the setitem-sweep fix on the H200: sizes, the loop forms, the stencil tests on CuPy blocks
L=$OUT/logs; mkdir -p $L
echo "$1" > $L/commit.txt
timeout 60 python3 scratch/s24/sizes.py > $L/sizes.log 2>&1; cat $L/sizes.log | tail -8
timeout 50 python3 scratch/s24/loop_forms.py jacobi 16384 > $L/loop_jacobi.log 2>&1; grep -E "^jacobi " $L/loop_jacobi.log
(GNP_BACKEND=cupy GNP_HYPOTHESIS_EXAMPLES=5 timeout 60 python3 -m pytest -q -p no:cacheprovider -n 16 tests/test_stencil.py tests/test_peel.py > $L/tests_cupy_stencil.log 2>&1); tail -1 $L/tests_cupy_stencil.log
cd $OUT && tar czf logs.tgz logs
