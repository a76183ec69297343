"""The dashboard as a user sees it: a 2-worker LocalCluster runs a fused computation, and headless Chromium
loads the dashboard's status and task-stream pages; the task names they draw are the fused tasks' (as
``gnp.explain`` names them), and a screenshot of each page goes to docs/images/ (docs/dashboard.md).

Needs selenium (the test extra) and Chromium with its driver: Debian's ``chromium`` and ``chromium-driver``,
installed here with apt-get when missing and allowed (root); skipped otherwise."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import time

import numpy as np
import pytest
from conftest import BACKEND

import dask_gpunumeric as gnp

pytestmark = pytest.mark.browser
distributed = pytest.importorskip("distributed")
pytest.importorskip("bokeh")
webdriver = pytest.importorskip("selenium.webdriver")

SCREENSHOTS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "images"
# the names of the glyphs' data on a page: what its plots draw (task-stream rectangles, progress bars)
DRAWN_NAMES = """
const names = new Set();
for (const doc of (window.Bokeh ? Bokeh.documents : []))
  for (const model of doc.all_models)
    for (const column of ["name", "names", "name-0"])
      for (const value of (model.data && model.data[column]) || []) names.add(String(value));
return [...names];
"""


def _chromium_driver() -> str:
    """The path of chromedriver, installing Debian's chromium and chromium-driver if missing (as root)."""
    if shutil.which("chromedriver") is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium", "chromium-driver"], capture_output=True,
                       timeout=600, check=False)
    path = shutil.which("chromedriver")
    if path is None or shutil.which("chromium") is None:
        pytest.skip("needs chromium and chromium-driver (Debian packages)")
    return path


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,1000"):
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium") or ""
    driver = webdriver.Chrome(service=webdriver.ChromeService(_chromium_driver()), options=options)
    yield driver
    driver.quit()


def _drawn(browser, wanted: str, timeout: float = 60.0) -> set[str]:
    """The names the open dashboard page draws, once one of them contains ``wanted`` (or the timeout passed)."""
    deadline = time.monotonic() + timeout
    while True:
        names = set(browser.execute_script(DRAWN_NAMES))
        if any(wanted in name for name in names) or time.monotonic() > deadline:
            return names
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.skipif(BACKEND != "numpy", reason="the CPU cluster; ci/gpu.sh runs the GPU's")
def test_dashboard_shows_the_fused_tasks(browser) -> None:
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address="127.0.0.1:0") as cluster, distributed.Client(cluster) as client:
        x = gnp.random.default_rng(0).random((4096, 1024), chunks=(512, 1024))
        total = gnp.sum(gnp.exp(-x ** 2) * 2.0 + 1.0)
        fused = "fused-random-square-negative-exp"
        assert fused in gnp.explain(total)
        base = client.dashboard_link.rsplit("/", 1)[0]
        SCREENSHOTS.mkdir(exist_ok=True)
        for page in ("status", "individual-task-stream"):
            browser.get(f"{base}/{page}")  # open, then compute: the page draws what runs while it is open
            time.sleep(2.0)
            for _ in range(3):
                assert np.isfinite(client.compute(total).result())
            names = _drawn(browser, fused)
            assert any(fused in name for name in names), (page, sorted(names))
            assert not {"exp", "multiply", "square"} & names, (page, sorted(names))  # no unfused tasks ran
            time.sleep(1.0)  # the plots' last redraw
            browser.save_screenshot(str(SCREENSHOTS / f"dashboard-{page}.png"))
