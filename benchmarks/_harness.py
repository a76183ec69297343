"""Shared helpers for the benchmarks: GPU detection and synchronisation, timing, tables, JSON.

A benchmark measures each implementation with :func:`measure` (warm-up runs first, then timed runs,
each bracketed by a device synchronisation), collects the :class:`Result` objects into a report with
:func:`make_report`, prints it with :func:`render` and saves it with :func:`write_json`.

    python benchmarks/_harness.py show RESULTS.json     # print a saved report again
"""

from __future__ import annotations

import datetime
import functools
import importlib
import importlib.metadata
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable


# --- device -------------------------------------------------------------------------------------


@functools.cache
def cupy_gpu():
    """The ``cupy`` module when CuPy imports and sees at least one GPU, else None."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy
    except Exception:
        pass
    return None


def sync() -> None:
    """Wait for all work queued on the GPU (no-op without one): CuPy kernels are asynchronous."""
    cp = cupy_gpu()
    if cp is not None:
        cp.cuda.runtime.deviceSynchronize()


def free_device_memory() -> None:
    """Return CuPy's pooled memory, so that one implementation's cache doesn't crowd the next."""
    cp = cupy_gpu()
    if cp is not None:
        sync()
        cp.get_default_memory_pool().free_all_blocks()
        cp.get_default_pinned_memory_pool().free_all_blocks()


def device_name() -> str:
    cp = cupy_gpu()
    if cp is not None:
        name = cp.cuda.runtime.getDeviceProperties(0)["name"]
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        count = cp.cuda.runtime.getDeviceCount()
        return f"{name} (GPU 0 of {count})"
    cpu = platform.processor() or platform.machine()
    return f"CPU {cpu}, {os.cpu_count()} cores, no GPU"


def versions(*modules: str) -> dict[str, str]:
    """Python's version and each module's (``"-"`` when it does not import)."""
    out = {"python": platform.python_version()}
    for name in modules:
        try:
            mod = importlib.import_module(name)
        except Exception:
            out[name] = "-"
            continue
        version = getattr(mod, "__version__", None)
        if version is None:
            try:
                version = importlib.metadata.version(name)
            except Exception:
                version = "?"
        out[name] = str(version)
    return out


def parse_int(text: str) -> int:
    """A count from the command line: an int, also written as a power: ``1073741824``, ``2**30`` (parsed,
    never evaluated)."""
    if "**" in text:
        base, exp = text.split("**")
        return int(base) ** int(exp)
    return int(text)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Result:
    """The timings of one implementation, the value it computed and the check of that value."""

    name: str
    times_s: list[float] = field(default_factory=list)
    value: Any = None
    ok: bool | None = None  # the check's verdict; None when not checked
    detail: str = ""  # what the check measured, e.g. "|err| 2.1e-04"
    error: str | None = None  # set when the implementation raised

    @property
    def median_ms(self) -> float:
        return 1e3 * statistics.median(self.times_s) if self.times_s else math.nan

    @property
    def min_ms(self) -> float:
        return 1e3 * min(self.times_s) if self.times_s else math.nan

    @property
    def passed(self) -> bool:
        return self.error is None and self.ok is not False

    def to_dict(self) -> dict:
        d = asdict(self)
        d["value"] = _jsonable(self.value)
        d["median_ms"] = None if math.isnan(self.median_ms) else self.median_ms
        d["min_ms"] = None if math.isnan(self.min_ms) else self.min_ms
        return d


