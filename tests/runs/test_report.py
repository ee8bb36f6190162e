"""HTML reports from run directories: headline first, grouped summaries, non-finite values
shown as "—", raw rows collapsed, legends outside the axes."""

from __future__ import annotations

import base64
import re
from html import unescape
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


def _findings(html: str) -> list[str]:
    section = html.split("<section id='findings'>")[1].split("</section>")[0]
    return [unescape(f) for f in re.findall(r"<p class='finding'>(.*?)</p>", section)]


def test_sweep_findings_name_the_best_and_worst_grid_point(tmp_path, small_spec):
    result = run_sweep(small_spec, tmp_path / "run", executor="serial", progress=False)
    path = render_report(result.run_dir)
    assert path == result.run_dir / "report.html"
    html = path.read_text()
    page = _parse(html)
    assert page.sections == ["findings", "figures", "tables", "run", "command", "raw"]
    section, rows = page.tables[0]
    means = _frame(rows)
    assert section == "tables"
    # grouped by the swept parameters; seeds and the shard id are averaged over, never shown
    assert list(means.columns[:3]) == ["gini", "ep", "rows"]
    assert not {"seed", "shard", "cell_id"} & set(means.columns)
    expected = result.results.groupby(["gini", "ep"], sort=False)["max_over_mean"].mean()
    assert len(means) == len(expected) == 4
    for _, row in means.iterrows():
        want = expected[(float(row["gini"]), int(row["ep"]))]
        assert _num(row["max_over_mean"]) == pytest.approx(want, rel=1e-3)
        assert int(row["rows"]) == 2 * int(row["ep"])  # 2 seeds x ep shards
    # the last result column first (no direction known): its lowest and highest grid point
    first = _findings(html)[0]
    low, high = expected.min(), expected.max()
    (gini_lo, ep_lo), (gini_hi, ep_hi) = expected.idxmin(), expected.idxmax()
    assert first.startswith("Over 4 grid points (each the mean of 2 seeds), max over mean")
    assert f"from {low:.4g} (gini {gini_lo:g}, EP {ep_lo})" in first
    assert f"to {high:.4g} (gini {gini_hi:g}, EP {ep_hi})" in first
    assert first.endswith(f"{100 * (high - low) / low:.3g}% higher than the lowest.")
    images = _images(html)
    # share, realised_gini, shard_gini, max_over_mean (not shard, seed or parameters)
    assert len(images) == 4 and all(i.startswith(b"\x89PNG") for i in images)
    assert html.index("alt='results: figure 1'") < html.index("<section id='figures'>")
    assert "mean per gini x ep, over seed x shard" in html


def test_summary_json_is_collapsed_at_the_end_in_words_and_numbers(tmp_path):
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
    assert page.sections[0] == "findings" and page.sections[-2:] == ["command", "raw"]
    command = html.split("<section id='command'>")[1]
    assert command.split("\n")[2].startswith("<details><summary>What the command printed")
    headline = [rows for section, rows in page.tables if section == "command"]
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
    # computed from the summary's per-mode objects: 0 vs 1 s is an absolute difference
    assert _findings(html)[0] == "Stall is 1 s lower with spray than with ecmp (0 s vs 1 s)."


def test_findings_the_command_wrote_come_first_as_written(tmp_path):
    pd.DataFrame({"mode": ["a", "b"], "iteration_s": [1.0, 2.0]}).to_parquet(tmp_path / "t.parquet")
    written = ["Adaptive is 17.7% faster than ECMP (3.194 s vs 3.880 s).", "x < y & z."]
    write_json(tmp_path / "summary.json", {"findings": written, "wall_s": 1.0})
    html = render_report(tmp_path).read_text()
    assert _findings(html) == written
    assert "x &lt; y &amp; z." in html
    findings = html.split("<section id='findings'>")[1].split("</section>")[0]
    assert "data-artists='2'" in findings  # the chart of the table's comparison: two bars


def test_findings_compare_modes_of_a_table_over_its_draws(tmp_path):
    table = pd.DataFrame(
        {
            "mode": ["ecmp", "ecmp", "adaptive", "adaptive"],
            "draw": [0, 1, 0, 1],
            "link": [17, 4, 17, 4],
            "iteration_s": [3.780, 3.980, 3.194, 3.194],
            "wall_s": [9.0, 1.0, 1.0, 1.0],
        }
    )
    table.to_parquet(tmp_path / "fabric_iteration.parquet")
    html = render_report(tmp_path).read_text()
    assert _findings(html) == [
        "Iteration time is 17.7% lower with adaptive than with ecmp "
        "(3.194 s vs 3.88 s; mean of 2 draws)."
    ]
    (chart,) = re.findall(r"<img [^>]*alt='comparison: figure 1'[^>]*>", html)
    assert "data-artists='2'" in chart and "data-min-artists='2'" in chart


