"""HTML reports from run directories."""

from __future__ import annotations

import base64
import re

import pandas as pd
import pytest

from trainfabric.errors import ConfigError
from trainfabric.runs import FIGURES, SweepSpec, render_report, run_sweep

IMG = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def _images(html: str) -> list[bytes]:
    return [base64.b64decode(b) for b in IMG.findall(html)]


def test_report_of_a_grid_sweep(tmp_path, small_spec):
    result = run_sweep(small_spec, tmp_path / "run", executor="serial", progress=False)
    path = render_report(result.run_dir)
    assert path == result.run_dir / "report.html"
    html = path.read_text()
    images = _images(html)
    # share, realised_gini, shard_gini, max_over_mean (not shard, seed or parameters)
    assert len(images) == 4 and all(i.startswith(b"\x89PNG") for i in images)
    assert "<table" in html and "moe_skew" in html
    assert "Mean per grid point" in html and f"First 24 of {len(result.results)} rows" in html


def test_report_without_grid_draws_histograms(tmp_path):
    spec = SweepSpec(experiment="moe_skew", seeds=3, base={"experts": 16, "ep": 4})
    run_sweep(spec, tmp_path / "run", executor="serial", progress=False)
    html = render_report(tmp_path / "run").read_text()
    assert len(_images(html)) == 4
    assert "Summary statistics" in html


def test_report_of_any_directory_with_tables(tmp_path):
    pd.DataFrame({"rate_bps": [1e9, 2e9, 4e9], "<b>name</b>": ["a", "b", "<i>c</i>"]}).to_parquet(
        tmp_path / "flows.parquet"
    )
    pd.DataFrame({"delay_s": [0.1, 0.2]}).to_parquet(tmp_path / "links.parquet")
    html = render_report(tmp_path).read_text()
    assert "Table flows" in html and "Table links" in html
    assert "No manifest.json" in html
    assert len(_images(html)) == 2
    assert "<b>name</b>" not in html and "&lt;b&gt;name&lt;/b&gt;" in html
    assert "<i>c</i>" not in html


def test_long_tables_are_cut(tmp_path):
    pd.DataFrame({"v": range(500)}).to_parquet(tmp_path / "t.parquet")
    html = render_report(tmp_path).read_text()
    assert "First 50 of 500 rows" in html
    assert "<td>49</td>" in html and "<td>50</td>" not in html.split("<h3>Rows</h3>")[1]


def test_experiment_figure_hook_comes_first(tmp_path, small_spec, monkeypatch):
    from matplotlib.figure import Figure

    seen = []

    def figures(table: pd.DataFrame) -> list[Figure]:
        seen.append(len(table))
        fig = Figure()
        fig.subplots().plot(table["gini"], table["max_over_mean"], "o")
        return [fig]

    monkeypatch.setitem(FIGURES, "moe_skew", figures)
    result = run_sweep(small_spec, tmp_path / "run", executor="serial", progress=False)
    html = render_report(result.run_dir).read_text()
    assert seen == [len(result.results)]
    assert len(_images(html)) == 1


def test_report_errors(tmp_path):
    with pytest.raises(ConfigError) as info:
        render_report(tmp_path / "absent")
    assert info.value.field == "run_dir"
    (tmp_path / "cells").mkdir()
    with pytest.raises(ConfigError, match="unfinished sweep"):
        render_report(tmp_path)
