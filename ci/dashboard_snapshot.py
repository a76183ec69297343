"""Snapshots of the dashboard for machines without a browser (the GPU machine): a 2-worker cluster runs a fused
computation, and the Bokeh documents of the dashboard's pages, pulled from the live Bokeh server, are written as
standalone HTML; headless Chromium turns them into PNGs elsewhere.

    python ci/dashboard_snapshot.py OUT_DIR               # <page>.html for each page, tasks.json
    python ci/dashboard_snapshot.py --render HTML_DIR [PNG_DIR]

The first starts ``gnp.cluster(n_workers=2)`` (a ``LocalCluster`` of CPU processes, or two dask-cuda workers on
the one GPU), computes ``sum(exp(-x**2) * 2 + 1)`` of a random array a few times (one fused task per block),
and pulls the pages while it keeps computing: status and task stream, plus distributed's GPU memory and
utilisation pages when NVML sees a GPU. tasks.json holds the task names each page's data sources name, the
fused name ``gnp.explain`` gives, and the versions. The second renders every <page>.html of HTML_DIR in
headless Chromium (Debian's chromium and chromium-driver, through selenium), checks that each page draws the
fused task name where tasks.json found it, and saves PNG_DIR/dashboard-{cpu,gpu}-<page>.png (PNG_DIR defaults
to docs/images). Both exit non-zero when a page lacks the fused task.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys
import threading
import time
from importlib.metadata import version
from typing import Any

PAGES = ("status", "individual-task-stream")
GPU_PAGES = ("individual-gpu-memory", "individual-gpu-utilization")
# where the pages' plots take their names from: the columns of their data sources
NAME_COLUMNS = ("name", "names", "name-0")
# the same in the browser, over every Bokeh document of the open page
DRAWN_NAMES = """
const names = new Set();
for (const doc of (window.Bokeh ? Bokeh.documents : []))
  for (const model of doc.all_models)
    for (const column of ["name", "names", "name-0"])
      for (const value of (model.data && model.data[column]) || []) names.add(String(value));
return [...names];
"""
IMAGES = pathlib.Path(__file__).resolve().parent.parent / "docs" / "images"


def _page_height(page: str) -> int:
    """Pixels for each of a page's plots in the standalone file, where no dashboard template sizes them."""
    return 250 if page == "status" else 450


def _names(doc: Any) -> list[str]:
    """The task names a pulled document's data sources hold (what its plots draw)."""
    from bokeh.models import ColumnDataSource

    names: set[str] = set()
    for model in doc.models:
        if isinstance(model, ColumnDataSource):
            for column in NAME_COLUMNS:
                names.update(str(value) for value in model.data.get(column, ()))
    return sorted(names)


def _standalone(doc: Any, page: str) -> str:
    """The pulled document as one self-contained HTML file (Bokeh's scripts inlined: no network needed)."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    for root in doc.roots:  # the dashboard's template sizes "stretch_both" roots; a plain page does not
        if root.sizing_mode in ("stretch_both", "stretch_height", "scale_both", "scale_height", None):
            root.sizing_mode = "stretch_width"
            root.height = _page_height(page)
    return file_html(doc, resources=INLINE, title=f"Dask: {page}", theme=doc.theme)


def _gpu_pages() -> tuple[str, ...]:
    """The GPU pages when distributed's NVML diagnostics see a GPU (nvidia-ml-py installed), else none."""
    try:
        from distributed.diagnostics.nvml import device_get_count

        return GPU_PAGES if device_get_count() > 0 else ()
    except Exception as e:  # noqa: BLE001 - no NVML: no GPU pages, say why
        print(f"dashboard_snapshot: no GPU pages: {type(e).__name__}: {e}", file=sys.stderr)
        return ()


def _versions(*names: str) -> dict[str, str]:
    """The installed versions of those of ``names`` that are installed."""
    from importlib.metadata import PackageNotFoundError

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found


def write_pages(client: Any, out: pathlib.Path, pages: tuple[str, ...]) -> dict[str, list[str]]:
    """Pull each dashboard page of ``client``'s cluster from its Bokeh server, write it to ``out/<page>.html``
    standalone, and return the task names each page's data sources hold."""
    from bokeh.client import pull_session

    base = client.dashboard_link.rsplit("/", 1)[0]
    found = {}
    for page in pages:
        with pull_session(url=f"{base}/{page}") as session:
            found[page] = _names(session.document)
            (out / f"{page}.html").write_text(_standalone(session.document, page))
    return found