def test_demo_steps_get_one_sentence_each():
    from trainfabric.runs.report_findings import findings

    steps = {
        "fabric": {
            "modes": {"ecmp": {"iteration_s": 2.0, "wall_s": 5.0}, "spray": {"iteration_s": 1.0}},
            "wall_s": 3.0,
        },
        "ocs": {"findings": ["OCS wins by 3%."], "wall_s": 1.0},
        "online": {"bound_held": True, "wall_s": 1.0},
        "workloads": {"presets": 9, "resumed": False, "wall_s": 1.0},
        "timing": {"wall_s": 1.0},
    }
    found = findings({"steps": steps}, {}, {})
    assert found.sentences == [
        "fabric: iteration time is 2x lower with spray than with ecmp (1 s vs 2 s).",
        "ocs: OCS wins by 3%.",
        "online: bound held: yes.",
        "workloads: presets 9.",
    ]
    assert [c.metric for c in found.comparisons] == ["iteration_s"]
    regimes = {  # per regime, per policy: one comparison, a group per regime
        r: {p: {"slo_violation_rate": v, "syncs": 5} for p, v in zip("pq", vs, strict=True)}
        for r, vs in (("steady", (0.1, 0.2)), ("bursty", (0.4, 0.3)))
    }
    rate = {"steady": 3.0, "bursty": 2.0}  # a rate per second: no direction, no finding
    found = findings({"regimes": regimes, "request_rate_per_s": rate}, {}, {})
    (c,) = found.comparisons
    assert c.groups == {"steady": {"p": 0.1, "q": 0.2}, "bursty": {"p": 0.4, "q": 0.3}}
    assert found.sentences == [
        "SLO violation rate is 2x lower with p than with q (0.1 vs 0.2; steady); "
        "p is best in 1 of 2 groups."
    ]


def test_comparison_sentences_closed_forms():
    from trainfabric.runs.report_findings import (
        Comparison,
        direction,
        relative,
        sentence,
        words,
    )

    assert relative(3.194, 3.880, "iteration_s") == "17.7%"  # (3.880 - 3.194) / 3.880
    assert relative(4.0, 1.0, "x") == "4x" and relative(0.0, 0.993, "t_s") == "0.993 s"
    assert relative(-1.0, 2.0, "gap") == "3"  # signs differ: the absolute difference
    assert [direction(k) for k in ("iteration_s", "line_rate_fraction", "p_value")] == [
        True,
        False,
        None,
    ]
    assert words("iteration_s") == "iteration time" and words("rate_gbps") == "rate"
    assert words("slo_violation_rate") == "SLO violation rate"
    assert words("hard_critical_path_s") == "hard critical path"
    groups = {"job a": {"x": 0.9, "y": 0.3, "z": 0.9}, "job b": {"x": 0.2, "y": 0.5, "z": 0.1}}
    rate = Comparison("line_rate_fraction", "mode", groups, lower=False)
    assert sentence(rate) == (
        "Line rate fraction is 3x higher with x and z than with y (0.9 vs 0.3; job a)."
    )
    one = Comparison("line_rate_fraction", "mode", {"job b": groups["job b"]}, lower=False)
    two = Comparison(
        "line_rate_fraction", "mode", {"b": groups["job b"], "a": groups["job a"]}, False
    )
    assert sentence(one).endswith("(0.5 vs 0.1; job b).")
    assert sentence(two).endswith("; y is best in 1 of 2 groups.")
    same = Comparison("gap", "workload", {"": {"moe": 0.0, "gpt": 0.0}}, lower=True)
    assert sentence(same) == "Gap is 0 for all of moe and gpt."


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


def test_no_figure_of_an_identifier_a_constant_or_a_table_without_a_sweep(tmp_path):
    """4.8e9 ± a few ulps is constant (the demo's V1 column); ``link``, ``plane`` and
    ``src_node`` are indices; a table that sweeps nothing gets its summary, no histograms."""
    from trainfabric.runs.report_figures import generic_figures

    v1 = 4.8e9 + np.array([0.0, 2e-6, -2e-6, 0.0, 1e-6] * 4)
    table = pd.DataFrame(
        {
            "x": np.repeat([1.0, 2.0, 4.0, 8.0], 5),
            "link": range(20),
            "plane": [0, 1, 2, 3] * 5,
            "src_node": range(20, 40),
            "v1": v1,
            "regret_s": np.arange(20.0),
        }
    )
    table.to_parquet(tmp_path / "r.parquet")
    html = render_report(tmp_path).read_text()
    assert html.count("<img") == 0 and "No other figures." in html
    figures = generic_figures(table, ["x"], ["link", "plane", "src_node", "v1", "regret_s"])
    assert [f.axes[0].get_ylabel() for f in figures] == ["regret_s (mean per cell)"]


