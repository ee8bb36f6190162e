"""DESIGN.md's layering as import-linter contracts (pyproject.toml): a climbing import fails,
and so does any import cycle between modules, function-local imports included."""

import ast
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    res = subprocess.run(
        [str(lint), str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "5 kept, 0 broken" in res.stdout


def module_graph() -> nx.DiGraph:
    """Every import between trainfabric's modules (grimp reads function-local imports too;
    imports under ``TYPE_CHECKING`` never run and are left out)."""
    g = grimp.build_graph("trainfabric", cache_dir=None, exclude_type_checking_imports=True)
    graph = nx.DiGraph()
    graph.add_nodes_from(g.modules)
    for m in g.modules:
        graph.add_edges_from((m, i) for i in g.find_modules_directly_imported_by(m))
    return graph


def test_no_import_cycle_between_modules():
    cycles = [c for c in nx.strongly_connected_components(module_graph()) if len(c) > 1]
    assert cycles == []


def test_the_cycle_check_sees_function_local_imports():
    # iteration.faults imports the task engine inside functions only (start-up cost)
    graph = module_graph()
    assert graph.has_edge("trainfabric.fabric.iteration.faults", "trainfabric.fabric.tasks.engine")


# DESIGN.md, "Compiled code": each engine's loop imports compiled code only from the shared
# kernels, by public name; the packet kernel imports nothing of the project.
LOOP_IMPORTS = {
    "trainfabric.fabric.flow.loop": {"trainfabric.fabric.heap", "trainfabric.fabric.maxmin"},
    "trainfabric.fabric.tasks.loop": {"trainfabric.fabric.heap", "trainfabric.fabric.maxmin"},
    "trainfabric.fabric.packet.kernel": set(),
}


def test_engine_loops_import_only_the_shared_kernels_by_public_name():
    graph = module_graph()
    for loop, allowed in LOOP_IMPORTS.items():
        assert set(graph.successors(loop)) == allowed, loop
        path = ROOT / "src" / Path(*loop.split(".")).with_suffix(".py")
        private = [
            alias.name
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trainfabric")
            for alias in node.names
            if alias.name.startswith("_")
        ]
        assert private == [], loop
