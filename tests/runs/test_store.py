"""Run directories: manifest, per-cell files, resume after interruption, refusal of others."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from trainfabric.errors import ConfigError
from trainfabric.io import loads, prepare_dir
from trainfabric.runs import RunDir, SweepSpec, run_sweep
from trainfabric.runs.store import git_state, safe_child


def _mtimes(run: RunDir) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in run.cells_dir.iterdir()}


def test_layout_and_manifest(tmp_path, small_spec):
    result = run_sweep(small_spec, tmp_path / "run", executor="serial", progress=False)
    run = RunDir(result.run_dir)
    assert run.results_path.is_file() and run.manifest_path.is_file()
    assert {p.stem for p in run.cells_dir.glob("*.parquet")} == set(result.computed)
    assert len(result.computed) == 8 and result.skipped == []
    manifest = loads(run.manifest_path.read_text())
    for key in ("spec", "config", "seeds", "versions", "git", "cells", "executor", "hostname"):
        assert key in manifest
    assert manifest["spec"]["grid"] == {"gini": [0.1, 0.3], "ep": [2, 4]}
    assert manifest["config"] == {"experts": 16}
    assert manifest["swept"] == ["gini", "ep"]
    assert manifest["seeds"] == [0, 1]
    assert [c["id"] for c in manifest["cells"]] == result.computed
    assert {"python", "trainfabric", "numpy", "scipy", "pandas", "pyarrow", "pydantic"} <= set(
        manifest["versions"]
    )
    assert manifest["git"] is None or re.fullmatch(r"[0-9a-f]{40}", manifest["git"]["commit"])
    assert manifest["executor"] == "serial"
    assert manifest["started"] <= manifest["finished"]
    assert (manifest["computed"], manifest["skipped"]) == (8, 0)
    pd.testing.assert_frame_equal(pd.read_parquet(run.results_path), result.results)


def test_git_state_outside_a_repository(tmp_path):
    assert git_state(tmp_path) is None


def test_no_temporary_files_are_left(tmp_path, small_spec):
    from trainfabric.runs import render_report

    run_sweep(small_spec, tmp_path / "run", executor="serial", progress=False)
    render_report(tmp_path / "run")
    assert list(tmp_path.rglob("*.tmp")) == []


def test_resume_recomputes_only_missing_cells(tmp_path, small_spec):
    first = run_sweep(small_spec, tmp_path / "run", executor="serial", progress=False)
    run = RunDir(first.run_dir)
    lost = first.computed[3]
    run.cell_path(lost).unlink()
    run.results_path.unlink()
    before = _mtimes(run)
    again = run_sweep(small_spec, run.path, executor="serial", progress=False)
    assert again.computed == [lost]
    assert again.skipped == [c for c in first.computed if c != lost]
    after = _mtimes(run)
    assert {k: after[k] for k in before} == before  # finished cells untouched
    pd.testing.assert_frame_equal(again.results, first.results)
    manifest = run.read_manifest()
    assert (manifest["computed"], manifest["skipped"]) == (1, 7)
    assert len(manifest["history"]) == 1 and manifest["history"][0]["computed"] == 8


def test_resume_removes_a_killed_writers_temporary_files(tmp_path, small_spec):
    first = run_sweep(small_spec, tmp_path / "run", executor="serial", progress=False)
    run = RunDir(first.run_dir)
    run.cell_path(first.computed[0]).unlink()
    orphans = [run.cells_dir / f".{first.computed[0]}.parquet.x1.tmp", run.path / ".m.x2.tmp"]
    for orphan in orphans:
        orphan.write_bytes(b"half a file")
    again = run_sweep(small_spec, run.path, executor="serial", progress=False)
    assert again.computed == [first.computed[0]]
    assert not any(orphan.exists() for orphan in orphans)


def test_rerun_of_a_finished_sweep_computes_nothing(tmp_path, small_spec):
    first = run_sweep(small_spec, tmp_path / "run", executor="serial", progress=False)
    equivalent = small_spec.model_copy(update={"seeds": [0, 1]})  # same cells, other spelling
    again = run_sweep(equivalent, tmp_path / "run", executor="local", progress=False)
    assert again.computed == [] and again.skipped == first.computed
    pd.testing.assert_frame_equal(again.results, first.results)


def test_interrupted_sweep_keeps_finished_cells(tmp_path, step_experiment):
    spec = SweepSpec(experiment="step", seeds=1, grid={"x": [0, 1, 2, 3]})
    step_experiment["fail_at"] = 2
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_sweep(spec, tmp_path / "run", executor="serial", progress=False)
    run = RunDir(tmp_path / "run")
    assert len(run.finished_ids()) == 2 and not run.results_path.exists()
    assert run.read_manifest()["finished"] is None
    step_experiment["fail_at"] = None
    again = run_sweep(spec, run.path, executor="serial", progress=False)
    assert len(again.skipped) == 2 and len(again.computed) == 2
    assert again.results["x"].tolist() == [0, 1, 2, 3]
    assert again.results["y"].tolist() == [0.0, 10.0, 20.0, 30.0]


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_failure_while_storing_keeps_earlier_cells_with_process_pool(
    tmp_path, small_spec, monkeypatch
):
    written = []
    original = RunDir.write_cell

    def flaky_write(self, cell_id, table):
        if len(written) == 3:
            raise OSError("disk full (simulated)")
        written.append(cell_id)
        return original(self, cell_id, table)

    monkeypatch.setattr(RunDir, "write_cell", flaky_write)
    with pytest.raises(OSError, match="simulated"):
        run_sweep(small_spec, tmp_path / "run", executor="local", workers=2, progress=False)
    run = RunDir(tmp_path / "run")
    assert run.finished_ids() == set(written)
    monkeypatch.setattr(RunDir, "write_cell", original)
    again = run_sweep(small_spec, run.path, executor="serial", progress=False)
    assert set(again.skipped) == set(written) and len(again.computed) == 8 - 3


def test_different_sweep_is_refused(tmp_path, small_spec):
    run_sweep(small_spec, tmp_path / "run", executor="serial", progress=False)
    other = small_spec.model_copy(update={"seeds": 3})
    with pytest.raises(ConfigError) as info:
        run_sweep(other, tmp_path / "run", executor="serial", progress=False)
    assert info.value.field == "--out"
    assert "different sweep" in str(info.value) and "use another one" in str(info.value)


def test_non_run_directory_is_refused(tmp_path, small_spec):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError) as info:
        run_sweep(small_spec, tmp_path, executor="serial", progress=False)
    assert info.value.field == "--out"
    assert not (tmp_path / "cells").exists()


def test_prepare_out_creates_and_probes(tmp_path):
    out = prepare_dir(tmp_path / "a" / "b")
    assert out.is_dir() and list(out.iterdir()) == []  # the probe file is gone


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp / "file.txt", "exists and is not a directory"),
        (lambda tmp: tmp / "file.txt" / "sub", "cannot create directory"),
        (lambda tmp: "/proc/trainfabric-out", "cannot create directory"),
        (lambda tmp: "/proc/self", "cannot write in /proc/self"),
    ],
)
def test_prepare_out_refuses_unusable_paths(tmp_path, make, message):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ConfigError) as info:
        prepare_dir(make(tmp_path), field="--out-dir")
    assert info.value.field == "--out-dir"
    assert message in info.value.message and "\n" not in str(info.value)


def test_safe_child_accepts_plain_names(tmp_path):
    assert safe_child(tmp_path, "fabric-eval_2.1", "name") == tmp_path / "fabric-eval_2.1"
    assert safe_child(tmp_path, "..hidden..", "name") == tmp_path / "..hidden.."


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "empty"),
        (".", "above or at the root"),
        ("..", "above or at the root"),
        ("../escape", "path separator"),
        ("a/b", "path separator"),
        ("/etc", "path separator"),
        ("a\\b", "path separator"),
        ("bell\x07", "control character"),
        ("new\nline", "control character"),
        ("x" * 256, "longer than 255 bytes"),
    ],
)
def test_safe_child_refuses_unsafe_names(tmp_path, name, problem):
    with pytest.raises(ConfigError) as info:
        safe_child(tmp_path, name, "scenario.name")
    assert info.value.field == "scenario.name" and problem in info.value.message


def test_safe_child_refuses_a_link_leading_outside(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "out").symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="outside"):
        safe_child(tmp_path / "root", "out", "name")
