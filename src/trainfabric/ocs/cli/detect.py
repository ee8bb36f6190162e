"""``trainfabric ocs detect``: run a multinomial change detector over a traffic sequence.

The sequence is read from ``--traffic`` (``.npy`` ``[T, n, n]`` or CSV ``slot,src,dst,bytes``,
by :func:`trainfabric.ocs.traffic.read_sequence`) and quantised to counts
``floor(bytes / --chunk-bytes)``, or drawn with ``--synthetic`` (Poisson ``--per-slot`` flows
per slot, a planted change of ``KL = --kl`` after ``--change-at`` slots; see
:func:`trainfabric.ocs.detect.streams.synthetic_change`). For a file, the first
``--reference-slots`` slots form the reference window: the CUSUM's ``p0`` (their pooled
frequencies plus 1/2 per category, so a category absent from the reference does not alarm at
once), the frozen top-r pairs and the default gradient; detection runs on the slots after it.

The statistics subtract terms of size ``N log N`` (``N`` the counts since the last restart;
:class:`trainfabric.ocs.detect.detectors.SplitStore`), so their float64 rounding is about
``1e-16 N log N`` nats: 3.5 nats at :data:`MAX_COUNTS`, a few percent of the smallest threshold
there (two categories: about 90 nats), and more beyond (at ``N ~ 1e305`` they overflow to
NaN). A stream of more counts in all is refused: a file naming ``--chunk-bytes`` (or
``--traffic`` when even 1-byte chunks are too many), a synthetic stream naming ``--per-slot``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trainfabric.clikit import (
    ConfigOpt,
    JsonOpt,
    MaxMemoryOpt,
    SeedOpt,
    emit_json,
    finite,
    options,
    out,
)
from trainfabric.errors import ConfigError

DETECTORS = ("glr", "cusum")
DEFAULT_TOP_R = 8  # clipped to n(n - 1) - 1 on fewer than 4 pods
MAX_COUNTS = 1e15  # counts in the whole stream (module doc)
STATISTICS = ("pairs", "marginals", "topr", "gradient")
NAMES = {
    "traffic": "--traffic",
    "counts": "--traffic",
    "matrix": "--traffic",
    "delta": "--delta",
    "density": "--density",
    "pods": "--pods",
    "kl": "--kl",
    "change": "--change",
    "r": "--top-r",
    "pairs": "--top-r",
    "gradient": "--gradient",
    "n_per_slot": "--per-slot",
    "p0": "--reference-slots",
}


def ocs_detect(
    traffic: Annotated[
        Path | None,
        typer.Option(help="Traffic sequence: .npy [T, n, n] or CSV slot,src,dst,bytes."),
    ] = None,
    synthetic: Annotated[
        bool, typer.Option("--synthetic", help="Draw a synthetic stream with a planted change.")
    ] = False,
    detector: Annotated[str, typer.Option(help="glr (unknown p0) or cusum (p0 known).")] = "glr",
    statistic: Annotated[
        str, typer.Option(help="Categories: pairs, marginals, topr (+ other) or gradient.")
    ] = "marginals",
    delta: Annotated[
        float, typer.Option(help="Bound on P(any false alarm), in (0, 1).", callback=finite(gt=0))
    ] = 0.01,
    density: Annotated[
        int, typer.Option(min=0, max=16, help="Candidate splits per octave = 2^density.")
    ] = 2,
    top_r: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=4096 * 4095,
            help=f"r of the topr statistic \\[default: {DEFAULT_TOP_R}, at most n(n-1) - 1].",
        ),
    ] = None,
    gradient: Annotated[
        Path | None,
        typer.Option(help="Circuit gradient dF/dx, .npy [n, n] (default: reference proxy)."),
    ] = None,
    reference_slots: Annotated[
        int,
        typer.Option(min=1, max=10**7, help="Reference window (slots) at the head of a file."),
    ] = 50,
    chunk_bytes: Annotated[
        float, typer.Option(help="Bytes per counted chunk (> 0).", callback=finite(gt=0))
    ] = 1.0,
    pods: Annotated[int, typer.Option(min=3, max=4096, help="Synthetic: pods.")] = 16,
    slots: Annotated[int, typer.Option(min=2, max=10**7, help="Synthetic: slots.")] = 400,
    change_at: Annotated[
        int, typer.Option(min=0, max=10**7, help="Synthetic: slots before the change.")
    ] = 200,
    kl: Annotated[
        float, typer.Option(help="Synthetic: KL(p1 || p0) over pairs (> 0).", callback=finite(gt=0))
    ] = 0.01,
    change: Annotated[str, typer.Option(help="Synthetic: hot-pod, heavy-pairs, random-pairs.")] = (
        "hot-pod"
    ),
    per_slot: Annotated[
        float, typer.Option(help="Synthetic: mean flows per slot (> 0).", callback=finite(gt=0))
    ] = 1000.0,
    seed: SeedOpt = 0,
    max_memory_gb: MaxMemoryOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Detect changes in a traffic sequence (multinomial GLR-CUSUM); print the alarm slots."""

    from trainfabric.ocs.detect.detectors import CusumDetector, GlrDetector, reduce_counts

    _choice("--detector", detector, DETECTORS)
    _choice("--statistic", statistic, STATISTICS)
    if synthetic == (traffic is not None):
        raise ConfigError("--traffic", "give exactly one of --traffic FILE and --synthetic")
    with options(**NAMES):
        if synthetic:
            if change_at >= slots:
                raise ConfigError("--change-at", f"must be < --slots ({slots}), got {change_at}")
            if per_slot * slots > MAX_COUNTS:
                raise ConfigError(
                    "--per-slot",
                    f"{per_slot:g} flows x {slots:,} slots exceeds {MAX_COUNTS:.0e} counts, "
                    "beyond which the statistics are rounding noise",
                )
            inst, counts = _synthetic(pods, slots, change_at, kl, change, per_slot, top_r, seed)
            offset, p0_matrix = 0, inst.p0
        else:
            inst, counts, p0_matrix = _from_file(traffic, chunk_bytes, reference_slots, top_r)
            offset = reference_slots
        if gradient is not None:
            inst = _with_gradient(inst, gradient)
        _check_size(statistic, counts.shape[-1], counts.shape[0], density)
        kw = inst.reduction(statistic)
        stream = reduce_counts(counts, statistic, **kw)
        if detector == "cusum":
            det = CusumDetector(reduce_counts(p0_matrix, statistic, **kw), delta, density)
        else:
            det = GlrDetector(delta, density)
        alarms = _run(det, stream, offset)
    summary = {
        "detector": detector,
        "statistic": statistic,
        "categories": int(stream.shape[1]),
        "delta": delta,
        "slots": int(stream.shape[0]),
        "first_slot": offset,
        "alarms": alarms,
    }
    if synthetic:
        after = [a["slot"] for a in alarms if a["slot"] >= change_at]
        summary["change_at"] = change_at
        summary["false_alarms"] = sum(a["slot"] < change_at for a in alarms)
        summary["delay_slots"] = after[0] - change_at + 1 if after else None
    if json_out:
        return emit_json(summary)
    _print(summary)


