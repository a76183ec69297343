"""``gnp.explain``: what the optimizer made of an expression, per block."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..codegen import rows as _rows
from ..codegen import stencil as _stencil_source
from ..codegen import stencil_plan as _stencil_plan
from .array import Array
from ..expr import ArrayExpr, Fused, Stencil
from ..runtime.compile import graph_of

FLOOR_RATE = 4.2e12  # bytes/s at which explain() quotes a stencil group's floor: an H200's copy rate


def _block_bytes(expr: ArrayExpr) -> int:
    return int(np.prod(expr.chunksize)) * expr.dtype.itemsize if expr.ndim else expr.dtype.itemsize


def plan(x: Array | ArrayExpr) -> dict[str, Any]:
    """The optimized plan as data: fused groups (ops, inputs, outputs, bytes per block), tasks by kind, and
    how accelerated calls run (``runtime.regions.lower.summary``)."""
    from ..runtime.regions.plan import Region
    from ..codegen.program import describe, epilogue_values
    from ..expr import Bundle
    from ..optimize import optimize
    from ..optimize.dag import DAG
    from ..runtime.regions.nodes import Loop
    from ..runtime.regions.lower import summary

    root = x.expr if isinstance(x, Array) else x
    optimized = optimize(root)
    nodes = DAG(optimized).order
    regions = []
    loop_of: dict[str, str] = {}  # the nodes of loop bodies: the loop's name
    for node in nodes:  # accelerated calls and loops: their plans' nodes too
        if isinstance(node, Region):
            regions.append({"name": node._name, "lowering": "programs" if node.as_programs else "tasks",
                            **(summary(node.plan.built(len(node.workers))) if node.as_programs else {})})
        if isinstance(node, (Region, Loop)):
            inner = DAG(Bundle(*(node.plan if isinstance(node, Region) else node.body).optimized)).order
            loop_of.update({n._name: node._name for n in inner if isinstance(node, Loop)})
            nodes += inner
    groups = []
    for node in nodes:
        if not isinstance(node, Fused):
            continue
        program = node.operand("program")
        _, _, instrs, outputs = program
        ops = [ins.func if ins.tag == "op" else f"random.{ins.kind}" if ins.tag == "random" else
               f"{ins.kind}-{ins.tag}" if ins.tag in ("total", "row") else ins.tag
               for ins in instrs if ins.tag in ("op", "random", "full", "total", "row")]
        read = sum(_block_bytes(i) for i in node.inputs)
        finished = epilogue_values(instrs)
        axes = _rows.row_axes(instrs)
        row_loads = _rows.row_inputs([i.chunksize for i in node.inputs], axes, program.ndim) if axes else None
        if axes:  # one value per row: as many as the block has rows
            finished = {i: 0 for i, row in enumerate(_rows.value_classes(instrs, row_loads)) if row}
        sizes = [max(c) for c in node.operand("elements")]
        elements = int(np.prod(sizes))
        row_length = int(np.prod([sizes[d] for d in axes])) if axes else elements
        rows = int(np.prod(sizes[:axes[0]])) if axes else 1  # the values of ``finished``: one per row, or one
        written = sum((rows if o.value in finished else elements)
                      * np.dtype(instrs[o.value].dtype).itemsize for o in outputs if o.tag == "store")
        groups.append({
            "name": node._name, "kernel": describe(program), "ops": ops,
            "blocks": int(np.prod([len(c) for c in node.operand("elements")])), "inputs": len(node.inputs),
            "outputs": [o.tag if o.tag == "store" else f"{o.kind}-partial" for o in outputs],
            "bytes_read_per_block": read, "bytes_written_per_block": written, "program": program,
            "scalars": node.operand("scalars"), "row_inputs": row_loads, "row_length": row_length,
            "loop": loop_of.get(node._name),
        })
    stencils = []
    for node in nodes:
        if isinstance(node, Stencil):
            stencil_plan = node.operand("plan")
            kinds = Counter("halo" if k[0].startswith("halo-") else "interior" if k[0].endswith(
                f"-interior-{node.deterministic_token}") else "bands" for k in node._layer())
            stencils.append({
                "name": node._name, "kernel": _stencil_plan.describe(stencil_plan),
                "kernels": _stencil_plan.sweeps(stencil_plan), "tiles": len(stencil_plan.tiles),
                "sweeps_per_kernel": [count for _, count in _stencil_plan.kernel_runs(stencil_plan)],
                "floor_bytes": _stencil_plan.bytes_moved(stencil_plan, _stencil_plan.kernel_runs(stencil_plan)),
                "vector": (stencil_plan.shape, max((s.dtype for s in node.sources if s.ndim), key=lambda d: d.itemsize,
                                                   default=node.dtype)),
                "blocks": int(np.prod(node.numblocks)), "loop": loop_of.get(node._name),
                "halo": _stencil_plan.halo_depth(stencil_plan), "inputs": len(node.sources),
                "outputs": [f"store {b}" for b in stencil_plan.outputs]
                + [f"{_stencil_plan.reduction_of(stencil_plan, r)[1].kind}-partial" for r in stencil_plan.reductions],
                "plan": stencil_plan,
                "tasks": {kind: kinds[kind] for kind in ("interior", "bands", "halo")},
            })
    graph = graph_of(optimized)
    prefixes = Counter(k[0].rsplit("-", 1)[0] if isinstance(k, tuple) else str(k) for k in graph)
    return {"groups": groups, "stencils": stencils, "tasks": len(graph), "tasks_by_prefix": dict(prefixes),
            "regions": regions}


class Explanation(str):
    """The text of a plan: a ``str`` whose repr is the text itself, so that ``print(gnp.explain(x))`` and a
    notebook cell ending in ``gnp.explain(x)`` both show it once, as lines."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def explain(x: Array | Sequence[Array], *, source: bool = False) -> Explanation:
    """The optimized plan of ``x`` (an Array, or a tuple or list of them computed together, as
    ``gnp.fetch((a, b))`` does), as printable text (nothing is printed): its fused groups (one kernel per
    block each), the tasks per block, the estimated bytes each kernel moves per block, and with
    ``source=True`` the generated CUDA of each kernel. ``print(gnp.explain(x))`` shows it."""
    from ..codegen.program import kernel_source
    from ..expr import Bundle

    if isinstance(x, (tuple, list)) and x and all(isinstance(a, Array) for a in x):
        info, header = plan(Bundle(*(a.expr for a in x))), "\n".join(map(repr, x))
    elif isinstance(x, Array):
        info, header = plan(x), repr(x)
    else:
        raise TypeError(f"gnp.explain takes a gnp.Array or a tuple or list of them, got {type(x).__name__}: "
                        "make one with gnp.asarray")
    lines = [header, f"optimized graph: {info['tasks']} tasks"]
    for prefix, n in sorted(info["tasks_by_prefix"].items()):
        lines.append(f"  {n:6d} x {prefix}")
    for region in info["regions"]:
        lines += _region_lines(region)
    if not info["groups"] and not info["stencils"]:
        lines.append("no fused kernels (nothing to fuse, or fusion is off: gpunumeric.fusion)")
    for g in info["stencils"]:
        tasks = g["tasks"]
        per_kernel = g["sweeps_per_kernel"]
        kernels = (f"{g['kernels']} kernel(s) per block part, one per sweep" if not g["tiles"] else
                   f"{g['kernels']} sweeps per block part in {len(per_kernel)} kernel(s) on CuPy blocks "
                   f"(sweeps per kernel: {' '.join(map(str, per_kernel))}; {g['tiles']} through shared memory)")
        inside = f" (each iteration of {g['loop']})" if g["loop"] else ""
        lines.append(f"stencil group {g['kernel']}{inside}: {g['blocks']} block(s), {kernels}")
        shape, dtype = g["vector"]
        vectors = g["floor_bytes"] / (int(np.prod(shape)) * dtype.itemsize)
        lines.append(f"  floor: {g['floor_bytes']:,} B moved by those kernels ({vectors:.3g} vectors of "
                     f"{' x '.join(map(str, shape))} {dtype}; {g['floor_bytes'] / FLOOR_RATE * 1e3:.3g} ms at "
                     f"{FLOOR_RATE / 1e12:g} TB/s)")
        lines.append(f"  tasks: {tasks['interior']} for block interiors (no halo), {tasks['bands']} for blocks or "
                     f"their edge bands, {tasks['halo']} halo strips")
        lines.append(f"  halo depth per axis: {g['halo']}; inputs: {g['inputs']}; outputs: {len(g['outputs'])}")
        if source:
            lines += [_stencil_source.kernel_source(code)[0] for code, *_ in g["plan"].sweeps]
            lines += [_stencil_source.tile_source(*_stencil_plan.tile_variant(g["plan"], run, "int"))[0]
                      for run in g["plan"].tiles]
    for loop in dict.fromkeys(g["loop"] for g in info["stencils"] if g["loop"]):
        inner = [g for g in info["stencils"] if g["loop"] == loop]
        shape, dtype = inner[0]["vector"]
        if all(g["vector"] == (shape, dtype) for g in inner):  # with its fused kernels' reads and writes
            moved = sum(g["floor_bytes"] for g in inner) + sum(
                (g["bytes_read_per_block"] + g["bytes_written_per_block"]) * g["blocks"]
                for g in info["groups"] if g["loop"] == loop)
            vectors = moved / (int(np.prod(shape)) * dtype.itemsize)
            lines.append(f"{loop}: its kernels move at least {vectors:.3g} vectors per iteration")
    for g in info["groups"]:
        rows = g["row_inputs"] is not None
        lines.append(f"fused {'row ' * rows}kernel {g['kernel']}: 1 kernel per block, {g['blocks']} block(s)")
        lines.append(f"  ops:     {', '.join(g['ops'])}")
        lines.append(f"  outputs: {', '.join(g['outputs'])}; inputs: {g['inputs']}")
        lines.append(f"  per block: reads {g['bytes_read_per_block']:,} B, writes {g['bytes_written_per_block']:,} B")
        if source:
            lines.append(_rows.kernel_source(g["program"], _rows.lanes_for(g["row_length"]), "int", g["row_inputs"])[0]
                         if rows else kernel_source(g["program"], "flat", 1)[0])
    return Explanation("\n".join(lines))


def _region_lines(region: dict[str, Any]) -> list[str]:
    """How an accelerated call runs: its tasks on the scheduler, and per worker its kernels and exchanges."""
    if region["lowering"] == "tasks":
        return [f"region {region['name']}: one task per block (gpunumeric.region-lowering='tasks')"]
    ranks = region["ranks"]
    where = f"one per worker, on workers {region['workers']}" if ranks > 1 else "one task, no exchanges"
    lines = [f"region {region['name']}: {ranks} task(s) on the scheduler ({where})"]

    def describe(program: dict[str, Any], indent: str, unit: str) -> None:
        lines.append(f"{indent}{unit}: {program['tasks']} operation(s) ({program['kernels']} with generated kernels), "
                     f"{program['exchanges']} exchange(s), {program['bytes_sent']:,} B sent")
        for loop in program["loops"]:
            times = loop["count"] if loop["kind"] == "fori" else f"<= {loop['count']}" if loop["count"] else "until done"
            describe(loop, indent + "  ", f"{loop['kind']}_loop ({times} iterations), per iteration")

    for rank, program in enumerate(region["programs"]):
        describe(program, "  ", f"worker {region['workers'][rank]}" if ranks > 1 else "the task")
    return lines
