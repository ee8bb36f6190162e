"""Shared benchmark plumbing: argument parsing, peak memory, and the one-JSON-line contract."""

from __future__ import annotations

import argparse
import platform
import resource
import sys
from pathlib import Path

from trainfabric.io import dumps, write_json

RESULTS = Path(__file__).resolve().parent / "results"


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="fewer seeds (never smaller sizes)")
    p.add_argument(
        "--out", type=Path, default=None, help="JSON output (default benchmarks/results/)"
    )
    return p


def peak_rss_gb() -> float:
    """Peak resident set size of this process so far (GB; ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def emit(name: str, result: dict, out: Path | None = None) -> None:
    """Write the result JSON under benchmarks/results/ and print it as the last stdout line
    (strict JSON: non-finite numbers become null with a ``<key>_nonfinite`` reason)."""
    result = {"benchmark": name, "python": platform.python_version(), **result}
    write_json(out or RESULTS / f"{name}.json", result)
    sys.stdout.write(dumps(result) + "\n")
