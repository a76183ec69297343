"""The benchmark suite on the CPU at small sizes: it runs, checks every system, and writes its results,
table and plots (times are not asserted: this machine's speed is not under test)."""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import weak_scaling  # noqa: E402  (benchmarks/ is not a package)

# These run the benchmark scripts at CPU sizes with the GPU hidden: the GPU machine runs the scripts
# themselves at full size (ci/gpu.sh), so the GPU test run leaves these to CI.
pytestmark = pytest.mark.skipif(os.environ.get("GNP_BACKEND") == "cupy",
                                reason="CPU runs of the benchmark scripts (CI); the GPU runs them at full size")


def _script_report(tmp_path: pathlib.Path, script: str, *args: str, timeout: int = 120) -> dict:
    """The JSON report of ``benchmarks/<script> ARGS --json`` run at CPU sizes with the GPU hidden (NumPy blocks);
    the run must succeed."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "GNP_BACKEND": "numpy", "PYTHONPATH": str(ROOT)}
    report_path = tmp_path / "report.json"
    command = [sys.executable, str(ROOT / "benchmarks" / script), *args, "--json", str(report_path)]
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    return json.loads(report_path.read_text())


@pytest.mark.slow
def test_suite_runs_on_the_cpu(tmp_path: pathlib.Path) -> None:
    # CUDA_VISIBLE_DEVICES="" hides any GPU: CPU sizes and NumPy blocks, on every machine
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "GNP_BACKEND": "numpy", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(ROOT / "benchmarks" / "suite.py"), "--only", "small_arrays,matmul",
               "--workers", "1,2", "--repeat", "1", "--warmup", "0", "--out", str(tmp_path)]
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=280)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]

    results = json.loads((tmp_path / "results.json").read_text())
    assert results["suite"]["cpu_run"] and results["suite"]["versions"]["dask"] != "-"
    assert set(results["benchmarks"]) == {"small_arrays", "matmul"}
    for report in results["benchmarks"].values():
        assert report["passed"] and report["device"] and report["date"]
        assert all(row["ok"] for row in report["results"]), report["results"]
    measured = {(row["workload"], row["system"], row["workers"]) for row in results["weak_scaling"]["results"]}
    assert {("matmul", "gnp", 1), ("matmul", "gnp", 2), ("matmul", "dask.array+numpy", 2)} <= measured

    table = (tmp_path / "results.md").read_text()
    assert "CPU run" in table and "### Dense matrix product" in table and "### Weak scaling" in table
    if importlib.util.find_spec("matplotlib") is not None:
        for plot in ("times.png", "weak_scaling.png"):
            assert (tmp_path / plot).read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("benchmark, size", [("cg", ["--steps", "5"]), ("gray_scott", ["--steps", "5"]),
                                             ("heat", ["--sweeps", "5"])])
@pytest.mark.slow
def test_iterative_benchmark_runs_and_checks_on_the_cpu(benchmark: str, size: list[str], tmp_path: pathlib.Path) -> None:
    """The iterative benchmarks at a small size: every system's result (gnp's plain path too) checked against
    NumPy's."""
    report = _script_report(tmp_path, f"{benchmark}.py", "--n", "64", *size, "--repeat", "1", "--warmup", "0")
    rows = {row["name"]: row for row in report["results"]}
    assert report["passed"] and {"gnp", "gnp-auto", "numpy"} <= set(rows)
    assert all(row["ok"] for name, row in rows.items() if name != "numpy"), report["results"]


def test_monte_carlo_benchmark_runs_and_checks_on_the_cpu(tmp_path: pathlib.Path) -> None:
    """The Monte-Carlo benchmark at a small size: the example's plain call, the same accelerated, and the
    baselines, each estimate checked against sqrt(pi)."""
    report = _script_report(tmp_path, "monte_carlo.py", "--n", "65536", "--repeat", "1", "--warmup", "0")
    rows = {row["name"]: row for row in report["results"]}
    assert report["passed"] and {"gnp", "gnp-accelerated", "gnp-unfused", "numpy"} <= set(rows)
    assert all(row["ok"] for row in rows.values()), report["results"]


