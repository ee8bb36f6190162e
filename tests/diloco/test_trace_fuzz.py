"""Fuzzing the trace CSV reader (Azure and generic layouts): mutations of valid traces and
random bytes either load correctly or raise a TrainfabricError of field ``trace`` naming the
file, the line and (for a bad value) the column; a value no column accepts put in a cell must
be refused at exactly that line and column."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.diloco import requests as R
from trainfabric.errors import TrainfabricError

AZURE = [
    ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
    ["2023-11-16 18:17:03.9799600", "4808", "10"],
    ["2023-11-16 18:17:04.0319600", "3180", "8"],
    ["2023-11-16 18:17:04.0781490", "110", "27"],
    ["2023-11-16 18:17:04.1206440", "7433", "14"],
]
GENERIC = [
    ["arrival_s", "prompt_tokens", "output_tokens"],
    ["0.0", "100", "10"],
    ["0.25", "2000", "1"],
    ["0.25", "0", "7"],
    ["3.5", "512", "64"],
]
LONG = "9" * 300
BAD_TOKENS = ("nan", "inf", "1e30", "-1", "", "abc", "1.5", LONG, "true", "1e7", "99999999999")
BAD_TIME = ("nan", "inf", "-inf", "abc", "", LONG, "true", "1e308", "-5")
ODD = (*BAD_TOKENS, *BAD_TIME, "0", "7", "2023-11-16 18:17:05", "12345", " 42 ", '"', "0x10")
MESSAGE = re.compile(r"^t\.csv(:\d+: (\w+: )?| ?: )")


def text(rows) -> str:
    return "".join(",".join(r) + "\n" for r in rows)


def refused(value: str, column: int, layout) -> bool:
    """Whether ``value`` is invalid in ``column`` whatever the rest of the trace holds."""
    if column > 0:
        return value.strip() in BAD_TOKENS or (column == 2 and value.strip() == "0")
    if layout[0] == "TIMESTAMP":
        return value.strip() in (*BAD_TIME, "0", "7", "12345", "0x10") or value == LONG
    return value.strip() in BAD_TIME


@st.composite
def mutations(draw, valid):
    """(CSV text, (line, column name) that must be named, or None)."""
    rows = [list(r) for r in valid]
    op = draw(st.sampled_from(["cell", "ragged", "swap", "truncate", "blank", "header"]))
    i = draw(st.integers(1, len(rows) - 1))
    if op == "cell":
        k = draw(st.integers(0, 2))
        value = draw(st.sampled_from(ODD))
        rows[i][k] = value
        must = (i + 1, rows[0][k]) if refused(value, k, rows[0]) else None
        return text(rows), must
    if op == "ragged":
        rows[i] = rows[i][:-1] if draw(st.booleans()) else [*rows[i], "1"]
    elif op == "swap":
        j = draw(st.integers(1, len(rows) - 1))
        rows[i], rows[j] = rows[j], rows[i]
    elif op == "blank":
        rows.insert(i, [""])
    elif op == "header":
        rows[0][draw(st.integers(0, 2))] = draw(st.sampled_from(["", "time", "TIMESTAMP", "x"]))
    out = text(rows)
    if op == "truncate":
        out = out[: draw(st.integers(0, len(out) - 1))]
    return out, None


def check(data, must=None):
    """A correct load, or a TrainfabricError of field trace naming the place."""
    try:
        r = R.parse_trace(data, "t.csv")
    except TrainfabricError as exc:
        assert exc.field == "trace" and MESSAGE.match(exc.message), exc.message
        assert len(exc.message) < 400
        if must is not None:
            line, column = must
            assert exc.message.startswith(f"t.csv:{line}: {column}: "), (exc.message, must)
        return None
    assert must is None, f"accepted a bad value at line {must[0]}, {must[1]}"
    assert r.n >= 1 and r.arrival_s[0] == 0.0
    assert np.isfinite(r.arrival_s).all() and np.all(np.diff(r.arrival_s) >= 0)
    assert r.prompt_tokens.min() >= 0 and r.output_tokens.min() >= 1
    assert max(r.prompt_tokens.max(), r.output_tokens.max()) <= R.MAX_TOKENS
    return r


@pytest.mark.parametrize("valid", [AZURE, GENERIC], ids=["azure", "generic"])
def test_the_valid_traces_load(valid):
    r = check(text(valid))
    assert r.n == 4
    assert r.prompt_tokens.tolist() == [int(row[1]) for row in valid[1:]]


@settings(max_examples=60)
@given(mutations(AZURE))
def test_mutated_azure_traces(case):
    check(*case)


@settings(max_examples=60)
@given(mutations(GENERIC))
def test_mutated_generic_traces(case):
    check(*case)


@settings(max_examples=40)
@given(
    st.binary(max_size=300) | st.text(alphabet='arivl_stmpoken,0123456789.e-\n\r" ', max_size=120)
)
def test_random_bytes_and_csv_shaped_text(data):
    check(data)


@pytest.mark.parametrize("value", BAD_TOKENS)
def test_every_bad_token_value_is_named(value):
    rows = [list(r) for r in GENERIC]
    rows[3][1] = value
    check(text(rows), (4, "prompt_tokens"))
