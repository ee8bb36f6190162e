"""The serial, local (process pool) and Ray executors give the same results."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from trainfabric.errors import ConfigError
from trainfabric.runs import SweepSpec, expand, run_sweep
from trainfabric.runs.executors import execute, run_ray


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    keys = ["cell_id", "shard"]
    return frame.sort_values(keys).reset_index(drop=True)


def test_serial_local_and_ray_agree(tmp_path, small_spec, ray_session):
    serial = run_sweep(small_spec, tmp_path / "serial", executor="serial", progress=False)
    local = run_sweep(small_spec, tmp_path / "local", executor="local", workers=2, progress=False)
    ray = run_sweep(small_spec, tmp_path / "ray", executor="ray", progress=False)
    assert len(serial.results) == 2 * 2 * (2 + 4)  # gini x seeds x (ep=2 + ep=4 shards)
    for other in (local, ray):
        assert other.computed == serial.computed and not other.skipped
        pd.testing.assert_frame_equal(_sorted(other.results), _sorted(serial.results))
        # results.parquet is in grid order whatever order the cells finished in
        pd.testing.assert_frame_equal(other.results, serial.results)
    assert ray_session.is_initialized()  # run_ray leaves a session it did not start running


def test_run_ray_calls_on_done_per_cell(ray_session):
    spec = SweepSpec(experiment="moe_skew", seeds=3, base={"experts": 8, "ep": 2})
    cells = expand(spec)
    seen = {}
    run_ray(cells, None, lambda cell, table: seen.__setitem__(cell.cell_id, len(table)))
    assert seen == {c.cell_id: 2 for c in cells}


def test_unknown_executor_is_refused_before_writing(tmp_path, small_spec):
    with pytest.raises(ConfigError) as info:
        run_sweep(small_spec, tmp_path / "run", executor="dask", progress=False)
    assert info.value.field == "executor"
    assert "local, ray, serial" in str(info.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("executor", "workers", "address", "field"),
    [
        ("local", 0, None, "workers"),
        ("serial", 2, None, "workers"),
        ("local", None, "ray://head:10001", "address"),
    ],
)
def test_bad_executor_options(tmp_path, small_spec, executor, workers, address, field):
    with pytest.raises(ConfigError) as info:
        run_sweep(
            small_spec,
            tmp_path,
            executor=executor,
            workers=workers,
            address=address,
            progress=False,
        )
    assert info.value.field == field


def test_missing_ray_is_a_config_error(monkeypatch, small_spec):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    with pytest.raises(ConfigError) as info:
        execute("ray", expand(small_spec), lambda cell, table: None)
    assert info.value.field == "executor"
    assert "pip install 'trainfabric[distributed]'" in str(info.value)


def test_experiment_config_error_keeps_its_field(step_experiment):
    step_experiment["fail_at"] = 1
    step_experiment["error"] = ConfigError
    cells = expand(SweepSpec(experiment="step", grid={"x": [0, 1]}))
    done = []
    with pytest.raises(ConfigError) as info:
        execute("serial", cells, lambda cell, table: done.append(cell.cell_id))
    assert info.value.field == "x"
    assert "simulated user error" in str(info.value) and cells[1].cell_id in str(info.value)
    assert done == [cells[0].cell_id]
