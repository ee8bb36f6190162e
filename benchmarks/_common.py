"""Shared benchmark plumbing: argument parsing, provenance, peak memory, and the
one-JSON-line contract.

Every benchmark calls :func:`parser` first and :func:`emit` last. ``parser`` starts the
provenance (UTC time, 1-minute load average, and ``reference_s``: the wall time of
:func:`reference_work`, a fixed single-threaded computation that lets a figure measured on one
machine be scaled to another); ``emit`` completes it (commit, versions, CPU) and writes it into
the results file under ``provenance``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from trainfabric.io import dumps, write_json

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
_START: dict[str, Any] = {}


def parser(description: str) -> argparse.ArgumentParser:
    """The benchmark's argument parser (``--quick``, ``--out``); starts its provenance."""
    _START.update(start_provenance())
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="fewer seeds (never smaller sizes)")
    p.add_argument(
        "--out", type=Path, default=None, help="JSON output (default benchmarks/results/)"
    )
    return p


def reference_work() -> float:
    """Wall seconds of a fixed computation, never to be changed: 40 sorts of 10^6 doubles and
    a 3*10^6-step pure-Python loop (numpy's sort and Python's interpreter are single-threaded,
    unlike BLAS). Measured on the project's 2-core machines: 0.33 s idle (load 0.7), 0.7-1.7 s
    beside other work (load 3.6-5.6) -- which is what it is for."""
    x = np.random.default_rng(20261205).random(1_000_000)
    t0 = time.perf_counter()
    for _ in range(40):
        np.sort(x, kind="quicksort")
    acc = 0
    for i in range(3_000_000):
        acc += i % 7
    return time.perf_counter() - t0


def start_provenance() -> dict[str, Any]:
    """What must be read when the benchmark starts: UTC time, load and ``reference_s``."""
    return {
        "utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_avg": round(os.getloadavg()[0], 2),
        "reference_s": round(reference_work(), 3),
    }


def provenance() -> dict[str, Any]:
    """The results file's ``provenance``: commit and dirty flag (changes under
    ``benchmarks/results/`` do not count), UTC start, the command line with repository paths
    made relative, library versions (``torch`` null unless this process imported it), CPU
    model, cores, load average at start and ``reference_s``."""
    start = _START or start_provenance()
    return {
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(
            _git(
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":(exclude)benchmarks/results",
            )
        ),
        "utc": start["utc"],
        "argv": relative(sys.argv),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": _version("numba"),
        "torch": sys.modules["torch"].__version__ if "torch" in sys.modules else None,
        "highspy": _version("highspy"),
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "load_avg": start["load_avg"],
        "reference_s": start["reference_s"],
    }


def relative(value: Any) -> Any:
    """``value`` with no machine paths (recursively through dicts and lists): a string path
    inside the repository made relative to its root, any other absolute path (a peer's build
    or checkout) reduced to ``<outside>/NAME``."""
    if isinstance(value, dict):
        return {k: relative(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [relative(v) for v in value]
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str) and value.startswith(str(ROOT) + os.sep):
        return value[len(str(ROOT)) + 1 :]
    if isinstance(value, str) and os.path.isabs(value) and not any(c.isspace() for c in value):
        return f"<outside>/{Path(value).name}"
    return value


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def peak_rss_gb() -> float:
    """Peak resident set size of this process so far (GB; ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def emit(name: str, result: dict, out: Path | None = None) -> None:
    """Write the result JSON, with its provenance, under benchmarks/results/ and print it as
    the last stdout line (strict JSON: non-finite numbers become null with a
    ``<key>_nonfinite`` reason; repository paths relative)."""
    result = {"benchmark": name, **relative(result), "provenance": provenance()}
    write_json(out or RESULTS / f"{name}.json", result)
    sys.stdout.write(dumps(result) + "\n")
