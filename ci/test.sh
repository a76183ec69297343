#!/usr/bin/env bash
# The test command (README): on a fresh machine, sets up .venv, runs the test suite, then compiles
# every CUDA kernel the tests generated with nvcc (when nvcc is on PATH), so code-generation
# errors show up without a GPU.
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
gnp_setup_venv test

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
    fail_dir="$(mktemp -d "${TMPDIR:-/tmp}/gnp-nvcc.XXXXXX")"
    # Identical sources compile once (sha256sum marks names holding '\' or newlines: skip that).
    mapfile -t unique < <(sha256sum -- "${kernels[@]}" | sort -s -u -k1,1 | cut -c67-)
    echo "ci: compiling ${#unique[@]} generated kernels (${#kernels[@]} files) with $(nvcc --version | tail -n 1)"
    export GNP_NVCC_FAIL_DIR="$fail_dir"
    # shellcheck disable=SC2016
    printf '%s\0' "${unique[@]}" | xargs -0 -n 1 -P "$(nproc 2>/dev/null || echo 2)" bash -c '
        f=$1
        # shellcheck disable=SC2086
        if ! out=$(nvcc -std=c++17 -arch=sm_90 ${GNP_NVCC_FLAGS:-} -c -o /dev/null "$f" 2>&1); then
            printf "%s\n" "$out" >"$GNP_NVCC_FAIL_DIR/$(printf %s "$f" | sha1sum | cut -c1-16).log"
            printf "%s\n" "$f" >>"$GNP_NVCC_FAIL_DIR/failed"
        fi' _ || true
    if [[ -s "$fail_dir/failed" ]]; then
        mapfile -t failed < <(sort "$fail_dir/failed")
        echo "ci: FAILED: ${#failed[@]} of ${#unique[@]} generated kernels did not compile:" >&2
        shown=0
        for f in "${failed[@]}"; do
            echo "ci:   $f" >&2
            if ((shown < 3)); then  # the first few in full, so that a CI log shows the error
                shown=$((shown + 1))
                sed 's/^/      nvcc| /' "$fail_dir/$(printf %s "$f" | sha1sum | cut -c1-16).log" >&2
                echo "      --- source (first 150 lines) ---" >&2
                nl -ba -- "$f" | head -n 150 | sed 's/^/      /' >&2
            fi
        done
        keep_kernels=1
        echo "ci: kept the generated kernels in $GNP_KERNEL_DUMP_DIR" >&2
        kernels_rc=1
    else
        echo "ci: compiled ${#unique[@]} generated kernels with nvcc -std=c++17 -arch=sm_90: all OK"
    fi
    rm -rf "$fail_dir"
fi

if ((pytest_rc != 0)); then exit "$pytest_rc"; fi
exit "$kernels_rc"
