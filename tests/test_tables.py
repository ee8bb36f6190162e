"""Terminal tables that fit (trainfabric.tables): number formats, and the table turning into
one block per record when it would not fit."""

import io

import numpy as np
import pytest
from rich.console import Console

from trainfabric.tables import Col, fmt_number, print_records, table_width


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (8819, "8,819"),
        (np.int64(8819), "8,819"),
        (3.194217, "3.194"),
        (0.028852549, "0.02885"),
        (1234567.8, "1,234,568"),
        (8.246e11, "8.246e+11"),
        (2.5e-7, "2.500e-07"),
        (0.0, "0"),
        (None, "-"),
        (True, "True"),
        (float("nan"), "nan"),
    ],
)
def test_numbers_read_as_a_person_writes_them(value, text):
    assert fmt_number(value) == text


ROWS = [{"mode": "adaptive_tokens", "iteration_s": 3.194, "bytes": 8.246e11, "requests": 8819}]
COLS = [Col("mode"), Col("iteration_s", "iteration", "s"), Col("bytes", unit="B"), Col("requests")]


def printed(width: int, wide: bool = False) -> str:
    buf = io.StringIO()
    print_records(Console(file=buf, width=width), ROWS, COLS, "t", wide=wide)
    return buf.getvalue()


def test_a_table_that_fits_prints_as_a_table_with_full_headers():
    text = printed(table_width(ROWS, COLS))
    assert "iteration (s)" in text and "adaptive_tokens" in text and "┃" in text


def test_a_table_too_wide_prints_one_block_per_record_and_no_cut_header():
    text = printed(table_width(ROWS, COLS) - 1)
    assert "┃" not in text and "mode: adaptive_tokens" in text
    assert "iteration (s)" in text and "8,819" in text and "…" not in text
    assert max(len(line) for line in text.splitlines()) <= table_width(ROWS, COLS)


def test_wide_forces_the_whole_table_past_the_terminal():
    text = printed(20, wide=True)
    assert "┃" in text and "iteration (s)" in text and "adaptive_tokens" in text
