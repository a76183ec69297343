"""The plain path's per-call work (no ``accelerate``; ``dask.compute``, ``dask.persist``, ``gnp.fetch``): work
that threads cannot shorten runs in the calling thread, work that they can runs on Dask's threads; results
stay NumPy's through every entry point."""
from __future__ import annotations

import threading

import dask
import dask.callbacks
import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import BACKEND, assert_eq, to_host

_threads: list[str] = []


def _record_thread(block):
    _threads.append(threading.current_thread().name)
    return block


def _threads_of(run):
    _threads.clear()
    out = run()
    return out, set(_threads)


@pytest.mark.skipif(BACKEND != "numpy", reason="CuPy blocks always run in order in this thread")
@pytest.mark.parametrize("entry", ["dask.compute", "compute", "fetch", "dask.persist"])
def test_one_block_work_runs_in_this_thread_and_many_blocks_on_threads(entry):
    """Softmax-like work on one block of 4 MiB (a chain of kernels, reductions reading them and a small
    side output) runs in the calling thread: threads could not shorten it. The same on 4 blocks runs on Dask's
    threads (blocks side by side)."""
    host = np.random.default_rng(0).standard_normal((512, 1024))

    def softmax(x):
        x = gnp.map_blocks(_record_thread, x)
        m = gnp.max(x, axis=1, keepdims=True)
        e = gnp.exp(x - m)
        s = gnp.sum(e, axis=1, keepdims=True)
        return e / s, (m + gnp.log(s))[:, 0]

    runs = {"dask.compute": lambda a, b: dask.compute(a, b),
            "compute": lambda a, b: (a.compute(), b.compute()),
            "fetch": lambda a, b: gnp.fetch((a, b)),
            "dask.persist": lambda a, b: gnp.fetch(dask.persist(a, b))}
    m = host.max(axis=1, keepdims=True)
    e = np.exp(host - m)
    s = e.sum(axis=1, keepdims=True)
    for chunks, in_this_thread in (((512, 1024), True), ((128, 1024), False)):
        x = dask.persist(gnp.asarray(host, chunks=chunks))[0]
        (a, b), names = _threads_of(lambda: runs[entry](*softmax(x)))
        np.testing.assert_allclose(to_host(a), e / s, rtol=1e-12)
        np.testing.assert_allclose(to_host(b), (m + np.log(s))[:, 0], rtol=1e-12)
        assert (names == {threading.current_thread().name}) is in_this_thread, (chunks, names)


def test_a_graph_cache_hit_walks_no_tree(monkeypatch):
    """A deep tree built again (a time-stepping loop called twice) finds its graph in the cache by its name
    and its inputs, which its nodes carry: the compile step walks no node of it; an input persisted in
    between (a tree of the same name) gets a graph of its own, reading the persisted blocks."""
    from dask_gpunumeric.runtime import compile as _compile

    host = np.random.default_rng(1).random(64)
    u0 = dask.persist(gnp.asarray(host, chunks=16))[0]

    def steps(u, n=300):
        for _ in range(n):
            u = u * 0.999 + 0.001
        return u

    expected = host
    for _ in range(300):
        expected = expected * 0.999 + 0.001
    for _ in range(2):  # a tree on persisted inputs is cached from its second build on
        np.testing.assert_allclose(to_host(dask.compute(steps(u0))[0]), expected, rtol=1e-12)
    walked: list = []
    walk = _compile.walk
    monkeypatch.setattr(_compile, "walk", lambda root: (walked.append(n) or n for n in walk(root)))
    for run in (lambda y: dask.compute(y)[0], lambda y: y.compute(), gnp.fetch):
        np.testing.assert_allclose(to_host(run(steps(u0))), expected, rtol=1e-12)
    assert walked == []
    half = steps(u0, 150)
    persisted = half.persist()
    assert persisted.name == half.name
    calls: list = []
    counted = gnp.map_blocks(lambda b: calls.append(1) or b, persisted)
    np.testing.assert_allclose(to_host(gnp.fetch(steps(counted, 150))), expected, rtol=1e-12)
    np.testing.assert_allclose(to_host(gnp.fetch(steps(persisted, 150))), expected, rtol=1e-12)
    assert steps(persisted, 150).name == steps(u0).name and len(calls) == 4  # 4 blocks, read once each


