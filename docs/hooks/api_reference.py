"""MkDocs hook: the API reference lists every public name of ``dask_gpunumeric``, grouped by the module
that defines it, so that a new function appears in the reference without editing a page.

A page of ``docs/api/`` holds markers, one per line:

- ``<!-- api: api.creation api.utility -->``: every public name of the ``gnp`` namespace whose object is
  defined in those modules of the package, sorted by name;
- ``<!-- api: linalg -->``, ``<!-- api: lib.stride_tricks -->``: every public function and class of that
  public submodule (``gnp.linalg.qr``, ...) that the package defines.

Each marker becomes one mkdocstrings block (``::: dask_gpunumeric.NAME``) per name. A public name that no
marker listed is a warning, which fails ``mkdocs build --strict``.
"""
from __future__ import annotations

import logging
import re
import types
from typing import Any

PACKAGE = "dask_gpunumeric"
MARKER = re.compile(r"^<!-- api: ([\w. ]+) -->$", re.MULTILINE)

# the package's layers (docs/architecture.md): the implementation, not public submodules
LAYERS = {"backend", "api", "ops", "expr", "optimize", "codegen", "kernels", "runtime", "integrations"}

log = logging.getLogger(f"mkdocs.hooks.{__name__}")  # under "mkdocs": strict builds count its warnings
listed: set[str] = set()


def public_names() -> dict[str, list[str]]:
    """Module name (``api.creation``, or a public submodule such as ``linalg`` or ``lib.stride_tricks``) ->
    the dotted paths of the public names it contributes."""
    import importlib

    package = importlib.import_module(PACKAGE)
    groups: dict[str, list[str]] = {}
    for name in sorted(dir(package)):
        obj = getattr(package, name)
        if name.startswith("_"):
            continue
        if name in LAYERS:
            continue
        if is_submodule(package, name, obj):
            add_submodule(groups, obj)
        elif callable(obj) and getattr(obj, "__module__", "").startswith(f"{PACKAGE}."):
            groups.setdefault(obj.__module__.removeprefix(f"{PACKAGE}."), []).append(f"{PACKAGE}.{name}")
    return groups


def is_submodule(parent: types.ModuleType, name: str, obj: Any) -> bool:
    """True when ``parent.name`` is a submodule of ``parent`` (not a module it merely imported)."""
    return isinstance(obj, types.ModuleType) and obj.__name__ == f"{parent.__name__}.{name}"


def add_submodule(groups: dict[str, list[str]], module: types.ModuleType) -> None:
    """The group of a public submodule, and those of its own public submodules."""
    groups[module.__name__.removeprefix(f"{PACKAGE}.")] = [f"{module.__name__}.{member}"
                                                          for member in submodule_members(module)]
    for name in getattr(module, "__all__", dir(module)):
        if is_submodule(module, name, obj := getattr(module, name)):
            add_submodule(groups, obj)


def submodule_members(module: types.ModuleType) -> list[str]:
    """The functions and classes of a public submodule that the package defines (not NumPy's exceptions it
    re-exports): those of its ``__all__``, or else its public ones."""
    names = getattr(module, "__all__", [name for name in vars(module) if not name.startswith("_")])
    return sorted(name for name in names if callable(obj := getattr(module, name))
                  and getattr(obj, "__module__", "").startswith(f"{PACKAGE}."))


def on_config(config: Any) -> None:
    listed.clear()


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    groups = public_names()

    def expand(match: re.Match) -> str:
        blocks = []
        for module in match.group(1).split():
            if module not in groups:
                log.warning(f"{page.file.src_uri}: no public names come from module {module!r}")
                continue
            listed.update(groups[module])
            blocks += [f"::: {path}" for path in groups[module]]
        return "\n\n".join(blocks)

    return MARKER.sub(expand, markdown)


def on_env(env: Any, **kwargs: Any) -> None:
    """After every page's Markdown: warn about public names that no page of the reference lists."""
    missing = sorted({path for paths in public_names().values() for path in paths} - listed)
    if missing:
        log.warning(f"not in the API reference (add their module to a '<!-- api: ... -->' marker): {missing}")
