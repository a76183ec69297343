"""Plain code called again and again on the same Arrays: its elementwise nodes are the ones made before
(``api.kept_nodes``), never another call's where an input, a number or a dtype changed, and never holding an input
alive that the user let go."""
from __future__ import annotations

import gc
import weakref

import dask
import numpy as np
import pytest

import dask_gpunumeric as gnp
from conftest import to_host


def _price(xp, s, k, t, rate):
    """Black-Scholes' call with an erf-polynomial normal CDF (sign, abs, exp, Horner steps), as users write it."""
    def cdf(x):
        a = xp.abs(x * 0.7071067811865476)
        u = 1.0 / (1.0 + 0.3275911 * a)
        y = 1.0 - ((((1.061405429 * u - 1.453152027) * u + 1.421413741) * u - 0.284496736) * u + 0.254829592) * u \
            * xp.exp(-a * a)
        return 0.5 * (1.0 + xp.sign(x) * y)

    d1 = (xp.log(s / k) + (rate + 0.045) * t) / (0.3 * xp.sqrt(t))
    d2 = d1 - 0.3 * xp.sqrt(t)
    return s * cdf(d1) - k * xp.exp(-rate * t) * cdf(d2), xp.where(d1 > 0, d1, -d2)


def _hosts(dtype=np.float32, n=64, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.uniform(lo, hi, n).astype(dtype) for lo, hi in ((5.0, 30.0), (1.0, 100.0), (0.25, 10.0)))


def _bits(values):
    return [to_host(v).tobytes() for v in values]


ENTRIES = ["gnp.compute", "gnp.persist", "dask.compute", "fetch"]


@pytest.mark.parametrize("entry", ENTRIES)
def test_repeated_calls_give_the_first_calls_bits_and_numpys_values(entry):
    """The same function on the same persisted Arrays, six times: from the third call on its nodes are those made
    before; every call's outputs are the first call's, bit for bit, and NumPy's values, through every entry point."""
    run = {"gnp.compute": lambda *o: gnp.compute(*o), "gnp.persist": lambda *o: gnp.fetch(gnp.persist(*o)),
           "dask.compute": lambda *o: dask.compute(*o), "fetch": lambda *o: gnp.fetch(o)}[entry]
    hosts = _hosts(seed=10 + sorted(ENTRIES).index(entry))  # (inputs of names of their own: no other test's nodes)
    arrays = dask.persist(*(gnp.asarray(h, chunks=16) for h in hosts))
    want = _price(np, *hosts, 0.02)
    gc.collect()  # (earlier tests' Arrays freed now, not amid the calls: their drop would drop these nodes too)
    first, nodes = None, []
    for _ in range(6):
        outputs = _price(gnp, *arrays, 0.02)
        nodes.append(outputs[0].expr)
        got = _bits(run(*outputs))
        first = first or got
        assert got == first
    assert nodes[-1] is nodes[-2] is nodes[-3]  # (kept: else this test would test nothing new)
    for g, w in zip(run(*_price(gnp, *arrays, 0.02)), want):
        np.testing.assert_allclose(to_host(g), w, rtol=2e-6, atol=2e-6)


