"""The benchmark suite: every benchmark, then weak scaling, into one JSON file, two plots and a table.

    python benchmarks/suite.py [--out docs/benchmarks] [--only NAME|user_code,...] [--workers 1,2]
                               [--repeat N] [--warmup N] [--no-weak-scaling]
    python benchmarks/suite.py --replot [--out docs/benchmarks]     # redraw from OUT/results.json

Runs each script of ``BENCHMARKS`` that exists in ``benchmarks/`` (a missing one is skipped with a
note) in its own process, with ``--json`` (and ``--repeat``/``--warmup`` when given here), then
``weak_scaling.py`` once per worker count (1, 2, 4, ... up to the GPUs of the machine; 1 and 2 worker
processes without a GPU). Each benchmark sizes itself: full size on a GPU, small on the CPU. A
progress bar (tqdm, on stderr) counts the steps; the scripts' own output scrolls above it.

Writes to ``--out``:

- ``results.json``: every benchmark's report (device, versions, date, parameters, times, checks) and the
  weak-scaling measurements;
- ``times.png``: median time of each system, one panel per benchmark;
- ``weak_scaling.png``: weak-scaling efficiency of each system against the worker count;
- ``results.md``: the same numbers as Markdown tables (included by ``docs/benchmarks.md``).

A run without a GPU labels the plots and the table as a CPU run. Exits 1 when a benchmark failed (a
system raised or computed a wrong result); the other steps still run.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any, Protocol

import _harness as H
import weak_scaling

BENCHMARKS_DIR = pathlib.Path(__file__).resolve().parent
ROOT = BENCHMARKS_DIR.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # an installed dask_gpunumeric comes first; else the checkout

USER_CODE = ("black_scholes_erf", "cg_setitem", "rk4", "rk4_large", "softmax", "heat3d", "heat3d_large",
             "advection", "histogram_stats", "least_squares")
"""The benchmarks of code as users write it (``_user_code``): ``--only user_code`` runs just these."""

BENCHMARKS = ("monte_carlo", "black_scholes", "heat", "gray_scott", "cg", "matmul", "small_arrays", "plain_path",
              "scalars", *USER_CODE, "cluster_overhead")
"""The benchmark scripts of the suite, in the order they run. Each takes ``--json PATH``, ``--repeat N`` and
``--warmup N`` and writes a ``_harness.make_report`` dictionary. (The reliability runs, ``long_run.py`` and
``out_of_memory.py``, check memory rather than time systems against each other: they run on their own.)"""

GROUPS = {"user_code": USER_CODE}
"""Names that ``--only`` expands to several benchmarks."""

class Progress(Protocol):
    """Steps counted on a progress display, with lines of output shown alongside."""

    def set_description(self, desc: str) -> None: ...
    def update(self) -> None: ...
    def write(self, line: str) -> None: ...


class BarProgress:
    """A tqdm bar on stderr; lines are written above it."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar

    def set_description(self, desc: str) -> None:
        self.bar.set_description(desc)

    def update(self) -> None:
        self.bar.update()

    def write(self, line: str) -> None:
        self.bar.write(line, file=sys.stderr)


class PlainProgress:
    """A line on stderr per step, for when tqdm is not installed or stderr is not a terminal."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0

    def set_description(self, desc: str) -> None:
        print(f"[suite {self.done}/{self.total}] {desc}", file=sys.stderr, flush=True)

    def update(self) -> None:
        self.done += 1

    def write(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def progress_bar(total: int) -> Iterator[Progress]:
    """A tqdm bar on stderr counting ``total`` steps (plain lines without tqdm or a terminal: a bar redrawn
    with carriage returns garbles a log file)."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is None or not sys.stderr.isatty():
        yield PlainProgress(total)
        return
    with tqdm(total=total, unit="step", file=sys.stderr, dynamic_ncols=True) as bar:
        yield BarProgress(bar)


def gpu_count() -> int:
    cp = H.cupy_gpu()
    return 0 if cp is None else cp.cuda.runtime.getDeviceCount()