def measure(
    name: str,
    fn: Callable[[], Any],
    *,
    repeat: int,
    warmup: int,
    check: Callable[[Any], tuple[bool, str]] | None = None,
    verbose: bool = True,
) -> Result:
    """Time ``fn()`` ``repeat`` times after ``warmup`` untimed calls, synchronising the device
    before starting and before stopping each clock. An exception is recorded, not raised."""
    result = Result(name)
    if verbose:
        print(f"  {name}: {warmup} warm-up + {repeat} timed runs ...", end="", flush=True)
    try:
        value = None
        for _ in range(warmup):
            value = fn()
            sync()
        for _ in range(max(repeat, 1)):
            sync()
            start = time.perf_counter()
            value = fn()
            sync()
            result.times_s.append(time.perf_counter() - start)
        result.value = _plain(value)
        if check is not None:
            result.ok, result.detail = check(result.value)
    except Exception as exc:  # one failing implementation must not stop the others
        result.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    finally:
        try:
            free_device_memory()
        except Exception:
            pass
    if verbose:
        if result.error:
            print(f" ERROR {result.error}", flush=True)
        else:
            print(f" median {result.median_ms:.2f} ms", flush=True)
    return result


def _plain(value):
    """A 0-d NumPy/CuPy array or NumPy scalar as a Python number; anything else unchanged."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        return value.item()
    return value


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


# --- reports ------------------------------------------------------------------------------------


def make_report(
    benchmark: str,
    results: list[Result],
    *,
    baseline: str,
    params: dict,
    value_name: str = "value",
    modules: tuple[str, ...] = ("numpy", "cupy", "dask", "dask_gpunumeric"),
) -> dict:
    """Everything :func:`render` prints and :func:`write_json` saves."""
    base = next((r for r in results if r.name == baseline and r.error is None), None)
    rows = []
    for r in results:
        d = r.to_dict()
        d["ratio"] = (r.median_ms / base.median_ms) if (base is not None and r.error is None) else None
        rows.append(d)
    return {
        "benchmark": benchmark,
        "date": now(),
        "device": device_name(),
        "versions": versions(*modules),
        "params": params,
        "baseline": baseline,
        "value_name": value_name,
        "results": rows,
        "passed": all(r.passed for r in results),
    }


def format_table(headers: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A plain-text table; ``align`` holds one ``l`` or ``r`` per column (default: first left)."""
    align = align or "l" + "r" * (len(headers) - 1)
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]

    def line(cells):
        out = [
            str(c).ljust(w) if a == "l" else str(c).rjust(w) for c, w, a in zip(cells, widths, align)
        ]
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _fmt_ms(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def _fmt_value(x) -> str:
    if isinstance(x, float):
        return f"{x:.6f}"
    return "-" if x is None else str(x)


def render(report: dict) -> str:
    """The report as text: a short header, then one aligned row per implementation."""
    p = report["params"]
    v = report["versions"]
    lines = [
        f"benchmark: {report['benchmark']}    date: {report['date']}",
        f"device:    {report['device']}",
        "versions:  " + ", ".join(f"{k} {val}" for k, val in v.items()),
        "params:    " + ", ".join(f"{k}={val}" for k, val in p.items()),
        "",
    ]
    baseline = report["baseline"]
    headers = ["implementation", "median ms", "min ms", f"x {baseline}", report["value_name"], "check"]
    rows = []
    for r in report["results"]:
        if r["error"]:
            rows.append([r["name"], "-", "-", "-", "-", "ERROR " + r["error"][:100]])
            continue
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        verdict = {True: "ok", False: "WRONG", None: ""}[r["ok"]]
        check = f"{r['detail']} {verdict}".strip()
        rows.append(
            [r["name"], _fmt_ms(r["median_ms"]), _fmt_ms(r["min_ms"]), ratio, _fmt_value(r["value"]), check]
        )
    lines.append(format_table(headers, rows, "lrrrrl"))
    lines.append(f"(x {baseline}: median time relative to {baseline}'s median; above 1 is slower)")
    return "\n".join(lines)


def finish(report: dict, json_path: str | None) -> int:
    """Print the report's table, write it as JSON if asked, and return the exit code (1 if it failed)."""
    print()
    print(render(report))
    if json_path:
        write_json(json_path, report)
        print(f"results written to {json_path}")
    return 0 if report["passed"] else 1


def write_json(path: str, report: dict) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "show":
        print("usage: python benchmarks/_harness.py show RESULTS.json", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        print(render(json.load(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