def _choice(option: str, value: str, known: tuple[str, ...]) -> None:
    if value not in known:
        raise ConfigError(option, f"unknown value {value!r}; known: {', '.join(known)}")


def _top_r(top_r: int | None, n: int) -> int:
    """``--top-r`` as given, else :data:`DEFAULT_TOP_R` clipped to the ``n(n-1) - 1`` pairs
    that leave an "other" category (a default never fails on few pods)."""
    return min(DEFAULT_TOP_R, n * (n - 1) - 1) if top_r is None else top_r


def _synthetic(pods, slots, change_at, kl, change, per_slot, top_r, seed):
    """(instance, ``[slots, n, n]`` counts) of a synthetic stream with a planted change."""
    import numpy as np

    from trainfabric.limits import check_memory
    from trainfabric.ocs.detect.streams import multinomial_stream, pair_matrix, synthetic_change

    check_memory("pods", 8.0 * slots * pods * pods, f"{slots:,} slots of {pods} pods")
    rng = np.random.default_rng(seed)
    inst = synthetic_change(pods, kl, rng, change, _top_r(top_r, pods), n_per_slot=per_slot)
    off = ~np.eye(pods, dtype=bool)
    pairs = multinomial_stream(inst.p0[off], inst.p1[off], change_at, per_slot, slots, rng)
    return inst, np.stack([pair_matrix(row, pods) for row in pairs])


