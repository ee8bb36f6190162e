"""``trainfabric ocs online``: rewire OCSes online under drifting traffic and measure the regret.

The traffic is a generator (``--traffic random-walk|jumps|moe-phases|job-arrival`` with
``--slots``, ``--v1`` and ``--pods``; :func:`trainfabric.ocs.traffic.generate`) or a file
(``--traffic PATH``, ``.npy`` ``[T, n, n]`` or CSV ``slot,src,dst,bytes``; read by
:func:`trainfabric.ocs.traffic.read_sequence`). The one-hop cost, the policies and the bound
are those of :mod:`trainfabric.ocs.online.threshold`; the regret is measured against the exact
per-slot optimum. ``--switch-cost-s`` defaults to the optimal cost of slot 0 (one slot's time).

``--charge per-circuit`` charges ``C`` per circuit added to the wiring (the least any split
onto the OCSes must add). ``--churn`` also splits every reconfiguration onto the OCSes
(:mod:`trainfabric.ocs.online.churn`) and reports the cross-connects a fresh and a
churn-aware split add, and, with the per-circuit charge, the regret re-charged with the
deployed split's cross-connect adds (``regret_cross_connects_s``).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from trainfabric.clikit import (
    ConfigOpt,
    JsonOpt,
    MaxMemoryOpt,
    ProgressOpt,
    SeedOpt,
    emit_json,
    finite,
    options,
    out,
    progress,
)
from trainfabric.errors import ConfigError
from trainfabric.ocs.cli.options import FallbackOpt, OcsOpt, PortsOpt, RateOpt
from trainfabric.tables import Col, fmt_number, print_records

GENERATORS = ("random-walk", "jumps", "moe-phases", "job-arrival")
POLICIES = (
    "threshold",
    "always",
    "never",
    "oracle",
    "glr",
    "online-balance",
    "online-learned",
    "glr-calibrated",
)
CHARGES = {"per-reconfiguration": "reconfiguration", "per-circuit": "circuit"}
# Work guard: the exact per-slot optimum of every policy runs at about 1e6 pair-slots per
# second on one core (measured: 16 pods x 20,000 slots, 64 x 2,000, 256 x 200), so 1e9
# pair-slots is a quarter of an hour; larger calls are refused before any work starts.
MAX_PAIR_SLOTS = 1e9
NAMES = {
    "traffic": "--traffic",
    "base": "--traffic",
    "slots": "--slots",
    "v1": "--v1",
    "pods": "--pods",
    "n": "--pods",
    "ports": "--ports",
    "ocs": "--ocs",
    "rate_bps": "--rate-gbps",
    "fallback_bps": "--fallback-gbps",
    "switch_cost_s": "--switch-cost-s",
    "charge": "--charge",
    "theta": "--theta",
    "policy": "--policy",
    "jumps": "--jumps",
    "delta": "--glr-delta",
}
DEFAULT_V1_SHARE = 0.2  # default --v1: this share of one slot's mean total bytes


def _sequence(traffic: str, slots: int, v1: float | None, pods: int | None, jumps: int, seed):
    """The traffic sequence of the call (errors name the options)."""
    from pathlib import Path

    from trainfabric.ocs import traffic as tr

    if traffic in GENERATORS:
        n = 16 if pods is None else pods
        _check_work(slots, n)
        v1 = DEFAULT_V1_SHARE * n * (n - 1) * 1e8 if v1 is None else v1
        return tr.generate(traffic, slots, v1, pods=n, seed=seed, jumps=jumps), traffic
    if not traffic.lower().endswith((".npy", ".csv")) and not Path(traffic).exists():
        known = ", ".join(GENERATORS)
        raise ConfigError("traffic", f"{traffic!r} is neither a generator ({known}) nor a file")
    seq = tr.from_array(tr.read_sequence(traffic), "file")
    if pods is not None and pods != seq.pods:
        raise ConfigError("pods", f"the file has {seq.pods} pods, --pods says {pods}")
    _check_work(seq.slots, seq.pods)
    return seq, str(traffic)


def _masks(cost, seq, policy: str, c: float, charge: str, delta: float, seed) -> dict | None:
    """The switch mask of a mask policy: ``glr`` (worst-case GLR threshold at ``delta``),
    ``online-balance`` (rent-or-buy), ``online-learned`` (drift threshold learned online) or
    ``glr-calibrated`` (GLR calibrated on the stream's
    null, ``delta`` per window, cost-gated); None for the threshold policies."""
    from trainfabric.ocs.online import adaptive
    from trainfabric.ocs.online.glr import glr_mask

    if policy == "glr":
        return {"glr": glr_mask(seq, delta=delta, seed=seed)}
    if policy == "online-balance":
        return {policy: adaptive.balance_mask(cost, seq, c, charge).mask}
    if policy == "online-learned":
        return {policy: adaptive.learned_mask(cost, seq, c, charge).mask}
    if policy == "glr-calibrated":
        null = adaptive.fit_null(cost, seq, delta=delta, seed=seed)
        return {policy: adaptive.glr_calibrated_mask(cost, seq, c, null, charge, seed=seed).mask}
    return None


def _check_work(slots: int, pods: int) -> None:
    """Refuse ``slots · n(n−1)/2`` above :data:`MAX_PAIR_SLOTS` (field ``slots``)."""
    work = float(slots) * pods * (pods - 1) / 2
    if work > MAX_PAIR_SLOTS:
        raise ConfigError(
            "slots",
            f"{slots:,} slots x {pods * (pods - 1) // 2:,} pod pairs = {work:.3g} pair-slots "
            f"exceeds {MAX_PAIR_SLOTS:.0e} (about 1e6 per second); use fewer slots or pods",
        )


def _churn(cost, seq, res, policy: str, c: float, charge: str) -> dict:
    """Cross-connects added by a fresh and the deployed (churn-aware) split (module doc)."""
    from trainfabric.ocs.online.churn import churn, replay

    run = res.oracle_theta() if policy == "oracle" else res.runs[policy]
    rows = churn(cost, replay(cost, seq, run))
    aware = sum(r.aware for r in rows)
    out = {
        "cross_connects_added_naive": sum(r.naive for r in rows),
        "cross_connects_added_aware": aware,
        "wiring_changes": len(rows),
    }
    if charge == "per-circuit":
        out["regret_cross_connects_s"] = run.regret_s + c * (aware - run.moved_circuits)
    return out


# ``ocs online``'s quantities in words with their units, and their summary keys.
ONLINE_ROWS = (
    ("regret against the per-slot optimum (s)", "regret_s"),
    ("regret bound (s)", "regret_bound_s"),
    ("regret / sqrt(gamma C V1 T)", "normalised_regret"),
    ("switches", "switches"),
    ("switches bound, V1 / theta + 1", "switches_bound"),
    ("circuits moved", "moved_circuits"),
    ("total l1 variation V1 (bytes)", "v1"),
    ("gamma, cost per byte of drift (s/byte)", "gamma_s_per_byte"),
    ("threshold theta (bytes)", "theta"),
    ("bound-optimal threshold theta* (bytes)", "theta_star"),
    ("regret of switching every slot (s)", "regret_always_s"),
    ("regret of never switching (s)", "regret_never_s"),
)


def ocs_online(
    traffic: Annotated[
        str,
        typer.Option(help=f"Generator ({', '.join(GENERATORS)}) or a .npy/.csv sequence file."),
    ] = "random-walk",
    slots: Annotated[int, typer.Option(min=2, max=10_000_000, help="Slots T (generators).")] = (
        10_000
    ),
    v1: Annotated[
        float | None,
        typer.Option(
            help="Total l1 variation V1, bytes (generators) \\[default: 0.2 x one slot's bytes].",
            callback=finite(ge=0),
        ),
    ] = None,
    pods: Annotated[
        int | None, typer.Option(min=2, max=4096, help="Pods \\[default: 16, or the file's].")
    ] = None,
    jumps: Annotated[
        int, typer.Option(min=1, max=10_000_000, help="Jumps of the 'jumps' generator.")
    ] = 8,
    ports: PortsOpt = 8,
    ocs: OcsOpt = 4,
    rate_gbps: RateOpt = 100.0,
    fallback_gbps: FallbackOpt = 5.0,
    switch_cost_s: Annotated[
        float | None,
        typer.Option(
            help="Switching cost C, s \\[default: slot 0's optimal cost].", callback=finite(ge=0)
        ),
    ] = None,
    charge: Annotated[
        str, typer.Option(help="per-reconfiguration (C each) or per-circuit (C x circuits added).")
    ] = "per-reconfiguration",
    policy: Annotated[str, typer.Option(help=f"One of {', '.join(POLICIES)}.")] = "threshold",
    theta: Annotated[
        float | None,
        typer.Option(
            help="Threshold on the l1 drift, bytes \\[default: θ*].", callback=finite(ge=0)
        ),
    ] = None,
    glr_delta: Annotated[
        float,
        typer.Option(
            help="GLR false-alarm level: of the whole stream (glr), per 3,000-slot window"
            " (glr-calibrated).",
            callback=finite(gt=0),
        ),
    ] = 0.01,
    churn_report: Annotated[
        bool, typer.Option("--churn", help="Split every reconfiguration onto the OCSes.")
    ] = False,
    seed: SeedOpt = 0,
    max_memory_gb: MaxMemoryOpt = None,
    show_progress: ProgressOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Online OCS rewiring under drifting traffic: regret of a policy and its bound."""
    from trainfabric.ocs.model import OcsModel
    from trainfabric.ocs.online.threshold import ORACLE_GRID, OneHopCost, evaluate

    with progress(json_out, "ocs online", show_progress), options(**NAMES):
        if policy not in POLICIES:
            raise ConfigError("policy", f"must be one of {', '.join(POLICIES)}, got {policy!r}")
        if charge not in CHARGES:
            raise ConfigError("charge", f"must be one of {', '.join(CHARGES)}, got {charge!r}")
        seq, source = _sequence(traffic, slots, v1, pods, jumps, seed)
        model = OcsModel.uniform(
            seq.pods, ports, ocs, rate_bps=rate_gbps * 1e9, fallback_bps=fallback_gbps * 1e9
        )
        cost = OneHopCost(model)
        c = cost.slot_optimum(seq.block(0, 1)[0])[0] if switch_cost_s is None else switch_cost_s
        masks = _masks(cost, seq, policy, c, CHARGES[charge], glr_delta, seed)
        grid = ORACLE_GRID if policy == "oracle" else None
        res = evaluate(cost, seq, c, CHARGES[charge], theta, grid, masks, extra=("always", "never"))
        churned = _churn(cost, seq, res, policy, c, charge) if churn_report else {}
    summary = {
        "traffic": source,
        "slots": seq.slots,
        "pods": seq.pods,
        "ports": ports,
        "ocs": ocs,
        "switch_cost_s": c,
        "charge": charge,
        "v1": res.v1,
        "gamma_s_per_byte": res.gamma,
        "c_eff_s": res.c_eff,
        "theta_star": res.theta_star,
        **res.summary(policy),
        "regret_always_s": res.runs["always"].regret_s,
        "regret_never_s": res.runs["never"].regret_s,
        **churned,
    }
    if json_out:
        return emit_json(summary)
    out.print(f"[bold]ocs online: {policy} policy on {escape(source)}, {seq.slots:,} slots[/bold]")
    rows = [{"quantity": q, "value": fmt_number(summary[key])} for q, key in ONLINE_ROWS]
    print_records(out, rows, [Col("quantity"), Col("value")])
