"""The dashboard as a user sees it: a 2-worker LocalCluster runs a fused computation, and headless Chromium
loads the dashboard's status and task-stream pages; the task names they draw are the fused tasks' (as
``gnp.explain`` names them), and a screenshot of each page is saved (to docs/images/, for docs/dashboard.md,
when ``GNP_SCREENSHOTS=docs`` is set; else to the test's temporary folder, leaving the checkout clean). The same
pages, pulled from the Bokeh server and written standalone (``ci/dashboard_snapshot.py``, for machines without
a browser), draw the same names.

Needs selenium (the test extra) and Chromium with its driver: Debian's ``chromium`` and ``chromium-driver``,
installed here with apt-get when missing and allowed (root); skipped otherwise."""
from __future__ import annotations

import os
import pathlib
import sys
import time

import numpy as np
import pytest
from conftest import BACKEND

import dask_gpunumeric as gnp

pytestmark = pytest.mark.browser
distributed = pytest.importorskip("distributed")
pytest.importorskip("bokeh")
pytest.importorskip("selenium.webdriver")
ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci"))
import dashboard_snapshot  # noqa: E402 - ci/ holds the browser code shared with the snapshot script

DOC_IMAGES = ROOT / "docs" / "images"


@pytest.fixture(scope="module")
def browser():
    driver = dashboard_snapshot.open_chromium()
    if driver is None:
        pytest.skip("needs chromium and chromium-driver (Debian packages)")
    yield driver
    driver.quit()


@pytest.mark.slow
@pytest.mark.skipif(BACKEND != "numpy", reason="the CPU cluster; ci/gpu.sh runs the GPU's")
def test_dashboard_shows_the_fused_tasks(browser, tmp_path: pathlib.Path) -> None:
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address="127.0.0.1:0") as cluster, distributed.Client(cluster) as client:
        x = gnp.random.default_rng(0).random((4096, 1024), chunks=(512, 1024))
        total = gnp.sum(gnp.exp(-x ** 2) * 2.0 + 1.0)
        fused = "fused-random-square-negative-exp"
        assert fused in gnp.explain(total)
        base = client.dashboard_link.rsplit("/", 1)[0]
        screenshots = DOC_IMAGES if os.environ.get("GNP_SCREENSHOTS") == "docs" else tmp_path / "screenshots"
        screenshots.mkdir(exist_ok=True)
        for page in dashboard_snapshot.PAGES:
            browser.get(f"{base}/{page}")  # open, then compute: the page draws what runs while it is open
            time.sleep(2.0)
            for _ in range(3):
                assert np.isfinite(client.compute(total).result())
            names = dashboard_snapshot.drawn(browser, fused)
            assert any(fused in name for name in names), (page, sorted(names))
            assert not {"exp", "multiply", "square"} & names, (page, sorted(names))  # no unfused tasks ran
            time.sleep(1.0)  # the plots' last redraw
            browser.save_screenshot(str(screenshots / f"dashboard-{page}.png"))
            assert (screenshots / f"dashboard-{page}.png").stat().st_size > 10_000
        # the same pages pulled from the Bokeh server, as standalone files
        found = dashboard_snapshot.write_pages(client, tmp_path, dashboard_snapshot.PAGES)
    for page, names in found.items():
        assert any(fused in name for name in names), (page, names)
        drawn = dashboard_snapshot.screenshot(browser, tmp_path / f"{page}.html", tmp_path / f"{page}.png", fused)
        assert any(fused in name for name in drawn) and not {"exp", "multiply", "square"} & drawn, (page, drawn)
        assert (tmp_path / f"{page}.png").stat().st_size > 10_000
