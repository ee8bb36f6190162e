"""What a user imports: every name a package exports resolves (to a non-deprecated module), and
no package exports a name that is also one of its submodules (the import system would replace
the one by the other, depending on what was imported first)."""

import importlib
import pkgutil
import warnings

import pytest

import trainfabric

PACKAGES = sorted(
    m.name for m in pkgutil.walk_packages(trainfabric.__path__, "trainfabric.") if m.ispkg
)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name):
    package = importlib.import_module(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        missing = [n for n in getattr(package, "__all__", ()) if getattr(package, n, None) is None]
    assert missing == []


@pytest.mark.parametrize("name", PACKAGES)
def test_no_export_shadows_a_submodule(name):
    package = importlib.import_module(name)
    submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert set(getattr(package, "__all__", ())) & submodules == set()


def test_the_pillars_name_what_a_user_imports():
    from trainfabric.diloco import FleetConfig, simulate
    from trainfabric.fabric import multiplane, run_tasks
    from trainfabric.ocs import OcsModel, plan

    assert callable(plan) and callable(simulate) and callable(multiplane) and callable(run_tasks)
    assert OcsModel.__module__ == "trainfabric.ocs.model"
    assert FleetConfig.__module__ == "trainfabric.diloco.fleet"
