#!/usr/bin/env bash
# Build the wheel, install it with its dependencies into a fresh virtual environment, and check it: every
# module of the package is in it, and, from outside the repository, it imports and computes.
#
#   bash ci/wheel.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/gnp-wheel.XXXXXX")"
# shellcheck disable=SC2064  # expand now: the folder to remove
trap "rm -rf '$work'" EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q build
echo "ci: python -m build --wheel"
"$work/venv/bin/python" -m build -q --wheel --outdir "$work/dist" "$root" >/dev/null
wheel=("$work"/dist/dask_gpunumeric-*.whl)
echo "ci: pip install -c ci/constraints.txt $(basename "${wheel[0]}") (a fresh venv)"
"$work/venv/bin/pip" install -q -c "$root/ci/constraints.txt" "${wheel[0]}"
cd "$work"  # not the repository: import the installed package
git -C "$root" ls-files 'dask_gpunumeric/*.py' > modules.txt
"$work/venv/bin/python" - "${wheel[0]}" modules.txt <<'PY'
import sys, zipfile
import numpy as np
import dask_gpunumeric as gnp

in_wheel = set(zipfile.ZipFile(sys.argv[1]).namelist())
missing = [m for m in open(sys.argv[2]).read().split() if m not in in_wheel]
assert not missing, f"modules missing from the wheel: {missing}"
assert gnp.__file__.startswith(sys.prefix), gnp.__file__
assert np.isclose(gnp.fetch(gnp.sum(gnp.exp(gnp.arange(10, chunks=3) * 0.1))), np.sum(np.exp(np.arange(10) * 0.1)))
print(f"ci: the wheel holds all {len(open(sys.argv[2]).read().split())} modules; installed, it imports and computes")
PY
