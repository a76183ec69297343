#!/usr/bin/env bash
# The test command (README): on a fresh machine, sets up .venv (test and bench extras), runs the test
# suite on NumPy blocks (spread over the CPU cores with pytest-xdist), then compiles every distinct CUDA
# kernel the tests generated with nvcc (when nvcc is on PATH), so code-generation errors show up without
# a GPU.
#
#   bash ci/test.sh [--quick] [PYTEST ARGS...]
#
#   --quick   the quick loop: tests not marked slow, 5 Hypothesis examples per test, no kernel
#             compilation (about 3 minutes on 2 cores)
#
# GNP_TEST_WORKERS: pytest-xdist processes (default "auto": one per core; 0 runs in this process).
# GNP_HYPOTHESIS_EXAMPLES: examples per property test (default 25; 5 with --quick).
# GNP_KERNEL_DUMP_DIR: where the library writes the generated kernels (*.cu); a fresh temporary
# folder, removed afterwards unless a kernel failed to compile, unless you set it yourself.
# GNP_NVCC_FLAGS: extra nvcc flags (default none).
# Hypothesis keeps its examples database in .pytest_cache/hypothesis (in a fresh temporary folder when
# CI is set, so that a CI run replays only the examples the repository ships, in @example decorators).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=0
if [[ "${1:-}" == "--quick" ]]; then
    quick=1
    shift
fi

# shellcheck source=ci/setup_venv.sh
source ci/setup_venv.sh
gnp_setup_venv test,bench

tmp_dirs=()
# shellcheck disable=SC2329  # invoked by the trap
cleanup() { if ((${#tmp_dirs[@]})); then rm -rf "${tmp_dirs[@]}"; fi; }
trap cleanup EXIT

keep_kernels=0
if [[ -n "${GNP_KERNEL_DUMP_DIR:-}" ]]; then
    mkdir -p "$GNP_KERNEL_DUMP_DIR"
    keep_kernels=1
else
    GNP_KERNEL_DUMP_DIR="$(mktemp -d "${TMPDIR:-/tmp}/gnp-kernels.XXXXXX")"
    tmp_dirs+=("$GNP_KERNEL_DUMP_DIR")
fi
export GNP_KERNEL_DUMP_DIR

if [[ -z "${HYPOTHESIS_STORAGE_DIRECTORY:-}" ]]; then
    if [[ -n "${CI:-}" && "${CI:-}" != "false" ]]; then
        HYPOTHESIS_STORAGE_DIRECTORY="$(mktemp -d "${TMPDIR:-/tmp}/gnp-hypothesis.XXXXXX")"
        tmp_dirs+=("$HYPOTHESIS_STORAGE_DIRECTORY")
    else
        HYPOTHESIS_STORAGE_DIRECTORY="$PWD/.pytest_cache/hypothesis"
    fi
fi
export HYPOTHESIS_STORAGE_DIRECTORY

args=(-q -p no:cacheprovider)
workers="${GNP_TEST_WORKERS:-auto}"
if [[ "$workers" != 0 ]] && python -c 'import xdist' 2>/dev/null; then
    args+=(-n "$workers" --dist worksteal)  # idle workers take tests queued on busy ones: no slow tail
fi
if ((quick)); then
    export GNP_HYPOTHESIS_EXAMPLES="${GNP_HYPOTHESIS_EXAMPLES:-5}"
    args+=(-m "not slow")
fi

echo "ci: python -m pytest ${args[*]} $* (GNP_KERNEL_DUMP_DIR=$GNP_KERNEL_DUMP_DIR)"
pytest_rc=0
python -m pytest "${args[@]}" "$@" || pytest_rc=$?
case $pytest_rc in
    0) ;;
    5) echo "ci: FAILED: pytest collected no tests (exit code 5)" >&2 ;;
    *) echo "ci: FAILED: pytest exit code $pytest_rc" >&2 ;;
esac

# Compile the generated kernels, also after failed tests: codegen errors are worth seeing too.
kernels_rc=0
if ((quick)); then
    echo "ci: --quick: generated kernels not compiled"
elif ! command -v nvcc >/dev/null 2>&1; then
    echo "ci: nvcc not on PATH: generated kernels not compiled"
elif ! python ci/compile_kernels.py "$GNP_KERNEL_DUMP_DIR"; then
    kernels_rc=1
    if ((!keep_kernels)); then
        kept="$(mktemp -d "${TMPDIR:-/tmp}/gnp-kernels-failed.XXXXXX")"
        cp -r "$GNP_KERNEL_DUMP_DIR"/. "$kept"/
        echo "ci: kept the generated kernels in $kept" >&2
    fi
fi

if ((pytest_rc != 0)); then exit "$pytest_rc"; fi
exit "$kernels_rc"
