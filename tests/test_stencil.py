"""The stencil pass: shifted slices, rolls and the ``v[1:-1, 1:-1] = expr`` update become one task and one
kernel per block per sweep, several sweeps per task, with halos from the neighbours (only strips travel);
results equal NumPy's for any chunking, fixed and periodic boundaries, 1-d to 3-d, several fields at once."""
from __future__ import annotations

import shutil
from typing import Any

import dask
import numpy as np
import _cuda_emulator
import pytest
from conftest import BACKEND, assert_eq, axis_chunks, compile_check
from hypothesis import given
from hypothesis import strategies as st

import dask_gpunumeric as gnp
from dask_gpunumeric.kernels import blocks as _blocks
from dask_gpunumeric.kernels import cuda as _cuda
from dask_gpunumeric.codegen import stencil as _stencil_source
from dask_gpunumeric.codegen import stencil_plan as _stencil_plan
from dask_gpunumeric.codegen.types import WRAP
from dask_gpunumeric.kernels import stencil as _stencil_kernels
from dask_gpunumeric.api.explain import plan
from dask_gpunumeric.runtime.compile import graph_of
from dask_gpunumeric.optimize import optimize
from dask_gpunumeric.optimize.dag import DAG

SWEEPS_PER_TASK = st.sampled_from(["auto", 1, 2, 3, 5])


def jacobi(xp: Any, u: Any) -> Any:
    """One Jacobi sweep, fixed boundary: the interior from its four neighbours."""
    v = u.copy()
    v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return v


def jacobi_in_place(xp: Any, u: Any) -> Any:
    u[1:-1, 1:-1] = (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]) / 4
    return u


def heat_periodic(xp: Any, u: Any) -> Any:
    """An explicit heat step with periodic boundaries along every axis (``roll``)."""
    lap = sum(xp.roll(u, s, axis=d) for d in range(u.ndim) for s in (1, -1)) - 2 * u.ndim * u
    return u + 0.1 * lap


def nine_point(xp: Any, u: Any) -> Any:
    """A 9-point smoother (the 3 x 3 box), fixed boundary."""
    v = u.copy()
    v[1:-1, 1:-1] = (4 * u[1:-1, 1:-1] + 2 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
                     + u[:-2, :-2] + u[:-2, 2:] + u[2:, :-2] + u[2:, 2:]) / 16
    return v


def jacobi_3d(xp: Any, u: Any) -> Any:
    u[1:-1, 1:-1, 1:-1] = (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1]
                           + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:]) / 6
    return u


def smooth_1d(xp: Any, u: Any) -> Any:
    """A 1-d three-point smoother of reach 2 on the left, fixed ends."""
    u[2:-1] = 0.5 * u[2:-1] + 0.3 * u[1:-2] + 0.1 * u[:-3] + 0.1 * u[3:]
    return u


def periodic_x_fixed_y(xp: Any, u: Any) -> Any:
    """Periodic along the last axis, fixed along the first."""
    v = u.copy()
    v[1:-1, :] = u[1:-1] + 0.2 * (xp.roll(u, 1, axis=1)[1:-1] + xp.roll(u, -1, axis=1)[1:-1] + u[2:] + u[:-2]
                                  - 4 * u[1:-1])
    return v


def roll_inside_fixed(xp: Any, u: Any) -> Any:
    """A cyclic read along the axis whose ends are fixed: fields can't be extended cyclically there."""
    v = u.copy()
    v[:-2] = (xp.roll(u, 3, axis=0) + xp.roll(u, -1, axis=0) + u)[:-2] / 3
    return v


def gray_scott(xp: Any, u: Any, v: Any) -> tuple[Any, Any]:
    """A Gray-Scott reaction-diffusion step: two fields reading each other, periodic Laplacians (``roll``)."""
    def lap(a: Any) -> Any:
        return xp.roll(a, 1, axis=0) + xp.roll(a, -1, axis=0) + xp.roll(a, 1, axis=1) + xp.roll(a, -1, axis=1) - 4 * a

    uvv = u * v * v
    return u + (0.16 * lap(u) - uvv + 0.035 * (1 - u)), v + (0.08 * lap(v) + uvv - 0.1 * v)


def gray_scott_loop(steps: int, seed: int) -> tuple[gnp.Array, gnp.Array]:
    """``steps`` Gray-Scott steps of random 12 x 10 fields in a ``fori_loop``, checked against NumPy's."""
    un, vn = np.random.default_rng(seed).random((2, 12, 10), dtype=np.float32)
    u, v = gnp.fori_loop(steps, lambda i, s: gray_scott(gnp, *s), (gnp.asarray(un), gnp.asarray(vn)))
    for _ in range(steps):
        un, vn = gray_scott(np, un, vn)
    assert_eq(u, un, rtol=1e-5, atol=1e-6)
    assert_eq(v, vn, rtol=1e-5, atol=1e-6)
    return u, v


UPDATES = {"jacobi": (jacobi, 2), "jacobi_in_place": (jacobi_in_place, 2), "heat_periodic_1d": (heat_periodic, 1),
           "heat_periodic_2d": (heat_periodic, 2), "heat_periodic_3d": (heat_periodic, 3), "jacobi_3d": (jacobi_3d, 3),
           "smooth_1d": (smooth_1d, 1), "periodic_x_fixed_y": (periodic_x_fixed_y, 2),
           "roll_inside_fixed": (roll_inside_fixed, 2)}


@st.composite
def grids(draw: Any, ndim: int) -> tuple[np.ndarray, tuple]:
    low = 4 if ndim < 3 else 3
    shape = tuple(draw(st.lists(st.integers(low, 12 if ndim < 3 else 7), min_size=ndim, max_size=ndim)))
    x = np.random.default_rng(draw(st.integers(0, 9))).random(shape, dtype=np.float32)
    return x, tuple(draw(axis_chunks(n)) for n in shape)


def sweeps(update: Any, xp: Any, u: Any, n: int) -> Any:
    for _ in range(n):
        u = update(xp, u)
    return u


@pytest.mark.parametrize("name", sorted(UPDATES))
@given(data=st.data(), n=st.integers(1, 4), per_task=SWEEPS_PER_TASK)
def test_sweeps_equal_numpy(name: str, data: Any, n: int, per_task: Any) -> None:
    update, ndim = UPDATES[name]
    x, chunks = data.draw(grids(ndim))
    with gnp.config.set(stencil_sweeps=per_task):
        result = sweeps(update, gnp, gnp.from_array(x, chunks=chunks), n)
        assert result.chunks == chunks
        assert_eq(result, sweeps(update, np, x.copy(), n), rtol=1e-5, atol=1e-6)
        assert [type(n).__name__ for n in DAG(optimize(result.expr)).order].count("Stencil") >= 1


@given(data=grids(1), depth=st.integers(1, 3))
def test_interior_slices_shrink(data: tuple, depth: int) -> None:
    """Expressions over slices alone (no setitem): each result is smaller than its input."""
    x, chunks = data
    u, ref = gnp.from_array(x, chunks=chunks), x
    for _ in range(depth):
        if ref.shape[0] < 3:
            break
        u, ref = (u[:-2] - 2 * u[1:-1] + u[2:]) / 2, (ref[:-2] - 2 * ref[1:-1] + ref[2:]) / 2
    assert_eq(u, ref)


