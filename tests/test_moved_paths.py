"""Module paths of the release before the pillars' subpackages keep working for one release:
every public name of every old module still imports from its old path, and an old module that
moved warns (DeprecationWarning) and is the new module itself."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

# old module path -> the public names it defined (taken from the release before the move)
OLD = json.loads((Path(__file__).parent / "data" / "old_module_names.json").read_text())

CHECK = """
import importlib, json, sys, warnings
old = json.loads(sys.argv[1])
report = {}
for path, names in old.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(path)
    report[path] = {
        "warned": [str(w.message) for w in caught if w.category is DeprecationWarning],
        "module": module.__name__, "missing": [n for n in names if not hasattr(module, n)],
    }
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def report():
    """Import every old path in a fresh interpreter (nothing imported before)."""
    res = subprocess.run(
        [sys.executable, "-c", CHECK, json.dumps(OLD)], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.splitlines()[-1])


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
def test_every_old_name_still_imports(report):
    assert {p: r["missing"] for p, r in report.items() if r["missing"]} == {}


def test_a_moved_module_warns_and_is_the_new_module(report):
    for path, r in report.items():
        if r["module"] != path:  # moved: the old path gives the new module
            assert len(r["warned"]) == 1, path
            assert f"moved to {r['module']}" in r["warned"][0]
        else:  # a module that became a package of the same name: no warning
            assert r["warned"] == [], path


def test_the_paths_scripts_use():
    from trainfabric.diloco import fleet
    from trainfabric.fabric.flow import engine
    from trainfabric.ocs import model
    from trainfabric.ocs.wiring import planner

    with pytest.warns(DeprecationWarning, match="trainfabric.ocs.wiring.planner"):
        from trainfabric.ocs.planner import plan
    with pytest.warns(DeprecationWarning, match="trainfabric.fabric.flow.engine"):
        from trainfabric.fabric.engine import simulate
    from trainfabric.fabric.scenarios import load_scenario, run_to_dir

    assert plan is planner.plan and simulate is engine.simulate
    # the names resolve to the objects their new modules define (not stale copies)
    assert model.OcsModel.__module__ == "trainfabric.ocs.model"
    assert fleet.simulate.__module__ == "trainfabric.diloco.fleet"
    assert load_scenario.__module__ == "trainfabric.fabric.scenarios.config"
    assert run_to_dir.__module__ == "trainfabric.fabric.scenarios.rundir"
