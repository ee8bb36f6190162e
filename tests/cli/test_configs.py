"""Every example file in configs/ loads as what its name says (the README and docs use them)."""

from pathlib import Path

import pytest

from trainfabric.fabric.scenarios import load_scenario
from trainfabric.runs import expand, load_sweep

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
KINDS = {
    "fabric-line-rate": "line_rate",
    "fabric-isolation": "isolation",
    "fabric-failures": "failures",
    "fabric-flaps": "flaps",
    "fabric-iteration": "iteration",
}
JOBS = ("job-example",)  # job TOMLs: a workload wherever a preset is (workloads/test_cli.py)


@pytest.mark.parametrize(("stem", "kind"), KINDS.items())
def test_one_example_per_scenario_kind(stem, kind):
    scenario = load_scenario(CONFIGS / f"{stem}.toml")
    assert scenario.kind == kind
    assert scenario.name and "/" not in scenario.name


@pytest.mark.parametrize(
    "path", sorted(p for p in CONFIGS.glob("*.toml") if p.stem not in {*KINDS, *JOBS})
)
def test_sweep_examples_expand(path):
    spec = load_sweep(path)
    assert len(expand(spec)) == len(spec.seed_list) * _grid_size(spec.grid)


def _grid_size(grid: dict) -> int:
    size = 1
    for values in grid.values():
        size *= len(values)
    return size
