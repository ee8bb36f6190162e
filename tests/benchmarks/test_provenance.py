"""Every benchmark result carries its provenance (benchmarks/_common.py): the keys the
project settled on, the commit it ran on, and no machine paths."""

from __future__ import annotations

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
    assert C.relative("/elsewhere/peer/ATRO") == "<outside>/ATRO"
    assert C.relative({"a": [C.ROOT / "b"]}) == {"a": ["b"]}
    assert C.relative("ours / theirs") == "ours / theirs"
