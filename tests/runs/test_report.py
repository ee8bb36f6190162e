"""HTML reports from run directories: headline first, grouped summaries, non-finite values
shown as "—", raw rows collapsed, legends outside the axes."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest

from trainfabric.errors import ConfigError
from trainfabric.io import write_json
from trainfabric.runs import FIGURES, render_report, run_sweep
from trainfabric.runs.report_figures import legend_outside, line_style, new_figure
from trainfabric.runs.report_headline import label, restore_nonfinite
from trainfabric.runs.report_tables import summarize

IMG = re.compile(r"<img src='data:image/png;base64,([A-Za-z0-9+/=]+)'")


class _Tables(HTMLParser):
    """Every <table> of a page as a list of rows of cell texts, with the id of the <section>
    it is in; and the order of the sections."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[str, list[list[str]]]] = []
        self.sections: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self.sections.append(dict(attrs)["id"])
        elif tag == "table":
            self.tables.append((self.sections[-1] if self.sections else "", []))
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None:
            self._row.append("".join(self._cell or []).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[-1][1].append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _parse(html: str) -> _Tables:
    parser = _Tables()
    parser.feed(html)
    return parser


def _frame(rows: list[list[str]]) -> pd.DataFrame:
    return pd.DataFrame(rows[1:], columns=rows[0])


def _images(html: str) -> list[bytes]:
    return [base64.b64decode(b) for b in IMG.findall(html)]


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def test_sweep_headline_is_the_mean_per_grid_point(tmp_path, small_spec):
    result = run_sweep(small_spec, tmp_path / "run", executor="serial", progress=False)
    path = render_report(result.run_dir)
    assert path == result.run_dir / "report.html"
    html = path.read_text()
    page = _parse(html)
    assert page.sections == ["headline", "figures", "run", "raw"]
    section, rows = page.tables[0]
    headline = _frame(rows)
    assert section == "headline"
    # grouped by the swept parameters; seeds and the shard id are averaged over, never shown
    assert list(headline.columns[:3]) == ["gini", "ep", "rows"]
    assert not {"seed", "shard", "cell_id"} & set(headline.columns)
    expected = result.results.groupby(["gini", "ep"], sort=False)["max_over_mean"].mean()
    assert len(headline) == len(expected) == 4
    for _, row in headline.iterrows():
        want = expected[(float(row["gini"]), int(row["ep"]))]
        assert _num(row["max_over_mean"]) == pytest.approx(want, rel=1e-3)
        assert int(row["rows"]) == 2 * int(row["ep"])  # 2 seeds x ep shards
    images = _images(html)
    # share, realised_gini, shard_gini, max_over_mean (not shard, seed or parameters)
    assert len(images) == 4 and all(i.startswith(b"\x89PNG") for i in images)
    assert "mean per gini x ep, over seed x shard" in html


def test_summary_json_is_the_headline_in_words_and_numbers(tmp_path):
    pd.DataFrame({"mode": ["ecmp", "spray"], "stall_s": [1.0, 0.0]}).to_parquet(
        tmp_path / "flaps.parquet"
    )
    summary = {
        "run_dir": str(tmp_path),
        "report": "not shown",
        "wall_s": 2.5,
        "modes": {"ecmp": {"stall_s": 1.0, "queue_s": np.inf}, "spray": {"stall_s": 0.0}},
        "regimes": {"bursty": {"wa": {"vs_matched_random": "beats", "p_value": 0.004}}},
        "verdicts": {"beats": 3, "ties": 13},
        "rows": [{"mode": "ecmp", "stall_s": 1.0}, {"mode": "spray", "stall_s": 0.0}],
    }
    write_json(tmp_path / "summary.json", summary)
    html = render_report(tmp_path).read_text()
    page = _parse(html)
    assert page.sections[0] == "headline"
    headline = [rows for section, rows in page.tables if section == "headline"]
    assert headline[0] == [["run dir", str(tmp_path)], ["wall (s)", "2.5"]]
    modes = _frame(headline[1])
    assert list(modes.columns) == ["modes", "queue (s)", "stall (s)"]  # keys sorted in the file
    assert modes.values.tolist() == [["ecmp", "—", "1"], ["spray", "", "0"]]
    assert "<h3>regimes · bursty</h3>" in html
    assert headline[2][0] == ["bursty", "vs matched random", "p value"]  # verdict first
    assert "<h3>rows</h3>\n<details><summary>2 records</summary>" in html
    assert "<span class='verdict verdict-beats'>beats</span>" in html
    assert "3 x <span class='verdict verdict-beats'>beats</span>" in html
    assert "not shown" not in html
    assert "— : not finite" in html


def test_per_step_scalars_share_one_table():
    from trainfabric.runs.report_headline import headline_html

    steps = {
        "fabric": {"wall_s": 7.5, "modes": {"ecmp": {"ratio": 0.5}, "spray": {"ratio": 1.0}}},
        "sweep": {"wall_s": 8.0, "cells": 60},
        "diloco": {"wall_s": 3.0, "verdicts": {"ties": 16}},
    }
    page = _parse(headline_html({"steps": steps}))
    assert [rows for _, rows in page.tables] == [
        [
            ["steps", "wall (s)", "cells"],
            ["fabric", "7.5", ""],
            ["sweep", "8", "60"],
            ["diloco", "3", ""],
        ],
        [["modes", "ratio"], ["ecmp", "0.5"], ["spray", "1"]],
    ]
    html = headline_html({"steps": steps})
    assert "<h3>steps · fabric · modes</h3>" in html and "<h3>steps · sweep</h3>" not in html
    assert "16 x <span class='verdict verdict-ties'>ties</span>" in html


def test_nonfinite_values_show_as_a_dash_with_a_note(tmp_path):
    table = pd.DataFrame(
        {
            "mode": ["ecmp", "ecmp", "spray", "spray"],
            "seed": [0, 1, 0, 1],
            "latency_s": [np.inf, 1.0, 2.0, 4.0],
            "ratio": [np.nan, 0.5, 1.0, 1.0],
        }
    )
    table.to_parquet(tmp_path / "failures.parquet")
    html = render_report(tmp_path).read_text()
    summary = _frame(next(rows for section, rows in _parse(html).tables if section == "tables"))
    assert summary.values.tolist() == [["ecmp", "2", "—", "—"], ["spray", "2", "3", "1"]]
    assert "— : not finite (an infinite value, as an unstable queue" in html
    assert "— : not a number" in html
    assert not re.search(r">\s*(inf|nan|NaN)\s*<", html)


def test_summaries_never_average_across_categories_or_design_columns():
    table = pd.DataFrame(
        {
            "method": ["milp", "milp", "ours", "ours"] * 2,
            "size_bytes": [1e6, 1e9] * 4,
            "seed": [0] * 4 + [1] * 4,
            "run_id": range(8),
            "gap": [0.0, 0.0, 0.1, 0.3, 0.0, 0.0, 0.3, 0.5],
        }
    )
    summary, caption = summarize(table, swept=[], keys=[])
    assert caption == "mean per method x size_bytes, over seed"
    assert list(summary.columns) == ["method", "size_bytes", "rows", "gap"]
    assert summary["gap"].tolist() == pytest.approx([0.0, 0.0, 0.2, 0.4])
    assert summary["rows"].tolist() == [2, 2, 2, 2]


def test_a_table_of_one_row_per_group_is_shown_as_is_and_a_series_is_not_averaged():
    verdicts = pd.DataFrame({"policy": ["a", "b"], "deployable": [True, False], "p": [0.1, 0.2]})
    summary, caption = summarize(verdicts, swept=[], keys=[])
    assert caption == "one row per policy"
    assert summary.equals(verdicts)
    timeline = pd.DataFrame({"mode": ["x"] * 3 + ["y"] * 3, "t_s": [0, 1, 2.5, 0, 1.5, 2]})
    summary, caption = summarize(timeline, swept=[], keys=[])
    assert summary is None and "a series per mode" in caption


def test_a_column_constant_up_to_rounding_gets_a_histogram(tmp_path):
    """4.8e9 ± a few ulps: numpy's "auto" bins refuse it (bin width under float spacing);
    the report draws one bin instead of failing (the demo's V1 column did this)."""
    v1 = 4.8e9 + np.array([0.0, 2e-6, -2e-6, 0.0, 1e-6] * 4)
    with pytest.raises(ValueError, match="Too many bins"):
        np.histogram(v1, bins="auto")
    pd.DataFrame({"v1": v1, "regret_s": np.arange(20.0)}).to_parquet(tmp_path / "r.parquet")
    html = render_report(tmp_path).read_text()  # raised ValueError before
    assert html.count("<img") == 2  # one histogram per numeric column


def test_raw_rows_are_last_collapsed_and_cut(tmp_path):
    pd.DataFrame({"v": range(500)}).to_parquet(tmp_path / "t.parquet")
    html = render_report(tmp_path).read_text()
    raw = html.split("<section id='raw'>")[1]
    assert raw.count("<details>") == 1 and "<details open" not in html
    assert "t: first 50 of 500 rows" in raw
    assert "<td>49</td>" in raw and "<td>50</td>" not in raw
    assert raw.rstrip().endswith("</section>\n</body>\n</html>".rstrip())


def test_every_table_scrolls_inside_its_own_box(tmp_path):
    wide = pd.DataFrame({f"column_{i}_with_a_long_name": [1.5, 2.5] for i in range(40)})
    wide.to_parquet(tmp_path / "wide.parquet")
    html = render_report(tmp_path).read_text()
    assert html.count("<table") == html.count("<div class='table-wrap'><table")
    assert ".table-wrap { overflow-x: auto;" in html


def test_the_description_is_shown_in_full(tmp_path):
    from trainfabric.runs.store import now, write_run_manifest

    description = "A long description. " * 40 + "It ends here."
    pd.DataFrame({"v": [1.0, 2.0]}).to_parquet(tmp_path / "t.parquet")
    write_run_manifest(tmp_path, "study", description, {}, [0], now())
    html = render_report(tmp_path).read_text()
    assert f"<b>study</b>: {description}</p>" in html
    assert html.index("class='description'") < html.index("<section id='headline'>")


def test_report_of_any_directory_escapes_names(tmp_path):
    pd.DataFrame({"rate_bps": [1e9, 2e9, 4e9], "<b>name</b>": ["a", "b", "<i>c</i>"]}).to_parquet(
        tmp_path / "flows.parquet"
    )
    html = render_report(tmp_path).read_text()
    assert "No manifest.json" in html and "No summary.json" in html
    assert "<b>name</b>" not in html and "&lt;b&gt;name&lt;/b&gt;" in html
    assert "<i>c</i>" not in html


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


def test_legend_outside_covers_no_axes_and_styles_differ():
    fig, axes = new_figure(2)
    for ax in axes:
        for i in range(4):
            ax.plot([0, 1], [i, i + 1], label=f"mode {i}", **line_style(i))
    legend_outside(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    assert [t.get_text() for t in legend.get_texts()] == [f"mode {i}" for i in range(4)]
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in axes)
    styles = [(s["marker"], str(s["linestyle"])) for s in map(line_style, range(8))]
    assert len(set(styles)) == 8


def test_labels_and_nonfinite_restoration():
    assert label("queue_delay_s") == "queue delay (s)"
    assert label("rate_gbps") == "rate (Gb/s)" and label("s") == "s"
    restored = restore_nonfinite({"a": None, "a_nonfinite": "-inf", "b": [{"c": None}]})
    assert restored == {"a": -np.inf, "b": [{"c": None}]}


def test_report_errors(tmp_path):
    with pytest.raises(ConfigError) as info:
        render_report(tmp_path / "absent")
    assert info.value.field == "run_dir"
    (tmp_path / "cells").mkdir()
    with pytest.raises(ConfigError, match="unfinished sweep"):
        render_report(tmp_path)
    pd.DataFrame({"v": [1.0]}).to_parquet(tmp_path / "t.parquet")
    (tmp_path / "summary.json").write_text('{"gap": NaN}')
    with pytest.raises(ConfigError, match="not strict JSON"):
        render_report(tmp_path)
    (tmp_path / "summary.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not a JSON object"):
        render_report(tmp_path)
