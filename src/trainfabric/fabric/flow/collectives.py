"""Collectives on the fabric: placement, flows with dependencies, NCCL-tests metrics.

A collective over ``n`` ranks is a list of steps (:mod:`trainfabric.workloads.collectives`);
:func:`collective_flows` maps rank ``i`` to host ``hosts[i]`` and turns the steps into one
:class:`~trainfabric.fabric.flows.FlowTable`:

* a flow of step ``k+1`` starts when its predecessors of step ``k`` have finished, plus
  ``step_latency_s`` (software/launch latency per step; the per-hop propagation latency is
  the engine's). ``sync="rank"``: the predecessors are the step-``k`` flows that the sending
  rank takes part in (it sends on what it has received, as NCCL's ring does: a stall
  propagates around the ring step by step); ``sync="step"``: a global barrier, every flow of
  step ``k`` (``n_k n_{k+1}`` dependency edges, so small groups only).
* ``connections`` (``CONNECTIONS``) says what a connection is, hence what the ECMP hash
  input ``entropy`` is:

  - ``"persistent"`` (default, as NCCL): one queue pair per (job, source host, destination
    host, channel), re-used by every step; ``entropy`` is a seeded 64-bit mix of those four,
    so a pair's steps share one path under per-flow hashing and a collision persists;
  - ``"per_message"`` (as htsim's connection-matrix generators, which start a new flow at
    every hop of a ring): a new connection per step (message), ``entropy`` mixes the step
    index in as well, so every step draws a fresh ECMP / flowlet hash.

  Only the hash input differs: software plane pinning (``pinning``) places a host pair's
  channels round-robin whatever the connection, and the split modes ignore the hash. No
  per-message start-up cost (handshake, first RTT) is added here: that is a transport
  effect for the calibration of the engine.
  ``channels = c`` splits every transfer into ``c`` connections of ``bytes / c`` each
  (NCCL's multiple channels/QPs).

Ring shortcut (:func:`run_collective`): when every step has the same pairs and bytes (ring
reduce-scatter, all-gather, all-reduce) and the steps are separated by a global barrier, the
steps are identical simulations, so the collective time is ``n_steps x`` the time of one
step. The shortcut is used only then (never for ``flowlet``, nor for ``per_message``
connections under a single-path mode, whose steps hash differently), and results say so
(``steps_simulated`` < ``n_steps``); with ``sync="rank"`` the steps overlap and every step
is simulated.

Size guard (:func:`check_collective_size`): before any step or flow is built, the flows the
engine will hold (:func:`flow_count`: ``n (n-1)`` for an all-to-all, ``n`` per ring or
halving-doubling step, one step under the ring shortcut, times ``channels``) are priced by
:func:`~trainfabric.fabric.flows.flow_memory_bytes` and refused over the memory limit. The
uniform all-to-all is built from index arithmetic (:func:`uniform_all_to_all`), never from a
dense ``n x n`` matrix.

Metrics (NCCL-tests, ``doc/PERFORMANCE.md``): for a per-rank buffer of ``S`` bytes taking
``t`` seconds, ``algbw = S / t`` and ``busbw = algbw x factor`` with factor ``2(n-1)/n``
(all-reduce), ``(n-1)/n`` (reduce-scatter, all-gather, all-to-all), ``1`` (permutation /
point-to-point, broadcast, reduce). ``S`` is the input of an all-reduce or reduce-scatter,
the gathered output of an all-gather and the whole send buffer of an all-to-all, as in
NCCL-tests. :func:`line_rate_fraction` is ``busbw`` over the per-rank NIC rate (all planes).
The factor is the bytes each rank sends per byte of ``S``, so a collective that keeps every
NIC busy sending for all of ``t`` has ``busbw`` = the NIC's payload rate; with 64 B headers
per 4096 B of payload that caps ``line_rate_fraction`` at ``4096/4160 = 0.9846``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainfabric.errors import ConfigError, InfeasibleError
from trainfabric.fabric.flow.calibration import Calibration, simulate_calibrated
from trainfabric.fabric.flows import FlowTable, flow_memory_bytes, mix64
from trainfabric.fabric.result import EngineResult
from trainfabric.limits import check_memory
from trainfabric.workloads import collectives as wc

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "permutation")
ALGORITHMS = ("ring", "halving_doubling")
PLACEMENTS = ("packed", "scattered", "random")
SYNCS = ("rank", "step")
CONNECTIONS = ("persistent", "per_message")
MAX_BARRIER_EDGES = 4_000_000
_BUS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "permutation": lambda n: 1.0,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


# -- metrics -----------------------------------------------------------------------------------
def bus_factor(kind: str, n: int) -> float:
    """NCCL-tests bus-bandwidth factor of collective ``kind`` over ``n`` ranks."""
    if kind not in _BUS:
        raise ConfigError("kind", f"unknown collective {kind!r}; known: {', '.join(_BUS)}")
    if n < 1:
        raise ConfigError("ranks", "must be >= 1")
    return float(_BUS[kind](n))


def algbw_Bps(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth ``S / t`` (bytes/s)."""
    return size_bytes / time_s


