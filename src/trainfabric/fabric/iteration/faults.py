"""Faults during a training iteration: static failed cables and link flaps, per mode.

Both are measured on the whole iteration (CLARIFICATIONS: "measure a flap as the stall of
the whole step and of the training iteration", never as the configured reaction time):

* **Static failed cables** (:func:`run_failures`): a fraction ``f`` of the leaf-spine cables
  down, uniform over them (:func:`~trainfabric.fabric.topology.fail_links`, both directions
  of a cable), one seeded set per draw, the same sets for every mode. The failures are old:
  every mechanism (hardware, host software, routing) already knows them when the iteration
  starts, i.e. each mode runs the whole iteration on its converged routes around them
  (its reaction time has passed). ``slowdown`` = iteration time with the failures / healthy
  iteration time of the same mode.
* **Link flaps** (:func:`run_flaps`): one cable down at ``t`` for ``d`` seconds, then up.

  - *When*: ``t`` uniform over the job's **communication intervals** of the mode's healthy
    run: the union of ``[start, finish)`` of every comm task that put bytes on the fabric.
  - *Which cable*: uniform among the cables that carry the job's traffic in the mode's
    healthy run (bits > 0 in either direction over the iteration): ``nic`` side, one NIC
    port (the host cable of one GPU on one plane); ``fabric`` side, one leaf-spine cable.
    Both directions go down.
  - *Hit* (``hit``, and ``flap_hit_rate`` = the share of draws with ``hit``): the flapped
    cable carries traffic of the job **at the flap instant** ``t`` in the healthy run, i.e.
    some flow in flight at ``t`` (started, still sending) has a route share on one of the
    cable's two directions. A cable the job uses at some time of the iteration is often
    idle at a random communication instant (another phase's links), so the rate is below 1.
  - *Reaction*: each mode learns the down and the up events through its own mechanisms
    (:data:`~trainfabric.fabric.routing.MECHANISMS`, the engine's views: hardware 5 us,
    host software 5 ms, routing 1 s, as the existing ``flaps`` scenario); until then its
    traffic into the dead cable is lost or stuck, as the flow engine models it.
  - *Cost*: every draw resumes from the engine's snapshot of the healthy run at ``t``
    (nothing before ``t`` is rerun) with the flap as link events, to the end of the
    iteration. ``slowdown`` = that iteration time / healthy; ``step_stall_s`` = the largest
    extra finish time of a comm task in flight at ``t`` (the stall of the collective step the
    flap hit); ``iteration_stall_s`` = iteration time - healthy iteration time.
  - *Draws*: ``flap_draws`` per mode in total, spread evenly over durations x sides (rounded
    up); draw ``k`` of (side, duration) uses the same two uniforms in every mode (common
    random numbers: a paired comparison of modes), mapped onto that mode's own intervals and
    cables.

The ranking of modes: in a fluid model spraying and adaptive routing are ideal on a healthy
fabric, so differences between modes come only from ECMP collisions (single-path modes: the
healthy iteration), from the failures and flaps (routes around dead cables after each
mode's reaction time, loss into dead links), never from packet effects (the flow engine has
none): :data:`RANKING_SOURCE` says so in every output.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T

FAILURES_STEM = "fabric_iteration_failures"
FLAPS_STEM = "fabric_iteration_flaps"
SIDES = ("nic", "fabric")
RANKING_SOURCE = (
    "flow engine: modes differ only by ECMP collisions (single-path modes) and by how each "
    "routes around failed or flapping cables after its reaction time; spraying and adaptive "
    "routing are ideal on a healthy fabric and no packet effect is modelled"
)


# -- communication intervals and draws -----------------------------------------------------------
def merge_intervals(start_s: np.ndarray, finish_s: np.ndarray) -> np.ndarray:
    """The union of ``[start, finish)`` intervals as sorted disjoint ``[k, 2]`` (empty ones
    dropped; touching ones merged)."""
    start_s, finish_s = np.asarray(start_s, float), np.asarray(finish_s, float)
    keep = finish_s > start_s
    s, f = start_s[keep], finish_s[keep]
    if s.size == 0:
        return np.zeros((0, 2))
    order = np.argsort(s, kind="stable")
    s, f = s[order], np.maximum.accumulate(f[order])
    new = np.r_[True, s[1:] > f[:-1]]
    heads = np.flatnonzero(new)
    ends = np.r_[heads[1:] - 1, s.size - 1]
    return np.c_[s[heads], f[ends]]


def time_in_intervals(intervals: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Map uniforms ``u`` in [0, 1) onto the union of ``intervals`` by length (inverse CDF of
    the uniform distribution over the union)."""
    if intervals.shape[0] == 0:
        raise ConfigError("faults", "the job has no communication on the fabric to flap")
    length = intervals[:, 1] - intervals[:, 0]
    cum = np.r_[0.0, np.cumsum(length)]
    pos = np.asarray(u, float) * cum[-1]
    k = np.clip(np.searchsorted(cum, pos, side="right") - 1, 0, length.size - 1)
    return np.minimum(intervals[k, 0] + (pos - cum[k]), intervals[k, 1])


