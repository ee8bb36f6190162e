"""HiGHS through highspy's public API: the integer programs of the OCS pillar.

:func:`integer_program` solves the small all-integer programs of the rounding and the
per-OCS decomposition; :func:`quiet_highs` gives the solver object :mod:`.milp` builds its
exact model on. HiGHS runs with ``threads=1`` and ``random_seed=0`` (same input, same
answer). highspy is used directly rather than through ``scipy.optimize.milp``: importing
``scipy.optimize`` costs a command-line plan about 0.3 s of its 2 s start-up budget.
"""

from __future__ import annotations

import os
import sys

import highspy
import numpy as np
import scipy.sparse as sp


def quiet_highs() -> highspy.Highs:
    """A ``highspy.Highs`` whose construction prints nothing.

    highspy's public ``Highs`` prints the HiGHS banner on C-level stdout the first time one is
    constructed in a process (when it installs its callbacks, before ``output_flag`` can be
    set), which would corrupt ``--json`` output and add lines to a one-line error. File
    descriptor 1 points at ``os.devnull`` for the duration of the construction.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        return highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


_INTEGRAL_TOL = 1e-9  # an LP optimum this close to integers is taken as the integer optimum


def integer_program(
    c: np.ndarray,
    a: sp.csr_matrix,
    row_lower: np.ndarray,
    row_upper: np.ndarray,
    upper: np.ndarray,
    time_limit_s: float,
    mip_rel_gap: float,
) -> np.ndarray | None:
    """``min c·x  s.t.  row_lower <= A x <= row_upper,  0 <= x <= upper,  x integer``.

    Returns the best integer point HiGHS found within ``time_limit_s`` (seconds), stopping at
    relative gap ``mip_rel_gap``; None when it found none (infeasible, or out of time before
    a first point). Infinite row bounds are allowed.

    The LP relaxation is solved first (dual simplex, a vertex): when that optimum is integral
    (every entry within ``_INTEGRAL_TOL`` of an integer, rounded to it) it is an optimum of
    the integer program, and the branch and bound is skipped. On the residual b-matchings of
    the rounding this holds about four times in five and costs a third of a MIP solve.
    """
    a = sp.csr_matrix(a)
    n_rows, n_cols = a.shape
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n_cols, n_rows
    lp.sense_ = highspy.ObjSense.kMinimize
    lp.col_cost_ = np.asarray(c, dtype=float)
    lp.col_lower_ = np.zeros(n_cols)
    lp.col_upper_ = np.asarray(upper, dtype=float)
    lp.row_lower_ = np.asarray(row_lower, dtype=float)
    lp.row_upper_ = np.asarray(row_upper, dtype=float)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n_cols, n_rows
    lp.a_matrix_.start_ = a.indptr.astype(np.int32)
    lp.a_matrix_.index_ = a.indices.astype(np.int32)
    lp.a_matrix_.value_ = a.data.astype(float)
    h = quiet_highs()
    for name, value in (
        ("output_flag", False),
        ("threads", 1),
        ("random_seed", 0),
        ("time_limit", float(time_limit_s)),
        ("mip_rel_gap", float(mip_rel_gap)),
    ):
        h.setOptionValue(name, value)
    h.passModel(lp)
    h.run()
    if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
        x = np.asarray(h.getSolution().col_value, dtype=float)
        near = np.round(x)
        if np.all(np.abs(x - near) <= _INTEGRAL_TOL):
            return near
    lp.integrality_ = [highspy.HighsVarType.kInteger] * n_cols
    h.passModel(lp)
    h.run()
    if h.getInfo().primal_solution_status != highspy.kSolutionStatusFeasible:
        return None
    return np.asarray(h.getSolution().col_value, dtype=float)
