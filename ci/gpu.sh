#!/usr/bin/env bash
# The one command for the GPU machine (offline; dask, distributed, dask-cuda, bokeh and UCXX travel
# as wheels in .whl/, see ../shared/device/README.md): installs the wheels into /tmp/site, prints
# the GPU and versions, runs the whole test suite on CuPy blocks, then the benchmark suite
# (benchmarks/suite.py: every benchmark, weak scaling on 1, 2, 4, ... GPUs, plots), and ends with a
# short summary. Logs go to $OUT/tests.log and $OUT/bench.log, the suite's results.json, results.md
# and plots to $OUT/benchmarks/, when $OUT is set. Exits non-zero when tests or benchmarks failed;
# failed tests don't stop the benchmarks.
#
#   bash ci/gpu.sh [--quick] [-- SUITE ARGS...]
#
#   --quick   benchmarks only (skip the tests)
#   -- ...    passed to benchmarks/suite.py, e.g. -- --repeat 5 --only monte_carlo,matmul
set -uo pipefail  # no -e: the benchmarks run even when tests fail
export PYTHONUNBUFFERED=1
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit

quick=0
bench_args=()
while (($#)); do
    case $1 in
        --quick) quick=1 ;;
        --) shift; bench_args=("$@"); break ;;
        -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
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

echo "== benchmarks: python3 benchmarks/suite.py --out $log_dir/benchmarks ${bench_args[*]}"
python3 benchmarks/suite.py --out "$log_dir/benchmarks" "${bench_args[@]}" 2>&1 | tee "$log_dir/bench.log"
bench_rc=${PIPESTATUS[0]}

# Two workers sharing one GPU (gnp.cluster(n_workers=2) on one device): every weak-scaling workload checked
# against NumPy and timed against the same run without a cluster; regions exchange through Dask's comms
# (NCCL refuses two ranks on one device). Fails on a wrong result or on NCCL/UCX errors in the log.
shared_gpu="${CUDA_VISIBLE_DEVICES:-0}"; shared_gpu="${shared_gpu%%,*}"
echo "== two workers on GPU $shared_gpu: python3 benchmarks/cluster_overhead.py --workers 2"
CUDA_VISIBLE_DEVICES="$shared_gpu" python3 benchmarks/cluster_overhead.py --workers 2 --repeat 5 --warmup 2 \
    --json "$log_dir/shared_gpu.json" 2>&1 | tee "$log_dir/shared_gpu.log"
shared_rc=${PIPESTATUS[0]}
shared_errors="$(grep -E -i 'nccl_error|ncclerror|ncclInvalidUsage|cuIpcOpenMemHandle|UCX +ERROR|UCXX?Error' "$log_dir/shared_gpu.log" | sort | uniq -c | sort -rn | head -n 5)"
if [[ -n "$shared_errors" ]]; then
    echo "NCCL/UCX errors in the log:"; echo "$shared_errors"
    ((shared_rc == 0)) && shared_rc=1
fi

echo
echo "== summary"
if ((quick)); then
    echo "tests:      skipped (--quick)"
else
    summary="$(grep -E '([0-9]+ (passed|failed|errors?|skipped|xfailed|xpassed|deselected)|no tests ran).* in [0-9.]+s' "$log_dir/tests.log" | tail -n 1)"
    echo "tests:      ${summary:-no pytest summary line (see tests.log)} (exit code $tests_rc)"
fi
echo "benchmarks: exit code $bench_rc; results, table and plots in $log_dir/benchmarks/"
echo "2 workers on one GPU: exit code $shared_rc (log: $log_dir/shared_gpu.log)"
[[ -n "${OUT:-}" ]] && echo "logs: $OUT/tests.log, $OUT/bench.log"

if ((tests_rc != 0)); then exit "$tests_rc"; fi
if ((bench_rc != 0)); then exit "$bench_rc"; fi
exit "$shared_rc"