def cable_candidates(topo: T.Topology, link_bits: np.ndarray, side: str) -> np.ndarray:
    """Cables (named by their host -> leaf or leaf -> spine link id) of ``side`` that carry
    bits in either direction (``link_bits``: bits per directed link over the run)."""
    if side not in SIDES:
        raise ConfigError("faults.flap_sides", f"must be nic or fabric, got {side!r}")
    tier = T.HOST_UP if side == "nic" else T.UP1
    cables = np.flatnonzero(topo.link_tier == tier)
    used = (link_bits[cables] > 0) | (link_bits[topo.reverse[cables]] > 0)
    return cables[used]


def cable_links(topo: T.Topology, cable: int) -> np.ndarray:
    """Both directed links of ``cable``."""
    return np.array([cable, int(topo.reverse[cable])], np.int64)


def flap_plan(faults, seed: int) -> pd.DataFrame:
    """The draws of every mode: side, duration, draw index and the two uniforms (time, cable),
    ``ceil(flap_draws / (sides x durations))`` per (side, duration)."""
    sides, durations = list(faults.flap_sides), list(faults.flap_durations_s)
    if not sides or not durations or faults.flap_draws == 0:
        return pd.DataFrame(columns=["side", "duration_s", "draw", "u_time", "u_cable"])
    per = math.ceil(faults.flap_draws / (len(sides) * len(durations)))
    rows = []
    for i, side in enumerate(sides):
        for j, dur in enumerate(durations):
            u = np.random.default_rng([seed, 0xF1A9, i, j]).random((per, 2))
            for k in range(per):
                rows.append((side, float(dur), k, float(u[k, 0]), float(u[k, 1])))
    return pd.DataFrame(rows, columns=["side", "duration_s", "draw", "u_time", "u_cable"])


# -- static failed cables -------------------------------------------------------------------------
def _sim(run, **options):
    """A :class:`~trainfabric.fabric.tasks.engine.TaskSim` of ``run``'s graph under its mode (the
    healthy run's bin length; ``options``: ``link_up``, ``events``)."""
    from trainfabric.fabric.iteration.run import make_router
    from trainfabric.fabric.tasks.engine import TaskSim

    router = make_router(run.topo, run.mode, run.seed)
    return TaskSim(run.topo, run.graph, router, bin_s=run.result.bin_s, **options)


def _iteration_s(res) -> float:
    """The iteration time of a result; ``inf`` when some task never finished (a connection
    left without a path: the job hangs)."""
    return float(res.makespan_s) if res.unfinished == 0 else math.inf


def failed_iteration(run, link_up: np.ndarray):
    """``run``'s iteration with the links ``~link_up`` down from the start (every mechanism
    knows them): the engine's result."""
    return _sim(run, link_up=link_up).run()


