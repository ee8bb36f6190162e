"""Run one scenario of any kind into a run directory: tables (Parquet), summary, manifest
and ``report.html``; the headline figures of each kind.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from trainfabric.fabric.iteration.scenario import scenario_summary, scenario_tables
from trainfabric.fabric.scenarios.config import Scenario
from trainfabric.fabric.scenarios.failures import FAILURE_FIGURES, failures_summary, run_failures
from trainfabric.fabric.scenarios.findings import mode_findings
from trainfabric.fabric.scenarios.flaps import flaps_summary, run_flaps
from trainfabric.fabric.scenarios.isolation import isolation_summary, run_isolation
from trainfabric.fabric.scenarios.line_rate import line_rate_summary, run_line_rate
from trainfabric.io import write_json, write_parquet
from trainfabric.runs import render_report
from trainfabric.runs.store import now, write_run_manifest

# -- running scenarios into run directories -------------------------------------------------------
STEMS = {
    "line_rate": "fabric_line_rate",
    "isolation": "fabric_isolation",
    "failures": "fabric_failures",
    "flaps": "fabric_flaps",
    "iteration": "fabric_iteration",
}


TIMELINE_STEM = "fabric_flap_timeline"


def _keyed(summary, key: str):
    """A per-mode summary ``{mode: value}`` as ``{mode: {key: value}}``."""

    def keyed(table: pd.DataFrame) -> dict[str, dict[str, float]]:
        return {mode: {key: float(v)} for mode, v in summary(table).items()}

    return keyed


RUNNERS = {
    "iteration": (scenario_tables, scenario_summary),
    "line_rate": (run_line_rate, line_rate_summary),
    "isolation": (run_isolation, _keyed(isolation_summary, "isolation_ratio")),
    "failures": (run_failures, failures_summary),
    "flaps": (run_flaps, _keyed(flaps_summary, "flap_recovery_s")),
}


FAILURE_KEYS = tuple(f"{k}_at_10pct_failures" for k in FAILURE_FIGURES)


HEADLINE = ("line_rate_fraction", "isolation_ratio", *FAILURE_KEYS, "flap_recovery_s")


def run_scenario(sc: Scenario) -> dict[str, pd.DataFrame]:
    """The scenario's tables, keyed by file stem (flaps add the goodput timeline)."""
    run, _ = RUNNERS[sc.kind]
    if sc.kind == "iteration":  # several tables (fabric.iteration.STEMS)
        return run(sc)
    if sc.kind != "flaps":
        return {STEMS[sc.kind]: run(sc)}
    timeline: list = []
    table = run(sc, timeline=timeline)
    return {STEMS["flaps"]: table, TIMELINE_STEM: pd.DataFrame(timeline)}


def summarize(kind: str, tables: dict[str, pd.DataFrame]) -> dict[str, dict[str, float]]:
    """``{mode: {headline metric: value}}`` of one scenario's tables."""
    _, summary = RUNNERS[kind]
    return summary(tables if kind == "iteration" else tables[STEMS[kind]])


def write_tables(run_dir: Path, tables: dict[str, pd.DataFrame]) -> None:
    for stem, table in tables.items():
        write_parquet(run_dir / f"{stem}.parquet", table)


def write_manifest(
    run_dir: Path, name: str, config: dict, started: str, seed: int, engine: str = "flow"
) -> None:
    description = f"trainfabric fabric scenarios ({engine}-level engine)"
    write_run_manifest(run_dir, name, description, config, [seed], started)


def render_run(run_dir: Path) -> Path:
    return render_report(run_dir)


def run_to_dir(sc: Scenario, run_dir: str | Path, console=None) -> dict:
    """Run one scenario, write its tables, manifest and report; per-mode headline figures."""
    run_dir = Path(run_dir)
    started, t0 = now(), time.perf_counter()
    if console is not None:
        console.print(f"scenario {sc.name or sc.kind} ({sc.kind}), modes {', '.join(sc.modes)}")
    tables = run_scenario(sc)
    write_tables(run_dir, tables)
    config = sc.model_dump(mode="json")
    write_manifest(run_dir, f"fabric-{sc.kind}", config, started, sc.seed, sc.engine)
    result = {
        "scenario": sc.name or sc.kind,
        "kind": sc.kind,
        "engine": sc.engine,
        "run_dir": str(run_dir),
        "modes": summarize(sc.kind, tables),
        "rows": tables[STEMS[sc.kind]].to_dict(orient="records"),
        "wall_s": time.perf_counter() - t0,
    }
    result["findings"] = mode_findings(result["modes"])
    write_json(run_dir / "summary.json", result)  # the report's headline
    return result | {"report": str(render_run(run_dir))}
