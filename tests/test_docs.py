"""Every code example of the documentation runs, on NumPy blocks.

- README.md and docs/**/*.md: the ```python blocks of a page run in order in one namespace (so a page
  reads like a notebook), in a temporary folder; its ```pycon blocks run as doctests in that namespace, their output compared
  (``...`` matches anything; an exception is compared by its type). ``--8<-- "path:section"`` lines (the
  snippets the site includes) are replaced by that section of the file, as the site shows it.
- The docstrings of the package: their doctests.
"""
from __future__ import annotations

import copy
import doctest
import importlib
import os
import pathlib
import pkgutil
import re
from collections.abc import Iterator
from typing import Any

import dask
import pytest

import dask_gpunumeric as gnp

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(python|pycon)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::(\w+))?"$', re.MULTILINE)
DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE | doctest.IGNORE_EXCEPTION_DETAIL


def snippet(match: re.Match) -> str:
    """The file (or its section between ``--8<-- [start:NAME]`` and ``--8<-- [end:NAME]`` lines) that a
    snippet line includes."""
    path, section = match.groups()
    text = (ROOT / path).read_text()
    if section is None:
        return text.rstrip("\n")
    found = re.search(rf"^[^\n]*--8<-- \[start:{section}\]\n(.*?)^[^\n]*--8<-- \[end:{section}\]$", text,
                      re.MULTILINE | re.DOTALL)
    assert found, f"no section {section!r} in {path}"
    return found.group(1).rstrip("\n")


def code_blocks(page: pathlib.Path) -> list[tuple[str, str, int]]:
    """(kind, code, line number) of every python and pycon block of a page, snippets expanded."""
    text = page.read_text()
    return [(m.group(1), SNIPPET.sub(snippet, m.group(2)), text.count("\n", 0, m.start()) + 1)
            for m in FENCE.finditer(text)]


def check_doctest(test: doctest.DocTest) -> None:
    """Run a doctest, keeping the names it defines in its namespace; fail with its report."""
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=DOCTEST_FLAGS)
    runner.run(test, out=report.append, clear_globs=False)
    assert runner.failures == 0, "".join(report)


def docstring_doctests() -> list[doctest.DocTest]:
    """The doctests of the docstrings of every module of the package."""
    modules = [gnp.__name__] + [info.name for info in pkgutil.walk_packages(gnp.__path__, f"{gnp.__name__}.")]
    finder = doctest.DocTestFinder()
    return [test for name in modules for test in finder.find(importlib.import_module(name)) if test.examples]


@pytest.fixture
def numpy_blocks() -> Iterator[None]:
    """NumPy blocks, and gnp's settings as they were afterwards (examples may change them globally)."""
    saved = copy.deepcopy(dask.config.config["gpunumeric"])
    try:
        with gnp.config.set(backend="numpy"):
            yield
    finally:
        dask.config.config["gpunumeric"] = saved


CI = bool(os.environ.get("CI"))  # CI installs every optional package the pages use: there, none may be missing


@pytest.mark.parametrize("page", [page for page in PAGES if code_blocks(page)],
                         ids=lambda page: str(page.relative_to(ROOT)))
def test_page_examples_run(page: pathlib.Path, numpy_blocks: None, tmp_path: pathlib.Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # files the examples write land here
    namespace: dict[str, Any] = {"__name__": f"docs.{page.stem}"}
    for kind, code, line in code_blocks(page):
        name = f"{page.relative_to(ROOT)}:{line}"
        if kind == "pycon":
            test = doctest.DocTestParser().get_doctest(code, namespace, name, name, line)
            check_doctest(test)
            namespace.update(test.globs)  # a doctest runs in a copy: later blocks see what it defined
        else:
            try:
                exec(compile(code, name, "exec"), namespace)
            except ImportError as e:  # an optional package the page uses (zarr, say) not installed here
                if CI:
                    raise
                pytest.skip(f"{name}: {e}")


@pytest.mark.parametrize("test", docstring_doctests(), ids=lambda test: test.name)
def test_docstring_examples_run(test: doctest.DocTest, numpy_blocks: None) -> None:
    check_doctest(test)