def run_failures(run, faults, seed: int, on_draw=None) -> pd.DataFrame:
    """Static failed cables (module doc) for ``run`` (an
    :class:`~trainfabric.fabric.iteration.run.IterationRun`, its healthy iteration): one row per
    failed fraction x draw, with ``slowdown`` against ``run.iteration_s``. Draw ``d`` of
    fraction ``f`` fails the cables of seed ``(seed, round(f * 1e6), d)``: the same sets in
    every mode. The draws are independent runs: with ``faults.workers > 1`` they run on that
    many local processes (:func:`~trainfabric.runs.executors.map_local`), the same rows.
    ``on_draw(d)``, if given, is called after each draw (progress)."""
    items = [(f, d, seed) for f in faults.failed_fractions for d in range(faults.failure_draws)]
    done = (lambda k: on_draw(items[k][1])) if on_draw is not None else (lambda k: None)
    if faults.workers > 1 and len(items) > 1:
        from trainfabric.runs.executors import map_local

        rows = map_local(_draw_held, items, faults.workers, done, _hold, (run,))
    else:
        rows = []
        for k, item in enumerate(items):
            rows.append(failure_row(run, *item))
            done(k)
    return pd.DataFrame(rows)


def failure_row(run, frac: float, d: int, seed: int) -> dict:
    """Draw ``d`` of ``frac`` failed cables (:func:`run_failures`): its table row."""
    draw_seed = int(np.random.default_rng([seed, round(frac * 1e6), d]).integers(2**31))
    up = T.fail_links(run.topo, frac, seed=draw_seed)
    res = failed_iteration(run, up)
    it = _iteration_s(res)
    return {
        "mode": run.mode,
        "failed_fraction": float(frac),
        "draw": d,
        "failed_cables": int((~up).sum()) // 2,
        "iteration_s": it,
        "healthy_iteration_s": run.iteration_s,
        "slowdown": it / run.iteration_s,
        "unfinished_tasks": int(res.unfinished),
        "sim_wall_s": float(res.wall_s),
    }


_HELD: list = []  # a pool worker's copy of the healthy run (:func:`_hold`)


def _hold(run) -> None:
    _HELD[:] = [run]


def _draw_held(item) -> dict:
    return failure_row(_HELD[0], *item)


# -- flaps ---------------------------------------------------------------------------------------
def comm_intervals(run) -> np.ndarray:
    """The healthy run's communication intervals: the union of ``[start, finish)`` of every
    comm task with flows on the fabric."""
    from trainfabric.fabric.tasks.graph import COMM

    g, res = run.graph, run.result
    sizes = np.diff(g.set_ptr)
    comm = np.flatnonzero(g.kind == COMM)
    comm = comm[sizes[g.flow_set[comm]] > 0]
    return merge_intervals(res.start_s[comm], res.finish_s[comm])


def _draws(run, faults, seed: int) -> pd.DataFrame:
    """The flap plan mapped onto ``run``: time ``at_s`` and ``cable`` per draw, sorted by time
    (so that one healthy run snapshots them in order)."""
    plan = flap_plan(faults, seed)
    plan["at_s"] = time_in_intervals(comm_intervals(run), plan["u_time"].to_numpy())
    cable = np.zeros(len(plan), np.int64)
    for side in plan["side"].unique():
        pick = (plan["side"] == side).to_numpy()
        cands = cable_candidates(run.topo, run.result.link_bits, side)
        if cands.size == 0:
            raise ConfigError("faults.flap_sides", f"the job's traffic uses no {side} cable")
        k = np.floor(plan.loc[pick, "u_cable"].to_numpy() * cands.size).astype(np.int64)
        cable[pick] = cands[np.minimum(k, cands.size - 1)]
    plan["cable"] = cable
    return plan.sort_values(["at_s", "side", "duration_s", "draw"], kind="stable")


