"""The SimAI side-by-side harness (benchmarks/vs_simai.py): SimAI's summary parses, and our
DP chain of the GPT files equals the DP time SimAI wrote for them (captured under
``tests/data/simai/peer``; running SimAI itself needs its build, outside the repository).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import vs_simai as V  # noqa: E402

from trainfabric.workloads.simai import read_simai, simai_dag  # noqa: E402

PEER = V.DATA / "peer"


def _captured(key: str) -> dict[str, float]:
    return V.parse_summary((PEER / f"{Path(V.FILES[key]).stem}-EndToEnd.csv").read_text())


def test_summary_parses():
    moe = _captured("moe")
    assert moe["dp"] == 40332 and moe["dp_ep"] == 1067010 and moe["total"] == 7545619
    parts = ("compute", "exposed_comm", "bubble", "pp")
    assert moe["total"] == pytest.approx(sum(moe[k] for k in parts), abs=2)  # rounded to us
    assert _captured("gpt7b")["tp"] == 89184


def test_summary_refuses_a_missing_column():
    with pytest.raises(ValueError, match="no column"):
        V.parse_summary("File name, Expose DP comm\nx-, 1 (100.00%)\n")
    with pytest.raises(ValueError, match="header line"):
        V.parse_summary("File name, Expose DP comm")


@pytest.mark.parametrize("key", ["gpt7b", "gpt13b"])
def test_dp_chain_matches_simai(key):
    dag = simai_dag(read_simai(V.DATA / V.FILES[key]), V.GPUS_PER_SERVER, 0.0, "1f1b")
    ours = V.our_parts(dag, 0.0)
    theirs = _captured(key)
    assert ours["dp"] == pytest.approx(theirs["dp"], abs=1.0)  # SimAI prints whole us
    assert ours["compute"] == pytest.approx(theirs["compute"], abs=1.0)
    assert ours["dp_ep"] == ours["ep"] == 0.0
