"""Time-varying pod traffic: seeded generators with an exact l1 variation, and a file reader.

A sequence is ``T`` slots of *directed* pod-level traffic matrices ``D_t`` [n, n] (row =
source pod, bytes per slot, non-negative, zero diagonal). Its total l1 variation is

    V1 = Σ_{t=1}^{T-1} ||D_t − D_{t−1}||_1        (entry-wise l1 over all n² entries).

The online costs (:mod:`.online`) see the directed matrix: a duplex circuit serves both
directions, so a pair's one-hop load is ``max(D_uv, D_vu)``; the DAG model scales every
comm node of the ordered pair ``u → v`` by ``D_t,uv``.

Generators (:func:`generate`) return a lazy :class:`TrafficSequence`: every slot is a pure
function of its index and a small state, so ``block(t0, t1)`` builds any window and
``T = 10^5`` slots of 32 pods never need to exist at once (:meth:`TrafficSequence.array`
materialises, guarded by :func:`trainfabric.limits.check_memory`, field ``slots``). Each
generator fixes the *shape* of the sequence first and then one amplitude ``a`` in which the
variation is linear, ``V1 = a · V1_raw``, with ``V1_raw`` measured exactly on the shape; so
the requested ``V1`` is met to rounding (tests measure it from the matrices). An amplitude
that would make traffic negative is refused (ConfigError naming ``v1``).

* ``random-walk``: ``D_t = m ∘ (1 + a Y_t)``, with ``m`` the base matrix and ``Y_t ∈ [−1, 1]``
  a reflected lattice walk per entry (``K = 8`` levels, every step ±1 level, folded at the
  ends) with ``S`` macro steps, linearly interpolated at the ``T`` slots. ``S`` is chosen
  from ``V1`` so that ``a ≈ 0.5`` (bounded, positive); at fixed ``V1`` a larger ``T``
  samples the same path more finely (the regime in which the regret bound's ``sqrt(T)``
  appears). ``a < 1`` keeps every entry positive.
* ``jumps``: piecewise constant, ``Γ`` jumps at slots ``round(j T / (Γ + 1))``; level ``j`` is
  ``m ∘ (1 + a Y_j)`` with ``Y_j`` uniform in ``[−1, 1]`` per entry.
* ``moe-phases``: MoE all-to-all (:mod:`trainfabric.workloads.moe`, Gini-skewed expert
  popularity, one expert-parallel shard per pod): ``D_t = (1 − a) A + a S(φ_t)`` with ``A``
  uniform all-to-all and ``S(φ)`` the skewed matrix whose hot shards are rotated by ``φ``
  pods (linear interpolation between whole rotations); ``φ_t`` grows linearly over the
  horizon, so the hot pods rotate periodically (period ``n`` whole rotations). ``a ≤ 1``.
* ``job-arrival``: a base job ``m`` plus a second job (an all-to-all among a random half of
  the pods) with bytes ``a · J`` while it runs: it arrives at ``round(T/3)`` and, with
  ``leave``, leaves at ``round(2T/3)``.

The base matrix ``m`` (``base=None``): lognormal entries (σ = 1, seeded), zero diagonal, mean
``pair_bytes`` per ordered pair.

:func:`read_sequence` reads ``.npy`` (``[T, n, n]``) or CSV (``slot,src,dst,bytes``; slots and
pods from 0, absent entries are 0; ids below 2^53, entries at most :data:`MAX_BYTES`). Errors
are ConfigErrors naming the file and the line or index; intra-pod entries (the diagonal) never
reach the OCS and are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.limits import check_memory
from trainfabric.workloads.moe import expert_popularity, shard_share

GENERATORS = ("random-walk", "jumps", "moe-phases", "job-arrival")
WALK_LEVELS = 8  # lattice levels of the reflected walk: Y ∈ {−1, −1 + 2/K, ..., 1}
WALK_TARGET_AMPLITUDE = 0.5  # the number of macro steps is chosen to give a ≈ this
BLOCK = 4096  # slots per block when a generator scans its own shape
BLOCK_ENTRIES = 1 << 24  # at most this many matrix entries per block (128 MiB of float64)
# Largest entry a file may hold: a quettabyte, beyond any real traffic. The online costs and
# bounds multiply byte totals (gamma C V1 T); with at most ~1e10 entries in memory every such
# product stays far inside float64, where a 1e308 entry made them inf (and NaN).
MAX_BYTES = 1e30
# Slot and pod ids of a CSV are parsed as float64, exact up to 2^53.
MAX_ID = 2.0**53


def block_slots(n: int, size: int = BLOCK) -> int:
    """Slots per block for ``n`` pods: ``size``, capped so one block holds at most
    :data:`BLOCK_ENTRIES` entries (``size`` itself for ``n <= 64``), and at least 1."""
    return max(1, min(int(size), BLOCK_ENTRIES // (n * n)))


@dataclass(frozen=True, eq=False)
class TrafficSequence:
    """``slots`` matrices of ``pods`` x ``pods`` bytes, built on demand by ``make(t)``
    (``t`` int64 slot indices -> ``[len(t), n, n]``). ``amplitude`` is the generator's
    ``a``; ``v1`` the variation it was built for; ``info`` generator details."""

    kind: str
    slots: int
    pods: int
    make: Callable[[np.ndarray], np.ndarray]
    v1: float
    amplitude: float
    info: dict

    def block(self, t0: int, t1: int) -> np.ndarray:
        """Slots ``t0 .. t1 − 1`` as ``[t1 − t0, n, n]`` float64."""
        t0, t1 = max(int(t0), 0), min(int(t1), self.slots)
        return self.make(np.arange(t0, t1, dtype=np.int64))

    def blocks(self, size: int = BLOCK) -> Iterator[tuple[int, np.ndarray]]:
        """``(t0, block)`` over the whole horizon in windows of ``size`` slots (capped by
        :func:`block_slots`, so a block of many pods stays small)."""
        size = block_slots(self.pods, size)
        for t0 in range(0, self.slots, size):
            yield t0, self.block(t0, t0 + size)

    def array(self) -> np.ndarray:
        """The whole ``[T, n, n]`` array (refused over the memory limit, field ``slots``)."""
        check_memory(
            "slots",
            8.0 * self.slots * self.pods**2,
            f"{self.slots:,} traffic matrices of {self.pods} pods",
        )
        return self.block(0, self.slots)


def from_array(d: np.ndarray, kind: str = "file") -> TrafficSequence:
    """A sequence over an existing ``[T, n, n]`` array (validated as by the reader)."""
    d = _validated(np.asarray(d), "traffic")
    return TrafficSequence(kind, d.shape[0], d.shape[1], lambda t: d[t], variation(d), 1.0, {})


def variation(seq) -> float:
    """``V1 = Σ_t ||D_t − D_{t−1}||_1`` of an array ``[T, n, n]`` or a :class:`TrafficSequence`
    (scanned block by block)."""
    if isinstance(seq, TrafficSequence):
        total, last = 0.0, None
        for _, b in seq.blocks():
            if last is not None:
                total += float(np.abs(b[0] - last).sum())
            total += float(np.abs(np.diff(b, axis=0)).sum())
            last = b[-1]
        return total
    d = np.asarray(seq, dtype=float)
    return float(np.abs(np.diff(d, axis=0)).sum())


def per_slot_variation(seq: TrafficSequence) -> np.ndarray:
    """``||D_t − D_{t−1}||_1`` [T] (0 for the first slot), block by block."""
    out = np.zeros(seq.slots)
    last = None
    for t0, b in seq.blocks():
        out[t0 + 1 : t0 + b.shape[0]] = np.abs(np.diff(b, axis=0)).sum(axis=(1, 2))
        if last is not None:
            out[t0] = np.abs(b[0] - last).sum()
        last = b[-1]
    return out


# -- generators -------------------------------------------------------------------------------


def base_matrix(pods: int, rng: np.random.Generator, pair_bytes: float = 1e8) -> np.ndarray:
    """Lognormal (σ = 1) directed traffic, zero diagonal, mean ``pair_bytes`` per ordered pair."""
    m = rng.lognormal(0.0, 1.0, size=(pods, pods))
    np.fill_diagonal(m, 0.0)
    return m * (pair_bytes * pods * (pods - 1) / m.sum())


def generate(
    kind: str,
    slots: int,
    v1: float,
    pods: int = 16,
    seed: int = 0,
    base: np.ndarray | None = None,
    pair_bytes: float = 1e8,
    jumps: int = 8,
    moe_gini: float = 0.5,
    leave: bool = True,
) -> TrafficSequence:
    """A seeded sequence of ``kind`` (one of :data:`GENERATORS`, module doc) with ``slots``
    slots and variation ``v1`` bytes. ConfigErrors name ``traffic``, ``slots``, ``v1``,
    ``pods``, ``jumps`` or ``base``."""
    if kind not in GENERATORS:
        raise ConfigError("traffic", f"unknown generator {kind!r}; one of {', '.join(GENERATORS)}")
    if not isinstance(slots, int | np.integer) or slots < 2:
        raise ConfigError("slots", f"need at least 2 slots, got {slots}")
    if not (np.isfinite(v1) and v1 >= 0):
        raise ConfigError("v1", f"must be finite and >= 0, got {v1}")
    if pods < 2:
        raise ConfigError("pods", "need at least 2 pods")
    rng = np.random.default_rng(seed)
    if base is None:
        m = base_matrix(pods, rng, pair_bytes)
    else:
        m = _validated(np.asarray(base, dtype=float)[None], "base")[0]
        if m.shape[0] != pods:
            raise ConfigError("base", f"has {m.shape[0]} pods, expected {pods}")
    slots = int(slots)
    if kind == "random-walk":
        return _random_walk(slots, float(v1), m, rng)
    if kind == "jumps":
        return _jumps(slots, float(v1), m, rng, jumps)
    if kind == "moe-phases":
        return _moe_phases(slots, float(v1), pods, rng, float(m.sum()), moe_gini)
    return _job_arrival(slots, float(v1), m, rng, leave)


def _amplitude(v1: float, raw: float, limit: float | None, why: str) -> float:
    """``a = v1 / raw``, refused if ``a`` reaches ``limit`` (traffic would turn negative)."""
    if v1 == 0:
        return 0.0
    if raw <= 0:
        raise ConfigError("v1", f"this sequence has no variation to scale ({why})")
    a = v1 / raw
    if limit is not None and a >= limit:
        raise ConfigError("v1", f"too large: at most {limit * raw:.6g} bytes here ({why})")
    return a


def _scan_raw(make_shape: Callable[[np.ndarray], np.ndarray], slots: int, n: int) -> float:
    """``Σ_t ||shape_t − shape_{t−1}||_1`` block by block (:func:`block_slots` of ``n`` pods)."""
    total, last = 0.0, None
    size = block_slots(n)
    for t0 in range(0, slots, size):
        b = make_shape(np.arange(t0, min(t0 + size, slots), dtype=np.int64))
        if last is not None:
            total += float(np.abs(b[0] - last).sum())
        total += float(np.abs(np.diff(b, axis=0)).sum())
        last = b[-1]
    return total


def _random_walk(slots: int, v1: float, m: np.ndarray, rng: np.random.Generator):
    n, k = m.shape[0], WALK_LEVELS
    step_l1 = (2.0 / k) * m.sum()  # l1 of one macro step of the shape m ∘ Y
    steps = int(np.clip(round(v1 / (WALK_TARGET_AMPLITUDE * step_l1)), 1, slots - 1))
    # peak: the int64 cumsum and its int64 concatenation alive together (16 bytes per entry)
    check_memory("slots", 16.0 * (steps + 1) * n * n, f"a {steps:,}-step walk of {n} pods")
    z = np.concatenate(
        [
            np.zeros((1, n, n), dtype=np.int64),
            np.cumsum(np.where(rng.random((steps, n, n)) < 0.5, -1, 1), axis=0),
        ]
    )
    level = (k // 2 + z) % (2 * k)
    level = np.where(level > k, 2 * k - level, level).astype(np.int8)  # folded: |Δ| = 1
    scale = steps / (slots - 1)

    def y_at(t: np.ndarray) -> np.ndarray:
        q = t * scale
        j = np.minimum(np.floor(q).astype(np.int64), steps - 1)
        w = (q - j)[:, None, None]
        lo = level[j].astype(float)
        return ((1.0 - w) * lo + w * level[j + 1]) * (2.0 / k) - 1.0

    a = _amplitude(v1, _scan_raw(lambda t: m * y_at(t), slots, n), 1.0, "random walk, a < 1")
    return TrafficSequence(
        "random-walk",
        slots,
        n,
        lambda t: m * (1.0 + a * y_at(t)),
        v1,
        a,
        {"macro_steps": steps, "levels": k},
    )


def _jumps(slots: int, v1: float, m: np.ndarray, rng: np.random.Generator, jumps: int):
    if not 1 <= jumps < slots:
        raise ConfigError("jumps", f"need 1 <= jumps < slots ({slots}), got {jumps}")
    at = np.rint(np.arange(1, jumps + 1) * slots / (jumps + 1)).astype(np.int64)
    y = rng.uniform(-1.0, 1.0, size=(jumps + 1, *m.shape))
    raw = float(np.abs(m * np.diff(y, axis=0)).sum())
    a = _amplitude(v1, raw, 1.0, "jumps, a < 1")
    levels = m * (1.0 + a * y)
    return TrafficSequence(
        "jumps",
        slots,
        m.shape[0],
        lambda t: levels[np.searchsorted(at, t, side="right")],
        v1,
        a,
        {"jump_slots": at.tolist()},
    )


def _rotated(share: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """Shard shares rotated by ``phi`` pods (real, linear between whole rotations) [len, n]."""
    n = share.size
    j = np.floor(phi).astype(np.int64)
    w = (phi - j)[:, None]
    idx = (np.arange(n)[None, :] - j[:, None]) % n
    return (1.0 - w) * share[idx] + w * share[(idx - 1) % n]


def _moe_phases(slots, v1, pods, rng, total, gini):
    if pods < 3 and v1 > 0:
        raise ConfigError(
            "pods", "moe-phases needs at least 3 pods to vary (with 2, each sends all to the other)"
        )
    share = shard_share(expert_popularity(4 * pods, gini, rng), pods)
    per = total / pods  # bytes each pod sends per slot
    off = 1.0 - np.eye(pods)

    def skewed(phi: np.ndarray) -> np.ndarray:
        s = _rotated(share, phi)[:, None, :] * off  # row i sends to column c ∝ share_c
        return per * s / s.sum(axis=2, keepdims=True)

    uniform = per * off / (pods - 1)
    one = float(np.abs(skewed(np.array([1.0])) - skewed(np.array([0.0]))).sum())
    rotations = max(v1 / (WALK_TARGET_AMPLITUDE * one), 1e-12) if one > 0 else 1.0
    phase = lambda t: t * (rotations / (slots - 1))  # noqa: E731
    raw = _scan_raw(lambda t: skewed(phase(t)), slots, pods)
    a = _amplitude(v1, raw, 1.0 + 1e-12, "MoE, a <= 1")
    return TrafficSequence(
        "moe-phases",
        slots,
        pods,
        lambda t: (1.0 - a) * uniform + a * skewed(phase(t)),
        v1,
        a,
        {"rotations": rotations, "gini": gini},
    )


def _job_arrival(slots, v1, m, rng, leave):
    n = m.shape[0]
    pods = rng.permutation(n)[: max(2, n // 2)]
    job = np.zeros_like(m)
    job[np.ix_(pods, pods)] = 1.0
    np.fill_diagonal(job, 0.0)
    at = [round(slots / 3)] + ([round(2 * slots / 3)] if leave else [])
    if at[0] < 1 or at[-1] >= slots or len(set(at)) != len(at):
        raise ConfigError("slots", f"too few slots ({slots}) for the arrival and departure")
    a = _amplitude(v1, len(at) * job.sum(), None, "job arrival")
    extra = a * job

    def make(t: np.ndarray) -> np.ndarray:
        on = (t >= at[0]) & ((t < at[1]) if leave else True)
        return m[None] + on[:, None, None] * extra[None]

    return TrafficSequence(
        "job-arrival", slots, n, make, v1, a, {"events": at, "job_pods": sorted(pods.tolist())}
    )


# -- reader -----------------------------------------------------------------------------------


def _validated(d: np.ndarray, field: str, where: str = "") -> np.ndarray:
    """Float64 copy of a ``[T, n, n]`` traffic array with zero diagonal; otherwise a
    ConfigError naming ``field``, prefixed by ``where`` (the file), and the first bad index."""
    where = f"{where}: " if where else ""
    if d.dtype == object or not np.issubdtype(d.dtype, np.number) or np.iscomplexobj(d):
        raise ConfigError(field, f"{where}must be a numeric array, got dtype {d.dtype}")
    if d.ndim != 3 or d.shape[1] != d.shape[2] or d.shape[1] < 2 or d.shape[0] < 1:
        raise ConfigError(field, f"{where}must have shape [slots, n, n] with n >= 2, got {d.shape}")
    d = d.astype(float)
    too_large = (d > MAX_BYTES, f"above {MAX_BYTES:.0e} bytes")
    for bad, what in ((~np.isfinite(d), "not finite"), (d < 0, "negative"), too_large):
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ConfigError(field, f"{where}entry [slot, src, dst] = {list(idx)} is {what}")
    d[:, np.arange(d.shape[1]), np.arange(d.shape[1])] = 0.0
    return d


def read_sequence(path: str | Path, pods: int | None = None) -> np.ndarray:
    """``[T, n, n]`` bytes per slot from ``.npy`` or CSV (``slot,src,dst,bytes`` header; module
    doc). ``pods`` fixes ``n`` for a CSV (default: largest pod index + 1). ConfigErrors name
    the file and, for CSV, the line."""
    p = Path(path)
    if not p.is_file():
        what = "is a directory, not a file" if p.is_dir() else "no such file"
        raise ConfigError("traffic", f"{p}: {what}")
    if p.suffix.lower() == ".npy":
        return _validated(load_npy(p, "traffic"), "traffic", str(p))
    return _read_csv(p, pods)


def load_npy(path: str | Path, field: str) -> np.ndarray:
    """The one array of a ``.npy`` file (no pickles). An empty, truncated or corrupt file, or
    an ``.npz`` archive, is a ConfigError naming ``field`` and the file (numpy's ``EOFError``
    on an empty file would otherwise read as an interrupt)."""
    try:
        d = np.load(path, allow_pickle=False)
    except EOFError:
        raise ConfigError(field, f"{path}: not a NumPy array file (empty or truncated)") from None
    except ValueError as err:
        raise ConfigError(field, f"{path}: not a NumPy array file ({err})") from None
    except OSError as err:
        raise ConfigError(field, f"cannot read {path}: {err}") from None
    if not isinstance(d, np.ndarray):
        d.close()
        raise ConfigError(field, f"{path}: an .npz archive, not a NumPy array file")
    return d


def _read_csv(p: Path, pods: int | None) -> np.ndarray:
    import pandas as pd

    where = str(p)
    try:
        df = pd.read_csv(p, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise ConfigError("traffic", f"{where}: not a slot,src,dst,bytes CSV ({err})") from None
    cols = [c.strip().lower() for c in df.columns]
    if cols != ["slot", "src", "dst", "bytes"]:
        raise ConfigError(
            "traffic", f"{where}: header must be slot,src,dst,bytes, got {','.join(cols)}"
        )
    df.columns = cols
    if df.empty:
        raise ConfigError("traffic", f"{where}: has no rows")
    ints = {}
    for col in ("slot", "src", "dst"):
        v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(v) | (v < 0) | (v != np.round(v))
        _refuse(where, bad, f"{col} must be a non-negative integer", df[col])
        _refuse(where, v >= MAX_ID, f"{col} must be below 2^53", df[col])
        ints[col] = v.astype(np.int64)
    b = pd.to_numeric(df["bytes"], errors="coerce").to_numpy(dtype=float)
    _refuse(where, ~np.isfinite(b), "bytes must be a finite number", df["bytes"])
    _refuse(where, b < 0, "bytes must be >= 0", df["bytes"])
    _refuse(where, b > MAX_BYTES, f"bytes must be at most {MAX_BYTES:.0e}", df["bytes"])
    n = int(max(ints["src"].max(), ints["dst"].max())) + 1 if pods is None else int(pods)
    if n < 2:
        raise ConfigError("traffic", f"{where}: needs at least 2 pods")
    _refuse(where, (ints["src"] >= n) | (ints["dst"] >= n), f"pod >= pods ({n})", df["src"])
    slots = int(ints["slot"].max()) + 1
    check_memory("traffic", 8.0 * slots * n * n, f"{slots:,} traffic matrices of {n} pods")
    key = (ints["slot"] * n + ints["src"]) * n + ints["dst"]  # below slots n², which fits
    _, first, counts = np.unique(key, return_index=True, return_counts=True)
    dup = np.zeros(key.size, dtype=bool)
    if (counts > 1).any():
        seen = np.zeros(key.size, dtype=bool)
        seen[first] = True
        dup = ~seen
    _refuse(where, dup, "duplicate (slot, src, dst)", df["slot"])
    d = np.zeros((slots, n, n))
    d[ints["slot"], ints["src"], ints["dst"]] = b
    return _validated(d, "traffic", where)


def _refuse(where: str, bad: np.ndarray, message: str, column) -> None:
    """ConfigError naming the file and the first bad line (header = line 1)."""
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ConfigError("traffic", f"{where}: line {i + 2}: {message} (got {column.iloc[i]!r})")
