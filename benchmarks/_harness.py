"""Shared helpers for the benchmarks: GPU detection and synchronisation, timing, tables, JSON.

A benchmark measures each implementation with :func:`measure` (warm-up runs first, then timed runs,
each bracketed by a device synchronisation), collects the :class:`Result` objects into a report with
:func:`make_report`, prints it with :func:`render` and saves it with :func:`write_json`.

    python benchmarks/_harness.py show RESULTS.json     # print a saved report again
"""

from __future__ import annotations

import datetime
import functools
import importlib.metadata
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any, Callable

import numpy as np


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
    """Wait for all work queued on the GPU (no-op without one): CuPy kernels are asynchronous, and so are
    cuPyNumeric's tasks once it is imported."""
    cp = cupy_gpu()
    if cp is not None:
        cp.cuda.runtime.deviceSynchronize()
    if "cupynumeric" in sys.modules:
        from legate.core import get_legate_runtime

        get_legate_runtime().issue_execution_fence(block=True)


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
    """Python's version and each module's (``"-"`` when it is not installed), without importing any:
    from the module when it is imported already, else from the distribution that installed it."""
    distributions = importlib.metadata.packages_distributions()
    out = {"python": platform.python_version()}
    for name in modules:
        version = getattr(sys.modules.get(name), "__version__", None)
        for distribution in [] if version else distributions.get(name, [name]):
            try:
                version = importlib.metadata.version(distribution)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
        out[name] = str(version or "-")
    return out


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def parse_int(text: str) -> int:
    """An int, also written as a power: ``1073741824``, ``2**30``."""
    if "**" in text:
        base, exp = text.split("**")
        return int(base) ** int(exp)
    return int(text)


# --- the other systems ----------------------------------------------------------------------------


def jax_modules() -> tuple[ModuleType, ModuleType] | None:
    """``(jax, jax.numpy)`` when JAX imports, else None. JAX is asked not to preallocate most of the GPU's
    memory up front, since it shares the device with CuPy in the same process."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    return jax, jnp


#: Legate's resources when a benchmark process shares its GPU with CuPy and JAX (by default Legate reserves
#: most of the device's memory and every CPU core); a LEGATE_CONFIG already set is kept
LEGATE_SHARED_GPU = "--gpus 1 --fbmem 40000 --zcmem 256 --sysmem 8000 --cpus 2 --utility 2"


def cupynumeric_module() -> ModuleType | None:
    """cuPyNumeric when it imports (it brings its own Legate runtime, configured by ``LEGATE_SHARED_GPU``
    where there is a GPU), else None."""
    if cupy_gpu() is not None:
        os.environ.setdefault("LEGATE_CONFIG", LEGATE_SHARED_GPU)
    try:
        import cupynumeric
    except ImportError:
        return None
    except Exception as e:  # installed but its runtime did not start: the other systems still run
        print(f"cuPyNumeric left out: it failed to start ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return cupynumeric


def jax_row_sharding(devices: list) -> Any:
    """A JAX sharding that splits axis 0 of an array evenly over ``devices`` (one block per device)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    return NamedSharding(Mesh(np.array(devices), ("workers",)), PartitionSpec("workers"))


def persisted(*collections: Any) -> tuple:
    """``dask.persist`` the collections and wait until the scheduler holds every block (on a distributed
    cluster persisting returns at once; locally the blocks are there already); the persisted collections."""
    import dask
    from distributed import futures_of, wait

    out = dask.persist(*collections)
    if futures_of(out):
        wait(out)
    return out


def dask_array_system() -> str:
    """The name of the dask.array baseline here: over CuPy blocks with a GPU, else over NumPy blocks."""
    return "dask.array+cupy" if cupy_gpu() is not None else "dask.array+numpy"


def to_host(value: Any) -> np.ndarray:
    """A NumPy copy of an array of any system measured: gnp, dask.array, CuPy, JAX or cuPyNumeric."""
    if hasattr(value, "__dask_graph__"):  # gnp and dask.array: compute, giving NumPy or CuPy
        value = value.compute()
    if type(value).__module__.split(".")[0] == "cupy":  # (not cupynumeric, which NumPy reads itself)
        value = value.get()
    return np.asarray(value)


