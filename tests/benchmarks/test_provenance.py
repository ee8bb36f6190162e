"""Every benchmark result carries its provenance (benchmarks/_common.py): the keys the
project settled on, the commit it ran on, and no machine paths."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _common as C  # noqa: E402

KEYS = {
    "commit", "dirty", "utc", "argv", "python", "numpy", "numba", "torch", "highspy",
    "cpu_model", "cores", "load_avg", "reference_s",
}  # fmt: skip


@pytest.fixture
def started(monkeypatch):
    """A parser call without the reference computation's second or two."""
    monkeypatch.setattr(C, "reference_work", lambda: 1.5)
    C.parser("test")
    yield
    C._START.clear()


def test_emit_writes_every_key_and_relative_paths(started, tmp_path, monkeypatch, strict_loads):
    argv = [str(C.ROOT / "benchmarks" / "x.py"), "--quick", "/opt/peer/build"]
    monkeypatch.setattr(sys, "argv", argv)
    out = tmp_path / "x.json"
    C.emit("x", {"table": str(C.ROOT / "runs" / "a.parquet"), "n": [1, 2]}, out)
    result = strict_loads(out.read_text())
    prov = result["provenance"]
    assert set(prov) == KEYS
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=C.ROOT, capture_output=True, text=True)
    assert prov["commit"] == head.stdout.strip() and isinstance(prov["dirty"], bool)
    assert prov["argv"] == ["benchmarks/x.py", "--quick", "<outside>/build"]
    assert result["table"] == "runs/a.parquet" and result["n"] == [1, 2]
    assert prov["reference_s"] == 1.5 and prov["cores"] >= 1
    assert str(C.ROOT) not in out.read_text()


def test_torch_is_null_unless_imported(started, monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert C.provenance()["torch"] is None


def test_paths_outside_the_repository_keep_only_their_name():
    """A peer's checkout anywhere in a result keeps only its name."""
    assert C.relative("/elsewhere/peer/ATRO") == "<outside>/ATRO"
    assert C.relative({"a": [C.ROOT / "b"]}) == {"a": ["b"]}
    assert C.relative("ours / theirs") == "ours / theirs"


RESULTS = sorted(C.RESULTS.glob("*.json"))
MACHINE_PATH = re.compile(r'"/(tmp|work|root|home|opt|usr|var)/')


@pytest.mark.parametrize("path", RESULTS, ids=[p.stem for p in RESULTS])
def test_every_results_file_carries_provenance_and_no_machine_path(path, strict_loads):
    """Every published figure names the committed code that made it: a clean tree, a full
    commit hash, the settled keys, and no path of the machine it ran on."""
    text = path.read_text()
    prov = strict_loads(text).get("provenance")
    assert prov is not None, f"{path.name} has no provenance: rerun its benchmark"
    assert set(prov) >= KEYS and len(prov["commit"]) == 40
    assert prov["dirty"] is False, f"{path.name} was written from a tree with uncommitted changes"
    assert not MACHINE_PATH.search(text) and str(C.ROOT) not in text