USER_CODE_TINY = {
    "black_scholes_erf": ["--shape", "4096"], "cg_setitem": ["--shape", "32,32", "--steps", "3"],
    "rk4": ["--shape", "1024", "--steps", "2"], "rk4_large": ["--shape", "2048", "--steps", "1"],
    "softmax": ["--shape", "64,48"], "heat3d": ["--shape", "12,10,8", "--steps", "3"],
    "heat3d_large": ["--shape", "8,8,8", "--steps", "1"], "advection": ["--shape", "4096", "--steps", "3"],
    "histogram_stats": ["--shape", "4096"], "least_squares": ["--shape", "1024,8"],
}
"""Tiny sizes of the user-code benchmarks (``suite.USER_CODE``)."""


def test_every_user_code_benchmark_is_tested() -> None:
    import suite

    assert set(USER_CODE_TINY) == set(suite.USER_CODE) and set(suite.USER_CODE) <= set(suite.BENCHMARKS)
    assert suite.parse_args(["--only", "user_code,cg"]).only == [*suite.USER_CODE, "cg"]


def test_user_code_interleaved_against_numpy_on_the_cpu(tmp_path: pathlib.Path) -> None:
    """``user_code_cpu.py`` at tiny sizes: every system's outputs checked (bit for bit where NumPy's order of
    operations is kept), wall and CPU times against NumPy's."""
    report = _script_report(tmp_path, "user_code_cpu.py", "--only", "advection,softmax", "--shape", "advection=4096",
                            "--shape", "softmax=64,48", "--rounds", "2")
    assert set(report["workloads"]) == {"advection", "softmax"}
    for result in report["workloads"].values():
        systems = result["systems"]
        assert set(systems) == {"numpy", "gnp-auto", "gnp"} and systems["numpy"]["cpu_ratio"] == 1.0
        assert all(s["passed"] and s["bitwise"] and len(s["cpu_ms"]) == 2 for s in systems.values()), systems


@pytest.mark.parametrize("benchmark", sorted(USER_CODE_TINY))
def test_user_code_benchmark_runs_and_checks_on_the_cpu(benchmark: str, tmp_path: pathlib.Path) -> None:
    """Each user-code benchmark at a tiny size: gnp plain and accelerated, checked against NumPy."""
    report = _script_report(tmp_path, f"{benchmark}.py", *USER_CODE_TINY[benchmark], "--repeat", "1", "--warmup", "0")
    rows = {row["name"]: row for row in report["results"]}
    assert report["passed"] and report["baseline"] == "numpy" and {"numpy", "gnp", "gnp-auto"} <= set(rows)
    assert all(row["ok"] for name, row in rows.items() if not name.startswith("numpy")), report["results"]
    assert set(report["first_call_ms"]) == set(report["ratios"]) == {"numpy", "gnp", "gnp-auto"}
    assert report["ratios"]["numpy"] == {"x numpy": 1.0}


