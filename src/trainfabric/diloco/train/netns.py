"""Learners in their own network namespaces, joined by tc-shaped veth pairs to a bridge.

Topology (a star through a Linux bridge in the root namespace): learner ``r`` lives in
namespace ``tfd-<tag>-<r>`` with interface ``tfd<tag>n<r>`` at ``10.213.0.<r+1>/24``; its peer
``tfd<tag>h<r>`` is a port of bridge ``tfd<tag>br``. Both ends of every veth are shaped on
egress with the same qdisc (``tbf rate R burst B latency L``, or ``htb`` with one class of
rate ``R``), so each learner has a full-duplex link of rate ``R`` to the bridge; a ring
all-reduce of ``S`` bytes among ``M`` learners then moves ``2 (M−1)/M · S`` bytes over each
learner's uplink and takes about that over ``R``.

No delay is added: this kernel has no ``netem`` (nor ``fq_codel``, ``prio``, ``sfq``,
``fq``: "Specified qdisc kind is unknown", no modules), so the link has a rate but only
the queueing delay the token bucket itself causes; the manifest says so.

Byte counters: :meth:`Network.qdisc_bytes` reads ``Sent N bytes`` of the root qdisc of both
ends (``tc -s qdisc``; ``tc -n NS`` for the learner side). The ``network`` telemetry signal is
link utilisation = Δbytes / (R/8 · Δt) of the busiest direction, in [0, 1].

**Other tenants of the link** (the serving testbed, :mod:`trainfabric.diloco.live_testbed`):
a process started with :func:`exec_prefix` (``ip netns exec NS taskset -c CPUS ...``) lives
in a learner's namespace, and :func:`call_in` runs a function in a thread that entered one
(``setns`` moves only the calling thread), so traffic between two namespaces crosses the
same shaped veths as the learners' sync. :meth:`Network.reshape` changes the qdiscs of a
live network (``tc qdisc replace``), e.g. to sweep the queue depth without restarting
what runs in the namespaces.

Cleanup: :meth:`Network.close` deletes the bridge, veths and namespaces (also from a
``finally`` and an ``atexit`` hook); a run killed before that leaves a state file in
``/run/trainfabric-netns`` naming its owner's pid, and :func:`sweep_stale` (called by every
new run) removes what a dead owner left behind.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import re
import secrets
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from trainfabric.diloco.train.config import ShapingConfig
from trainfabric.errors import ConfigError

STATE_DIR = Path("/run/trainfabric-netns")
SUBNET = "10.213.0"
CLONE_NEWNET = 0x40000000
_SENT = re.compile(r"Sent (\d+) bytes")
_DROPPED = re.compile(r"dropped (\d+)")


def _run(*args: str) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def require_tools() -> None:
    """Shaping needs root (CAP_NET_ADMIN) and iproute2's ``ip`` and ``tc``."""
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        raise ConfigError(
            "shaping", f"{' and '.join(missing)} not found (iproute2); install it or run unshaped"
        )
    if os.geteuid() != 0:
        raise ConfigError("shaping", "network namespaces need root; run as root or unshaped")


