"""Plots of a suite run (``benchmarks/suite.py``): time per benchmark and weak-scaling efficiency.

    python benchmarks/suite.py --replot [--out DIR]     # redraws DIR/times.png and DIR/weak_scaling.png

Every system keeps one colour across the panels and both figures; the figures' titles name the device
and the date, and say so when the run was on the CPU.
"""
from __future__ import annotations

import math
import pathlib

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

import _harness as H  # noqa: E402
import weak_scaling  # noqa: E402

SYSTEM_COLORS = {
    "gnp": "#1b7837", "gnp-auto": "#5aae61", "gnp-unfused": "#a6dba0",
    "jax-jit": "#2166ac", "jax-sharding": "#2166ac", "cupy": "#e08214", "numpy": "#e08214",
    "dask.array": "#762a83", "dask.array+cupy": "#762a83", "dask.array+numpy": "#762a83", "cupynumeric": "#b2182b", "copy": "#878787",
}
"""Colour of each system; systems not listed get grey."""


def system_color(system: str) -> str:
    return SYSTEM_COLORS.get(system, "#bababa")


def figure_title(results: dict, what: str) -> str:
    suite_info = results["suite"]
    text = f"dask_gpunumeric: {what}\n{suite_info['device']}, {suite_info['date'][:10]}"
    if suite_info["cpu_run"]:
        text += "\nCPU RUN (NumPy blocks, small sizes): a placeholder, not GPU results"
    return text


def panel_grid(count: int, width: float, height: float) -> tuple[plt.Figure, list[plt.Axes]]:
    """A figure with ``count`` panels in up to two columns; the panels in reading order."""
    columns = 1 if count == 1 else 2
    rows = max(1, math.ceil(count / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(width * columns, height * rows + 1.2), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat[:count]


def plot_times(results: dict, path: pathlib.Path) -> None:
    """Median time of each system, one panel per benchmark (log scale; a failed system is marked)."""
    reports = {name: report for name, report in results["benchmarks"].items() if report["results"]}
    fig, axes = panel_grid(max(len(reports), 1), 6.0, 2.6)
    for ax, (name, report) in zip(axes, reports.items()):
        rows = report["results"]
        labels = [row["name"] for row in rows]
        times = [math.nan if row["error"] else row["median_ms"] for row in rows]
        ax.barh(labels, times, color=[system_color(label) for label in labels])
        for y, row in enumerate(rows):
            if row["error"]:
                ax.text(0.01, y, "failed", transform=ax.get_yaxis_transform(), va="center", fontsize=8)
            else:
                note = f"{row['median_ms']:.3g} ms" + (" WRONG" if row["ok"] is False else "")
                ax.annotate(note, (row["median_ms"], y), xytext=(3, 0), textcoords="offset points", va="center",
                            fontsize=8)
        ax.set_xscale("log")
        measured = [ms for ms in times if not math.isnan(ms)] or [1.0]
        ax.set_xlim(min(measured) / 3, 4 * max(measured))  # every bar visible; room for the notes
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.invert_yaxis()
        ax.set_title(H.title(name), fontsize=10)
        ax.set_xlabel("median ms (log scale; shorter is faster)", fontsize=8)
        ax.tick_params(labelsize=8)
    fig.suptitle(figure_title(results, "median time per benchmark"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_weak_scaling(results: dict, path: pathlib.Path) -> None:
    """Weak-scaling efficiency, time(1 worker) / time(k workers), of each system, one panel per workload."""
    efficiency = weak_scaling.efficiencies(results["weak_scaling"]["results"])
    workloads = list(dict.fromkeys(workload for workload, _ in efficiency))
    counts = sorted({row["workers"] for row in results["weak_scaling"]["results"]})
    shown = workloads if len(counts) > 1 else []  # at one worker count every efficiency is 100 %: no panels
    fig, axes = panel_grid(max(len(shown), 1), 5.0, 3.0)
    for ax, workload in zip(axes, shown):
        for (name, system), by_k in efficiency.items():
            if name != workload:
                continue
            ks = sorted(by_k)
            ax.plot(ks, [100 * by_k[k] for k in ks], marker="o", label=system, color=system_color(system),
                    linestyle="--" if system.endswith("unfused") else "-")
        ax.axhline(100, color="black", linewidth=0.8, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(k) for k in counts])
        ax.set_ylim(0, max(120, ax.get_ylim()[1]))
        ax.set_title(H.title(workload), fontsize=10)
        ax.set_xlabel("workers (GPUs), same work per worker", fontsize=8)
        ax.set_ylabel("efficiency %", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=7)
    if not shown:
        note = (f"weak scaling needs two or more worker counts:\nthis run measured {counts[0]} worker(s) only\n"
                "(its times are in the table)" if workloads else "no weak-scaling results")
        axes[0].text(0.5, 0.5, note, ha="center", va="center", fontsize=9)
        axes[0].set_axis_off()
    fig.suptitle(figure_title(results, "weak-scaling efficiency (100% is perfect)"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