def busbw_Bps(kind: str, n: int, size_bytes: float, time_s: float) -> float:
    """Bus bandwidth ``algbw x factor`` (bytes/s)."""
    return algbw_Bps(size_bytes, time_s) * bus_factor(kind, n)


def line_rate_fraction(
    kind: str, n: int, size_bytes: float, time_s: float, nic_rate_bps: float
) -> float:
    """``busbw / B`` with ``B`` the per-rank NIC rate (all planes, bits/s)."""
    return 8.0 * busbw_Bps(kind, n, size_bytes, time_s) / nic_rate_bps


def ideal_time_s(kind: str, n: int, size_bytes: float, nic_rate_bps: float) -> float:
    """Bandwidth-only lower bound ``(S / B) x factor`` (no headers, no latency)."""
    return 8.0 * size_bytes * bus_factor(kind, n) / nic_rate_bps


# -- placement and steps ------------------------------------------------------------------------
def place(host_leaf: np.ndarray, n: int, placement: str, seed: int = 0, available=None):
    """``n`` host ids for ranks ``0..n-1`` out of ``available`` (default: every host).

    ``host_leaf[h]`` is host ``h``'s leaf (any plane). ``packed``: the lowest host ids in
    order (consecutive ranks share a leaf); ``scattered``: round-robin over the leaves
    (rank ``i`` on the ``i``-th leaf in turn, so ring neighbours sit on different leaves);
    ``random``: a seeded uniform draw in random rank order.
    """
    hosts = np.arange(host_leaf.size) if available is None else np.asarray(available, np.int64)
    if not 1 <= n <= hosts.size:
        raise ConfigError("ranks", f"must be in 1..{hosts.size} (available hosts), got {n}")
    if placement == "packed":
        return np.sort(hosts)[:n]
    if placement == "random":
        return np.random.default_rng(seed).permutation(hosts)[:n]
    if placement != "scattered":
        raise ConfigError("placement", f"unknown {placement!r}; known: {', '.join(PLACEMENTS)}")
    hosts = np.sort(hosts)
    leaf = host_leaf[hosts]
    order = np.lexsort((hosts, leaf))  # by leaf, then host id
    sorted_leaf = leaf[order]
    first = np.searchsorted(sorted_leaf, sorted_leaf, side="left")
    slot = np.arange(hosts.size) - first  # position of the host inside its leaf
    return hosts[order[np.lexsort((sorted_leaf, slot))]][:n]


