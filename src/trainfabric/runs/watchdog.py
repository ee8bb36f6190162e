"""A watchdog that kills a process's descendants once that process is gone.

``python path/to/watchdog.py PARENT_PID`` (or ``python -m trainfabric.runs.watchdog``; the
file imports only the standard library, so running it by path starts in milliseconds without
importing trainfabric) runs beside a process that starts helpers
it cannot put in a process group of their own, such as a local Ray instance (GCS server,
raylet, dashboard and runtime-env agents: measured with Ray 2.60, the two agents outlive a
SIGKILLed driver, re-parented to init). The watchdog is started by ``PARENT_PID`` in its own
session, so signals sent to the parent's process group do not reach it.

While the parent lives, it records every descendant of the parent, as ``(pid, start time)``
pairs read from ``/proc`` every :data:`POLL_S` seconds (the start time guards against a PID
reused by an unrelated process). Once the parent is gone (its PID no longer runs with the
recorded start time), it adds the recorded processes' own descendants, sends SIGKILL to every
recorded process still alive and exits. Terminating the watchdog (SIGTERM) stops it without
killing anything: that is how a parent that shut its helpers down cleanly dismisses it.
Linux only (``/proc``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

POLL_S = 0.25

Proc = tuple[int, int]  # (pid, start time in clock ticks since boot)


def stat_of(pid: int) -> tuple[int, int] | None:
    """``(parent pid, start time)`` of ``pid`` from ``/proc/PID/stat``, or None when it is gone
    (or a zombie, which holds no resources but its table entry)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[19])


def children_map() -> dict[int, list[Proc]]:
    """Parent pid -> its live children, from one scan of ``/proc``."""
    children: dict[int, list[Proc]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            info = stat_of(int(entry.name))
            if info is not None:
                children.setdefault(info[0], []).append((int(entry.name), info[1]))
    return children


def descendants(roots: set[int], exclude: int) -> set[Proc]:
    """Every live descendant of the pids in ``roots`` (not the roots), except ``exclude``."""
    children = children_map()
    found: set[Proc] = set()
    stack = list(roots)
    while stack:
        for proc in children.get(stack.pop(), []):
            if proc[0] != exclude and proc not in found:
                found.add(proc)
                stack.append(proc[0])
    return found


def alive(proc: Proc) -> bool:
    """Whether ``proc`` still runs (same pid, same start time)."""
    info = stat_of(proc[0])
    return info is not None and info[1] == proc[1]


def kill_all(procs: set[Proc]) -> int:
    """SIGKILL every process of ``procs`` still alive; return how many were signalled."""
    killed = 0
    for proc in procs:
        if alive(proc):
            try:
                os.kill(proc[0], signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                continue
    return killed


def watch(parent_pid: int, poll_s: float = POLL_S) -> int:
    """Record ``parent_pid``'s descendants until it is gone, then kill them; return how many
    were killed."""
    me = os.getpid()
    info = stat_of(parent_pid)
    if info is None:
        return 0
    parent = (parent_pid, info[1])
    recorded: set[Proc] = set()
    while alive(parent):
        recorded |= descendants({parent_pid}, exclude=me)
        time.sleep(poll_s)
    survivors = {pid for pid, start in recorded if alive((pid, start))}
    recorded |= descendants(survivors, exclude=me)
    return kill_all(recorded)


def main(argv: list[str]) -> int:
    """``watchdog PARENT_PID``; exit code 0 (2 on a bad argument)."""
    if len(argv) != 1 or not argv[0].isdigit():
        sys.stderr.write("usage: python -m trainfabric.runs.watchdog PARENT_PID\n")
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch(int(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