MODULES = ("numpy", "cupy", "dask", "distributed", "dask_gpunumeric", "jax", "cupynumeric")
"""The modules whose versions a report records."""


TITLES = {
    "monte_carlo": "Monte-Carlo (example)", "black_scholes": "Black-Scholes", "heat": "2-D heat (Jacobi)",
    "gray_scott": "Gray-Scott reaction-diffusion", "cg": "Conjugate gradient (2-D Laplacian)",
    "matmul": "Dense matrix product", "small_arrays": "Small-array latency", "long_run": "Long run",
    "black_scholes_erf": "Black-Scholes, erf polynomial (user code)", "cg_setitem": "CG, setitem Laplacian (user code)",
    "rk4": "RK4, two coupled fields (user code)", "rk4_large": "RK4, two coupled fields, large (user code)",
    "softmax": "Row-wise softmax/logsumexp (user code)", "heat3d": "3-D heat, 7-point (user code)",
    "heat3d_large": "3-D heat, 7-point, large (user code)", "advection": "1-D upwind advection (user code)",
    "histogram_stats": "Histogram statistics (user code)", "least_squares": "Least squares, X.T @ X (user code)",
}
"""Display names of the benchmarks and weak-scaling workloads (others show their file name)."""


def title(name: str) -> str:
    """The display name of a benchmark or workload."""
    return TITLES.get(name, name.replace("_", " "))


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


def wait_for_background_compiles() -> None:
    """Wait for the kernels dask_gpunumeric compiles in the background (nothing when it is not imported)."""
    cuda = sys.modules.get("dask_gpunumeric.kernels.cuda")
    if cuda is not None:
        cuda.wait_for_background_compiles()


def measure(
    name: str,
    fn: Callable[[], Any],
    *,
    repeat: int,
    warmup: int,
    check: Callable[[Any], tuple[bool, str]] | None = None,
    verbose: bool = True,
    min_warmup_s: float = 0.3,
    synchronize: Callable[[], None] | None = None,
) -> Result:
    """Time ``fn()`` ``repeat`` times after at least ``warmup`` untimed calls and ``min_warmup_s`` seconds
    of them (a GPU raises its clocks only after some busy time: without it, whichever implementation
    runs first is timed at lower clocks), synchronising the device (``synchronize``, default
    :func:`sync`: this process's GPU) before starting and before stopping each clock. An exception is
    recorded, not raised."""
    sync_device = synchronize or sync
    result = Result(name)
    if verbose:
        print(f"  {name}: {warmup} warm-up + {repeat} timed runs ...", end="", flush=True)
    try:
        value = None
        warm_start = time.perf_counter()
        done = 0
        while done < warmup or (done and time.perf_counter() - warm_start < min_warmup_s):
            value = fn()
            sync_device()
            done += 1
        if done:  # kernels specialized to repeated scalar values: the timed runs use them, as later calls would
            wait_for_background_compiles()
            value = fn()
            sync_device()
        for _ in range(max(repeat, 1)):
            sync_device()
            start = time.perf_counter()
            value = fn()
            sync_device()
            result.times_s.append(time.perf_counter() - start)
        value = _plain(value)
        if check is not None:
            result.ok, result.detail = check(value)
        if _jsonable(value) is value:  # keep numbers and strings; let go of arrays (device memory)
            result.value = value
    except Exception as exc:  # one failing implementation must not stop the others
        result.error = describe_error(exc)
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


def describe_error(exc: BaseException) -> str:
    """An exception in one short line: its type and the first line of its message."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


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
    modules: tuple[str, ...] = MODULES,
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


def print_floor_ratios(results: list[Result], floor_name: str | None) -> None:
    """Each implementation's median against the memory floor's (a device copy of as many bytes)."""
    if not floor_name:
        return
    floor = next(r for r in results if r.name == floor_name)
    for r in results:
        if not r.error and not floor.error:
            print(f"  {r.name:16s} {r.median_ms:8.3f} ms  x copy {r.median_ms / floor.median_ms:5.2f}")


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
