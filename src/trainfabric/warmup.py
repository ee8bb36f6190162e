"""Fill numba's on-disk cache for the kernels the default commands run, so that the first
command after an install does not wait for the compiler (``make install`` runs this).

numba compiles a kernel once per argument types, not per input size, so each step below runs
a command on a tiny input and compiles what the same command runs at full size. The CLI
commands go through the real CLI in-process, with ``--json`` into a temporary directory; the
fabric scenarios run through :func:`~trainfabric.fabric.scenarios.run_scenario` on both
engines. A failing step is reported and the others still run (its kernels then compile on
first use).

``python -m trainfabric.warmup`` runs the :data:`GROUPS` side by side, one process each (the
compiler is single-threaded; the groups split the kernels roughly in half), and prints one
line per step with its seconds; ``--group I`` runs group ``I`` alone in this process.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

OUT = "{out}"

OCS_COMMANDS: list[list[str]] = [
    ["ocs", "plan", "--workload", "moe", "--pods", "8", "--ports", "4", "--ocs", "2"]
    + ["--out", OUT],
    ["ocs", "online", "--traffic", "jumps", "--slots", "200", "--pods", "6", "--ports", "4"]
    + ["--ocs", "2"],
    ["ocs", "schedule", "--demand", "moe", "--pods", "8", "--ocs", "2"],
    ["ocs", "detect", "--synthetic", "--pods", "6", "--slots", "60", "--change-at", "30"],
    ["ocs", "fairness", "--jobs", "moe,pipeline", "--pods", "8", "--ports", "4", "--ocs", "2"]
    + ["--no-alpha-check"],  # the alpha check is a HiGHS solve, nothing to compile
]
JOB_COMMANDS: list[list[str]] = [
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


#: Complete scenarios besides: a training iteration with failed cables and link flaps (the
#: task engine's link-state events, which ``fabric job`` reaches only when a failed cable
#: carries traffic) and the 3-tier routes of a fat-tree.
EXTRA: list[dict] = [
    {
        "kind": "iteration",
        "modes": ["ecmp", "spray", "adaptive"],
        "topology": {"gpus": 64, "switch_radix": 16},
        "workload": {"name": "llama3-70b", "pods": 8, "layers": 1},
        "faults": {
            "failed_fractions": [0.2],
            "failure_draws": 2,
            "flap_durations_s": [1e-3],
            "flap_draws": 2,
        },
    },
    {
        "kind": "line_rate",
        "modes": _MODES,
        "sizes_bytes": [1048576.0],
        "topology": {"kind": "fat_tree", "gpus": 16, "switch_radix": 4},
    },
]


def run_scenarios() -> None:
    """Every scenario of :data:`SCENARIOS` on the flow and the packet engine, then
    :data:`EXTRA`."""
    from trainfabric.fabric.scenarios import parse_scenario, run_scenario

    for engine in ("flow", "packet"):
        for sc in SCENARIOS:
            data = {**sc, "engine": engine, "modes": _MODES, "topology": _TOPOLOGY}
            run_scenario(parse_scenario(data))
    for sc in EXTRA:
        run_scenario(parse_scenario(sc))


def run(argv: list[str]) -> int:
    """Run one CLI command in-process with its output discarded; its exit code."""
    from trainfabric.cli import main

    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        args = [a.replace(OUT, str(Path(tmp) / "out")) for a in argv] + ["--json"]
        try:
            main(args)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1
    return 0


def _command(argv: list[str]) -> tuple[str, Callable[[], int]]:
    return "trainfabric " + " ".join(argv), lambda: run(argv)


def _scenarios() -> int:
    run_scenarios()
    return 0


#: Two groups of (label, step returning an exit code), each run by one process.
GROUPS: list[list[tuple[str, Callable[[], int]]]] = [
    [*map(_command, OCS_COMMANDS), ("fabric scenarios, flow and packet engines", _scenarios)],
    list(map(_command, JOB_COMMANDS)),
]


def run_group(index: int) -> int:
    """Run group ``index`` here; one stderr line per step; the number of failed steps."""
    failed = 0
    for label, step in GROUPS[index]:
        t0 = time.perf_counter()
        try:
            code, status = step(), ""
        except Exception as exc:  # reported, never fatal: these kernels compile on first use
            code, status = 1, f" ({type(exc).__name__}: {exc})"
        if code:
            failed += 1
            status = status or f" (exit {code})"
        print(f"{time.perf_counter() - t0:6.1f} s  {label}{status}", file=sys.stderr)
    return failed


def main(argv: list[str] | None = None) -> int:
    """``--group I``: run that group here; otherwise every group in its own process at
    once. Exit 1 when any step failed."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--group"]:
        return int(run_group(int(argv[1])) > 0)
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "-m", "trainfabric.warmup", "--group", str(i)])
        for i in range(len(GROUPS))
    ]
    codes = [p.wait() for p in procs]
    print(f"{time.perf_counter() - t0:6.1f} s  warm-up, {os.cpu_count()} cores", file=sys.stderr)
    return int(any(codes))


if __name__ == "__main__":
    raise SystemExit(main())