@pytest.mark.slow
def test_long_run_writes_its_checks_and_plot_on_the_cpu(tmp_path: pathlib.Path) -> None:
    """The long-run benchmark at a few hundred steps: flat memory and bounded caches, as JSON and a plot."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "GNP_BACKEND": "numpy", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(ROOT / "benchmarks" / "long_run.py"), "--steps", "400", "--every", "50",
               "--n", "64", "--out", str(tmp_path)]
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    report = json.loads((tmp_path / "long_run.json").read_text())
    assert report["passed"] and len(report["records"]) == 8 and set(report["checks"]) >= {"host memory flat"}
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "long_run.png").read_bytes().startswith(b"\x89PNG")


def test_weak_scaling_plot_of_one_worker_count(tmp_path: pathlib.Path) -> None:
    """A one-GPU suite run measures weak scaling at one worker only: its plot (a note, no panels) is still drawn."""
    plots = pytest.importorskip("plots")  # matplotlib
    row = {**weak_scaling.new_row("matmul", "gnp", 1), "median_ms": 10.0, "ok": True}
    results = {"suite": {"device": "test", "date": "2026-12-01", "cpu_run": True},
               "weak_scaling": {"results": [row]}}
    plots.plot_weak_scaling(results, tmp_path / "weak_scaling.png")
    assert (tmp_path / "weak_scaling.png").read_bytes().startswith(b"\x89PNG")


def test_weak_scaling_efficiency_and_table() -> None:
    def row(system: str, workers: int, ms: float | None, ok: bool | None = True) -> weak_scaling.Row:
        error = None if ms is not None else "RuntimeError: lost"
        return {**weak_scaling.new_row("matmul", system, workers, error), "median_ms": ms, "ok": ok}

    rows = [row("gnp", 1, 10.0), row("gnp", 2, 12.5), row("jax-sharding", 1, 8.0), row("jax-sharding", 2, None),
            row("dask.array+numpy", 1, 5.0, ok=False)]
    assert weak_scaling.efficiencies(rows) == {("matmul", "gnp"): {1: 1.0, 2: 0.8},
                                               ("matmul", "jax-sharding"): {1: 1.0}}
    headers, lines = weak_scaling.table(rows)
    assert headers == ["workload", "system", "1 w ms", "2 w ms", "eff 2"]
    assert lines == [["matmul", "gnp", "10.00", "12.50", "80%"], ["matmul", "jax-sharding", "8.00", "error", "-"],
                     ["matmul", "dask.array+numpy", "WRONG", "-", "-"]]


def test_host_gap_says_it_needs_a_gpu() -> None:
    """``host_gap.py`` measures device time with CUDA events: without a GPU it says so and measures nothing
    (exit code 2), rather than a wrong number."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "GNP_BACKEND": "numpy", "PYTHONPATH": str(ROOT)}
    process = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "host_gap.py"), "heat"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert process.returncode == 2 and "needs a GPU" in process.stderr, process.stdout + process.stderr


def test_plain_path_operations_times_every_operation(tmp_path: pathlib.Path) -> None:
    """``plain_path.py --only operations`` times building each operation, an RK4 step and a Black-Scholes price."""
    results = _script_report(tmp_path, "plain_path.py", "--only", "operations", timeout=300)["results"]
    assert {r["name"] for r in results} >= {"a * 1.5", "gnp.where(c, a, b)", "RK4 step", "Black-Scholes price"}
    assert all(r["us"] > 0 and r["operations"] >= 1 for r in results)


def test_launch_host_runs_on_the_cpu() -> None:
    """``launch_host.py --cpu`` times each workload's launch path with kernels that do nothing and counts the input
    attributes a launch reads: a repeated launch reads each of its 3 inputs' dtype, shape and strides once."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "GNP_BACKEND": "numpy", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(ROOT / "benchmarks" / "launch_host.py"), "--cpu", "--size", "4096", "--calls",
               "5", "--rounds", "2"]
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stdout + process.stderr
    for name in ("monte_carlo", "black_scholes", "softmax"):
        assert re.search(rf"^{name} +[0-9.]+ +[0-9.]+$", process.stdout, re.M), process.stdout
    assert "black_scholes  input attribute reads per launch: 9 (dtype 3, shape 3, strides 3)" in process.stdout


def test_compute_overhead_times_every_call_and_step_on_the_cpu(tmp_path: pathlib.Path) -> None:
    """``compute_overhead.py`` checks ``dask.compute``'s values against ``gnp.fetch``'s, then times each call warm and
    cold and each step of ``dask.compute`` on our outputs and on Dask's trivial collections."""
    report = _script_report(tmp_path, "compute_overhead.py", "--rounds", "1", "--batch", "2", "--cold", "1")
    assert report["calls_us"].keys() == report["cold_us"].keys() >= {"dask.compute(a, b)", "gnp.fetch((a, b))",
                                                                     "floor: dask.compute(c, d)"}
    assert report["steps_us"]["gnp"].keys() == report["steps_us"]["trivial"].keys() >= {"repack", "+ optimize()"}
    assert all(t > 0 for t in report["calls_us"].values())