@pytest.mark.parametrize("chunks", [(64, 32), (16, 32)])
def test_fetch_of_several_arrays_computes_them_together(chunks):
    """``gnp.fetch`` of a tuple or list of Arrays gives what ``dask.compute`` gives, as NumPy values (0-d ones
    as Python numbers), the work they share done once; the same Array twice, plain values among the Arrays
    and a Dask callback watching the run change nothing."""
    host = np.random.default_rng(2).random((64, 32))
    calls: list = []
    x = gnp.map_blocks(lambda b: calls.append(1) or b, dask.persist(gnp.asarray(host, chunks=chunks))[0])
    shifted = x - gnp.max(x, axis=1, keepdims=True)
    outputs = (gnp.exp(shifted), gnp.sum(shifted, axis=0), gnp.sum(shifted), shifted[:3, 1])
    exact = host - host.max(axis=1, keepdims=True)
    expected = (np.exp(exact), exact.sum(axis=0), exact.sum(), exact[:3, 1])
    for kind in (tuple, list):
        calls.clear()
        got = gnp.fetch(kind(outputs))
        assert type(got) is kind and len(calls) == x.npartitions
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12)
        assert isinstance(got[2], float) and isinstance(got[0], np.ndarray)
        for g, d in zip(got, dask.compute(*outputs)):
            np.testing.assert_array_equal(g, to_host(d))
    (alone,) = gnp.fetch([outputs[1]])
    np.testing.assert_array_equal(alone, got[1])
    assert gnp.fetch(()) == ()
    twice = gnp.fetch((outputs[1], outputs[1], 7))
    np.testing.assert_allclose(twice[0], expected[1], rtol=1e-12)
    np.testing.assert_array_equal(twice[0], twice[1])
    assert twice[2] == 7
    started: list = []
    with dask.callbacks.Callback(start=lambda dsk: started.append(1)):
        watched = gnp.fetch((outputs[2], outputs[3]))
    assert started and watched[0] == got[2]
    np.testing.assert_array_equal(watched[1], got[3])


def test_a_one_dimensional_roll_without_an_axis_is_the_roll_along_it():
    """``roll(x, s)`` of a 1-d array (advection's form) is the roll along axis 0, node for node: a 1-d array is its
    own ravel, so no ravel and reshape are built around it; values as NumPy's through every entry point."""
    from dask_gpunumeric.expr import Gather

    host = np.arange(10.0)
    for dtype in (np.float64, np.float32, np.float64):  # (a roll met before: its plan, a token head per dtype)
        x = gnp.asarray(host.astype(dtype), chunks=4)
        for shift in (1, -1, 13, 0):
            rolled = gnp.roll(x, shift)
            assert rolled.name == gnp.roll(x, shift, axis=0).name
            if shift % 10:
                assert rolled.name == Gather(*rolled.expr.operands)._name  # the constructor's node
            assert_eq(rolled, np.roll(host.astype(dtype), shift))
    grid = np.arange(12.0).reshape(3, 4)
    assert_eq(gnp.roll(gnp.asarray(grid, chunks=2), 5), np.roll(grid, 5))  # (n-d: rolled as its ravel)


