"""The package's layering (docs/architecture.md): each module imports only its own layer and the layers below
it, with no import cycles (imports inside functions count), and no module is over 900 lines."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dask_gpunumeric"

# Lowest first: a module may import modules of its own layer and of the layers before it. "base" is the
# package's config.py and backend.py (which array module holds the blocks), which every layer may read.
LAYERS = ["base", "ops", "codegen", "kernels", "expr", "optimize", "runtime", "api", "integrations", "namespace"]

# The one documented exception (DESIGN.md): an expression's graph is made by dask's ``__dask_graph__`` /
# ``_lower`` hooks on the node itself, which must run the optimizer and the compile step of the runtime.
EXCEPTIONS: set[tuple[str, str]] = {("dask_gpunumeric.expr.base", "dask_gpunumeric.runtime.compile")}

MAX_LINES = 900


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] not in LAYERS:
        return "base" if parts[-1] in ("config", "backend") else "namespace"
    return parts[1]


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports anywhere in its text (``from . import x`` of a submodule
    counts as importing that submodule)."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            targets = [f"{base_name}.{alias.name}" if f"{base_name}.{alias.name}" in known else base_name
                       for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != module)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imports(module, path, known) for module, path in known.items()}


def test_layers_import_only_downwards() -> None:
    wrong = sorted(f"{source} ({layer(source)}) imports {target} ({layer(target)})"
                   for source, targets in import_graph().items() for target in targets
                   if LAYERS.index(layer(target)) > LAYERS.index(layer(source))
                   and (source, target) not in EXCEPTIONS)
    assert not wrong, "imports up the layers:\n" + "\n".join(wrong)


def test_no_import_cycles() -> None:
    graph = {source: {t for t in targets if (source, t) not in EXCEPTIONS} for source, targets in import_graph().items()}
    cycles = [component for component in strongly_connected(graph) if len(component) > 1]
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(sorted(c)) for c in cycles)


def test_exceptions_are_used() -> None:
    graph = import_graph()
    unused = sorted(pair for pair in EXCEPTIONS if pair[1] not in graph.get(pair[0], set()))
    assert not unused, f"exceptions no module needs any more: {unused}"


@pytest.mark.parametrize("module", sorted(modules()))
def test_module_size(module: str) -> None:
    lines = len(modules()[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines: split it by job"


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(component)
    return components


_WITHOUT_DISTRIBUTED = """
import importlib.abc, sys

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "distributed" or name.startswith("distributed."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, Refuse())
import dask_gpunumeric as gnp
assert "distributed" not in sys.modules
print(gnp.fetch(gnp.accelerate(lambda x: gnp.sum(x * 2))(gnp.arange(4.0))))
"""


def test_package_imports_and_computes_without_distributed() -> None:
    """distributed is an optional dependency (the ``distributed`` extra): the package imports, and computes on
    the local scheduler, without it (the docs build's environment has none)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    # Keep the caller's path (dask may live there, as on the device machine), the checkout first.
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, "-c", _WITHOUT_DISTRIBUTED], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": path}, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "12.0"