@pytest.mark.slow
@pytest.mark.parametrize("only", ["all", "breakdown"])
def test_plain_path_benchmark_runs_every_row_on_the_cpu(only: str, tmp_path: pathlib.Path) -> None:
    """``plain_path.py`` once per row: every row runs and its checks pass; ``--only breakdown`` has the five parts
    of each workload's plain call."""
    results = _script_report(tmp_path, "plain_path.py", "--only", only, "--repeat", "1", "--warmup", "0",
                             timeout=300)["results"]
    assert all(r["error"] is None and r["ok"] is not False for r in results), [r for r in results if r["error"]]
    names = [r["name"] for r in results]
    if only == "breakdown":
        assert len(names) == 8 * 5 and sum(n.endswith(": gnp.fetch of outputs built once") for n in names) == 8
    else:
        assert "gnp matrix build" in names and sum(n.startswith("gnp plain ") for n in names) == 8


def test_monte_carlo_breakdown_in_fresh_processes() -> None:
    """``breakdown.py --processes 2``: the estimate timed in two fresh processes, each line and the median
    printed (the hand-written kernel's time is nan without a GPU)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "GNP_BACKEND": "numpy", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(ROOT / "benchmarks" / "breakdown.py"), "--n", "4096", "--repeat", "2",
               "--processes", "2"]
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    lines = process.stdout.splitlines()
    assert [line.split(":")[0].strip() for line in lines[:2]] == ["process  1", "process  2"], process.stdout
    times = [float(line.split("estimate")[1].split("ms")[0]) for line in lines[:2]]
    median = float(lines[2].split("fresh processes")[1].split("ms")[0])
    assert all(t > 0 for t in times) and median == pytest.approx(sum(times) / 2, abs=1e-3), process.stdout


def test_first_launch_times_each_call_in_fresh_processes_on_the_cpu() -> None:
    """``first_launch.py --cpu --processes 2``: each call (CuPy blocks emulated, kernels that do nothing) timed in
    two fresh processes, from the call to its first launch, to its return and to its end, and the medians of them;
    a call launches after it starts and returns after its first launch."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "GNP_BACKEND": "numpy", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(ROOT / "benchmarks" / "first_launch.py"), "--cpu", "--repeat", "3",
               "--processes", "2"]
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    for name in ("monte_carlo", "least_squares", "black_scholes"):
        found = re.search(rf"^{name} +([0-9.]+) +([0-9.]+) +([0-9.]+) +median of 2 processes$", process.stdout, re.M)
        assert found, process.stdout
        first, back, end = map(float, found.groups())
        assert 0 < first < back <= end, process.stdout


def test_scalars_benchmark_runs_and_checks_on_the_cpu(tmp_path: pathlib.Path) -> None:
    """``benchmarks/scalars.py`` at a small size: every system's result checked against NumPy's."""
    report = _script_report(tmp_path, "scalars.py", "--shape", "1024", "--repeat", "3", "--warmup", "0")
    assert report["passed"] and [row["name"] for row in report["results"]] == [
        "gnp, new dt", "gnp, same dt", "numpy, new dt"]


def test_stencil_probe_compares_picked_variants_on_the_cpu() -> None:
    """``stencil_probe.py --variants --pick`` runs the default and the picked configurations of CG's kernels (here
    the old combine and the late reductions) and each gives the default's checksum."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "GNP_BACKEND": "numpy", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(ROOT / "benchmarks" / "stencil_probe.py"), "--variants", "--pick", "8,9", "--only",
               "cg", "--n", "64", "--repeat", "1", "--rounds", "1"]
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stdout + process.stderr
    rows = re.findall(r"^(\S.*?) +cg +[0-9.]+ +[0-9.]+ +(0x\S+)", process.stdout, re.M)
    assert [name.split()[0] for name, _ in rows] == ["default", "sweep", "stencil-late-reductions=True"], process.stdout
    assert len({checksum for _, checksum in rows}) == 1, process.stdout
