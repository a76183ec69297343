#!/usr/bin/env bash
# The test command (README): on a fresh machine, sets up .venv (test and bench extras), runs the test
# suite, then compiles every CUDA kernel the tests generated with nvcc (when nvcc is on PATH), so
# code-generation errors show up without a GPU.
#
#   bash ci/test.sh [PYTEST ARGS...]
#
# GNP_KERNEL_DUMP_DIR: where the library writes the generated kernels (*.cu); a fresh temporary
# folder, removed afterwards unless a kernel failed to compile, unless you set it yourself.
# GNP_NVCC_FLAGS: extra nvcc flags (default none).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=ci/setup_venv.sh
source ci/setup_venv.sh
gnp_setup_venv test,bench

keep_kernels=0
if [[ -n "${GNP_KERNEL_DUMP_DIR:-}" ]]; then
    mkdir -p "$GNP_KERNEL_DUMP_DIR"
    keep_kernels=1
else
    GNP_KERNEL_DUMP_DIR="$(mktemp -d "${TMPDIR:-/tmp}/gnp-kernels.XXXXXX")"
fi
export GNP_KERNEL_DUMP_DIR
# shellcheck disable=SC2329  # invoked by the trap
cleanup() { if [[ $keep_kernels == 0 ]]; then rm -rf "$GNP_KERNEL_DUMP_DIR"; fi; }
trap cleanup EXIT

echo "ci: python -m pytest -q -p no:cacheprovider $* (GNP_KERNEL_DUMP_DIR=$GNP_KERNEL_DUMP_DIR)"
pytest_rc=0
python -m pytest -q -p no:cacheprovider "$@" || pytest_rc=$?
case $pytest_rc in
    0) ;;
    5) echo "ci: FAILED: pytest collected no tests (exit code 5)" >&2 ;;
    *) echo "ci: FAILED: pytest exit code $pytest_rc" >&2 ;;
esac

# Compile the generated kernels, also after failed tests: codegen errors are worth seeing too.
kernels_rc=0
mapfile -d '' kernels < <(find "$GNP_KERNEL_DUMP_DIR" -type f -name '*.cu' -print0 | sort -z)
if ((${#kernels[@]} == 0)); then
    echo "ci: no generated kernels in $GNP_KERNEL_DUMP_DIR"
elif ! command -v nvcc >/dev/null 2>&1; then
    echo "ci: nvcc not on PATH: ${#kernels[@]} generated kernels not compiled"
else
    python ci/compile_kernels.py "$GNP_KERNEL_DUMP_DIR" || { kernels_rc=1; keep_kernels=1; echo "ci: kept the generated kernels in $GNP_KERNEL_DUMP_DIR" >&2; }
fi

if ((pytest_rc != 0)); then exit "$pytest_rc"; fi
exit "$kernels_rc"
