"""Collective flow lists against textbook byte and step counts."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.workloads import collectives as c


def sent_per_rank(steps, ranks):
    out = dict.fromkeys(ranks, 0.0)
    for s in steps:
        for u, b in zip(s.src.tolist(), s.bytes.tolist(), strict=True):
            out[u] += b
    return out


def received_per_rank(steps, ranks):
    out = dict.fromkeys(ranks, 0.0)
    for s in steps:
        for v, b in zip(s.dst.tolist(), s.bytes.tolist(), strict=True):
            out[v] += b
    return out


@given(st.integers(2, 40), st.floats(1.0, 1e10))
def test_ring_all_reduce_textbook(n, size):
    ranks = list(range(100, 100 + n))
    steps = c.ring_all_reduce(ranks, size)
    assert len(steps) == 2 * (n - 1)
    for s in steps:  # every step is the ring-successor permutation
        assert sorted(s.src.tolist()) == ranks and sorted(s.dst.tolist()) == ranks
        assert all((d - 100) == (u - 100 + 1) % n for u, d in zip(s.src, s.dst, strict=True))
    for r in ranks:
        assert sent_per_rank(steps, ranks)[r] == pytest.approx(2 * (n - 1) / n * size)
        assert received_per_rank(steps, ranks)[r] == pytest.approx(2 * (n - 1) / n * size)


@given(st.integers(1, 6), st.floats(1.0, 1e10))
def test_halving_doubling_textbook(log_n, size):
    n = 2**log_n
    ranks = list(range(n))
    steps = c.halving_doubling_all_reduce(ranks, size)
    assert len(steps) == 2 * log_n
    rs = c.halving_doubling_reduce_scatter(ranks, size)
    partners = [int(s.dst[0] ^ s.src[0]) for s in rs]
    assert partners == [n >> (j + 1) for j in range(log_n)]  # distance halves each step
    for s in steps:  # pairwise exchanges: dst(dst(i)) == i
        m = dict(zip(s.src.tolist(), s.dst.tolist(), strict=True))
        assert all(m[m[i]] == i for i in ranks)
    for r in ranks:
        assert sent_per_rank(steps, ranks)[r] == pytest.approx(2 * (n - 1) / n * size)


@given(st.integers(2, 20), st.floats(1.0, 1e9))
def test_reduce_scatter_and_all_gather(n, size):
    for fn in (c.ring_reduce_scatter, c.ring_all_gather):
        steps = fn(range(n), size)
        assert len(steps) == n - 1
        assert sum(s.total_bytes for s in steps) == pytest.approx((n - 1) * size)


@given(st.integers(2, 12), st.floats(1.0, 1e9))
def test_all_to_all_uniform_and_stepped(n, size):
    one = c.all_to_all(range(n), size)
    stepped = c.all_to_all(range(n), size, stepped=True)
    assert len(one) == 1 and one[0].src.size == n * (n - 1)
    assert len(stepped) == n - 1
    assert all(sorted(s.dst.tolist()) == list(range(n)) for s in stepped)
    total = (n - 1) / n * size * n
    assert one[0].total_bytes == pytest.approx(total)
    assert sum(s.total_bytes for s in stepped) == pytest.approx(total)
    assert not np.any(one[0].src == one[0].dst)


def test_all_to_all_matrix_skips_diagonal():
    m = np.arange(9.0).reshape(3, 3)
    (s,) = c.all_to_all([5, 6, 7], matrix=m)
    assert s.total_bytes == m.sum() - np.trace(m)
    got = {(int(u), int(v)): b for u, v, b in zip(s.src, s.dst, s.bytes, strict=True)}
    assert got[(5, 7)] == m[0, 2] and got[(7, 6)] == m[2, 1]


def test_errors():
    with pytest.raises(ConfigError):
        c.halving_doubling_all_reduce(range(6), 1.0)
    with pytest.raises(ConfigError):
        c.ring_all_reduce([1, 1, 2], 1.0)
    with pytest.raises(ConfigError):
        c.point_to_point(3, 3, 1.0)
    with pytest.raises(ConfigError):
        c.all_to_all(range(3), matrix=np.ones((2, 2)))
    (p,) = c.point_to_point(0, 4, 10.0)
    assert (p.src[0], p.dst[0], p.bytes[0]) == (0, 4, 10.0)
