#!/usr/bin/env bash
# Run the array API standard's test suite (data-apis/array-api-tests) against dask_gpunumeric.
#
#   bash ci/array_api_tests.sh PATH/TO/array-api-tests [PYTEST ARGS...]
#
# The suite is not on PyPI and none of it lives in this repository: pass a checkout of it (tag 2026.02.26)
# with the spec repository data-apis/array-api checked out as its `array-api` folder. Runs version 2024.12
# with 3 examples per test and the fft extension disabled, under the default configuration (the guards
# warn, as for any user: the suite indexes single elements, converts 0-d arrays to Python numbers and mixes
# dtypes by design; their warnings are silenced with -W ignore) and without Hypothesis's per-example
# deadline (timing is for benchmarks/, and a shared machine makes it noise), and prints pytest's summary. Needs
# pytest-json-report and ndindex>=1.8 besides the test extra.
set -euo pipefail
suite="${1:?usage: bash ci/array_api_tests.sh PATH/TO/array-api-tests [PYTEST ARGS...]}"
shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$suite"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export ARRAY_API_TESTS_MODULE=dask_gpunumeric
export ARRAY_API_TESTS_VERSION=2024.12
exec python -m pytest array_api_tests --max-examples 3 --disable-extension fft --disable-deadline -q -p no:cacheprovider \
    -o addopts="" -W ignore "$@"