def snapshot(out: pathlib.Path) -> int:
    """Run the computation on a 2-worker cluster and write each page's HTML and tasks.json into ``out``."""
    import distributed
    import numpy as np

    import dask_gpunumeric as gnp

    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with gnp.cluster(n_workers=2, dashboard_address=":0") as client:
        backend = gnp.config.backend()
        pages = PAGES + (_gpu_pages() if backend == "cupy" else ())
        x = gnp.random.default_rng(0).random((4096, 1024), chunks=(512, 1024))
        total = gnp.sum(gnp.exp(-x ** 2) * 2.0 + 1.0)
        fused = "fused-random-square-negative-exp"
        plan = str(gnp.explain(total))
        if fused not in plan:
            print(plan, file=sys.stderr)
            return 1
        # the task stream keeps tasks only once a page or this context asks for it
        with distributed.get_task_stream(client):
            for _ in range(3):
                assert np.isfinite(client.compute(total).result())
            busy = threading.Event()

            def keep_busy() -> None:  # the GPU utilisation page shows what runs while it is pulled
                step = 0
                while not busy.is_set():  # a new key each time: the last one may still be being released
                    step += 1
                    client.compute(gnp.sum(gnp.exp(-x ** 2) * 2.0 + float(step))).result()

            worker = threading.Thread(target=keep_busy, daemon=True)
            worker.start()
            time.sleep(3.0)  # a few heartbeats: the workers' memory and GPU metrics
            try:
                found = write_pages(client, out, pages)
            finally:
                busy.set()
                worker.join()
    report = {"backend": backend, "fused": fused, "plan": plan, "pages": found,
              "machine": platform.node(), "seconds": round(time.monotonic() - started, 1),
              "versions": _versions("dask", "distributed", "bokeh", "numpy", "cupy-cuda13x", "dask-cuda",
                                    "nvidia-ml-py")}
    (out / "tasks.json").write_text(json.dumps(report, indent=1))
    missing = [page for page in PAGES if not any(fused in name for name in found[page])]
    print(f"dashboard_snapshot: {backend} blocks, pages {', '.join(pages)} in {out} ({report['seconds']} s)")
    if missing:
        print(f"dashboard_snapshot: no {fused} task on {missing}: {found}", file=sys.stderr)
    return 1 if missing else 0


def open_chromium(window: str = "1600,1000") -> Any:
    """Headless Chromium through selenium (Debian's chromium and chromium-driver, installed with apt-get when
    missing and allowed: root), or None when there is none."""
    import os
    import shutil
    import subprocess

    from selenium import webdriver

    if shutil.which("chromedriver") is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium", "chromium-driver"], capture_output=True,
                       timeout=600, check=False)
    driver, binary = shutil.which("chromedriver"), shutil.which("chromium")
    if driver is None or binary is None:
        return None
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={window}")
    options.binary_location = binary
    return webdriver.Chrome(service=webdriver.ChromeService(driver), options=options)


def drawn(browser: Any, wanted: str, timeout: float = 60.0) -> set[str]:
    """The names the open page draws, once one of them contains ``wanted`` (or the timeout passed)."""
    deadline = time.monotonic() + timeout
    while True:
        names = set(browser.execute_script(DRAWN_NAMES))
        if any(wanted in name for name in names) or time.monotonic() > deadline:
            return names
        time.sleep(0.5)


def screenshot(browser: Any, html: pathlib.Path, png: pathlib.Path, wanted: str | None) -> set[str]:
    """Open a standalone page, wait until it draws ``wanted`` (if given), save the whole page as ``png``, and
    return the names it draws."""
    browser.get(html.resolve().as_uri())
    seen = drawn(browser, wanted or "\0", timeout=30.0 if wanted else 3.0)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1600, height + 20)  # the whole page in one screenshot
    time.sleep(1.0)  # the plots' last redraw
    browser.save_screenshot(str(png))
    return seen


def render(html_dir: pathlib.Path, png_dir: pathlib.Path) -> int:
    """Save a PNG of every page of ``html_dir`` (as ``snapshot`` wrote it), checking the fused task is drawn."""
    report = json.loads((html_dir / "tasks.json").read_text())
    machine = "gpu" if report["backend"] == "cupy" else "cpu"
    browser = open_chromium()
    if browser is None:
        print("dashboard_snapshot: needs chromium and chromium-driver (Debian packages)", file=sys.stderr)
        return 2
    png_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    try:
        for page, names in report["pages"].items():
            expected = any(report["fused"] in name for name in names)
            path = png_dir / f"dashboard-{machine}-{page}.png"
            seen = screenshot(browser, html_dir / f"{page}.html", path, report["fused"] if expected else None)
            if expected and not any(report["fused"] in name for name in seen):
                failed.append(page)
            print(f"dashboard_snapshot: {path}")
    finally:
        browser.quit()
    if failed:
        print(f"dashboard_snapshot: {report['fused']} not drawn on {failed}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--render", action="store_true", help="turn HTML_DIR's pages into PNGs in PNG_DIR")
    parser.add_argument("dir", type=pathlib.Path, help="OUT_DIR (snapshot) or HTML_DIR (--render)")
    parser.add_argument("png_dir", type=pathlib.Path, nargs="?", default=IMAGES, help="with --render")
    args = parser.parse_args(argv)
    return render(args.dir, args.png_dir) if args.render else snapshot(args.dir)


if __name__ == "__main__":
    sys.exit(main())
