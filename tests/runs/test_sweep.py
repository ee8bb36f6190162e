"""Sweep specs, grid expansion, cell ids and ``run_cell``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trainfabric import limits
from trainfabric.errors import ConfigError
from trainfabric.runs import (
    SweepSpec,
    default_run_dir,
    expand,
    load_sweep,
    run_cell,
)
from trainfabric.runs.sweep import CELL_BYTES

DEMO = Path(__file__).resolve().parents[2] / "configs" / "sweep-demo.toml"


def test_demo_file_loads_with_stem_as_name():
    spec = load_sweep(DEMO)
    assert spec.name == "sweep-demo"
    assert spec.experiment == "moe_skew"
    assert spec.seed_list == [0, 1, 2]
    assert len(expand(spec)) == 3 * 2 * 3
    assert default_run_dir(spec) == Path("runs/sweep-demo")


def test_name_in_file_wins(tmp_path):
    path = tmp_path / "file.toml"
    path.write_text('experiment = "moe_skew"\nname = "mine"\n')
    assert load_sweep(path).name == "mine"
    assert default_run_dir(SweepSpec(experiment="moe_skew"), tmp_path) == tmp_path / "moe_skew"


def test_missing_and_malformed_files_are_config_errors(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_sweep(tmp_path / "absent.toml")
    assert info.value.field == "config"
    bad = tmp_path / "bad.toml"
    bad.write_text("experiment = \n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_sweep(bad)
    typo = tmp_path / "typo.toml"
    typo.write_text('experiment = "moe_skew"\n[grd]\ngini = [0.1]\n')
    with pytest.raises(ConfigError) as info:
        load_sweep(typo)
    assert info.value.field == "grd"


@pytest.mark.parametrize(
    ("seeds", "message"),
    [(0, ">= 1"), ([], "non-empty"), ([1, 1], "distinct"), ([-1], "non-negative"), (True, "")],
)
def test_bad_seeds(seeds, message):
    from trainfabric.config import validate

    with pytest.raises(ConfigError) as info:
        validate(SweepSpec, {"experiment": "moe_skew", "seeds": seeds})
    assert info.value.field == "seeds"
    assert message in str(info.value)


def test_bad_name():
    from trainfabric.config import validate

    with pytest.raises(ConfigError) as info:
        validate(SweepSpec, {"experiment": "moe_skew", "name": "../up"})
    assert info.value.field == "name"


def test_cell_count_is_grid_product_times_seeds():
    grid = {"gini": [0.0, 0.1, 0.2], "ep": [1, 2, 4, 8], "experts": [16, 32]}
    spec = SweepSpec(experiment="moe_skew", seeds=[3, 1], grid=grid)
    cells = expand(spec)
    assert len(cells) == math.prod(len(v) for v in grid.values()) * 2
    assert len({c.cell_id for c in cells}) == len(cells)
    # grid order: first field outermost, seeds innermost
    assert [c.seed for c in cells[:4]] == [3, 1, 3, 1]
    assert cells[0].params == {"gini": 0.0, "ep": 1, "experts": 16}
    assert cells[2].params == {"gini": 0.0, "ep": 1, "experts": 32}
    assert all(c.swept == ("gini", "ep", "experts") for c in cells)


def test_cell_ids_are_stable():
    spec = SweepSpec(experiment="moe_skew", base={"experts": 64}, grid={"gini": [0.1], "ep": [4]})
    first = expand(spec)[0]
    assert first.cell_id == expand(spec)[0].cell_id
    # Pinned (the demo's first cell): a change silently invalidates existing run directories.
    assert first.cell_id == "74db5d48277c2243"
    same_from_base = SweepSpec(experiment="moe_skew", base={"experts": 64, "gini": 0.1, "ep": 4})
    assert expand(same_from_base)[0].cell_id == first.cell_id


def test_cell_id_identifies_the_complete_config():
    """Spelling a default out, or writing 1 for 1.0, is the same cell."""
    implicit = expand(SweepSpec(experiment="moe_skew", seeds=[7]))[0]
    explicit = expand(
        SweepSpec(experiment="moe_skew", seeds=[7], base={"experts": 256, "ep": 8, "gini": 0.2})
    )[0]
    assert implicit.cell_id == explicit.cell_id
    assert (
        expand(SweepSpec(experiment="moe_skew", base={"gini": 0}))[0].cell_id
        == expand(SweepSpec(experiment="moe_skew", base={"gini": 0.0}))[0].cell_id
    )
    other_seed = expand(SweepSpec(experiment="moe_skew", seeds=[8]))[0]
    assert other_seed.cell_id != implicit.cell_id


def test_grid_overrides_base():
    spec = SweepSpec(
        experiment="moe_skew", base={"experts": 32, "gini": 0.5}, grid={"gini": [0.1, 0.2]}
    )
    cells = expand(spec)
    assert [c.params for c in cells] == [
        {"experts": 32, "gini": 0.1},
        {"experts": 32, "gini": 0.2},
    ]
    assert cells[0].swept == ("gini",)


@pytest.mark.parametrize(
    ("base", "grid", "field", "message"),
    [
        ({}, {"gni": [0.1]}, "grid.gni", "not a field of experiment 'moe_skew'"),
        ({}, {"gini": [0.1, 1.5]}, "grid.gini[1]", "less than 1"),
        ({"experts": 64}, {"ep": [4, 8, 6]}, "grid.ep[2]", "must divide experts (64)"),
        ({"experts": 4}, {"gini": [0.1, 0.8]}, "grid.gini[1]", "< 0.750"),
        ({"experts": 0}, {"gini": [0.1]}, "base.experts", "greater than or equal to 1"),
        ({"exprts": 64}, {}, "base.exprts", "fields: experts, ep, gini"),
        ({}, {"gini": []}, "grid.gini", "at least one value"),
        ({}, {"gini": [0.1, 0.10]}, "grid", "gini[0]) and (gini[1]"),
    ],
)
def test_bad_fields_are_named(base, grid, field, message):
    spec = SweepSpec(experiment="moe_skew", base=base, grid=grid)
    with pytest.raises(ConfigError) as info:
        expand(spec)
    assert info.value.field == field
    assert message in str(info.value)


def test_unknown_experiment_at_expansion():
    with pytest.raises(ConfigError) as info:
        expand(SweepSpec(experiment="nope"))
    assert info.value.field == "experiment"


def test_run_cell_adds_parameter_and_bookkeeping_columns():
    spec = SweepSpec(experiment="moe_skew", seeds=[4], base={"experts": 16}, grid={"ep": [4]})
    cell = expand(spec)[0]
    table = run_cell(cell.experiment, cell.params, cell.seed, cell.swept)
    assert list(table.columns[:3]) == ["ep", "seed", "cell_id"]
    assert "experts" not in table.columns  # fixed fields live in the manifest
    assert (table["cell_id"] == cell.cell_id).all()
    assert (table["seed"] == 4).all() and len(table) == 4
    assert table.equals(cell.run())
    everything = run_cell("moe_skew", {"experts": 16, "ep": 4}, 4)
    assert list(everything.columns[:4]) == ["experts", "ep", "seed", "cell_id"]


def test_run_cell_validates_params():
    with pytest.raises(ConfigError) as info:
        run_cell("moe_skew", {"experts": -1}, 0)
    assert info.value.field == "params.experts"


def test_a_billion_seeds_is_refused_at_once(allocates_at_most):
    spec = SweepSpec(experiment="moe_skew", seeds=1_000_000_000, base={"experts": 8, "ep": 2})
    with allocates_at_most(1), pytest.raises(ConfigError) as info:
        expand(spec)
    assert info.value.field == "seeds"
    assert info.value.message == (
        "too large: 1 grid points x 1,000,000,000 seeds = 1,000,000,000 cells, "
        "over the limit of 1,000,000 cells"
    )


def test_a_huge_grid_is_refused_naming_grid():
    spec = SweepSpec(
        experiment="moe_skew",
        seeds=2,
        base={"experts": 8},
        grid={"gini": [0.01 * i for i in range(1, 90)], "ep": list(range(1, 20000))},
    )
    with pytest.raises(ConfigError) as info:
        expand(spec)
    assert info.value.field == "grid" and "1,779,911 grid points x 2 seeds" in info.value.message


def test_sweep_over_the_memory_limit_is_refused():
    spec = SweepSpec(experiment="moe_skew", seeds=1000, base={"experts": 8, "ep": 2})
    with limits.memory_limit(1000 * CELL_BYTES / 2 / 1e9), pytest.raises(ConfigError) as info:
        expand(spec)
    assert info.value.field == "seeds" and "--max-memory-gb" in info.value.message
    with limits.memory_limit(1000 * CELL_BYTES * 2 / 1e9):
        assert len(expand(spec)) == 1000


def test_size_counts_do_not_build_the_seed_list():
    spec = SweepSpec(experiment="moe_skew", seeds=10**15, grid={"ep": [2, 4]})
    assert (spec.seed_count, spec.point_count) == (10**15, 2)
    assert SweepSpec(experiment="moe_skew", seeds=[3, 5]).seed_count == 2
