"""Dask's own tools show what runs (the fused graph, named as on the dashboard), ``gnp.explain`` returns
its text without printing, and ``gnp.cluster()`` without distributed says which extra to install."""
from __future__ import annotations

import sys

import dask
import numpy as np
import pytest
from conftest import assert_eq

import dask_gpunumeric as gnp


def _chain() -> tuple[np.ndarray, gnp.Array]:
    """A 10-operation elementwise chain on 4 blocks: one fused task per block."""
    x = np.linspace(0.0, 1.0, 16)
    y = gnp.from_array(x, chunks=4)
    for i in range(5):
        x, y = np.sinh(x) * 0.5 + i, gnp.sinh(y) * 0.5 + i
    return x, y


def _prefixes(graph: dict) -> set[str]:
    return {key[0].rsplit("-", 1)[0] if isinstance(key, tuple) else str(key) for key in graph}


def test_dask_optimize_gives_the_fused_graph() -> None:
    x, y = _chain()
    (optimized,) = dask.optimize(y)
    graph = dict(optimized.__dask_graph__())
    assert "4 x fused-sinh-multiply-add" in gnp.explain(y)  # the names the dashboard shows
    assert "fused-sinh-multiply-add" in _prefixes(graph)
    assert not _prefixes(graph) & {"sinh", "multiply"}
    assert len(graph) == 3 * 4  # per block: its data, its fused task, and the output key (an alias of it)
    assert_eq(optimized, x)
    a, total = dask.optimize(y, gnp.sum(y))
    assert "sum" in _prefixes(dict(total.__dask_graph__())) and "sinh" not in _prefixes(dict(total.__dask_graph__()))
    assert_eq(a, x)
    assert_eq(total, np.sum(x))


def test_visualize_draws_the_fused_graph(tmp_path) -> None:
    pytest.importorskip("graphviz")
    _, y = _chain()
    drawing = y.visualize(filename=None)
    assert "fused-sinh-multiply-add" in drawing.source and "sinh-" not in drawing.source.replace("fused-sinh", "")
    drawing = dask.visualize(*dask.optimize(y), filename=None)
    assert "fused-sinh-multiply-add" in drawing.source


def test_client_compute_runs_the_fused_tasks(client) -> None:
    x = np.linspace(0.0, 1.0, 16)
    y = gnp.arctan(gnp.cosh(gnp.from_array(x, chunks=4)) * 0.25)
    assert_eq(client.compute(y).result(), np.arctan(np.cosh(x) * 0.25))
    prefixes = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes))
    assert "fused-cosh-multiply-arctan" in prefixes and "cosh" not in prefixes
    (optimized,) = dask.optimize(y)
    assert "fused-cosh-multiply-arctan" in _prefixes(dict(optimized.__dask_graph__()))


def test_explain_returns_its_text_and_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    _, y = _chain()
    plan = gnp.explain(y)
    assert capsys.readouterr().out == ""
    assert isinstance(plan, str) and "fused kernel sinh-multiply-add" in plan
    assert repr(plan) == str(plan)  # a notebook or the prompt shows the lines, not a quoted string
    print(plan)
    assert capsys.readouterr().out == plan + "\n"
    assert y.explain() == plan


def test_explain_of_arrays_computed_together() -> None:
    """``gnp.explain((a, b))`` explains the joint plan that ``gnp.fetch((a, b))`` runs: one kernel per block
    storing both; anything but Arrays is a TypeError saying what to pass."""
    x = gnp.asarray(np.linspace(0.0, 1.0, 64), chunks=32)
    a, b = gnp.sin(x) * 2, gnp.sin(x) + 1
    joint = gnp.explain((a, b))
    assert "outputs: store, store" in joint and "2 x fused-sin-add-multiply\n" in joint
    assert gnp.explain([a, b]) == joint
    assert "outputs: store;" in gnp.explain(a)
    for bad in ((a, np.ones(3)), (), np.ones(3)):
        with pytest.raises(TypeError, match="gnp.asarray"):
            gnp.explain(bad)


def test_cluster_without_distributed_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    with pytest.raises(ModuleNotFoundError, match=r"\[distributed\]"):
        gnp.cluster()
