"""The shared-trace harness (benchmarks/vs_astra_traces.py) without astra-sim: the system
configurations it writes, the traces it finds, and its two forms -- the closed form our DAGs
meet, and astra-sim's whole-nanosecond form against astra-sim's own times on these traces.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _common  # noqa: E402
import vs_astra as V  # noqa: E402
import vs_astra_traces as T  # noqa: E402

from trainfabric.workloads.workload import load_workload  # noqa: E402

TRACES = ROOT / "tests" / "data" / "chakra"
S = 1 << 20
# astra-sim f242411 (analytical, congestion aware) on tests/data/chakra, ns (its cycles):
# direct all-to-all (as tests/workloads/test_chakra.py), and its ring all-to-all
ASTRA_NS = {
    ("all_reduce", 4, "direct"): 61459,
    ("all_reduce", 8, "direct"): 106709,
    ("all_reduce", 16, "direct"): 189331,
    ("all_gather", 4, "direct"): 77917,
    ("all_gather", 8, "direct"): 181805,
    ("all_gather", 16, "direct"): 389581,
    ("all_to_all", 4, "direct"): 10244,
    ("all_to_all", 8, "direct"): 7623,
    ("all_to_all", 16, "direct"): 6312,
    ("all_to_all", 4, "ring"): 61459,
    ("all_to_all", 8, "ring"): 213417,
    ("all_to_all", 16, "ring"): 757321,
}


def test_systems_differ_only_in_the_all_to_all():
    direct, ring = T.system("direct"), T.system("ring")
    assert direct["all-to-all-implementation"] == ["direct"]
    assert ring["all-to-all-implementation"] == ["ring"]
    for key in ("all-reduce", "all-gather", "reduce-scatter"):
        assert direct[f"{key}-implementation"] == ring[f"{key}-implementation"] == ["ring"]
    strip = {k: v for k, v in direct.items() if k != "all-to-all-implementation"}
    assert strip == {k: v for k, v in ring.items() if k != "all-to-all-implementation"}
    assert strip == {k: v for k, v in V.SYSTEM.items() if k != "all-to-all-implementation"}
    assert V.SYSTEM["all-to-all-implementation"] == ["ring"]  # vs_astra's own is untouched


def test_finds_the_nine_traces():
    names = [str(f.relative_to(TRACES)) for f in T.trace_folders(TRACES)]
    ops = ("all_gather", "all_reduce", "all_to_all")
    assert names == [f"{op}/{n}npus_1MB" for op in ops for n in (16, 4, 8)]


@pytest.mark.parametrize(("op", "n", "impl"), list(ASTRA_NS))
def test_astra_integer_form_gives_astra_sims_times(op, n, impl):
    k, b = T.messages(op, n, S, impl)
    assert round(T.astra_integer_form_s(k, b) * 1e9) == ASTRA_NS[op, n, impl]
    if op == "all_to_all":  # ring: n(n-1)/2 messages one after another; direct: one
        assert (k, b) == (n * (n - 1) // 2 if impl == "ring" else 1, S // n)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "all_to_all"])
def test_our_dags_meet_the_closed_form(op):
    for n in (4, 8, 16):
        dag = load_workload(str(TRACES / op / f"{n}npus_1MB"), gpus_per_pod=1).dag
        closed = T.closed_form_s(*T.messages(op, n, S))
        assert dag.critical_path_at(V.RATE_BPS) == pytest.approx(closed, rel=1e-12)


def test_without_astra_it_says_so_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_common, "reference_work", lambda: 0.0)
    out = tmp_path / "r.json"
    monkeypatch.setattr(sys, "argv", ["vs_astra_traces.py", str(tmp_path), "--out", str(out)])
    T.main()
    assert "no astra-sim build" in capsys.readouterr().err and not out.exists()
