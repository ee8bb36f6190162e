"""Fill numba's on-disk cache for the kernels the default commands run, so that the first
command after an install does not wait for the compiler (``make install`` runs this).

numba compiles a kernel once per argument types, not per input size, so each command below
runs on a tiny input and compiles what the same command runs at full size. Every command goes
through the real CLI in this process, with ``--json`` into a temporary directory; a failure
is reported and the remaining commands still run (the cache then fills on first use).

``python -m trainfabric.warmup`` prints one line per command with its seconds.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

OUT = "{out}"

COMMANDS: list[list[str]] = [
    ["ocs", "plan", "--workload", "moe", "--pods", "8", "--ports", "4", "--ocs", "2"]
    + ["--out", OUT],
    ["ocs", "online", "--traffic", "jumps", "--slots", "200", "--pods", "6", "--ports", "4"]
    + ["--ocs", "2"],
    ["ocs", "schedule", "--demand", "moe", "--pods", "8", "--ocs", "2"],
    ["ocs", "detect", "--synthetic", "--pods", "6", "--slots", "60", "--change-at", "30"],
    ["ocs", "fairness", "--jobs", "moe,pipeline", "--pods", "8", "--ports", "4", "--ocs", "2"],
    ["fabric", "job", "--workload", "llama3-70b", "--pods", "4", "--layers", "1"],
    ["fabric", "job", "--workload", "llama3-70b", "--pods", "4", "--layers", "1"]
    + ["--mode", "adaptive", "--failures", "0.1", "--draws", "1"],
    ["fabric", "job", "--workload", "moe", "--pods", "4", "--mode", "spray"],
    ["diloco", "sim", "--regime", "bursty", "--windows", "300"],
]

_TOPOLOGY = {"gpus": 16, "switch_radix": 16}
_MODES = ["ecmp", "flowlet", "pinning", "spray", "adaptive"]
_FLAPS = [
    {"link": "host", "iteration": 1, "duration_s": 0.01},
    {"link": "fabric", "iteration": 2, "duration_s": 0.01},
]
#: The four kinds of ``fabric eval`` / ``fabric run``, on 16 GPUs, run on both engines.
SCENARIOS: list[dict] = [
    {
        "kind": "line_rate",
        "sizes_bytes": [1048576.0],
        "collectives": [{"kind": "all_reduce", "sync": "step", "ranks": 8}, {"kind": "all_to_all"}],
    },
    {
        "kind": "isolation",
        "oversubscription": [1.0],
        "failed_fractions": [0.0, 0.1],
        "victim": {"kind": "all_reduce", "size_bytes": 1048576},
        "aggressor": {"kind": "all_to_all", "size_bytes": 1048576},
    },
    {
        "kind": "failures",
        "fractions": [0.0, 0.1],
        "draws": 1,
        "collective": {"kind": "all_to_all", "size_bytes": 1048576, "ranks": 8},
    },
    {
        "kind": "flaps",
        "iterations": 3,
        "compute_s": 0.01,
        "collective": {"kind": "all_reduce", "ranks": 4, "size_bytes": 1048576},
        "flaps": _FLAPS,
    },
]


def run_scenarios() -> None:
    """Every scenario of :data:`SCENARIOS` on the flow and the packet engine."""
    from trainfabric.fabric.scenarios import parse_scenario, run_scenario

    for engine in ("flow", "packet"):
        for sc in SCENARIOS:
            data = {**sc, "engine": engine, "modes": _MODES, "topology": _TOPOLOGY}
            run_scenario(parse_scenario(data))


def run(argv: list[str]) -> tuple[int, float]:
    """Run one CLI command in-process with its output discarded: (exit code, seconds)."""
    from trainfabric.cli import main

    t0 = time.perf_counter()
    sink = io.StringIO()
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sink):
        args = [a.replace(OUT, str(Path(tmp) / "out")) for a in argv] + ["--json"]
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, time.perf_counter() - t0


def main() -> int:
    """Warm every command; prints ``seconds  command`` per line, 1 if any command failed."""
    failed = 0
    for argv in COMMANDS:
        code, seconds = run(argv)
        failed += code != 0
        status = "" if code == 0 else f"  (exit {code}: compiles on first use instead)"
        print(f"{seconds:6.1f} s  trainfabric {' '.join(argv)}{status}", file=sys.stderr)
    t0 = time.perf_counter()
    try:
        run_scenarios()
        status = ""
    except Exception as exc:  # reported, never fatal: the kernels then compile on first use
        failed += 1
        status = f"  ({type(exc).__name__}: {exc})"
    seconds = time.perf_counter() - t0
    print(f"{seconds:6.1f} s  fabric scenarios, flow and packet engines{status}", file=sys.stderr)
    return int(failed > 0)


if __name__ == "__main__":
    raise SystemExit(main())
