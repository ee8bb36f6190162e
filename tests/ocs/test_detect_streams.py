"""Reduced statistics and count streams (ocs.detect.streams), against hand sums and closed
forms."""

import numpy as np
import pytest
from scipy.special import rel_entr

from trainfabric.errors import ConfigError
from trainfabric.ocs.detect.detectors import reduce_counts
from trainfabric.ocs.detect.streams import (
    multinomial_stream,
    planted_change,
    slot_batches,
    top_pairs,
)

M = np.array([[9, 1, 2], [3, 9, 4], [5, 6, 9]], float)  # the diagonal is ignored


def test_reductions_by_hand():
    assert reduce_counts(M, "pairs").tolist() == [1, 2, 3, 4, 5, 6]
    assert reduce_counts(M, "marginals").tolist() == [3, 7, 11]
    assert reduce_counts(M, "marginals", axis="dst").tolist() == [8, 7, 6]
    pairs = top_pairs(M, 2)
    assert pairs.tolist() == [[2, 1], [2, 0]]  # 6 then 5; the diagonal never counts
    assert reduce_counts(M, "topr", pairs=pairs).tolist() == [6, 5, 10]
    g = np.array([[0, -1, 2], [-3, 0, 1], [1, 1, 0]], float)
    assert reduce_counts(M, "gradient", gradient=g).tolist() == [4, 17]
    assert reduce_counts(M, "gradient", gradient=g, level=1.5).tolist() == [19, 2]
    # off-diagonal gradients -1, 2, -3, 1, 1, 1: the 0.3-quantile is 0 -> pairs below it
    assert reduce_counts(M, "gradient", gradient=g, quantile=0.3).tolist() == [4, 17]


def test_reductions_batch_and_total():
    rng = np.random.default_rng(0)
    batch = rng.integers(0, 50, (4, 5, 6, 6)).astype(float)
    pairs = top_pairs(batch[0, 0], 5)
    grad = rng.normal(size=(6, 6))
    off_total = batch.sum((-2, -1)) - np.trace(batch, axis1=-2, axis2=-1)
    for mode, kw in [
        ("pairs", {}),
        ("marginals", {}),
        ("topr", {"pairs": pairs}),
        ("gradient", {"gradient": grad}),
    ]:
        out = reduce_counts(batch, mode, **kw)
        assert out.shape[:2] == (4, 5)
        np.testing.assert_allclose(out.sum(-1), off_total)
        one = reduce_counts(batch[1, 2], mode, **kw)
        np.testing.assert_array_equal(out[1, 2], one)


def test_reduction_errors_name_the_field():
    for args, kw, field in [
        ((np.ones(3), "pairs"), {}, "matrix"),
        ((-M, "pairs"), {}, "matrix"),
        ((M, "nope"), {}, "mode"),
        ((M, "marginals"), {"axis": "x"}, "axis"),
        ((M, "topr"), {}, "pairs"),
        ((M, "topr"), {"pairs": [[0, 0]]}, "pairs"),
        ((M, "topr"), {"pairs": [[0, 1], [0, 1]]}, "pairs"),
        ((M, "topr"), {"pairs": [[0, 3]]}, "pairs"),
        ((M, "gradient"), {}, "gradient"),
        ((M, "gradient"), {"gradient": np.ones((2, 2))}, "gradient"),
        ((M, "gradient"), {"gradient": np.ones((3, 3))}, "gradient"),
        ((M, "gradient"), {"gradient": np.eye(3), "quantile": 1.0}, "quantile"),
    ]:
        with pytest.raises(ConfigError, match=f"^{field}"):
            reduce_counts(*args, **kw)


def test_planted_change_has_the_requested_kl():
    rng = np.random.default_rng(1)
    p0 = rng.dirichlet(np.ones(12))
    mask = np.arange(12) < 3
    for kl in (1e-4, 0.01, 0.3):
        p1 = planted_change(p0, mask, kl)
        assert rel_entr(p1, p0).sum() == pytest.approx(kl, rel=1e-10)
        ratio = p1 / p0
        assert np.allclose(ratio[~mask], ratio[~mask][0])  # the rest keeps its proportions
        assert (ratio[mask] > ratio[~mask][0]).all()
    with pytest.raises(ConfigError, match="^kl"):
        planted_change(p0, mask, -np.log(p0[mask].sum()) + 0.1)


def test_streams_follow_p0_then_p1():
    rng = np.random.default_rng(2)
    p0, p1 = np.array([0.7, 0.2, 0.1]), np.array([0.1, 0.2, 0.7])
    x = multinomial_stream(p0, p1, 100, 500, 200, rng)
    assert x.shape == (200, 3)
    np.testing.assert_allclose(x[:100].sum(0) / x[:100].sum(), p0, atol=0.01)
    np.testing.assert_allclose(x[100:].sum(0) / x[100:].sum(), p1, atol=0.01)
    assert x.sum(1).std() > 5  # Poisson totals (sd ~ 22)
    fixed = multinomial_stream(p0, p1, 10, 37, 20, rng, poisson=False)
    assert (fixed.sum(1) == 37).all()
    batch = next(slot_batches(p0, p1, 0, 10, 6, rng))
    assert batch.shape == (6, 3)
    with pytest.raises(ConfigError, match="^p1"):
        next(slot_batches(p0, [1, 1], 0, 10, 1, rng))
    with pytest.raises(ConfigError, match="^n_per_slot"):
        next(slot_batches(p0, p1, 0, 0, 1, rng))