def collective_steps(kind: str, n: int, size_bytes: float, algorithm: str = "ring", seed: int = 0):
    """Steps of ``kind`` over ranks ``0..n-1`` with a per-rank buffer of ``size_bytes``.

    ``permutation``: one step, rank ``i`` sends ``size_bytes`` to ``perm[i]`` for a seeded
    random derangement ``perm`` (a random permutation with no fixed point).
    """
    if not size_bytes > 0:
        raise ConfigError("size_bytes", "must be > 0")
    if n < 2:
        raise ConfigError("ranks", f"a collective needs >= 2 ranks, got {n}")
    ranks = np.arange(n)
    if kind == "permutation":
        perm = _derangement(n, np.random.default_rng(seed))
        return [wc.Step(ranks, perm, np.full(n, float(size_bytes)))]
    if kind == "all_to_all":
        return uniform_all_to_all(n, size_bytes)
    table = {"all_reduce": wc.ALL_REDUCE, "reduce_scatter": wc.REDUCE_SCATTER}
    table["all_gather"] = wc.ALL_GATHER
    if kind not in table:
        raise ConfigError("kind", f"unknown collective {kind!r}; known: {', '.join(KINDS)}")
    if algorithm not in table[kind]:
        raise ConfigError("algorithm", f"unknown {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    return table[kind][algorithm](ranks, size_bytes)


def uniform_all_to_all(n: int, size_bytes: float) -> list:
    """One step of all ``n (n-1)`` flows of ``size_bytes / n`` each, in the order of
    :func:`trainfabric.workloads.collectives.all_to_all` (shift ``k = 1..n-1``, then rank
    ``i -> (i + k) mod n``), without its dense ``n x n`` byte matrix: ``O(n^2)`` memory only
    for the flows themselves (src, dst: int64; bytes: float64)."""
    i = np.tile(np.arange(n, dtype=np.int64), n - 1)
    dst = np.repeat(np.arange(1, n, dtype=np.int64), n)
    dst += i
    dst %= n
    return [wc.Step(i, dst, np.full(i.size, size_bytes / n))]


def grouped_all_to_all(
    hosts: np.ndarray, group_size: int, size_bytes: float, *, seed: int = 0
) -> FlowTable:
    """Concurrent all-to-alls within consecutive groups of ``group_size`` ranks (expert
    parallelism: group ``g`` = ranks ``g·G .. g·G + G-1`` on ``hosts``), every group at once:
    ``n (G-1)`` flows of ``size_bytes / G`` (the uniform all-to-all of each group), tagged
    ``job = g``, one persistent connection per pair (``entropy`` as :func:`collective_flows`).
    Built by index arithmetic: ``O(n G)`` memory for the flows only."""
    hosts = np.asarray(hosts, np.int64)
    n = hosts.size
    if group_size < 2 or n % group_size:
        raise ConfigError("group_size", f"must be >= 2 and divide the ranks ({n})")
    (step,) = uniform_all_to_all(group_size, size_bytes)
    groups = n // group_size
    off = np.repeat(np.arange(groups, dtype=np.int64) * group_size, step.src.size)
    src = hosts[np.tile(step.src, groups) + off]
    dst = hosts[np.tile(step.dst, groups) + off]
    job = np.repeat(np.arange(groups, dtype=np.int64), step.src.size)
    entropy = mix64(job, src, dst, np.zeros(src.size, np.int64), seed=seed)
    return FlowTable.simple(src, dst, step.bytes[0], job=job, entropy=entropy)


def _steps_and_flows(kind: str, n: int, algorithm: str) -> tuple[int, int]:
    """``(steps, flows per step)`` of a collective over ``n`` ranks (:func:`collective_steps`)."""
    if kind == "all_to_all":
        return 1, n * (n - 1)
    if kind == "permutation":
        return 1, n
    per_pass = n - 1 if algorithm == "ring" else max(1, int(n).bit_length() - 1)
    return (2 if kind == "all_reduce" else 1) * per_pass, n


def shortcut_applies(sync: str, mode: str, connections: str = "persistent") -> bool:
    """Whether the ring shortcut may replace identical ring steps by one (module doc):
    a global barrier, not ``flowlet``, and the same hashes every step (``persistent``
    connections, or a split mode that ignores the hash)."""
    if connections not in CONNECTIONS:
        raise ConfigError(
            "connections", f"unknown {connections!r}; known: {', '.join(CONNECTIONS)}"
        )
    split = mode in ("spray", "adaptive")
    return sync == "step" and mode != "flowlet" and (connections == "persistent" or split)


def flow_count(
    kind: str,
    n: int,
    algorithm: str = "ring",
    sync: str = "rank",
    mode: str = "ecmp",
    connections: str = "persistent",
) -> int:
    """Flows (per channel) the engine simulates for one collective: every step's flows, or one
    step when the ring shortcut applies (:func:`run_collective`, :func:`shortcut_applies`)."""
    steps, per_step = _steps_and_flows(kind, n, algorithm)
    ring = kind in ("all_reduce", "reduce_scatter", "all_gather") and algorithm == "ring"
    if ring and shortcut_applies(sync, mode, connections):
        steps = 1
    return steps * per_step


def collective_memory_bytes(
    kind: str,
    n: int,
    *,
    algorithm="ring",
    sync="rank",
    channels=1,
    planes=1,
    modes=("ecmp",),
    connections="persistent",
) -> tuple[float, int]:
    """``(bytes, flows)``: the largest over ``modes`` of the flows x per-flow bytes
    (:func:`~trainfabric.fabric.flows.flow_memory_bytes`), with ``channels`` flows per
    transfer plus their ``2 x channels`` dependencies (8 B each) per flow."""
    worst = (0.0, 0)
    for mode in modes:
        flows = flow_count(kind, n, algorithm, sync, mode, connections) * channels
        split = mode in ("spray", "adaptive")
        nbytes = flow_memory_bytes(flows, planes, split) + 16.0 * channels * flows
        worst = max(worst, (nbytes, flows))
    return worst


def check_collective_size(field: str, kind: str, n: int, **options) -> int:
    """Refuse (ConfigError naming ``field``, e.g. ``topology.gpus`` or ``collective.ranks``)
    a collective whose flows exceed the memory limit; returns the flow count. ``options``:
    those of :func:`collective_memory_bytes`."""
    nbytes, flows = collective_memory_bytes(kind, n, **options)
    check_memory(field, nbytes, f"a {kind} over {n:,} ranks ({flows:,} flows)")
    return flows


def _derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform random permutation, fixed points repaired by swapping with a random position."""
    perm = rng.permutation(n)
    for i in np.flatnonzero(perm == np.arange(n)):
        if perm[i] != i:
            continue
        j = int(rng.integers(n - 1))
        j += j >= i
        perm[i], perm[j] = perm[j], perm[i]
    return perm


# -- flows ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CollectiveFlows:
    """A collective (or a sequence of them) as flows; ``step[f]`` is flow ``f``'s step index."""

    flows: FlowTable
    step: np.ndarray
    n_steps: int


def collective_flows(
    steps: list,
    hosts: np.ndarray,
    *,
    job: int = 0,
    step_latency_s: float | np.ndarray = 2e-6,
    sync: str = "rank",
    channels: int = 1,
    release_s: float = 0.0,
    seed: int = 0,
    connections: str = "persistent",
) -> CollectiveFlows:
    """Flows of ``steps`` (rank ids) on ``hosts``; ``step_latency_s`` scalar or per step;
    ``connections``: ``"persistent"`` or ``"per_message"`` (module doc)."""
    if sync not in SYNCS:
        raise ConfigError("sync", f"unknown {sync!r}; known: {', '.join(SYNCS)}")
    if connections not in CONNECTIONS:
        raise ConfigError(
            "connections", f"unknown {connections!r}; known: {', '.join(CONNECTIONS)}"
        )
    if channels < 1:
        raise ConfigError("channels", "must be >= 1")
    hosts = np.asarray(hosts, np.int64)
    lat = np.broadcast_to(np.asarray(step_latency_s, float), (len(steps),))
    src, dst, nbytes, step_of, chan = [], [], [], [], []
    for k, s in enumerate(steps):
        keep = s.bytes > 0
        m = int(keep.sum())
        src.append(np.repeat(hosts[s.src[keep]], channels))
        dst.append(np.repeat(hosts[s.dst[keep]], channels))
        nbytes.append(np.repeat(s.bytes[keep] / channels, channels))
        chan.append(np.tile(np.arange(channels), m))
        step_of.append(np.full(m * channels, k, np.int64))
    src, dst, nbytes, chan, step_of = (np.concatenate(a) for a in (src, dst, nbytes, chan, step_of))
    deps_ptr, deps = _step_deps(src, dst, step_of, len(steps), sync)
    f = src.size
    if connections == "persistent":
        entropy = mix64(np.full(f, job), src, dst, chan, seed=seed)
    else:  # a new connection (hash) per message: the step index joins the key
        entropy = mix64(np.full(f, job), src, dst, chan, step_of, seed=seed)
    flows = FlowTable(
        src=src,
        dst=dst,
        bytes=nbytes,
        entropy=entropy,
        job=np.full(f, job, np.int32),
        deps_ptr=deps_ptr,
        deps=deps,
        release_s=np.full(f, float(release_s)),
        delay_s=lat[step_of].copy(),
        channel=chan,
    )
    return CollectiveFlows(flows, step_of, len(steps))


def _step_deps(src, dst, step_of, n_steps: int, sync: str):
    """CSR predecessors: per flow of step k+1, the flows of step k (see module doc)."""
    f = src.size
    bounds = np.searchsorted(step_of, np.arange(n_steps + 1))
    counts = np.zeros(f, np.int64)
    parts: list[np.ndarray] = []
    for k in range(n_steps - 1):
        a, b, c = bounds[k], bounds[k + 1], bounds[k + 2]
        if sync == "step":
            if (b - a) * (c - b) > MAX_BARRIER_EDGES:
                raise ConfigError(
                    "sync", f"a global barrier over {b - a} flows is too large; use sync='rank'"
                )
            counts[b:c] = b - a
            parts.append(np.tile(np.arange(a, b), c - b))
            continue
        # flows of step k touching each host (as source or destination), grouped by host
        host = np.concatenate([src[a:b], dst[a:b]])
        fid = np.tile(np.arange(a, b), 2)
        order = np.lexsort((fid, host))
        host, fid = host[order], fid[order]
        lo = np.searchsorted(host, src[b:c], side="left")
        hi = np.searchsorted(host, src[b:c], side="right")
        counts[b:c] = hi - lo
        take = np.repeat(lo - np.cumsum(np.r_[0, (hi - lo)[:-1]]), hi - lo) + np.arange(
            (hi - lo).sum()
        )
        parts.append(fid[take])
    deps_ptr = np.r_[0, np.cumsum(counts)].astype(np.int64)
    deps = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return deps_ptr, deps.astype(np.int64)


def identical_steps(steps: list) -> bool:
    """True when every step has the same sources, destinations and bytes (a ring)."""
    first = steps[0]
    distinct = {id(s): s for s in steps}  # ring steps share a few Step objects: compare those
    return all(
        s is first
        or (
            np.array_equal(s.src, first.src)
            and np.array_equal(s.dst, first.dst)
            and np.array_equal(s.bytes, first.bytes)
        )
        for s in distinct.values()
    )


# -- running ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CollectiveRun:
    """Completion of a collective simulated on a fabric: on the flow engine
    (:func:`run_collective`, calibrated or not) or on the packet engine (the scenarios').

    ``time_s``: from release to the last byte's arrival (incl. propagation), seconds. When the
    ring shortcut applied, ``steps_simulated = 1`` and ``time_s = n_steps x`` the one step's
    time. ``result``: the engine's result of the steps simulated
    (:class:`~trainfabric.fabric.result.EngineResult`).
    """

    time_s: float
    n_steps: int
    steps_simulated: int
    n_flows: int
    n_events: int
    wall_s: float
    result: EngineResult

    @classmethod
    def of(
        cls, result: EngineResult, n_steps: int, shortcut: bool, release_s: float = 0.0
    ) -> CollectiveRun:
        """The collective of ``n_steps`` steps whose simulated flows (one step under the ring
        ``shortcut``, else every step) gave ``result``: ``time_s = (makespan_s - release_s) x
        n_steps`` under the shortcut, ``makespan_s - release_s`` else (seconds); ``n_flows =
        result.finish_s.size``. InfeasibleError if a flow never finished."""
        if result.unfinished:
            raise InfeasibleError(f"{result.unfinished} flows of the collective never finished")
        one = result.makespan_s - float(release_s)
        return cls(
            time_s=one * (n_steps if shortcut else 1),
            n_steps=n_steps,
            steps_simulated=1 if shortcut else n_steps,
            n_flows=result.finish_s.size,
            n_events=int(result.n_events),
            wall_s=float(result.wall_s),
            result=result,
        )

    @property
    def shortcut(self) -> bool:
        return self.steps_simulated < self.n_steps

    @property
    def packet(self) -> dict:
        """The packet engine's figures of the run (its result's ``packet_metrics()``);
        ``{}`` on the flow engine."""
        return self.result.packet_metrics()


def run_collective(
    topo,
    router,
    steps: list,
    hosts,
    *,
    shortcut: bool = True,
    link_up=None,
    batch_rtol: float = 0.0,
    calibration: Calibration | None = None,
    **flow_options,
) -> CollectiveRun:
    """Simulate ``steps`` on ``hosts`` (see :func:`collective_flows` for ``flow_options``;
    ``link_up``: links down from the start; ``batch_rtol``: see the engine) on the flow
    engine, calibrated by ``calibration`` when given
    (:func:`~trainfabric.fabric.flow.calibration.simulate_calibrated`).

    The ring shortcut (module doc) applies when ``shortcut``, ``sync == "step"``, every step
    is identical, the mode is not ``flowlet`` (whose re-hashes depend on each step's idle
    gaps) and every step hashes alike (``persistent`` connections or a split mode); the
    steps are then identical simulations (static failures, same connections).
    """
    from trainfabric.fabric.flow.engine import simulate

    connections = flow_options.get("connections", "persistent")
    use = (
        shortcut
        and shortcut_applies(flow_options.get("sync", "rank"), router.mode, connections)
        and len(steps) > 1
        and identical_steps(steps)
    )
    cf = collective_flows(steps[:1] if use else steps, hosts, **flow_options)
    options = dict(link_up=link_up, batch_rtol=batch_rtol)
    if calibration is None:
        res = simulate(topo, cf.flows, router, **options)
    else:
        res = simulate_calibrated(topo, cf.flows, router, calibration, **options)
    return CollectiveRun.of(res, len(steps), use, flow_options.get("release_s", 0.0))