def flap_once(run, healthy, cable: int, at_s: float, duration_s: float) -> dict:
    """One flap of ``cable`` (both directions) at ``at_s`` for ``duration_s``, resumed from
    ``healthy``'s snapshot at ``at_s`` (``healthy``: a
    :class:`~trainfabric.fabric.tasks.engine.TaskSim`
    of ``run`` without events, at or before ``at_s``): the row's figures (module doc)."""
    from trainfabric.fabric.events import LinkEvents
    from trainfabric.fabric.tasks.engine import TaskSim
    from trainfabric.fabric.tasks.graph import COMM

    topo, res0, base = run.topo, run.result, run.iteration_s
    links = cable_links(topo, cable)
    snap = healthy.snapshot(at_s)
    hit = bool(snap.links_in_flight()[links].any())
    wall0 = time.perf_counter()
    events = LinkEvents.flap(links, at_s, at_s + duration_s)
    res = TaskSim.resume(snap, healthy, events=events).run()
    wall = time.perf_counter() - wall0
    it = _iteration_s(res)
    steps = (res0.start_s <= at_s) & (res0.finish_s > at_s) & (run.graph.kind == COMM)
    extra = np.nan_to_num(res.finish_s[steps] - res0.finish_s[steps], nan=math.inf)
    return {
        "at_s": at_s,
        "cable": int(cable),
        "tier": T.TIER_NAMES[int(topo.link_tier[cable])],
        "plane": int(topo.link_plane[cable]),
        "hit": hit,
        "reaction_s": float(np.max(healthy.router.reaction_s(links))),
        "iteration_s": it,
        "healthy_iteration_s": base,
        "slowdown": it / base,
        "iteration_stall_s": it - base,
        "step_stall_s": float(extra.max(initial=0.0)),
        "unfinished_tasks": int(res.unfinished),
        "resume_wall_s": wall,
    }


def run_flaps(run, faults, seed: int) -> pd.DataFrame:
    """Link flaps (module doc) during ``run``'s iteration: one row per draw, each resumed from
    the snapshot of one healthy run at its flap time."""
    plan = _draws(run, faults, seed)
    healthy = _sim(run)
    rows = []
    for d in plan.itertuples(index=False):
        row = flap_once(run, healthy, int(d.cable), float(d.at_s), float(d.duration_s))
        rows.append(
            {
                "mode": run.mode,
                "side": d.side,
                "duration_s": float(d.duration_s),
                "draw": int(d.draw),
                **row,
            }
        )
    return pd.DataFrame(rows)


# -- summaries ---------------------------------------------------------------------------------
def failures_summary(table: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per mode (and failed fraction, in the key when there are several): the median and the
    worst (largest) iteration slowdown over the draws."""
    out: dict[str, dict[str, float]] = {}
    if table.empty:
        return out
    fractions = sorted(table["failed_fraction"].unique())
    for (mode, frac), rows in table.groupby(["mode", "failed_fraction"], sort=False):
        tag = "" if len(fractions) == 1 else f"_at_{round(100 * frac)}pct"
        s = rows["slowdown"].to_numpy(float)
        out.setdefault(mode, {}).update(
            {
                f"failure_slowdown_median{tag}": float(np.median(s)),
                f"failure_slowdown_worst{tag}": float(np.max(s)),
            }
        )
    return out


QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}


def flaps_summary(table: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per mode: the quantiles of the iteration slowdown over all draws (``flap_slowdown_p50``
    ... ``_max``) and per duration and side (``flap_slowdown_p50_nic_1ms``, ...), and
    ``flap_hit_rate`` (share of draws whose cable carried traffic at the flap instant)."""
    out: dict[str, dict[str, float]] = {}
    if table.empty:
        return out
    for mode, rows in table.groupby("mode", sort=False):
        row = _quantiles(rows["slowdown"], "flap_slowdown")
        row["flap_hit_rate"] = float(rows["hit"].mean())
        for (side, dur), part in rows.groupby(["side", "duration_s"], sort=False):
            row |= _quantiles(part["slowdown"], "flap_slowdown", f"_{side}_{dur * 1e3:g}ms")
        out[mode] = row
    return out


def _quantiles(values: pd.Series, prefix: str, suffix: str = "") -> dict[str, float]:
    v = values.to_numpy(float)
    return {f"{prefix}_{k}{suffix}": float(np.quantile(v, q)) for k, q in QUANTILES.items()}