def test_changed_numbers_dtypes_and_inputs_are_never_served_kept_nodes():
    """Between calls kept from before: other numbers (zeros of either sign, NaN), another dtype, other data of the same
    shape, an input rebound in place (setitem, ``out=``, ``fill``) each give their own values, as NumPy's."""
    hosts = _hosts()
    s, k, t = dask.persist(*(gnp.asarray(h, chunks=16) for h in hosts))

    def check(arrays, host_arrays, rate):
        for _ in range(3):  # (made, kept, given again)
            got = gnp.compute(*_price(gnp, *arrays, rate))
        with np.errstate(all="ignore"):
            want = _price(np, *host_arrays, rate)
        for g, w in zip(got, want):
            assert to_host(g).dtype == w.dtype
            np.testing.assert_allclose(to_host(g), w, rtol=2e-6, atol=2e-6)

    for rate in (0.02, 0.05, 0.0, -0.0, 0.02, float("nan"), np.float32(0.03), 0.02):
        check((s, k, t), hosts, rate)
    hosts64 = _hosts(np.float64)
    check(dask.persist(*(gnp.asarray(h, chunks=16) for h in hosts64)), hosts64, 0.02)
    other = _hosts(seed=1)
    check(dask.persist(*(gnp.asarray(h, chunks=16) for h in other)), other, 0.02)
    check((s, k, t), hosts, 0.02)
    s[3:9] = 7.5  # setitem rebinds s: the nodes kept over its old node are not its
    hs = hosts[0].copy()
    hs[3:9] = 7.5
    check((s, k, t), (hs, *hosts[1:]), 0.02)
    gnp.multiply(k, 2.0, out=k)
    check((s, k, t), (hs, hosts[1] * np.float32(2.0), hosts[2]), 0.02)
    t.fill(1.5)
    check((s, k, t), (hs, hosts[1] * np.float32(2.0), np.full_like(hosts[2], 1.5)), 0.02)


def test_the_promotion_guard_still_speaks_on_every_call():
    """An operation that widens its array's dtype is checked on every call, kept nodes or not."""
    s, k, t = dask.persist(*(gnp.asarray(h, chunks=16) for h in _hosts(seed=20)))
    for _ in range(3):
        gnp.compute(*_price(gnp, s, k, t, 0.02))
    for _ in range(3):
        with gnp.config.set(guards="error"), pytest.raises(TypeError, match="promoted"):
            _price(gnp, s, k, t, np.float64(0.02))


def test_kept_nodes_hold_no_input_the_user_let_go():
    """Inputs freed or rebound by the user are not held by kept nodes: their blocks are freed at once (no garbage
    collection needed), whatever was computed on them before."""
    gc.disable()
    try:
        hosts = _hosts(seed=30)
        arrays = list(dask.persist(*(gnp.asarray(h, chunks=16) for h in hosts)))
        for _ in range(4):
            gnp.compute(*_price(gnp, *arrays, 0.02))
        freed = weakref.ref(arrays[0].expr)
        del arrays[0]
        assert freed() is None
        rebound = weakref.ref(arrays[1].expr)
        arrays[1].fill(2.0)  # (its old node held by no Array of the user's)
        assert rebound() is None
    finally:
        gc.enable()


def test_every_node_type_compares_by_identity():
    """Kept nodes are given again only for the same operand objects, which ``_short_path`` compares as lists of nodes
    (``==``): no node type may define an equality of its own."""
    import dask_gpunumeric  # noqa: F401 - every node type imported
    from dask_gpunumeric.expr import ArrayExpr

    types, seen = [ArrayExpr], []
    while types:
        cls = types.pop()
        seen.append(cls)
        types.extend(cls.__subclasses__())
    assert len(seen) > 20
    assert [c for c in seen if c.__eq__ is not object.__eq__] == []


def test_inputs_made_on_every_call_give_numpys_values_call_after_call():
    """A function that makes an input of its own on each call (an Array freed at its end: kept nodes over it dropped,
    then never tried again), with inputs of the caller's, called more times than kept nodes are ever dropped: the
    first call's bits, NumPy's values."""
    hosts = _hosts(seed=40)
    weights = np.linspace(0.5, 1.5, 64, dtype=np.float32)
    s, k, t = dask.persist(*(gnp.asarray(h, chunks=16) for h in hosts))
    want = [w * weights for w in _price(np, *hosts, 0.02)]
    first = None
    for _ in range(24):
        got = _bits(gnp.compute(*(o * gnp.asarray(weights, chunks=16) for o in _price(gnp, s, k, t, 0.02))))
        first = first or got
        assert got == first
    for g, w in zip(gnp.compute(*(o * gnp.asarray(weights, chunks=16) for o in _price(gnp, s, k, t, 0.02))), want):
        np.testing.assert_allclose(to_host(g), w, rtol=2e-6, atol=2e-6)
