"""NumPy's legacy ``numpy.random`` functions on gnp.random (one module-level Philox Generator: after
``seed(s)`` they give what ``default_rng(s)`` gives, call for call), ``Generator.choice/permutation/shuffle``
and ``integers`` over spans wider than 2**63 (unbiased), with NumPy's shapes, dtypes and errors."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_eq

import dask_gpunumeric as gnp


@pytest.mark.parametrize("seed", [0, 12345])
def test_legacy_functions_draw_from_the_seeded_stream(seed):
    gnp.random.seed(seed)
    legacy = [gnp.random.rand(3, 4), gnp.random.randn(5), gnp.random.normal(2.0, 3.0, (2, 2)),
              gnp.random.uniform(-1.0, 1.0, 6), gnp.random.randint(0, 10, 7), gnp.random.random((2, 3)),
              gnp.random.random_sample(4)]
    g = gnp.random.default_rng(seed)
    same = [g.random((3, 4)), g.standard_normal(5), g.normal(2.0, 3.0, (2, 2)), g.uniform(-1.0, 1.0, 6),
            g.integers(0, 10, 7), g.random((2, 3)), g.random(4)]
    np.random.seed(seed)
    numpy_legacy = [np.random.rand(3, 4), np.random.randn(5), np.random.normal(2.0, 3.0, (2, 2)),
                    np.random.uniform(-1.0, 1.0, 6), np.random.randint(0, 10, 7), np.random.random((2, 3)),
                    np.random.random_sample(4)]
    for ours, expected, like in zip(legacy, same, numpy_legacy):
        assert ours.shape == like.shape and ours.dtype == like.dtype
        assert_eq(ours, gnp.fetch(expected))
    gnp.random.seed(seed)
    assert_eq(gnp.random.rand(3, 4), gnp.fetch(legacy[0]))  # reseeding repeats the stream
    assert gnp.random.rand().shape == () and gnp.random.randn().dtype == np.float64
    with pytest.raises(ValueError):
        gnp.random.randint(5, 5)
    with pytest.raises(ValueError):
        np.random.randint(5, 5)


def test_choice():
    g = gnp.random.default_rng(7)
    population = np.array([10.0, 20.0, 30.0, 40.0])
    for a in (5, population, gnp.asarray(population, chunks=2)):
        n = 5 if isinstance(a, int) else 4
        for size in (None, 6, (2, 3)):
            ours = g.choice(a, size)
            ref = np.random.default_rng(7).choice(np.asarray(a) if not isinstance(a, int) else a, size)
            assert ours.shape == np.shape(ref) and ours.dtype == np.asarray(ref).dtype
            values = np.atleast_1d(gnp.fetch(ours))
            assert np.isin(values, np.arange(n) if isinstance(a, int) else population).all()
    picks = gnp.fetch(g.choice(8, 8, replace=False))
    np.testing.assert_array_equal(np.sort(picks), np.arange(8))
    weights = np.array([0.5, 0.0, 0.25, 0.25])
    drawn = gnp.fetch(g.choice(population, 4000, p=weights))
    counts = np.array([(drawn == v).sum() for v in population])
    assert counts[1] == 0 and abs(counts[0] / 4000 - 0.5) < 0.05 and abs(counts[2] / 4000 - 0.25) < 0.05
    grid = np.arange(12.0).reshape(4, 3)
    rows = gnp.fetch(g.choice(gnp.asarray(grid, chunks=2), 5, axis=0))
    assert rows.shape == (5, 3) and all(any((r == q).all() for q in grid) for r in rows)
    for bad in (lambda m: m.choice(3, 4, replace=False), lambda m: m.choice(0, 2),
                lambda m: m.choice(3, p=[0.5, 0.6, -0.1]), lambda m: m.choice(3, p=[0.5, 0.5])):
        with pytest.raises(ValueError):
            bad(np.random.default_rng(0))
        with pytest.raises(ValueError):
            bad(g)


def test_permutation_and_shuffle():
    g = gnp.random.default_rng(3)
    perm = gnp.fetch(g.permutation(20))
    np.testing.assert_array_equal(np.sort(perm), np.arange(20))
    assert not (perm == np.arange(20)).all()
    grid = np.arange(24.0).reshape(6, 4)
    rows = gnp.fetch(g.permutation(gnp.asarray(grid, chunks=(4, 3))))
    np.testing.assert_array_equal(rows[np.argsort(rows[:, 0])], grid)
    columns = gnp.fetch(g.permutation(grid, axis=1))
    np.testing.assert_array_equal(np.sort(columns, axis=1), grid)
    x = gnp.asarray(grid, chunks=3)
    assert g.shuffle(x) is None
    shuffled = gnp.fetch(x)
    np.testing.assert_array_equal(shuffled[np.argsort(shuffled[:, 0])], grid)
    with pytest.raises(TypeError):
        g.shuffle([1, 2, 3])


@pytest.mark.parametrize("dtype, low, high", [
    (np.uint64, 0, 2**63 + 2**62), (np.int64, -2**63, 2**63 - 2**61), (np.uint64, 0, 2**64),
])
def test_integers_unbiased_for_wide_spans(dtype, low, high):
    draws = gnp.fetch(gnp.random.default_rng(11).integers(low, high, 6000, dtype=dtype))
    assert draws.dtype == dtype
    values = draws.astype(object)
    assert all(low <= v < high for v in values)
    span = high - low
    # the lowest 2**64 - span values of the span are the ones a plain modulo would draw twice as often
    low_part = (2**64 - span) / span if span < 2**64 else 0.25
    share = np.mean([v - low < (2**64 - span if span < 2**64 else 2**62) for v in values])
    assert abs(share - low_part) < 0.03, (share, low_part)