@given(data=grids(2), n=st.integers(1, 3), per_task=SWEEPS_PER_TASK)
def test_two_fields_updated_together(data: tuple, n: int, per_task: Any) -> None:
    """Gray-Scott reaction-diffusion (periodic): both fields in one kernel per block and sweep."""
    x, chunks = data
    u, v, ru, rv = gnp.from_array(x, chunks=chunks), gnp.from_array(1 - x, chunks=chunks), x, 1 - x
    for _ in range(n):
        (u, v), (ru, rv) = gray_scott(gnp, u, v), gray_scott(np, ru, rv)
    with gnp.config.set(stencil_sweeps=per_task):
        uu, vv = dask.compute(u, v)
        np.testing.assert_allclose(np.asarray(uu if BACKEND == "numpy" else uu.get()), ru, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(vv if BACKEND == "numpy" else vv.get()), rv, rtol=1e-5, atol=1e-6)
        info = plan(gnp.stack([u, v]))
        assert info["stencils"] and all(len(g["outputs"]) == 2 for g in info["stencils"])


def test_game_of_life_on_integers() -> None:
    """Integer and boolean dtypes, comparisons and logic in a periodic stencil."""
    board = (np.random.default_rng(3).random((9, 11)) < 0.4).astype(np.uint8)

    def life(xp: Any, b: Any) -> Any:
        n = sum(xp.roll(xp.roll(b, i, axis=0), j, axis=1) for i in (-1, 0, 1) for j in (-1, 0, 1) if (i, j) != (0, 0))
        return ((n == 3) | ((b == 1) & (n == 2))).astype(np.uint8)

    assert_eq(sweeps(life, gnp, gnp.from_array(board, chunks=(4, 5)), 4), sweeps(life, np, board, 4))


def test_boundary_conditions_and_residual() -> None:
    """Setitems of scalars on the edges each sweep, and a reduction over two consecutive iterates."""
    x = np.random.default_rng(1).random((12, 10))

    def step(xp: Any, u: Any) -> Any:
        u[0, :] = 1.0
        u[-1, :] = u[-2, :]
        return jacobi(xp, u)

    u, ref = gnp.from_array(x, chunks=(5, 4)), x.copy()
    for _ in range(3):
        u, ref = step(gnp, u), step(np, ref)
    previous, ref_previous = u, ref
    u, ref = step(gnp, u), step(np, ref.copy())
    assert_eq(gnp.max(gnp.abs(u - previous)), np.max(np.abs(ref - ref_previous)))
    assert_eq(u, ref)


def test_accelerated_loop_with_array_coefficients() -> None:
    """In ``gnp.accelerate``, with coefficients passed as 0-d arrays (one plan for every value)."""
    x = np.random.default_rng(2).random((10, 12), dtype=np.float32)

    def damped(xp: Any, u: Any, w: Any) -> Any:
        v = u.copy()
        v[1:-1, 1:-1] = w * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]) + (1 - 4 * w) * u[1:-1, 1:-1]
        return v

    @gnp.accelerate
    def relax(u: Any, w: Any, n: int) -> Any:
        for _ in range(n):
            u = damped(gnp, u, w)
        return u

    u = gnp.from_array(x, chunks=(5, 6))
    for w in (0.25, 0.2):
        ref = x.copy()
        for _ in range(6):
            ref = damped(np, ref, np.float32(w))
        assert_eq(relax(u, gnp.asarray(np.float32(w)), 6), ref)
    assert len(relax.plans) == 1
    with gnp.config.set(dispatch="lazy"):  # lazy outputs, to see the plan
        assert plan(relax(u, gnp.asarray(np.float32(0.25)), 6))["stencils"]


@pytest.mark.parametrize("shape, chunkings", [((256,), [(256,), (100,), (64, 192)]),
                                              ((2**15,), [(2**15,), (2**14,)]),
                                              ((12, 10), [(12, 10), (5, 10), (12, 4)])])
def test_repeated_calls_on_other_data_and_blocks(shape: tuple, chunkings: list) -> None:
    """An accelerated periodic loop called again and again: on other data, and on other chunkings of the
    same shape (the same sweeps over other blocks and parts, whose launches were worked out for others), each
    call gives NumPy's result; a call on data already seen works out no launch again."""
    relax = gnp.accelerate(lambda u: sweeps(heat_periodic, gnp, u, 5))
    for seed, chunks in enumerate(chunkings * 2):
        x = np.random.default_rng(seed).random(shape, dtype=np.float32)
        with gnp.config.set(stencil_sweeps=5):  # all five sweeps in each task, whatever the blocks
            u = gnp.from_array(x, chunks=chunks).persist()
            assert_eq(relax(u), sweeps(heat_periodic, np, x, 5), rtol=1e-5, atol=1e-6)
            known = len(_stencil_kernels._SCHEDULES)
            assert_eq(relax(gnp.from_array(x[::-1].copy(), chunks=chunks).persist()),
                      sweeps(heat_periodic, np, x[::-1], 5), rtol=1e-5, atol=1e-6)
            assert len(_stencil_kernels._SCHEDULES) == known


def _stencil_tasks(x: gnp.Array) -> list:
    graph = graph_of(optimize(x.expr))
    return [k for k in graph if isinstance(k, tuple) and k[0].startswith("stencil-")]


@pytest.mark.parametrize("per_task", [1, 2, 4])
def test_explain_one_kernel_per_block_per_sweep(per_task: int) -> None:
    """Each group: per block an interior task (no halo needed) and a task for the edge bands, each running
    one kernel per sweep of the group; nothing else runs but the halo strips."""
    x = np.random.default_rng(0).random((16, 16), dtype=np.float32)
    u = sweeps(jacobi, gnp, gnp.from_array(x, chunks=8), 8)
    with gnp.config.set(stencil_sweeps=per_task, stencil_tiles=False):
        info = plan(u)
        text = gnp.explain(u)
    groups = info["stencils"]
    assert len(groups) == 8 // per_task
    for g in groups:
        assert g["kernels"] == per_task and g["blocks"] == 4 and g["halo"] == (per_task, per_task)
        assert g["tasks"]["interior"] == g["tasks"]["bands"] == 4
    assert not info["groups"]  # no other kernels: slices, setitems and arithmetic are all in the stencils
    assert set(info["tasks_by_prefix"]) == {"array", "halo", "stencil-add-multiply", "stencil-add-multiply-interior"}
    assert info["tasks_by_prefix"]["stencil-add-multiply"] == 4 * len(groups)
    assert f"{per_task} kernel(s) per block part, one per sweep" in text
    one_per_sweep = info["stencils"][0]["floor_bytes"]
    assert one_per_sweep == per_task * 2 * x.nbytes  # each sweep reads the grid and writes it
    with gnp.config.set(stencil_sweeps=per_task):  # tile kernels on CuPy blocks: all sweeps of a task in one
        groups = plan(u)["stencils"]
        assert [g["tiles"] for g in groups] == [int(per_task > 1)] * len(groups)
        assert [g["sweeps_per_kernel"] for g in groups] == [[per_task]] * len(groups)
        assert [g["floor_bytes"] for g in groups] == [2 * x.nbytes] * len(groups)
        if per_task > 1:
            assert (f"{per_task} sweeps per block part in 1 kernel(s) on CuPy blocks (sweeps per kernel: {per_task}; "
                    "1 through shared memory)") in gnp.explain(u)
            assert f"floor: {2 * x.nbytes:,} B moved by those kernels" in gnp.explain(u)


