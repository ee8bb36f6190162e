"""Process bookkeeping for the kill and signal tests, read straight from ``/proc`` (Linux).

A process is ``(pid, start time)``: the start time tells a live process from a later one
that reused its PID.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

Proc = tuple[int, int]


def sigint_default() -> None:
    """``preexec_fn`` of a child that a test interrupts: SIGINT back to ``SIG_DFL``.

    A shell without job control starts background jobs with SIGINT ignored, exec keeps an
    ignored signal ignored, and Python then installs no KeyboardInterrupt handler; a test
    run started that way (``bash .ci/run &``) would see its children shrug off Ctrl-C.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stat(pid: int) -> tuple[int, int] | None:
    """``(parent pid, start time)`` of a live, non-zombie ``pid``; None otherwise."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else (int(fields[1]), int(fields[19]))


def _parents() -> dict[Proc, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := stat(int(entry))) is not None:
            parents[(int(entry), info[1])] = info[0]
    return parents


def children(pid: int) -> set[Proc]:
    """The live children of ``pid``."""
    return {proc for proc, ppid in _parents().items() if ppid == pid}


def descendants(root: int) -> set[Proc]:
    """The live descendants of ``root`` (children, their children, ...)."""
    parents = _parents()
    found: set[Proc] = set()
    frontier = {root}
    while frontier:
        new = {proc for proc, ppid in parents.items() if ppid in frontier} - found
        found |= new
        frontier = {pid for pid, _ in new}
    return found


def alive(procs: set[Proc]) -> set[Proc]:
    """The processes of ``procs`` still running (same PID and start time)."""
    return {(pid, start) for pid, start in procs if (stat(pid) or (0, -1))[1] == start}


def cmdline(pid: int) -> bytes:
    """The command line of ``pid`` (NUL-separated), empty when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
