#!/usr/bin/env bash
# Build the wheel and install it with the test extra into a fresh virtual environment, at the HIGHEST
# dask and distributed that setup.cfg admits (ci/constraints-newest.txt: what `pip install .` picks; the
# main test run, ci/test.sh, pins the lowest). Then check it from outside the repository: every module of
# the package is in the wheel, it imports and computes, and the tests of the code that leans on dask's
# internals (dask._expr, dask._task_spec, the collection hooks, dask.compute/optimize/persist,
# distributed, xarray) pass against it.
#
#   bash ci/wheel.sh [PYTEST ARGS...]     # e.g. bash ci/wheel.sh -x
#
# GNP_CONSTRAINTS: the pins to install with (default ci/constraints-newest.txt).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
constraints="${GNP_CONSTRAINTS:-ci/constraints-newest.txt}"
# run against the other end of the admitted dask range: not slow, not browser, 5 Hypothesis examples, and
# xarray's operations on a local scheduler only (the main run does them on a cluster too)
dask_facing_tests=(test_collection.py test_dask_tools.py test_distributed.py test_cluster.py test_cluster_owner.py
                   test_xarray.py test_optimize.py)
work="$(mktemp -d "${TMPDIR:-/tmp}/gnp-wheel.XXXXXX")"
# shellcheck disable=SC2064  # expand now: the folder to remove
trap "rm -rf '$work'" EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q build
echo "ci: python -m build --wheel"
"$work/venv/bin/python" -m build -q --wheel --outdir "$work/dist" "$root" >/dev/null
wheel=("$work"/dist/dask_gpunumeric-*.whl)
echo "ci: pip install -c $constraints \"$(basename "${wheel[0]}")[test]\" (a fresh venv)"
"$work/venv/bin/pip" install -q -c "$root/$constraints" "${wheel[0]}[test]"
cd "$work"  # not the repository: import the installed package
git -C "$root" ls-files 'dask_gpunumeric/*.py' > modules.txt
"$work/venv/bin/python" - "${wheel[0]}" modules.txt "$root/$constraints" <<'PY'
import sys, zipfile
from importlib.metadata import version
import numpy as np
import dask_gpunumeric as gnp

in_wheel = set(zipfile.ZipFile(sys.argv[1]).namelist())
missing = [m for m in open(sys.argv[2]).read().split() if m not in in_wheel]
assert not missing, f"modules missing from the wheel: {missing}"
assert gnp.__file__.startswith(sys.prefix), gnp.__file__
assert np.isclose(gnp.fetch(gnp.sum(gnp.exp(gnp.arange(10, chunks=3) * 0.1))), np.sum(np.exp(np.arange(10) * 0.1)))
pins = dict(line.split("==") for line in open(sys.argv[3]).read().splitlines() if "==" in line and line[0] != "#")
installed = {name: version(name) for name in pins}
assert installed == pins, f"installed {installed}, pinned {pins}"
print(f"ci: the wheel holds all {len(open(sys.argv[2]).read().split())} modules; installed, it imports and computes;",
      ", ".join(f"{name} {v}" for name, v in installed.items()))
PY
echo "ci: pytest of the installed wheel ($constraints): ${dask_facing_tests[*]}"
GNP_HYPOTHESIS_EXAMPLES="${GNP_HYPOTHESIS_EXAMPLES:-5}" "$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
    -c "$root/setup.cfg" --rootdir "$root" -n auto -m "not slow and not browser" \
    -k "not (test_operation_like_xarray and distributed)" \
    "${dask_facing_tests[@]/#/$root/tests/}" "$@"