def _from_file(path, chunk_bytes, reference_slots, top_r):
    """(instance built on the reference window, counts after it, the CUSUM's ``p0``)."""
    import numpy as np

    from trainfabric.ocs.detect.streams import SyntheticChange, top_pairs
    from trainfabric.ocs.traffic import read_sequence

    seq = read_sequence(path)
    _check_counts(path, float(seq.sum()), chunk_bytes)
    counts = np.floor(seq / chunk_bytes)
    if counts.shape[0] <= reference_slots:
        raise ConfigError(
            "--reference-slots",
            f"the file has {counts.shape[0]} slots; need more than the {reference_slots} "
            "reference slots",
        )
    n = counts.shape[1]
    off = ~np.eye(n, dtype=bool)
    if not seq[:, off].any():  # nothing to count: "no alarm" would mean nothing
        raise ConfigError("--traffic", f"{path}: holds no traffic between pods")
    if not counts[:, off].any():
        raise ConfigError("--chunk-bytes", f"no slot of {path} holds a chunk of {chunk_bytes:g} B")
    reference = counts[:reference_slots].sum(0) * off
    p0 = (reference + 0.5) * off
    p0 /= p0.sum()
    gradient = (reference[off].mean() - reference) * off
    inst = SyntheticChange(p0, p0, reference, gradient, top_pairs(reference, _top_r(top_r, n)))
    return inst, counts[reference_slots:], p0


def _check_counts(path, total_bytes: float, chunk_bytes: float) -> None:
    """Refuse a file of more than :data:`MAX_COUNTS` chunks in all (module doc): naming
    ``--traffic`` when its bytes alone are that many, else ``--chunk-bytes``."""
    if total_bytes <= MAX_COUNTS * chunk_bytes:
        return
    why = f"over {MAX_COUNTS:.0e} counts, beyond which the statistics are rounding noise"
    if total_bytes > MAX_COUNTS:
        raise ConfigError(
            "--traffic", f"{path}: {total_bytes:.3g} bytes in all is {why}; raise --chunk-bytes"
        )
    raise ConfigError(
        "--chunk-bytes", f"{total_bytes / chunk_bytes:.3g} chunks of {chunk_bytes:g} bytes is {why}"
    )


def _with_gradient(inst, path: Path):
    """The instance with the user's circuit gradient (.npy [n, n])."""
    import dataclasses

    import numpy as np

    from trainfabric.clikit import input_file
    from trainfabric.ocs.traffic import load_npy

    g = load_npy(input_file(path, "--gradient"), "--gradient")
    n = inst.p0.shape[0]
    if g.shape != (n, n) or not np.issubdtype(g.dtype, np.number) or not np.isfinite(g).all():
        raise ConfigError("--gradient", f"expected a finite [{n}, {n}] array, got {g.shape}")
    return dataclasses.replace(inst, gradient=g.astype(float))


def _check_size(statistic: str, n: int, slots: int, density: int) -> None:
    """The detector keeps ``K`` counts per candidate split (about 2^density per octave)."""
    import math

    from trainfabric.limits import check_memory

    k = n * (n - 1) if statistic == "pairs" else n
    splits = 2**density * (math.log2(max(slots, 2)) + 2)
    check_memory("--statistic", 8.0 * k * (splits + 4), f"{statistic} over {k:,} categories")


def _run(det, stream, offset: int) -> list[dict]:
    """Feed the slots; one record per alarm (slot index in the input, 0-based)."""
    alarms, start = [], 0
    for t, c in enumerate(stream):
        if det.update(c):
            a = det.last_alarm
            alarms.append(
                {
                    "slot": t + offset,
                    "statistic": a["statistic"],
                    "threshold": a["threshold"],
                    "change_after_slot": start + a["split"] - 1 + offset,
                }
            )
            start = t + 1
    return alarms


def _print(summary: dict) -> None:
    t = Table(
        "alarm slot",
        "statistic",
        "threshold",
        "change after slot",
        title=f"ocs detect: {summary['detector']} on {summary['statistic']} "
        f"(K = {summary['categories']}), delta = {summary['delta']:g}, "
        f"slots {summary['first_slot']}..{summary['first_slot'] + summary['slots'] - 1}",
    )
    for a in summary["alarms"]:
        t.add_row(
            str(a["slot"]),
            f"{a['statistic']:.2f}",
            f"{a['threshold']:.2f}",
            str(a["change_after_slot"]),
        )
    out.print(t)
    if "change_at" in summary:
        delay = summary["delay_slots"]
        out.print(
            f"planted change after slot {summary['change_at'] - 1}: "
            f"{summary['false_alarms']} false alarm(s) before it; "
            + (f"detected {delay} slot(s) later" if delay is not None else "not detected")
        )