def test_empty_axes_are_dropped_and_an_empty_figure_is_said_in_words(tmp_path, monkeypatch):
    from trainfabric.runs.report_figures import new_figure

    def figures(table: pd.DataFrame):
        fig, (full, empty) = new_figure(2)
        full.bar(["a", "b"], [1.0, 2.0])
        empty.step([1.0], [1.0], where="post")  # one draw: an ECDF of one point shows nothing
        empty.set_title("no draw hit traffic")
        blank, ax = new_figure()
        ax.axhline(1.0, ls=":")  # a reference line alone is no data
        return [fig, blank]

    monkeypatch.setitem(FIGURES, "flaps", figures)
    pd.DataFrame({"v": [1.0, 2.0]}).to_parquet(tmp_path / "flaps.parquet")
    html = render_report(tmp_path).read_text()
    (img,) = re.findall(r"<img [^>]*>", html)
    assert "data-artists='2'" in img and "data-min-artists='2'" in img
    text = unescape(html)
    assert "1 panel(s) with no visible data not drawn ('no draw hit traffic')" in text
    assert "flaps: figure 2: nothing to draw, no panel has visible data." in text
    (png,) = _images(html)
    assert _png_width(png) < 2 * 640  # the empty axes' room went too


def _png_width(png: bytes) -> int:
    return int.from_bytes(png[16:20], "big")  # IHDR


def test_data_artists_count_what_shows():
    from trainfabric.runs.report_figures import data_artists, new_figure

    fig, axes = new_figure(8)
    axes[0].axhline(1.0)
    axes[0].axvline(0.5)
    axes[1].plot([1.0], [2.0])  # one point, no marker
    axes[2].plot([1.0], [2.0], "o")
    axes[3].bar([0, 1, 2], [1.0, 0.0, 3.0])  # the bar of height 0 shows nothing
    axes[4].scatter([0, 1], [1, 2])
    axes[5].broken_barh([(0.0, 1.0), (2.0, 1.0)], (0.0, 1.0))
    axes[6].plot([0, 1], [5, 6])
    axes[6].set_ylim(0, 1)  # the data lies outside the view
    axes[7].bar([0, 1], [1e-7, 1.0])
    axes[7].set(yscale="log", ylim=(1e-7, 10))  # a floor bar has no height on this axis
    assert [data_artists(ax) for ax in axes] == [0, 0, 1, 2, 1, 1, 0, 1]


def test_wide_figures_fit_the_page_and_titles_clear_the_legend(tmp_path, monkeypatch):
    from trainfabric.runs.report_figures import MAX_WIDTH_PX, fit_titles, legend_outside

    def wide(table: pd.DataFrame):
        fig, axes = new_figure(4, width=5.0)
        for ax in axes:
            ax.plot([0, 1], [0, 1], label="a line")
        return [fig]

    monkeypatch.setitem(FIGURES, "wide", wide)
    pd.DataFrame({"v": [1.0, 2.0]}).to_parquet(tmp_path / "wide.parquet")
    html = render_report(tmp_path).read_text()
    (png,) = _images(html)
    assert _png_width(png) <= MAX_WIDTH_PX and f"width='{_png_width(png)}'" in html

    def overlaps(fit: bool) -> bool:
        fig, ax = new_figure(width=5.0)
        ax.plot([0, 1], [0, 1], label="ecmp")
        ax.set_title("Static failed leaf-spine cables (10%): slowdown per draw (bar: median)")
        legend_outside(fig)
        if fit:
            fit_titles(fig)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legend = fig.legends[0].get_window_extent(renderer)
        return legend.overlaps(ax.title.get_window_extent(renderer))

    assert overlaps(fit=False) and not overlaps(fit=True)


def test_comparison_figure_has_a_bar_per_name_and_group_and_a_log_axis_for_wide_spans():
    from trainfabric.runs.report_figures import comparison_figure, data_artists

    groups = {"moe": {"milp": 1.14, "uniform": 22.1, "demand": 1.23}, "gpt": {"milp": 2.0}}
    fig = comparison_figure(groups, "critical path (s)", "method", "Critical path per method")
    (ax,) = fig.axes
    assert data_artists(ax) == 4 and ax.get_xscale() == "linear"  # span 22.1 / 1.14 < 50
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["moe", "gpt"]
    fig = comparison_figure({"": {"a": 1.0, "b": 100.0}}, "x", "mode", "t")
    assert fig.axes[0].get_xscale() == "log" and not fig.legends


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
    assert html.index("class='description'") < html.index("<section id='findings'>")


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
    (tmp_path / "summary.json").write_bytes(bytes(range(128, 228)))  # not UTF-8 text
    with pytest.raises(ConfigError, match="cannot read .*summary.json"):
        render_report(tmp_path)