def test_group_size_rule() -> None:
    """auto: sweeps are grouped while the halo stays within 1/8 of the blocks; an unsplit axis needs no halo,
    fixed or periodic (its reads wrap around in the kernel); a split periodic one does."""
    x = np.zeros((64, 64), dtype=np.float32)
    split = sweeps(jacobi, gnp, gnp.from_array(x, chunks=(32, 64)), 10)  # halo 4 allowed along axis 0
    assert [g["kernels"] for g in plan(split)["stencils"]] == [4, 4, 2]
    single = sweeps(jacobi, gnp, gnp.from_array(x, chunks=64), 10)
    assert [g["kernels"] for g in plan(single)["stencils"]] == [10]
    periodic = sweeps(heat_periodic, gnp, gnp.from_array(x, chunks=64), 10)
    assert [g["kernels"] for g in plan(periodic)["stencils"]] == [10]
    split_periodic = sweeps(heat_periodic, gnp, gnp.from_array(x, chunks=(64, 32)), 10)  # halo 4 along axis 1
    assert [g["kernels"] for g in plan(split_periodic)["stencils"]] == [4, 4, 2]
    with gnp.config.set(stencil_sweeps=3):
        assert [g["kernels"] for g in plan(single)["stencils"]] == [3, 3, 3, 1]
    with gnp.config.set(stencil_sweeps=0), pytest.raises(ValueError, match="stencil-sweeps"):
        plan(single)


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_periodic_block_wraps_in_place(ndim: int) -> None:
    """An axis of one block read cyclically needs no halo: a single block is one task reading its own block,
    the reads past its ends wrapped around it (no strips, no bands), all sweeps in one group; split along
    the last axis, blocks get halo strips there (and only there)."""
    shape = (9, 8, 7)[:ndim]
    x = np.random.default_rng(ndim).random(shape, dtype=np.float32)
    whole = sweeps(heat_periodic, gnp, gnp.from_array(x, chunks=shape), 5)
    split = sweeps(heat_periodic, gnp, gnp.from_array(x, chunks=(*shape[:-1], -(-shape[-1] // 2))), 5)
    for u in (whole, split):
        assert_eq(u, sweeps(heat_periodic, np, x, 5), rtol=1e-5, atol=1e-6)
    assert [(g["kernels"], g["tasks"]) for g in plan(whole)["stencils"]] == [(5, {"interior": 0, "bands": 1, "halo": 0})]
    for g in plan(split)["stencils"]:
        assert g["tasks"]["interior"] == g["tasks"]["bands"] == 2 and g["tasks"]["halo"] == 4
        strips = [task.args[1] for key, task in graph_of(optimize(split.expr)).items() if key[0].startswith("halo-")]
        assert all(s.stop - s.start == n for strip in strips for s, n in zip(strip[:-1], shape))  # whole along others


def test_gray_scott_step_is_one_kernel() -> None:
    """Two fields with periodic Laplacians (``roll``) in a ``fori_loop`` on one block: per step one task
    running one kernel that reads u and v and writes both; equal to NumPy's steps."""
    with gnp.config.set(dispatch="lazy"):  # a region to look at, not its results
        u, _ = gray_scott_loop(6, 4)
    info = plan(u)
    (loop,) = info["regions"][0]["programs"][0]["loops"]
    assert loop["kernels"] == 1 and loop["tasks"] == 3  # the kernel's task, and picking its two outputs
    (group,) = info["stencils"]
    assert group["kernels"] == 1 and group["tasks"] == {"interior": 0, "bands": 1, "halo": 0}
    assert group["inputs"] == 2 and len(group["outputs"]) == 2


@st.composite
def padded_grids(draw: Any) -> tuple[np.ndarray, tuple, tuple, float]:
    """A grid, its chunks, pad widths per axis (one to three, at either end) and a constant."""
    x, chunks = draw(grids(draw(st.integers(1, 3))))
    widths = tuple((draw(st.integers(1, 2)), draw(st.integers(1, 2))) for _ in x.shape)
    return x, chunks, widths, draw(st.sampled_from([0.0, 1.5, -2.0]))


def padded_laplacian(xp: Any, u: Any, widths: tuple, value: float) -> Any:
    """The Laplacian of ``u`` padded by a constant, from shifted slices of the padded array (as JAX code
    writes it), over the part of the padded array that stays within one element of ``u``."""
    p = xp.pad(u, widths, constant_values=value)
    inner = tuple(slice(b - 1, b - 1 + n + 2) for (b, _), n in zip(widths, u.shape))
    box = tuple(slice(1, n + 1) for n in u.shape)
    total = -2 * u.ndim * p[inner][box]
    for d in range(u.ndim):
        for e in (-1, 1):
            total = total + p[inner][tuple(slice(1 + e, n + 1 + e) if a == d else b for a, (b, n) in
                                          enumerate(zip(box, u.shape)))]
    return total


@given(data=padded_grids())
def test_constant_padding_read_in_kernel(data: tuple) -> None:
    """Shifted slices of ``pad(u, widths, constant_values=c)`` read ``u`` itself in the kernel, ``c`` past its
    ends: no padded array, no copies; any chunking, 1-d to 3-d."""
    x, chunks, widths, value = data
    u = gnp.from_array(x, chunks=chunks)
    result = padded_laplacian(gnp, u, widths, value)
    assert_eq(result, padded_laplacian(np, x, widths, value), rtol=1e-5, atol=1e-5)
    info = plan(result)
    assert set(info["tasks_by_prefix"]) <= {"array", "halo", "stencil-multiply-add", "stencil-multiply-add-interior"}
    assert [g["inputs"] for g in info["stencils"]] == [1]


def test_padding_with_other_edges() -> None:
    """Padding along one axis with a roll along the other, pads of pads (one value), and pads of different
    values of one array in one kernel."""
    x = np.random.default_rng(5).random((7, 6))
    for chunks in [(7, 6), (3, 4)]:
        u = gnp.from_array(x, chunks=chunks)
        for xp, a in ((np, x), (gnp, u)):
            p = xp.pad(a, ((1, 1), (0, 0)))
            mixed = p[:-2] + p[2:] + xp.roll(a, 1, axis=1) - 3 * a
            q = xp.pad(xp.pad(a, 1), 1)
            nested = q[:-4, 2:-2] + q[4:, 2:-2] + q[2:-2, :-4] + a
            ones, twos = xp.pad(a, 1, constant_values=1.0), xp.pad(a, 1, constant_values=2.0)
            values = ones[:-2, 1:-1] * twos[2:, 1:-1] + ones[1:-1, 2:] - twos[1:-1, :-2]
            if xp is np:
                expected = (mixed, nested, values)
        for got, want in zip((mixed, nested, values), expected):
            assert_eq(got, want, rtol=1e-12)
            assert [g["inputs"] for g in plan(got)["stencils"]] == [1]


REDUCED = {"sum": lambda xp, v: xp.sum(v), "max": lambda xp, v: xp.max(v), "min": lambda xp, v: xp.min(v),
           "mean": lambda xp, v: xp.mean(v), "prod": lambda xp, v: xp.prod(1 + v / 64),
           "any": lambda xp, v: xp.any(v > 3.5), "all": lambda xp, v: xp.all(v > -9), "ptp": lambda xp, v: xp.ptp(v)}


@pytest.mark.parametrize("kind", sorted(REDUCED))
@given(data=grids(2), per_task=SWEEPS_PER_TASK, n=st.integers(1, 3))
def test_full_reductions_in_stencil_kernels(kind: str, data: tuple, per_task: Any, n: int) -> None:
    """A full reduction of a stencil's result (after ``n`` sweeps) is computed by the stencil's kernel:
    partials per block (parts of blocks combined), no separate pass over the values; the reduced values
    are not stored unless used otherwise."""
    x, chunks = data
    u = sweeps(heat_periodic, gnp, gnp.from_array(x, chunks=chunks), n - 1)
    r = sweeps(heat_periodic, np, x, n - 1)
    with gnp.config.set(stencil_sweeps=per_task):
        value = REDUCED[kind](gnp, u * gnp.roll(u, 1, axis=0) - u)
        assert_eq(value, REDUCED[kind](np, r * np.roll(r, 1, axis=0) - r), rtol=1e-4)
        info = plan(value)
    assert not info["groups"]  # no fused kernel besides the stencil's
    graph = graph_of(optimize(value.expr))
    assert not [t for t in graph.values() if getattr(t, "func", None) is _blocks.reduce_chunk]  # its partials
    assert info["stencils"][-1]["outputs"] == [f"{kind}-partial"]


def test_stencil_groups_without_shifts_are_fused_kernels() -> None:
    """Work of a cluster that reads nothing at a shift (a level after a reduction) is an elementwise fused
    kernel, not a stencil group; readers of one array join the kernel that reads it anyway."""
    x = np.random.default_rng(6).random((10, 8))
    u = gnp.from_array(x, chunks=(5, 8))
    lap = gnp.roll(u, 1, axis=0) + gnp.roll(u, -1, axis=0) - 2 * u
    scale = gnp.sum(lap * lap)
    later, beside = u / scale + 1, gnp.exp(u) * 2
    info = plan(gnp.stack([later, beside]))
    assert [g["outputs"] for g in info["stencils"]] == [["store 1", "sum-partial"]]  # beside, and the scale's
    assert [g["ops"] for g in info["groups"]] == [["true_divide", "add"]]
    lap_n = np.roll(x, 1, axis=0) + np.roll(x, -1, axis=0) - 2 * x
    assert_eq(later, x / np.sum(lap_n * lap_n) + 1)
    assert_eq(beside, np.exp(x) * 2)


@pytest.mark.parametrize("chunks", [(16, 12), (8, 6)])
@pytest.mark.parametrize("quotients", [False, True])
def test_conjugate_gradient_iteration(chunks: tuple, quotients: bool) -> None:
    """CG on the padded Laplacian (``_solvers``) in a ``fori_loop``: per iteration two stencil kernels, the
    first computing ``sum(p * A p)`` alone, the second ``x``, ``r`` and ``sum(r * r)`` (``A p`` recomputed
    from ``p`` and its halo, the zero boundary read in the kernel; with ``stencil-quotients``, ``alpha = rr / pAp``
    computed in it from the two totals: no launch of its own), then one fused kernel for the new ``p``;
    with the loop rotated (the default, on one block), the new ``p`` is computed by the first stencil kernel of
    the next iteration (``tests/test_cg_floor.py``; with ``stencil-quotients``, ``beta`` there too from the carried
    totals), the first iteration and the last ``p`` outside the loop."""
    from _solvers import gnp_cg, numpy_cg

    b = np.random.default_rng(7).standard_normal((16, 12))
    for rotated in (False, True):
        with dask.config.set({"gpunumeric.dispatch": "lazy", "gpunumeric.loop-rotation": rotated,  # a region
                              "gpunumeric.stencil-quotients": quotients}):
            x = gnp_cg(gnp.asarray(b, chunks=chunks), 5)
        assert_eq(x, numpy_cg(b, 5), rtol=1e-9, atol=1e-12)
        info = plan(x)
        rotated = rotated and chunks == b.shape  # (over several blocks, p's halo would be one more exchange)
        q = int(quotients)  # (one more input: alpha's (beta's) two totals instead of it)
        first = [["sum-partial"], [f"store {4 + q}", f"store {5 + q}", "sum-partial"]]
        body = [[f"store {3 + q}", "sum-partial"], [f"store {4 + q}", f"store {5 + q}", "sum-partial"]] if rotated else []
        assert [g["outputs"] for g in info["stencils"]] == first + body
        # p; p, alpha (rr, pAp), r, x; beta (rr_new, rr), p, r
        assert [g["inputs"] for g in info["stencils"]] == [1, 4 + q] + [3 + q, 4 + q] * rotated
        loop = info["regions"][0]["programs"][0]["loops"][0]
        stencil_tasks = [g["tasks"] for g in info["stencils"]]
        if chunks == b.shape:  # one block: one task per kernel, no halos; the rest is 0-d arithmetic and picking
            assert stencil_tasks == [{"interior": 0, "bands": 1, "halo": 0}] * len(stencil_tasks)
            assert loop["kernels"] == 2 if rotated else 3
        assert [g["ops"] for g in info["groups"] if g["inputs"] == 3] == [["multiply", "add"]]


def test_only_halo_strips_travel() -> None:
    """A stencil task reads its own block whole, and only strips (tasks of their own) of its neighbours."""
    x = np.random.default_rng(0).random((12, 12))
    u = gnp.from_array(x, chunks=4)
    for v in (sweeps(jacobi, gnp, u, 2), gnp.map_overlap(lambda b: b, u, depth=1, boundary="periodic")):
        graph = graph_of(optimize(v.expr))
        for key, task in graph.items():
            if key[0].split("-")[0] in ("stencil", "overlap"):
                whole = [d for d in task.dependencies if not d[0].startswith("halo-")]
                assert whole and all(d[1:] == key[1:] for d in whole)  # the block at the task's own place
        for key, task in graph.items():
            if key[0].startswith("halo-"):
                strip = task.args[1]
                assert sum(s.stop - s.start < 4 for s in strip) >= 1  # a strip: thin along some axis


def test_not_stencils() -> None:
    """Strided slices, reversed views and setitems of whole arrays stay as they were, with NumPy's values."""
    x = np.arange(40.0).reshape(5, 8)
    a = gnp.from_array(x, chunks=3)
    assert_eq(a[:, ::2] + a[:, 1::2], x[:, ::2] + x[:, 1::2])
    assert_eq(a + a[::-1], x + x[::-1])
    b = a.copy()
    b[1:3] = 7.0
    y = x.copy()
    y[1:3] = 7.0
    assert_eq(b, y)
    assert not plan(b)["stencils"]


def test_on_a_cluster(client: Any) -> None:
    """Halo strips are cut where their blocks live; results are those of the local scheduler."""
    x = np.random.default_rng(0).random((16, 8))
    with client.as_current(), dask.config.set(scheduler="dask.distributed"):
        u = sweeps(heat_periodic, gnp, gnp.from_array(x, chunks=(4, 8)), 3)
        assert_eq(u, sweeps(heat_periodic, np, x, 3))
        persisted = sweeps(jacobi, gnp, gnp.from_array(x, chunks=(4, 8)), 3).persist()
        assert_eq(persisted, sweeps(jacobi, np, x.copy(), 3))


EMULATED = {"jacobi": (jacobi, (13, 11), [(13, 11), (6, 5)]), "jacobi_3d": (jacobi_3d, (7, 6, 9), [(7, 6, 9), (4, 3, 5)]),
            "smooth_1d": (smooth_1d, (1100,), [(1100,), (300,)]), "heat_periodic": (heat_periodic, (9, 10), [(9, 10), (5, 4)]),
            "periodic_x_fixed_y": (periodic_x_fixed_y, (10, 9), [(10, 9), (10, 4)])}


@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy", reason="needs g++; CPU runs only")
@pytest.mark.parametrize("name", sorted(EMULATED))
def test_generated_kernels_run_on_the_cpu(name: str, monkeypatch: Any) -> None:
    """The CUDA path of the stencil tasks (launch arguments, edges, rows per thread, reductions), its
    generated kernels compiled for the CPU (``_cuda_emulator``): NumPy's results, whole blocks and split."""
    update, shape, chunkings = EMULATED[name]
    x = np.random.default_rng(8).random(shape, dtype=np.float32)
    _cuda_emulator.emulated_cupy(monkeypatch)
    for chunks in chunkings:
        u = sweeps(update, gnp, gnp.from_array(x, chunks=chunks), 3)
        expected = sweeps(update, np, x.copy(), 3)
        assert_eq(u, expected, rtol=1e-5, atol=1e-6)
        assert_eq(gnp.sum(u * u), np.sum(expected * expected), rtol=1e-4)
        assert_eq(gnp.ptp(u * 2), np.ptp(expected * 2), rtol=1e-5)  # a reduction of two folds


@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy", reason="needs g++; CPU runs only")
@pytest.mark.parametrize("shape, chunks", [((9,), (4,)), ((7, 6), (7, 3)), ((7, 6), (3, 6)), ((7, 6), (3, 3)),
                                           ((4, 5, 3), (4, 2, 3))])
def test_generated_kernels_wrap_boxes_past_the_period(shape: tuple, chunks: tuple, monkeypatch: Any) -> None:
    """Two periodic sweeps per task through the emulated kernels: the first sweep's box reaches past the
    whole-period buffer of an axis of one block (a halo for the second), so its unshifted reads wrap too."""
    x = np.random.default_rng(3).random(shape, dtype=np.float32)
    _cuda_emulator.emulated_cupy(monkeypatch)
    with gnp.config.set(stencil_sweeps=2):
        u = sweeps(heat_periodic, gnp, gnp.from_array(x, chunks=chunks), 2)
        assert_eq(u, sweeps(heat_periodic, np, x.copy(), 2), rtol=1e-5, atol=1e-6)


def test_setitem_sweeps_one_per_kernel_read_only_their_block(monkeypatch: Any) -> None:
    """A sweep restricted to a region (the interior's setitem), one sweep per kernel on one block, as a ``fori_loop``
    of one step per iteration plans it: its packed loads never pass the block's ends (on the CPU each launch's
    arrays lie next to an unreadable page, so that a read past them faults; on the H200 such reads faulted for
    some sizes); NumPy's values through every entry point."""
    if BACKEND == "numpy":
        if _cuda_emulator.HOST_COMPILER is None:
            pytest.skip("needs g++")
        _cuda_emulator.emulated_cupy(monkeypatch)
    host = np.random.default_rng(12).random((24, 20), dtype=np.float32)
    expected = host
    for _ in range(3):
        expected = jacobi(np, expected)
    loop = gnp.accelerate(lambda u: gnp.fori_loop(3, lambda i, w: jacobi(gnp, w), u, unroll=1))
    for chunks in [(24, 20), (12, 20)]:
        assert_eq(loop(gnp.from_array(host, chunks=chunks).persist()), expected, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy", reason="needs g++; CPU runs only")
def test_generated_kernels_run_on_the_cpu_for_cg_and_gray_scott(monkeypatch: Any) -> None:
    """CG (constant padding, two full reductions per iteration) and Gray-Scott (two fields, wrapping) through
    the emulated kernels, in ``fori_loop`` regions."""
    from _solvers import gnp_cg, numpy_cg

    _cuda_emulator.emulated_cupy(monkeypatch)
    b = np.random.default_rng(9).standard_normal((20, 18))
    for chunks in [(20, 18), (7, 9)]:
        assert_eq(gnp_cg(gnp.asarray(b, chunks=chunks), 6), numpy_cg(b, 6), rtol=1e-9, atol=1e-12)
    gray_scott_loop(4, 10)


def counted_tile_kernels(monkeypatch: Any) -> list[tuple]:
    """The emulated kernels, recording the variant of each tile kernel launch (kernels are looked up once per
    launch geometry, then launched again)."""
    _cuda_emulator.emulated_cupy(monkeypatch)
    launched, emulated = [], _stencil_kernels._tile_kernel

    def tile_kernel(*variant: Any) -> tuple[Any, int]:
        kernel, resident = emulated(*variant)

        def launch(*args: Any) -> Any:
            launched.append(variant)
            return kernel(*args)

        return launch, resident

    monkeypatch.setattr(_stencil_kernels, "_tile_kernel", tile_kernel)
    return launched


@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy", reason="needs g++; CPU runs only")
def test_repeated_calls_through_the_generated_kernels(monkeypatch: Any) -> None:
    """The same accelerated loop interpreted, then through the emulated kernels (tile kernels and single
    sweeps, interiors and bands), then again on other data: the kernels run, with NumPy's results."""
    relax = gnp.accelerate(lambda u: sweeps(heat_periodic, gnp, u, 5))
    x = np.random.default_rng(4).random((24, 20), dtype=np.float32)
    with gnp.config.set(stencil_sweeps=5):  # per task, a tile kernel of 3 sweeps and one of 2
        assert_eq(relax(gnp.from_array(x, chunks=(12, 20)).persist()), sweeps(heat_periodic, np, x, 5),
                  rtol=1e-5, atol=1e-6)
        launched = counted_tile_kernels(monkeypatch)
        for y in (x, x[::-1].copy()):
            assert_eq(relax(gnp.from_array(y, chunks=(12, 20)).persist()), sweeps(heat_periodic, np, y, 5),
                      rtol=1e-5, atol=1e-6)
            assert sorted({len(variant[0]) for variant in launched}) == [2, 3]
            launched.clear()


def wrapped(variant: tuple) -> bool:
    """Whether a tile kernel's linked reads wrap (its sweeps but the last computed past their boxes)."""
    codes, links, _, edges, *_ = variant
    return any(WRAP in edges[j + 1][slot] for j, shared in enumerate(links) for slot, _ in shared)


PAIRED = {"jacobi": jacobi, "heat_periodic": heat_periodic}


@pytest.mark.slow
@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy", reason="needs g++; CPU runs only")
@pytest.mark.parametrize("name", sorted(PAIRED))
@pytest.mark.parametrize("n", [5])  # two pair kernels and an odd sweep out (4 sweeps: the same pairs alone)
def test_pair_kernels_run_on_the_cpu(name: str, n: int, monkeypatch: Any) -> None:
    """Two sweeps per kernel through shared memory (fixed boundary with a ``SetItem`` box, periodic with
    reads wrapping around one block), emulated: NumPy's results on one block, on blocks of several tiles
    and on small blocks (halos), an odd sweep out running alone; pair kernels launched per block part."""
    launched = counted_tile_kernels(monkeypatch)
    x = np.random.default_rng(5).random((70, 140), dtype=np.float32)
    with gnp.config.set(stencil_sweeps=n, stencil_tile_sweeps=2):
        for chunks in [(70, 140), (35, 70), (13, 29)]:
            u = sweeps(PAIRED[name], gnp, gnp.from_array(x, chunks=chunks), n)
            assert_eq(u, sweeps(PAIRED[name], np, x.copy(), n), rtol=1e-5, atol=1e-6)
            launched.clear()  # assert_eq computed u through each entry point: count one computation
            gnp.fetch(u)
            tasks = sum(g["tasks"]["interior"] + g["tasks"]["bands"] for g in plan(u)["stencils"])
            # n // 2 pair kernels per block part (a band task computes several parts)
            assert len(launched) == n // 2 if chunks == x.shape else len(launched) >= tasks * (n // 2)
            # one periodic block: the second sweep's reads of the first's outputs wrap (phase 1 past its box)
            assert {len(v[0]) for v in launched} == {2}
            assert set(map(wrapped, launched)) == {name == "heat_periodic" and chunks == x.shape}


TILED = {"jacobi": jacobi, "jacobi_in_place": jacobi_in_place, "heat_periodic": heat_periodic,
         "nine_point": nine_point}


@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy", reason="needs g++; CPU runs only")
@pytest.mark.parametrize("name", sorted(TILED))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tile_kernels_run_on_the_cpu(name: str, dtype: Any, monkeypatch: Any) -> None:
    """Several sweeps per kernel through shared memory (``stencil-tile-sweeps``), emulated, bit for bit
    NumPy's: 5-point and 9-point, fixed (a ``SetItem`` box) and periodic (``roll``: on one block the linked
    reads wrap) boundaries, odd sizes of several tiles, one block and several (halos); 9 sweeps per task in
    three kernels of 3 (at most 4 per kernel), 5 with at most 8 per kernel in one (6 would do more than
    ``TILE_WORK`` times the work of their tiles); on 130 x 200, thread blocks inside every box and region
    (computed without checks)."""
    launched = counted_tile_kernels(monkeypatch)
    for shape, chunks, n, limit, runs in [((67, 133), (67, 133), 9, 4, [3, 3, 3]), ((67, 133), (34, 67), 9, 4, [3, 3, 3]),
                                          ((67, 133), (67, 133), 5, 8, [5]), ((130, 200), (130, 200), 6, 4, [3, 3])]:
        x = np.random.default_rng(11).random(shape).astype(dtype)
        with gnp.config.set(stencil_sweeps=n, stencil_tile_sweeps=limit):
            u = sweeps(TILED[name], gnp, gnp.from_array(x, chunks=chunks), n)
            assert [g["sweeps_per_kernel"] for g in plan(u)["stencils"]] == [runs]
            launched.clear()
            np.testing.assert_array_equal(gnp.fetch(u), sweeps(TILED[name], np, x.copy(), n))
            assert sorted(len(variant[0]) for variant in launched)[-len(runs):] == runs
            assert any(map(wrapped, launched)) == (name == "heat_periodic" and chunks == x.shape)


@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy", reason="needs g++; CPU runs only")
@pytest.mark.parametrize("name", ["jacobi_3d", "heat_periodic"])
def test_tile_kernels_in_3d(name: str, monkeypatch: Any) -> None:
    """3-d 7-point sweeps two per kernel through shared memory (emulated), bit for bit NumPy's: fixed and
    periodic boundaries, odd sizes, one block (on 20 x 40 x 70 with thread blocks inside everything) and
    several."""
    launched = counted_tile_kernels(monkeypatch)
    update = {"jacobi_3d": jacobi_3d, "heat_periodic": heat_periodic}[name]
    for shape, chunks in [((19, 21, 37), (19, 21, 37)), ((19, 21, 37), (10, 11, 37)), ((20, 40, 70), (20, 40, 70))]:
        x = np.random.default_rng(13).random(shape, dtype=np.float32)
        with gnp.config.set(stencil_sweeps=4):
            u = sweeps(update, gnp, gnp.from_array(x, chunks=chunks), 4)
            assert [g["sweeps_per_kernel"] for g in plan(u)["stencils"]] == [[2, 2]]
            launched.clear()
            np.testing.assert_array_equal(gnp.fetch(u), sweeps(update, np, x.copy(), 4))
            assert launched and {len(variant[0]) for variant in launched} == {2}


def upwind(xp: Any, q: Any, c: Any) -> Any:
    """One first-order upwind step of dq/dt + c dq/dx = 0 with a velocity of either sign (periodic)."""
    return q - 0.4 * c * xp.where(c > 0, q - xp.roll(q, 1), xp.roll(q, -1) - q)


@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy", reason="needs g++; CPU runs only")
@pytest.mark.parametrize("name", ["smooth_1d", "heat_periodic", "upwind"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tile_kernels_in_1d(name: str, dtype: Any, monkeypatch: Any) -> None:
    """1-d sweeps up to 8 per kernel through shared memory (emulated), bit for bit NumPy's: fixed ends (a
    ``SetItem`` box), periodic ``roll`` and upwind advection (``where`` over a second input), on sizes of
    several 1,024-element tiles and one element more, one block and several (halos)."""
    launched = counted_tile_kernels(monkeypatch)
    rng = np.random.default_rng(21)
    for size, chunks, n, runs in [(2049, 2049, 10, [5, 5]), (2049, 700, 10, [5, 5]), (3000, 3000, 30, [8, 8, 7, 7])]:
        x, c = rng.random(size).astype(dtype), (rng.random(size) - 0.5).astype(dtype)
        gc = gnp.from_array(c, chunks=chunks)
        with gnp.config.set(stencil_sweeps=n):
            if name == "upwind":
                u, expected = gnp.from_array(x, chunks=chunks), x
                for _ in range(n):
                    u, expected = upwind(gnp, u, gc), upwind(np, expected, c)
            else:
                update = {"smooth_1d": smooth_1d, "heat_periodic": heat_periodic}[name]
                u, expected = sweeps(update, gnp, gnp.from_array(x, chunks=chunks), n), sweeps(update, np, x.copy(), n)
            assert [g["sweeps_per_kernel"] for g in plan(u)["stencils"]] == [runs]
            launched.clear()
            np.testing.assert_array_equal(gnp.fetch(u), expected)
            np.testing.assert_array_equal(np.asarray(u), expected)
            assert {len(variant[0]) for variant in launched} == set(runs)


@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy", reason="needs g++; CPU runs only")
@pytest.mark.parametrize("chunks", [(41, 70), (21, 35)])
def test_tile_kernels_for_gray_scott(chunks: tuple, monkeypatch: Any) -> None:
    """Gray-Scott's two fields, updated together by rolls, 8 steps in two kernels of 4 (emulated, float32),
    both fields in shared memory between the steps, on one block and on four: bit for bit NumPy's."""
    launched = counted_tile_kernels(monkeypatch)
    un, vn = np.random.default_rng(12).random((2, 41, 70), dtype=np.float32)
    u, v = gnp.from_array(un, chunks=chunks), gnp.from_array(vn, chunks=chunks)
    for _ in range(8):
        (u, v), (un, vn) = gray_scott(gnp, u, v), gray_scott(np, un, vn)
    with gnp.config.set(stencil_sweeps=8):
        assert [g["sweeps_per_kernel"] for g in plan(u + v)["stencils"]] == [[4, 4]]  # the sum in the last sweep
        np.testing.assert_array_equal(gnp.fetch(u + v), un + vn)
    assert {len(variant[0]) for variant in launched} == {4}
    assert all(len(shared) == 2 for variant in launched for shared in variant[1])


@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy", reason="needs g++; CPU runs only")
@pytest.mark.parametrize("chunks", [(40, 70), (20, 35)])
def test_pair_kernels_for_gray_scott(chunks: tuple, monkeypatch: Any) -> None:
    """Gray-Scott's two fields updated together by rolls, both kept in shared memory between the two steps
    of a pair kernel (emulated), on one block and on four: NumPy's results."""
    launched = counted_tile_kernels(monkeypatch)
    un, vn = np.random.default_rng(6).random((2, 40, 70), dtype=np.float32)
    u, v = gnp.from_array(un, chunks=chunks), gnp.from_array(vn, chunks=chunks)
    for _ in range(3):
        (u, v), (un, vn) = gray_scott(gnp, u, v), gray_scott(np, un, vn)
    with gnp.config.set(stencil_sweeps=3, stencil_tile_sweeps=2):
        assert_eq(u + v, un + vn, rtol=1e-5, atol=1e-6)
        # both fields in shared memory between the steps
        assert launched and all(len(shared) == 2 for variant in launched for shared in variant[1])
        launched.clear()
        assert_eq(u, un, rtol=1e-5, atol=1e-6)  # u's last step pairs with v's: one field shared, two global
        assert launched and all(len(variant[1][-1]) == 1 for variant in launched)


@pytest.mark.skipif(_cuda_emulator.HOST_COMPILER is None or BACKEND != "numpy", reason="needs g++; CPU runs only")
def test_stencil_tiles_off(monkeypatch: Any) -> None:
    """``stencil-tiles`` off: no pairs planned (another optimized graph), one kernel per sweep, the same
    results."""
    launched = counted_tile_kernels(monkeypatch)
    x = np.random.default_rng(7).random((30, 40), dtype=np.float32)
    u = sweeps(jacobi, gnp, gnp.from_array(x, chunks=(15, 40)), 4)
    with gnp.config.set(stencil_sweeps=4):
        assert [g["tiles"] for g in plan(u)["stencils"]] == [1]
        with gnp.config.set(stencil_tiles=False):  # the optimized graph (cached per setting) has no tiles
            assert [g["tiles"] for g in plan(u)["stencils"]] == [0]
            assert_eq(u, sweeps(jacobi, np, x.copy(), 4), rtol=1e-5, atol=1e-6)
            assert not launched
        assert_eq(u, sweeps(jacobi, np, x.copy(), 4), rtol=1e-5, atol=1e-6)
        assert launched


def tile_runs(x: gnp.Array) -> list[tuple]:
    return [g["plan"].tiles for g in plan(x)["stencils"]]


def test_tiles_planned_where_eligible() -> None:
    """Tile kernels only of 2-d sweeps whose outputs are each read by the next alone (all of a sweep's
    outputs or none also the group's), not with a box before wrapping reads; in order, a stretch cut into runs
    of even sizes within ``stencil-tile-sweeps``, an odd sweep alone."""
    x = np.zeros((16, 16), dtype=np.float32)
    u = gnp.from_array(x)
    assert tile_runs(sweeps(jacobi, gnp, u, 5)) == [((0, 3), (3, 2))]  # at most 4 per kernel (the default)
    assert tile_runs(sweeps(jacobi, gnp, u, 20)) == [tuple((k, 4) for k in range(0, 20, 4))]
    with gnp.config.set(stencil_tile_sweeps=6):
        assert tile_runs(sweeps(jacobi, gnp, u, 20)) == [((0, 5), (5, 5), (10, 5), (15, 5))]
    with gnp.config.set(stencil_tile_sweeps=2):
        assert tile_runs(sweeps(jacobi, gnp, u, 5)) == [((0, 2), (2, 2))]
    with gnp.config.set(stencil_tile_sweeps=1), pytest.raises(ValueError, match="stencil-tile-sweeps"):
        plan(sweeps(jacobi, gnp, u, 2))
    assert tile_runs(sweeps(periodic_x_fixed_y, gnp, u, 4)) == [()]  # box, wrap
    # 3-d: 8 x 16 x 32 tiles, two sweeps per kernel (a third would pass ``TILE_WORK``)
    assert tile_runs(sweeps(jacobi_3d, gnp, gnp.from_array(np.zeros((6, 6, 6))), 5)) == [((0, 2), (2, 2))]
    # 1-d: 1,024-element tiles, up to 8 sweeps per kernel by default
    assert tile_runs(sweeps(smooth_1d, gnp, gnp.from_array(np.zeros(50)), 4)) == [((0, 4),)]
    assert tile_runs(sweeps(heat_periodic, gnp, gnp.from_array(np.zeros(50)), 20)) == [((0, 7), (7, 7), (14, 6))]
    with gnp.config.set(stencil_tile_sweeps=4):
        assert tile_runs(sweeps(heat_periodic, gnp, gnp.from_array(np.zeros(50)), 8)) == [((0, 4), (4, 4))]
    p = padded_laplacian(gnp, padded_laplacian(gnp, u, ((1, 1), (1, 1)), 0.0), ((1, 1), (1, 1)), 0.0)
    assert tile_runs(p) == [((0, 2),)]  # constant padding: the first sweep's tile filled past the array's ends
    first = jacobi(gnp, u)
    # the first sweep's output is read by the third kernel (the sum) too: only the second joins the sum
    assert tile_runs(jacobi(gnp, first) + first) == [((1, 2),)]
    # float64 Gray-Scott: two fields of two sweeps in shared memory would pass 48 KiB: pairs
    state = (gnp.from_array(np.zeros((16, 16))), gnp.from_array(np.ones((16, 16))))
    for _ in range(4):
        state = gray_scott(gnp, *state)
    assert tile_runs(state[0] + state[1]) == [((0, 2), (2, 2))]
    state = (u, gnp.from_array(np.ones((16, 16), dtype=np.float32)))
    for _ in range(4):
        state = gray_scott(gnp, *state)
    assert tile_runs(state[0] + state[1]) == [((0, 4),)]  # float32: four steps per kernel
    # its floor: reading both fields and writing their sum once; one kernel per sweep: both fields each step
    assert [g["floor_bytes"] for g in plan(state[0] + state[1])["stencils"]] == [3 * u.nbytes]
    with gnp.config.set(stencil_tiles=False):
        assert [g["floor_bytes"] for g in plan(state[0] + state[1])["stencils"]] == [(3 * 4 + 3) * u.nbytes]


def test_pair_sources_recorded(tmp_path: Any, monkeypatch: Any) -> None:
    """With ``GNP_KERNEL_DUMP_DIR`` set, planning a group writes its pair kernels (both index types, with and
    without edges; on the tiles pairs launch with) for CI's nvcc run."""
    monkeypatch.setenv("GNP_KERNEL_DUMP_DIR", str(tmp_path))
    u = sweeps(heat_periodic, gnp, gnp.from_array(np.zeros((7, 9), dtype=np.float32)), 2)
    (group,) = plan(u)["stencils"]
    written = {f.read_text() for f in tmp_path.glob("*.cu")}
    assert {_stencil_source.tile_source(*_stencil_plan.tile_variant(group["plan"], (0, 2), index, with_edges),
                                        _stencil_kernels.PAIR_TILE_CONFIG)[0]
            for index in ("int", "long long") for with_edges in (False, True)} <= written


@pytest.mark.parametrize("forge", ["offset", "slot", "axis", "base", "index"])
def test_forged_stencil_code_is_refused(forge: str) -> None:
    """Stencil code comes from the pass; a forged one (other names, non-integers, slots out of range) does
    not become CUDA source."""
    from dask_gpunumeric.codegen.check import ProgramError

    u = gnp.from_array(np.zeros((6, 6), dtype=np.float32), chunks=3)
    ((code, *_), *_), index = plan(jacobi(gnp, u))["stencils"][0]["plan"].sweeps, "int"
    program, buffers, loads, restricted, bases, out_dtypes = code
    if forge == "offset":
        loads = ((loads[0][0], ("0]; evil(); b0[0", 0)), *loads[1:])
    elif forge == "slot":
        loads = ((len(buffers), loads[0][1]), *loads[1:])
    elif forge == "axis":
        restricted = (0, 2)
    elif forge == "base":
        bases = ((0, (0.5, 0)),)
    else:
        index = "long long); evil(("
    _stencil_source.kernel_source(code, "int")  # the pass's own code is fine
    with pytest.raises(ProgramError):
        _stencil_source.kernel_source((program, buffers, loads, restricted, bases, out_dtypes), index)


@pytest.mark.parametrize("forge", ["slot", "output", "stored", "reduction", "index", "3d", "links", "memory"])
def test_forged_tiles_are_refused(forge: str) -> None:
    """A tile kernel is made only of the pass's sweeps and slots: forged linked slots, edges, index types,
    link counts or tiles past the shared memory do not become CUDA source."""
    from dask_gpunumeric.codegen.check import ProgramError

    (group,) = plan(sweeps(jacobi, gnp, gnp.from_array(np.zeros((6, 6), dtype=np.float32)), 3))["stencils"]
    codes, links, index, edges, stored = _stencil_plan.tile_variant(group["plan"], (0, 3), "int")
    _stencil_source.tile_source(codes, links, index, edges, stored)  # as planned: fine
    (slot, _), = links[0]
    if forge == "slot":
        links = (((len(codes[1][1]), 0),), links[1])
    elif forge == "output":
        links = (((slot, 1),), links[1])
    elif forge == "stored":
        stored = (2,)  # the last sweep's outputs are stored anyway; only earlier ones may be named
    elif forge == "reduction":  # a full reduction in a sweep but the last
        u = gnp.from_array(np.zeros((6, 6), dtype=np.float32))
        (reducing,) = plan(gnp.sum(padded_laplacian(gnp, u, ((1, 1), (1, 1)), 0.0)))["stencils"]
        codes = (reducing["plan"].sweeps[0].code, *codes[1:])
    elif forge == "index":
        index = "int); evil(("
    elif forge == "3d":
        code = plan(jacobi_3d(gnp, gnp.from_array(np.zeros((5, 5, 5)), chunks=5)))["stencils"][0]["plan"].sweeps[0][0]
        codes, edges = (code, *codes[1:]), (_stencil_source.no_edges(code), *edges[1:])
    elif forge == "links":
        links = links[:1]
    else:  # 40 sweeps' tiles: far past a thread block's shared memory
        codes, links, edges = (codes[0],) + codes[1:2] * 39, (links[0],) * 39, (edges[0],) + edges[1:2] * 39
    with pytest.raises(ProgramError):
        _stencil_source.tile_source(codes, links, index, edges, stored)


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


@pytest.mark.slow
@needs_nvcc
def test_kernel_sources_compile() -> None:
    u = gnp.from_array(np.zeros((6, 6, 6), dtype=np.float32), chunks=3)
    codes = {code for group in [plan(jacobi_3d(gnp, u)), plan(heat_periodic(gnp, u[0]))]
             for g in group["stencils"] for code, *_ in g["plan"].sweeps}
    source = "\n".join(_stencil_source.kernel_source(code, index)[0] for code in codes for index in ("int", "long long"))
    compile_check(source)
    for dtype in (np.float32, np.float64):
        x = gnp.from_array(np.zeros((6, 6), dtype=dtype))
        state = (x, gnp.from_array(np.ones((6, 6), dtype=dtype)))
        for _ in range(5):
            state = gray_scott(gnp, *state)
        cube = np.zeros((6, 6, 6), dtype=dtype)
        for y in (sweeps(jacobi, gnp, x, 7), sweeps(heat_periodic, gnp, x, 6), sweeps(nine_point, gnp, x, 4),
                  state[0] + state[1], sweeps(jacobi_3d, gnp, gnp.from_array(cube), 2),
                  sweeps(heat_periodic, gnp, gnp.from_array(cube), 2)):
            # tile kernels of 2 to 4 sweeps
            (group,) = plan(y)["stencils"]
            assert group["plan"].tiles
            variants = {_stencil_plan.tile_variant(group["plan"], run, index, with_edges) for run in group["plan"].tiles
                        for index in ("int", "long long") for with_edges in (False, True)}  # some coincide
            compile_check("\n".join(_stencil_source.tile_source(*variant)[0] for variant in variants))
