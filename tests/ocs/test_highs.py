"""``integer_program``: the optimum of small random integer programs, against enumeration.

The LP-first shortcut returns the LP relaxation's vertex when it is integral; these programs
(b-matchings on random multigraphs, and general 0/1 rows with both kinds of optimum) check
that the objective always equals the exact optimum found by enumerating every integer point.
"""

import itertools

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.ocs.highs import integer_program


def _enumerate(c, a, lo, hi, upper):
    """The least ``c·x`` over the integer points of the box that satisfy the rows, or None."""
    best = None
    for x in itertools.product(*(range(int(u) + 1) for u in upper)):
        x = np.array(x, dtype=float)
        ax = a @ x
        if np.all(ax >= lo - 1e-9) and np.all(ax <= hi + 1e-9):
            v = float(c @ x)
            best = v if best is None else min(best, v)
    return best


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n_cols=st.integers(1, 7), n_rows=st.integers(1, 4))
def test_integer_program_reaches_the_enumerated_optimum(seed, n_cols, n_rows):
    rng = np.random.default_rng(seed)
    a = (rng.random((n_rows, n_cols)) < 0.6).astype(float)
    upper = rng.integers(1, 3, n_cols).astype(float)
    point = np.minimum(rng.integers(0, 3, n_cols), upper)
    rhs = a @ point  # feasible by construction: ``point`` satisfies every row
    lo = np.where(rng.random(n_rows) < 0.5, rhs, -np.inf)
    c = rng.normal(size=n_cols).round(2)  # ties happen, fractional LP vertices too
    x = integer_program(c, sp.csr_matrix(a), lo, rhs, upper, 10.0, mip_rel_gap=0.0)
    want = _enumerate(c, a, lo, rhs, upper)
    assert x is not None
    np.testing.assert_array_equal(x, np.round(x))
    assert np.all(a @ x <= rhs + 1e-9) and np.all(a @ x >= lo - 1e-9)
    assert np.all((x >= 0) & (x <= upper))
    assert float(c @ x) == want or abs(float(c @ x) - want) <= 1e-9 * max(1.0, abs(want))


def test_a_fractional_relaxation_still_gets_the_integer_optimum():
    """A triangle with every degree 1 and unit weights: the LP optimum is x = 1/2 on every
    edge (value -1.5), no integer point meets every degree, so relaxing the degrees to <= 1
    the integer optimum is one edge (-1): the LP vertex is fractional, the MIP must run."""
    a = sp.csr_matrix(np.array([[1, 1, 0], [1, 0, 1], [0, 1, 1]], dtype=float))
    x = integer_program(-np.ones(3), a, np.full(3, -np.inf), np.ones(3), np.ones(3), 10.0, 0.0)
    assert float(-x.sum()) == -1.0