def default_workers() -> list[int]:
    """1, 2, 4, ... up to the number of GPUs; 1 and 2 worker processes without a GPU."""
    available = gpu_count() or 2
    counts = [1]
    while counts[-1] * 2 <= available:
        counts.append(counts[-1] * 2)
    return counts


def run_step(command: list[str], json_path: pathlib.Path, progress: Progress) -> tuple[dict | None, str | None]:
    """Run one benchmark process, its output shown above the progress bar; its report, or why there is
    none."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    progress.write("$ " + " ".join(command))
    start = time.perf_counter()
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, bufsize=1) as process:
        for line in process.stdout:
            progress.write("  " + line.rstrip())
    progress.write(f"  (this step took {time.perf_counter() - start:.0f} s)")
    if not json_path.exists():
        return None, f"no report written (exit code {process.returncode})"
    return json.loads(json_path.read_text()), None


def run_suite(args: argparse.Namespace) -> dict:
    """Run the benchmarks and weak scaling; the merged results (see ``results.json``)."""
    names = [name for name in BENCHMARKS if not args.only or name in args.only]
    present = [name for name in names if (BENCHMARKS_DIR / f"{name}.py").exists()]
    skipped = {name: f"benchmarks/{name}.py does not exist" for name in names if name not in present}
    weak_names = [name for name in weak_scaling.WORKLOADS if not args.only or name in args.only]
    workers = [] if args.no_weak_scaling or not weak_names else args.workers
    timing = []
    if args.repeat is not None:
        timing += ["--repeat", str(args.repeat)]
    if args.warmup is not None:
        timing += ["--warmup", str(args.warmup)]
    for name, reason in skipped.items():
        print(f"suite: skipped {name}: {reason}", file=sys.stderr)

    import dask_gpunumeric  # noqa: F401  (for its version in the report; it touches no GPU)

    results: dict[str, Any] = {
        "suite": {"date": H.now(), "device": H.device_name(), "gpus": gpu_count(), "cpu_run": gpu_count() == 0,
                  "versions": H.versions(*H.MODULES), "command": " ".join(["python", *sys.argv])},
        "benchmarks": {}, "skipped": skipped,
        "weak_scaling": {"workers": workers, "results": [], "skipped": {}, "errors": []},
    }
    with tempfile.TemporaryDirectory() as tmp, progress_bar(len(present) + len(workers)) as progress:
        for name in present:
            progress.set_description(name)
            json_path = pathlib.Path(tmp, f"{name}.json")
            command = [sys.executable, str(BENCHMARKS_DIR / f"{name}.py"), "--json", str(json_path), *timing]
            report, error = run_step(command, json_path, progress)
            results["benchmarks"][name] = report or {"benchmark": name, "error": error, "results": [],
                                                     "passed": False}
            progress.update()
        weak = results["weak_scaling"]
        for k in workers:
            progress.set_description(f"weak scaling, {k} worker(s)")
            json_path = pathlib.Path(tmp, f"weak_scaling_{k}.json")
            command = [sys.executable, str(BENCHMARKS_DIR / "weak_scaling.py"), "--workers", str(k),
                       "--only", ",".join(weak_names), "--json", str(json_path), *timing]
            report, error = run_step(command, json_path, progress)
            if report is None:
                weak["errors"].append(f"{k} worker(s): {error}")
            else:
                weak["results"] += report["results"]
                weak["skipped"].update(report["skipped"])
                weak["params"] = report["params"]
            progress.update()
    results["passed"] = (all(report["passed"] for report in results["benchmarks"].values())
                         and not weak["errors"] and all(weak_scaling.passed(row) for row in weak["results"]))
    return results


def write_outputs(results: dict, out: pathlib.Path) -> None:
    """``results.md`` and, with matplotlib, ``times.png`` and ``weak_scaling.png`` in ``out``."""
    (out / "results.md").write_text(markdown(results))
    try:
        import plots
    except ImportError as exc:
        print(f"suite: no plots ({exc}); pip install '.[bench]' and run "
              f"python benchmarks/suite.py --replot --out {out}", file=sys.stderr)
        return
    plots.plot_times(results, out / "times.png")
    plots.plot_weak_scaling(results, out / "weak_scaling.png")


def heading(results: dict) -> str:
    """Where and when the results were measured, and a warning when it was a CPU run."""
    suite = results["suite"]
    versions = ", ".join(f"{name} {version}" for name, version in suite["versions"].items() if version != "-")
    text = f"Suite run of {suite['date']} on {suite['device']} ({versions}): `{suite['command']}`."
    if suite["cpu_run"]:
        text = ("**CPU run: NumPy blocks at small sizes, no GPU. A placeholder for the layout, not GPU "
                "results.** " + text)
    return text


def markdown_table(headers: list[str], rows: list[list[str]], align: str) -> str:
    """A Markdown table; ``align`` holds one ``l`` or ``r`` per column. A ``|`` in a cell is escaped."""
    rule = [":---" if a == "l" else "---:" for a in align]
    return "\n".join("| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"
                     for cells in [headers, rule, *rows])


def markdown(results: dict) -> str:
    """The results as Markdown: a table per benchmark, then the weak-scaling table."""
    parts = [heading(results)]
    for name, report in results["benchmarks"].items():
        parts.append(f"### {H.title(name)}")
        if report.get("error"):
            parts.append(f"Failed: {report['error']}")
            continue
        parts.append("Parameters: " + ", ".join(f"{key}={value}" for key, value in report["params"].items()) + ".")
        rows = []
        for row in report["results"]:
            if row["error"]:
                rows.append([row["name"], "-", "-", "error: " + row["error"][:80]])
                continue
            verdict = {True: "ok", False: "WRONG", None: "not checked"}[row["ok"]]
            ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
            rows.append([row["name"], f"{row['median_ms']:.3g}", ratio, f"{row['detail']} {verdict}".strip()])
        parts.append(markdown_table(["system", "median ms", f"x {report['baseline']}", "check"], rows, "lrrl"))
    for name, reason in results["skipped"].items():
        parts.append(f"{H.title(name)}: skipped ({reason}).")
    weak = results["weak_scaling"]
    if weak["results"]:
        headers, lines = weak_scaling.table(weak["results"])
        parts.append("### Weak scaling")
        parts.append(markdown_table(headers, [[H.title(line[0]), *line[1:]] for line in lines],
                                    "ll" + "r" * (len(headers) - 2)))
    parts.extend(f"Weak scaling: {error}." for error in weak["errors"])
    return "\n\n".join(parts) + "\n"


def expand_only(text: str) -> list[str]:
    """The benchmarks that ``--only`` names: comma-separated names and groups."""
    return [name for part in text.split(",") for name in GROUPS.get(part, [part])]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "benchmarks",
                        help="folder for results.json, the plots and results.md (default docs/benchmarks)")
    parser.add_argument("--only", type=expand_only,
                        help=f"comma-separated benchmarks to run (default all of {', '.join(BENCHMARKS)}), or "
                             f"groups of them: {', '.join(GROUPS)}")
    parser.add_argument("--workers", type=lambda text: [int(k) for k in text.split(",")], default=default_workers(),
                        help="worker counts for weak scaling (default 1, 2, 4, ... up to the GPUs; 1,2 on the CPU)")
    parser.add_argument("--repeat", type=int, help="timed runs of every benchmark (default: each one's own)")
    parser.add_argument("--warmup", type=int, help="untimed runs first (default: each one's own)")
    parser.add_argument("--no-weak-scaling", action="store_true", help="skip the weak-scaling runs")
    parser.add_argument("--replot", action="store_true", help="only redraw the plots and table from OUT/results.json")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only or ()) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out: pathlib.Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        results = json.loads((out / "results.json").read_text())
    else:
        results = run_suite(args)
        H.write_json(str(out / "results.json"), results)
    write_outputs(results, out)
    print(markdown(results))
    print(f"suite: results in {out}/ (results.json, results.md, times.png, weak_scaling.png)", file=sys.stderr)
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