def enter(namespace: str) -> None:
    """Move the calling process into ``namespace`` (``setns(2)``; Python 3.11 has no os.setns)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({namespace}) failed")
    finally:
        os.close(fd)


def exec_prefix(namespace: str | None, cpus: tuple[int, ...] | None = None) -> list[str]:
    """The argv prefix that runs a command in ``namespace`` (``ip netns exec``) pinned to
    ``cpus`` (``taskset -c``, inherited by every process and thread it starts)."""
    pre = ["ip", "netns", "exec", namespace] if namespace else []
    if cpus:
        pre += ["taskset", "-c", ",".join(str(c) for c in cpus)]
    return pre


def call_in(namespace: str | None, fn, *args, cpus: tuple[int, ...] | None = None, **kw):
    """``fn(*args, **kw)`` in a new thread that entered ``namespace`` and is pinned to
    ``cpus`` (both per thread: the caller's namespace and affinity are untouched); returns
    its result or raises its exception. Sockets the thread opens belong to ``namespace``."""
    box: dict = {}

    def body() -> None:
        try:
            if cpus:
                os.sched_setaffinity(0, set(cpus))  # 0: the calling thread
            if namespace:
                enter(namespace)
            box["value"] = fn(*args, **kw)
        except BaseException as exc:  # re-raised in the caller
            box["error"] = exc

    t = threading.Thread(target=body, name=f"in-{namespace}", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _shape(dev: str, s: ShapingConfig, ns: str | None, verb: str = "add") -> None:
    pre = ("tc", "-n", ns) if ns else ("tc",)
    rate, burst = f"{s.rate_mbit}mbit", f"{s.burst_kb}kb"
    if s.qdisc == "tbf":
        _run(
            *pre,
            "qdisc",
            verb,
            "dev",
            dev,
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            burst,
            "latency",
            f"{s.latency_ms}ms",
        )
    else:
        _run(*pre, "qdisc", verb, "dev", dev, "root", "handle", "1:", "htb", "default", "10")
        _run(
            *pre,
            "class",
            verb,
            "dev",
            dev,
            "parent",
            "1:",
            "classid",
            "1:10",
            "htb",
            "rate",
            rate,
            "ceil",
            rate,
            "burst",
            burst,
        )


def _sent(dev: str, ns: str | None) -> int:
    pre = ("tc", "-n", ns) if ns else ("tc",)
    m = _SENT.search(_run(*pre, "-s", "qdisc", "show", "dev", dev, "root"))
    return int(m.group(1)) if m else 0


@dataclass
class Network:
    """A created (live) star network for ``n`` learners; use as a context manager."""

    tag: str
    n: int
    shaping: ShapingConfig
    created: list[str] = field(default_factory=list)  # what close() must delete

    @property
    def bridge(self) -> str:
        return f"tfd{self.tag}br"

    def namespace(self, r: int) -> str:
        return f"tfd-{self.tag}-{r}"

    def host_dev(self, r: int) -> str:
        return f"tfd{self.tag}h{r}"

    def inner_dev(self, r: int) -> str:
        return f"tfd{self.tag}n{r}"

    def address(self, r: int) -> str:
        return f"{SUBNET}.{r + 1}"

    def qdisc_bytes(self) -> list[tuple[int, int]]:
        """Per learner (bytes it sent, bytes sent to it): the root qdiscs' Sent counters."""
        return [
            (_sent(self.inner_dev(r), self.namespace(r)), _sent(self.host_dev(r), None))
            for r in range(self.n)
        ]

    def dev_bytes(self) -> tuple[tuple[int, int], ...]:
        """Per learner (bytes it sent, bytes sent to it) from the host-side veth's interface
        counters (sysfs ``rx_bytes``/``tx_bytes``: microseconds, where ``tc`` takes ~15 ms)."""
        out = []
        for r in range(self.n):
            stats = Path("/sys/class/net") / self.host_dev(r) / "statistics"
            rx, tx = (int((stats / f).read_text()) for f in ("rx_bytes", "tx_bytes"))
            out.append((rx, tx))
        return tuple(out)

    def manifest(self) -> dict:
        return {
            "topology": "star: one veth pair per learner to a Linux bridge",
            "qdisc": self.shaping.qdisc,
            "rate_mbit": self.shaping.rate_mbit,
            "burst_kb": self.shaping.burst_kb,
            "latency_ms": self.shaping.latency_ms if self.shaping.qdisc == "tbf" else None,
            "shaped": "egress of both veth ends (full duplex, rate each way)",
            "delay_ms": 0.0,
            "delay_note": "no delay added: netem is not available on this kernel",
            "addresses": [self.address(r) for r in range(self.n)],
            "namespaces": [self.namespace(r) for r in range(self.n)],
        }

    def reshape(self, shaping: ShapingConfig) -> None:
        """Replace every veth end's qdisc by ``shaping``'s (same kind of qdisc; a live
        network keeps its namespaces, addresses and whatever runs there)."""
        if shaping.qdisc != self.shaping.qdisc:
            raise ConfigError("qdisc", f"reshape keeps the qdisc kind ({self.shaping.qdisc})")
        for r in range(self.n):
            _shape(self.host_dev(r), shaping, None, "replace")
            _shape(self.inner_dev(r), shaping, self.namespace(r), "replace")
        self.shaping = shaping

    def queue_drops(self) -> int:
        """Packets the root qdiscs of every veth end dropped so far (``tc -s``: a full
        queue)."""
        total = 0
        for r in range(self.n):
            for dev, ns in ((self.inner_dev(r), self.namespace(r)), (self.host_dev(r), None)):
                pre = ("tc", "-n", ns) if ns else ("tc",)
                m = _DROPPED.search(_run(*pre, "-s", "qdisc", "show", "dev", dev, "root"))
                total += int(m.group(1)) if m else 0
        return total

    def close(self) -> None:
        for what in reversed(self.created):
            kind, name = what.split(":", 1)
            args = ("ip", "netns", "del", name) if kind == "ns" else ("ip", "link", "del", name)
            subprocess.run(args, capture_output=True, timeout=30)
        self.created.clear()
        (STATE_DIR / f"{self.tag}.json").unlink(missing_ok=True)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def create(n: int, shaping: ShapingConfig) -> Network:
    """Build the namespaces, veths, bridge and qdiscs; on any failure remove what was made."""
    require_tools()
    sweep_stale()
    net = Network(secrets.token_hex(3)[:5], n, shaping)
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    (STATE_DIR / f"{net.tag}.json").write_text(json.dumps({"pid": os.getpid(), "n": n}))
    atexit.register(net.close)
    try:
        _build(net)
    except Exception:
        net.close()
        raise
    return net


def _build(net: Network) -> None:
    _run("ip", "link", "add", net.bridge, "type", "bridge")
    net.created.append(f"link:{net.bridge}")
    _run("ip", "link", "set", net.bridge, "up")
    for r in range(net.n):
        ns, host, inner = net.namespace(r), net.host_dev(r), net.inner_dev(r)
        _run("ip", "netns", "add", ns)
        net.created.append(f"ns:{ns}")
        _run("ip", "link", "add", host, "type", "veth", "peer", "name", inner)
        net.created.append(f"link:{host}")
        _run("ip", "link", "set", inner, "netns", ns)
        _run("ip", "link", "set", host, "master", net.bridge, "up")
        _run("ip", "-n", ns, "addr", "add", f"{net.address(r)}/24", "dev", inner)
        _run("ip", "-n", ns, "link", "set", inner, "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _shape(host, net.shaping, None)
        _shape(inner, net.shaping, ns)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Remove the networks of runs whose owner process is gone; returns their tags."""
    swept = []
    for state in sorted(STATE_DIR.glob("*.json")) if STATE_DIR.is_dir() else []:
        try:
            info = json.loads(state.read_text())
        except (OSError, ValueError):
            info = {"pid": -1, "n": 0}
        if info.get("pid", -1) > 0 and _alive(info["pid"]):
            continue
        tag = state.stem
        stale = Network(tag, int(info.get("n", 0)), ShapingConfig())
        stale.created = [f"link:{stale.bridge}"]
        for r in range(stale.n):
            stale.created += [f"ns:{stale.namespace(r)}", f"link:{stale.host_dev(r)}"]
        stale.close()
        swept.append(tag)
    return swept


def utilisation(
    before: list[tuple[int, int]], after: list[tuple[int, int]], dt: float, rate_mbit: float
) -> float:
    """Busiest direction's Δbytes / (rate · Δt), capped to [0, 1] (the ``network`` signal)."""
    if dt <= 0:
        return 0.0
    cap = rate_mbit * 1e6 / 8 * dt
    busiest = max(
        (max(a[0] - b[0], a[1] - b[1]) for b, a in zip(before, after, strict=True)), default=0
    )
    return min(1.0, max(0.0, busiest / cap))


def wait_gone(net: Network, timeout: float = 5.0) -> bool:
    """True once none of ``net``'s namespaces is listed any more (cleanup check)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = _run("ip", "netns", "list")
        if not any(net.namespace(r) in listed for r in range(net.n)):
            return True
        time.sleep(0.05)
    return False