def test_a_stencil_update_builds_the_node_its_constructor_builds():
    """``v[1:-1, 1:-1] = w * (...)`` (a Jacobi sweep's update: its region plan met before) builds the ``SetItem``
    node that the generic constructor builds, name and operands alike, without the constructor's steps; values
    as NumPy's through every entry point."""
    from dask_gpunumeric.expr.halo import SetItem

    def sweep(u):
        v = u.copy()
        v[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        return v

    expected = np.random.default_rng(3).random((12, 10))
    u = dask.persist(gnp.asarray(expected, chunks=(6, 5)))[0]
    for _ in range(3):  # the first sweep plans the region; the later ones find its plan
        u, expected = sweep(u), sweep(expected)
        node = u.expr
        generic = SetItem(*node.operands)
        assert type(node) is SetItem and node.operands == generic.operands
        assert (node._name, node.chunks, node.dtype, node.backend) == \
            (generic._name, generic.chunks, generic.dtype, generic.backend)
    assert_eq(u, expected)


def test_dask_compute_of_several_outputs_looks_up_no_operand_by_name(monkeypatch):
    """``dask.compute(a, b)`` of outputs of one tree (the suite's plain calls) reads the joint node of our outputs
    by position: Dask's lookup of an operand by name (``Expr.__getattr__``, microseconds each) meets none of our
    nodes on the way; results as ``gnp.fetch``'s."""
    from dask._expr import Expr

    from dask_gpunumeric.expr import ArrayExpr

    host = np.random.default_rng(4).random((16, 8))
    x = dask.persist(gnp.asarray(host))[0]

    def outputs():
        m = gnp.max(x, axis=1, keepdims=True)
        e = gnp.exp(x - m)
        return e / gnp.sum(e, axis=1, keepdims=True), (m + gnp.log(gnp.sum(e, axis=1, keepdims=True)))[:, 0]

    expected = gnp.fetch(outputs())
    dask.compute(*outputs())  # the graph compiled and cached
    looked_up: list = []
    by_name = Expr.__getattr__

    def counted(self, key):
        if isinstance(self, ArrayExpr):
            looked_up.append((type(self).__name__, key))
        return by_name(self, key)

    monkeypatch.setattr(Expr, "__getattr__", counted)
    got = dask.compute(*outputs())
    assert looked_up == []
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(to_host(g), e)


@pytest.mark.parametrize("chunks", [(16, 8), (8, 8)])
def test_a_graph_cache_hit_compiles_no_tree_through_any_entry_point(monkeypatch, chunks):
    """Outputs built again whose graph is cached (the suite's plain calls) run it through every entry point without
    making and compiling a tree node of theirs (``dask.compute`` as ``gnp.fetch`` does: the graph looked up by the
    outputs' names); NumPy's values, on one block and on several."""
    from dask_gpunumeric.runtime import compile as _compile

    host = np.random.default_rng(8).random((16, 8))
    x = dask.persist(gnp.asarray(host, chunks=chunks))[0]
    m = host.max(axis=1, keepdims=True)
    e = np.exp(host - m)
    s = e.sum(axis=1, keepdims=True)
    entries = {"dask.compute": lambda a, b: dask.compute(a, b), "dask.compute of one": lambda a, b: dask.compute(a),
               "compute": lambda a, b: (a.compute(),), "fetch": lambda a, b: gnp.fetch((a, b)),
               "dask.persist": lambda a, b: gnp.fetch(dask.persist(a, b))}
    for _ in range(2):  # a tree on persisted inputs is cached from its second build on
        for run in entries.values():
            run(*_softmax_outputs(x))
    compiled: list = []
    compile_tree = _compile.compile_tree
    monkeypatch.setattr(_compile, "compile_tree", lambda tree: compiled.append(tree) or compile_tree(tree))
    for name, run in entries.items():
        got = run(*_softmax_outputs(x))
        assert compiled == [], name
        np.testing.assert_allclose(to_host(got[0]), e / s, rtol=1e-12)
        if len(got) == 2:
            np.testing.assert_allclose(to_host(got[1]), (m + np.log(s))[:, 0], rtol=1e-12)


@pytest.mark.parametrize("chunks", [(16, 8), (8, 8)])
def test_persisted_arrays_hold_the_node_their_constructor_builds(chunks):
    """``x.persist()``, ``dask.persist`` (on our scheduler, synchronous, with a callback) and ``dask.optimize`` give
    Arrays whose ``FromGraph`` node is the one its constructor builds from the same operands (name, token, metadata,
    inputs); values as NumPy's, computed again from the persisted blocks."""
    from dask_gpunumeric.expr import FromGraph

    host = np.random.default_rng(9).random((16, 8))
    x = dask.persist(gnp.asarray(host, chunks=chunks))[0]
    m = host.max(axis=1, keepdims=True)
    e = np.exp(host - m)
    s = e.sum(axis=1, keepdims=True)
    persisted = {"persist()": lambda a, b: (a.persist(), b.persist()), "dask.persist": lambda a, b: dask.persist(a, b),
                 "dask.persist synchronous": lambda a, b: dask.persist(a, b, scheduler="sync"),
                 "dask.persist with a callback": lambda a, b: _with_callback(lambda: dask.persist(a, b)),
                 "dask.optimize": lambda a, b: dask.optimize(a, b)}
    for name, persist in persisted.items():
        for array in persist(*_softmax_outputs(x)):
            node = array.expr
            generic = FromGraph(*node.operands)
            assert type(node) is FromGraph and node.operands == generic.operands, name
            assert (node._name, node.deterministic_token, node.chunks, node.dtype, node.backend, node._leaves.keys()) == \
                (generic._name, generic.deterministic_token, generic.chunks, generic.dtype, generic.backend,
                 generic._leaves.keys()), name
        a, b = gnp.fetch(persist(*_softmax_outputs(x)))
        np.testing.assert_allclose(a, e / s, rtol=1e-12)
        np.testing.assert_allclose(b, (m + np.log(s))[:, 0], rtol=1e-12)
    scaled = gnp.accelerate(lambda y, w: tuple(w * o for o in _softmax_outputs(y)))  # outputs of a call run now
    for w in (1.0, 2.5):
        outputs = scaled(x, w)
        for array in outputs:
            node, generic = array.expr, FromGraph(*array.expr.operands)
            assert type(node) is FromGraph and (node._name, node.deterministic_token, node.dtype) == \
                (generic._name, generic.deterministic_token, generic.dtype)
        a, b = gnp.fetch(outputs)
        np.testing.assert_allclose(a, w * e / s, rtol=1e-12)
        np.testing.assert_allclose(b, w * (m + np.log(s))[:, 0], rtol=1e-12)


def test_a_repeated_slice_builds_the_node_its_constructor_builds():
    """A slice met before on these chunks (stencil code repeats them) builds the ``Gather`` node that the generic
    constructor builds, name and operands alike, on arrays of any dtype (one plan for the chunks, the text of its
    operands written once per dtype); values as NumPy's through every entry point."""
    from dask_gpunumeric.expr import Gather

    host = np.arange(12 * 10).reshape(12, 10)
    for dtype in (np.float64, np.float32, np.int16, bool, np.complex64, np.float64):
        x = gnp.asarray(host.astype(dtype), chunks=(5, 4))
        for index in ((slice(None, -2), slice(1, -1)), (slice(2, None), slice(1, -1)), (Ellipsis, 3), 5):
            for _ in range(2):  # planned, then found
                piece = x[index]
                node = piece.expr
                generic = Gather(*node.operands)
                assert type(node) is Gather and node.operands == generic.operands
                assert (node._name, node.chunks, node.dtype) == (generic._name, generic.chunks, generic.dtype)
            assert_eq(piece, host.astype(dtype)[index])


def _softmax_outputs(x):
    m = gnp.max(x, axis=1, keepdims=True)
    e = gnp.exp(x - m)
    s = gnp.sum(e, axis=1, keepdims=True)
    return e / s, (m + gnp.log(s))[:, 0]


_ENTRY_POINTS = {
    "dask.compute": lambda a, b: dask.compute(a, b),
    "dask.compute of a list": lambda a, b: tuple(dask.compute([a, b])[0]),
    "dask.compute of each": lambda a, b: (dask.compute(a)[0], dask.compute(b)[0]),
    "synchronous": lambda a, b: dask.compute(a, b, scheduler="sync"),
    "threads": lambda a, b: dask.compute(a, b, scheduler="threads"),
    "unoptimized": lambda a, b: dask.compute(a, b, optimize_graph=False),
    "with a callback": lambda a, b: _with_callback(lambda: dask.compute(a, b)),
    "dask.persist": lambda a, b: gnp.fetch(dask.persist(a, b)),
    "dask.persist synchronous": lambda a, b: gnp.fetch(dask.persist(a, b, scheduler="sync")),
    "dask.persist with a callback": lambda a, b: gnp.fetch(_with_callback(lambda: dask.persist(a, b))),
    "dask.optimize": lambda a, b: dask.compute(*dask.optimize(a, b)),
}


def _with_callback(run):
    started: list = []
    with dask.callbacks.Callback(start=lambda dsk: started.append(1)):
        out = run()
    assert started
    return out


@pytest.mark.parametrize("chunks", [(64, 32), (16, 32)])
@pytest.mark.parametrize("entry", list(_ENTRY_POINTS))
def test_dask_compute_and_persist_of_arrays_alone_give_numpys_values(entry, chunks):
    """``dask.compute``/``dask.persist`` of gnp Arrays alone (the suite's plain calls), however called: NumPy's
    values, on one block and on several, on a graph compiled before too."""
    host = np.random.default_rng(5).random((64, 32))
    x = dask.persist(gnp.asarray(host, chunks=chunks))[0]
    m = host.max(axis=1, keepdims=True)
    e = np.exp(host - m)
    s = e.sum(axis=1, keepdims=True)
    for _ in range(2):
        a, b = _ENTRY_POINTS[entry](*_softmax_outputs(x))
        np.testing.assert_allclose(to_host(a), e / s, rtol=1e-12)
        np.testing.assert_allclose(to_host(b), (m + np.log(s))[:, 0], rtol=1e-12)


def test_dask_compute_of_arrays_among_other_collections():
    """A gnp Array computed and persisted together with a dask.array or a delayed value, either first: each
    value as computed alone. (Dask 2026.7.1 returns the results of several collections of one kind among
    others of graph-backed kinds in the wrong places, its own collections too: ``dask.compute(da_a, delayed,
    da_b)`` gives ``da_b``'s value second; such mixes are left out here.)"""
    import dask.array as da

    host = np.random.default_rng(6).random((16, 8))
    x = dask.persist(gnp.asarray(host, chunks=(8, 8)))[0]
    a, _ = _softmax_outputs(x)
    d = da.from_array(host, chunks=(4, 8)).sum(axis=0)
    later = dask.delayed(lambda v: v + 1)(2)
    expected = gnp.fetch(a)
    for got, (i, j) in ((dask.compute(a, d), (0, 1)), (dask.compute(d, a), (1, 0))):
        np.testing.assert_array_equal(to_host(got[i]), expected)
        np.testing.assert_allclose(np.asarray(got[j]), host.sum(axis=0), rtol=1e-12)
    got = dask.compute(later, a)
    assert got[0] == 3
    np.testing.assert_array_equal(to_host(got[1]), expected)
    pa, pd = dask.persist(a, d)
    assert isinstance(pa, gnp.Array) and isinstance(pd, da.Array)
    np.testing.assert_array_equal(gnp.fetch(pa), expected)
    np.testing.assert_allclose(np.asarray(pd.compute()), host.sum(axis=0), rtol=1e-12)


def test_dask_walks_none_of_our_trees_on_compute_and_persist(monkeypatch):
    """``dask.compute``/``dask.persist`` of Arrays alone: Dask's passes (simplify, tune, lower) meet our outputs as
    one node, whatever the depth of their trees: they ask our nodes the same few things for a tree of 10
    operations and of 400."""
    from dask_gpunumeric.expr import ArrayExpr

    host = np.random.default_rng(7).random((8, 4))
    x = dask.persist(gnp.asarray(host))[0]

    def outputs(depth):
        y = x
        for _ in range(depth):
            y = y * 0.999 + 0.001
        return gnp.sum(y, axis=1), y

    asked: list = []
    for name in ("dependencies", "_simplify_up", "_simplify_down", "simplify_once", "lower_once", "_lower",
                 "rewrite", "_tune_up", "_tune_down"):
        method = getattr(ArrayExpr, name)

        def counted(self, *args, _method=method, _name=name, **kwargs):
            if isinstance(self, ArrayExpr):
                asked.append(_name)
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(ArrayExpr, name, counted)
    counts = {}
    for depth in (10, 400):
        expected = gnp.fetch(outputs(depth))
        for entry in ("dask.compute", "dask.compute of each", "dask.persist synchronous"):
            asked.clear()
            got = _ENTRY_POINTS[entry](*outputs(depth))
            counts[depth, entry] = len(asked)
            for g, e in zip(got, expected):
                np.testing.assert_array_equal(to_host(g), e)
    for entry in ("dask.compute", "dask.compute of each", "dask.persist synchronous"):
        assert counts[10, entry] == counts[400, entry] <= 6, counts
_USER_EXPRESSIONS = '''
import math
import numpy as np
import dask_gpunumeric as gnp


def user_expressions():
    """Expressions as users write them (operators with Python and NumPy numbers, ufuncs, where, in-place updates),
    through the short build paths: one RK4 step, a Black-Scholes price, and the operands those paths treat apart."""
    u = gnp.asarray(np.linspace(0.5, 1.5, 12, dtype=np.float32), chunks=5)
    v = gnp.asarray(np.linspace(1.0, 2.0, 12, dtype=np.float32), chunks=5)
    n = gnp.asarray(np.arange(12), chunks=5)
    grid = gnp.asarray(np.ones((3, 12), np.float32), chunks=(2, 5))

    def rates(u, v):
        eaten = u * v / (1.0 + 0.5 * u)
        return 1.1 * u * (1.0 - u / 2.0) - 0.4 * eaten, 0.3 * eaten - 0.4 * v

    k1u, k1v = rates(u, v)
    k2u, k2v = rates(u + 0.025 * k1u, v + 0.025 * k1v)
    step = u + 0.05 / 6.0 * (k1u + 2.0 * k2u + k2u), v + 0.05 / 6.0 * (k1v + 2.0 * k2v)
    d1 = (gnp.log(u / v) + (0.02 + 0.5 * 0.3 * 0.3) * v) / (0.3 * gnp.sqrt(v))
    k = 1.0 / (1.0 + 0.2316419 * gnp.abs(d1))
    w = 0.3989422804014327 * gnp.exp(-0.5 * d1 * d1) * (k * (0.31938153 + k * -0.356563782))
    price = u * gnp.where(d1 > 0, 1.0 - w, w) - v * gnp.exp(-0.02 * v)
    x = u
    x += 1.0
    x *= v
    zeros = {"zero": u * 0.0, "negative zero": u * -0.0}
    others = [u + float("nan"), u - math.inf, 2.0 - u, u ** 2, u ** 0.5, 1 / u, u / 4.0, u / 3.0,
              n * 3 + 2 ** 40, n // 3, n % 4, n * 1.5, u * np.float32(2.5), u / np.float32(4), n * np.int64(3),
              u.astype(np.float64) * np.float64(-0.0), np.float32(2.5) - u, -u, ~(u > v), gnp.maximum(u, 1.5),
              gnp.where(u > v, u, -0.0), grid * u + 1.0, u.astype(np.float64) * u, x,
              gnp.random.default_rng(7).random(12, dtype=np.float32, chunks=5) * u,
              gnp.full((3, 12), 2.5, dtype=np.float32, chunks=(2, 5)) - grid, gnp.arange(12, chunks=5) + n]
    for _ in range(2):  # planned, then found (slices, rolls, reductions and products keep their plans and token texts)
        others += [u[1:-1], n[1:-1], grid[:, 1:-1], gnp.roll(u, 1), gnp.roll(n, 1), gnp.roll(u, -13),
                   gnp.roll(grid, 2, axis=1), gnp.roll(grid, 1, axis=-2), gnp.roll(u, 0),
                   gnp.sum(grid, axis=1, keepdims=True), gnp.max(grid, axis=1, keepdims=True),
                   gnp.max(grid, axis=-1, keepdims=True), gnp.sum(grid, axis=0), gnp.sum(u * v), gnp.sum(n),
                   gnp.sum(u, dtype=np.float64), gnp.min(n, axis=0), gnp.mean(grid, axis=1), gnp.mean(n),
                   gnp.std(u), gnp.var(u, ddof=1), gnp.var(u, ddof=True), gnp.var(u, ddof=1.0),
                   gnp.std(grid, axis=1, ddof=-0.0), gnp.std(grid, axis=1, ddof=0.0),
                   gnp.any(u > v, axis=0, keepdims=True), grid.T, grid.T @ grid, grid @ grid.T,
                   gnp.linalg.solve(grid @ grid.T + 3.0, grid[:, 1])]
    return {**zeros, **{str(k): a for k, a in enumerate([*step, price, *others])}}


def names(roots):
    """The names of every node under each of ``roots``, in a fixed order."""
    from dask_gpunumeric.expr.base import walk

    return {key: sorted(node._name for node in walk(root.expr)) for key, root in roots.items()}
'''


def test_names_are_the_constructors_and_the_same_in_another_process():
    """Nodes built on the short paths of the operations users write have the names (and metadata) the generic
    constructor gives them, and another process gives the same expressions the same names (the graph cache and
    ``accelerate`` key on them)."""
    import os
    import subprocess
    import sys

    from dask_gpunumeric.expr.base import walk

    scope: dict = {}
    exec(_USER_EXPRESSIONS, scope)  # noqa: S102 - the expressions the other process builds too
    roots = scope["user_expressions"]()
    assert roots["zero"].name != roots["negative zero"].name  # (equal floats of other bits)
    for root in roots.values():
        for node in walk(root.expr):
            generic = type(node)(*node.operands)
            assert (generic._name, generic.chunks, generic.dtype, generic.backend) == \
                (node._name, node.chunks, node.dtype, node.backend)
    script = _USER_EXPRESSIONS + "\nprint(repr(names(user_expressions())))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "GNP_BACKEND": BACKEND})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == repr(scope["names"](roots))


@pytest.mark.parametrize("entry", ["dask.compute", "dask.persist", "fetch"])
def test_repeated_calls_with_changed_scalars_and_inputs_give_numpys_values(entry):
    """The same function called again and again, as user code is (its nodes' tokens and its graph found where
    they were made before): a changed scalar or input is never served another call's graph, also after the kept
    tokens are dropped; each node named as its constructor names it."""
    from dask_gpunumeric.expr import tokens
    from dask_gpunumeric.expr.base import walk

    def price(s, k, rate):
        d = (gnp.log(s / k) + rate) / gnp.sqrt(k)
        return s * gnp.exp(-rate * d) - k, gnp.where(d > 0, 1.0 - d, d)

    def reference(s, k, rate):
        d = (np.log(s / k) + rate) / np.sqrt(k)
        return s * np.exp(-rate * d) - k, np.where(d > 0, 1.0 - d, d)

    rng = np.random.default_rng(11)
    hosts = [(rng.uniform(1.0, 2.0, 40), rng.uniform(1.0, 2.0, 40)) for _ in range(2)]
    inputs = [dask.persist(gnp.asarray(s, chunks=16), gnp.asarray(k, chunks=16)) for s, k in hosts]
    run = {"dask.compute": lambda a, b: dask.compute(a, b), "dask.persist": lambda a, b: gnp.fetch(dask.persist(a, b)),
           "fetch": lambda a, b: gnp.fetch((a, b))}[entry]
    for clear in (False, True, False):
        if clear:
            tokens.TOKENS.clear()
        for (s, k), (hs, hk) in zip(inputs, hosts):
            for rate in (0.5, 0.25, 0.5, -0.0, 0.0):
                outputs = price(s, k, rate)
                for got, want in zip(run(*outputs), reference(hs, hk, rate)):
                    np.testing.assert_allclose(to_host(got), want, rtol=1e-12)
                for node in walk(outputs[0].expr):
                    assert node._name == type(node)(*node.operands)._name


def test_long_token_texts_are_not_kept():
    """Nodes whose token texts are long (the chunks of thousands of blocks) are named without keeping their texts,
    so that the kept tokens stay small; named as their constructors name them, NumPy's values."""
    from dask_gpunumeric.expr import tokens

    x = gnp.ones(4096, chunks=2) * 2.0  # 2,048 blocks
    assert all(len(text) <= tokens._KEPT_TEXT_LENGTH for text in tokens.TOKENS)
    assert x.expr._name == type(x.expr)(*x.expr.operands)._name
    np.testing.assert_array_equal(gnp.fetch(x[:5]), np.full(5, 2.0))


_blocks_made: list[int] = []


def _counted(block):
    _blocks_made.append(1)
    return block * 2.0


@pytest.mark.parametrize("entry", ["gnp.compute", "gnp.persist", "compute", "persist", "fetch", "dask.compute"])
def test_outputs_of_the_same_names_on_persisted_or_lazy_inputs_get_their_own_graphs(entry):
    """Outputs rebuilt on a persisted input and on the lazy expression it was persisted from have the same names:
    each call, alternating, runs its own graph (the persisted blocks are not made again, the lazy input is); other
    dtypes, shapes and scalars get theirs too; NumPy's values through every entry point."""
    runs = {"gnp.compute": lambda a, b: gnp.compute(a, b), "gnp.persist": lambda a, b: gnp.fetch(gnp.persist(a, b)),
            "compute": lambda a, b: (a.compute(),), "persist": lambda a, b: (gnp.fetch(a.persist()),),
            "fetch": lambda a, b: gnp.fetch((a, b)), "dask.compute": lambda a, b: dask.compute(a, b)}
    run = runs[entry]
    for shape, dtype, scale in (((16, 8), np.float64, 1.5), ((16, 8), np.float32, 1.5), ((12, 6), np.float64, 1.5),
                                ((16, 8), np.float64, 2.5)):
        host = np.random.default_rng(3).random(shape).astype(dtype)
        lazy = gnp.map_blocks(_counted, gnp.asarray(host, chunks=(8, 8)))
        persisted = lazy.persist()
        m = (host * 2.0).max(axis=1, keepdims=True)
        expected = (np.exp(host * 2.0 - m) * scale, (m + scale)[:, 0])
        for x, made in ((persisted, 0), (lazy, 2), (persisted, 0), (persisted, 0), (lazy, 2), (lazy, 2)):
            m_ = gnp.max(x, axis=1, keepdims=True)
            outputs = (gnp.exp(x - m_) * scale, (m_ + scale)[:, 0])
            _blocks_made.clear()
            got = run(*outputs)
            assert len(_blocks_made) == made, (shape, dtype, scale)
            for g, want in zip(got, expected):
                assert to_host(g).dtype == want.dtype
                np.testing.assert_allclose(to_host(g), want, rtol=1e-6 if dtype == np.float32 else 1e-12)
