#!/usr/bin/env bash
# The one command for the GPU machine (offline; dask, distributed, dask-cuda, bokeh and UCXX travel
# as wheels in .whl/, see ../shared/device/README.md): installs the wheels into /tmp/site, prints
# the GPU and versions, runs the whole test suite on CuPy blocks, then the benchmarks, and ends
# with a short summary. Logs go to $OUT/tests.log and $OUT/bench.log (and $OUT/<benchmark>.json) when
# $OUT is set. Exits non-zero when tests or benchmarks failed; failed tests don't stop the
# benchmarks.
#
#   bash ci/gpu.sh [--quick] [-- BENCHMARK ARGS...]
#
#   --quick   benchmarks only (skip the tests)
#   -- ...    passed to every benchmark, e.g. -- --repeat 5
set -uo pipefail  # no -e: the benchmarks run even when tests fail
export PYTHONUNBUFFERED=1
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit

quick=0
bench_args=()
while (($#)); do
    case $1 in
        --quick) quick=1 ;;
        --) shift; bench_args=("$@"); break ;;
        -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "ci/gpu.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done

if ! compgen -G '.whl/*.whl' >/dev/null; then
    echo "ci/gpu.sh: no wheels in .whl/: run ../shared/device/fetch-wheels.sh on a machine with PyPI access and send .whl/ along" >&2
    exit 2
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || exit;
export PYTHONPATH="$PWD:$PYTHONPATH"  # import dask_gpunumeric from this checkout, uninstalled

log_dir="${OUT:-}"
if [[ -z "$log_dir" ]]; then
    log_dir="$(mktemp -d "${TMPDIR:-/tmp}/gnp-gpu.XXXXXX")"
fi
mkdir -p "$log_dir"

echo "== GPU"
nvidia-smi -L || echo "(nvidia-smi -L failed)"
echo "== versions"
python3 - <<'PY'
import importlib, platform
print(f"python {platform.python_version()}")
for name in ("numpy", "cupy", "dask", "distributed", "dask_cuda"):
    try:
        print(f"{name} {importlib.import_module(name).__version__}")
    except Exception as exc:
        print(f"{name}: not importable ({type(exc).__name__}: {exc})")
try:
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    print(f"CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, driver {cupy.cuda.runtime.driverGetVersion()}, "
          f"device 0: {name}, {cupy.cuda.runtime.getDeviceCount()} device(s)")
except Exception as exc:
    print(f"cupy: no GPU ({type(exc).__name__}: {exc})")
PY

tests_rc=0
if ((quick)); then
    echo "== tests skipped (--quick)"
else
    # pytest-xdist (on the GPU image) spreads the suite over a few processes sharing the GPU
    xdist=()
    python3 -c 'import xdist' 2>/dev/null && xdist=(-n "${GNP_TEST_WORKERS:-6}")
    export GNP_HYPOTHESIS_EXAMPLES="${GNP_HYPOTHESIS_EXAMPLES:-20}"
    echo "== tests: GNP_BACKEND=cupy python3 -m pytest -q -p no:cacheprovider ${xdist[*]} tests"
    GNP_BACKEND=cupy python3 -m pytest -q -p no:cacheprovider "${xdist[@]}" tests 2>&1 | tee "$log_dir/tests.log"
    tests_rc=${PIPESTATUS[0]}
fi

BENCHMARKS=(monte_carlo black_scholes heat small_arrays)
bench_rc=0
: >"$log_dir/bench.log"
for bench in "${BENCHMARKS[@]}"; do
    echo "== benchmark: python3 benchmarks/$bench.py ${bench_args[*]}"
    python3 "benchmarks/$bench.py" --json "$log_dir/$bench.json" "${bench_args[@]}" 2>&1 | tee -a "$log_dir/bench.log"
    rc=${PIPESTATUS[0]}
    ((rc != 0)) && bench_rc=$rc
done
n_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if ((n_gpus >= 2)); then  # weak scaling from 1 to every GPU of the machine (powers of two)
    counts=1; k=2
    while ((k <= n_gpus)); do counts+=",$k"; k=$((k * 2)); done
    echo "== benchmark: python3 benchmarks/weak_scaling.py --workers $counts"
    python3 benchmarks/weak_scaling.py --workers "$counts" --json "$log_dir/weak_scaling.json" 2>&1 | tee -a "$log_dir/bench.log"
    rc=${PIPESTATUS[0]}
    ((rc != 0)) && bench_rc=$rc
fi

echo
echo "== summary"
if ((quick)); then
    echo "tests:      skipped (--quick)"
else
    summary="$(grep -E '([0-9]+ (passed|failed|errors?|skipped|xfailed|xpassed|deselected)|no tests ran).* in [0-9.]+s' "$log_dir/tests.log" | tail -n 1)"
    echo "tests:      ${summary:-no pytest summary line (see tests.log)} (exit code $tests_rc)"
fi
echo "benchmarks: exit code $bench_rc"
for bench in "${BENCHMARKS[@]}"; do
    [[ -s "$log_dir/$bench.json" ]] && python3 benchmarks/_harness.py show "$log_dir/$bench.json"
done
[[ -n "${OUT:-}" ]] && echo "logs: $OUT/tests.log, $OUT/bench.log, $OUT/*.json"

if ((tests_rc != 0)); then exit "$tests_rc"; fi
exit "$bench_rc"
