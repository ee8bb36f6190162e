"""Flows with dependencies: the fabric engine's input, as one structure of arrays.

Flow ``f`` sends ``bytes[f]`` (payload) from host ``src[f]`` to host ``dst[f]``. It starts at

    start_f = max(release_s[f], max_{d ∈ deps(f)} finish_d) + delay_s[f]

where ``finish_d`` is the arrival of ``d``'s last byte at its receiver and ``deps(f)`` is the
CSR slice ``deps[deps_ptr[f]:deps_ptr[f+1]]`` (flow ids, all ``< f``, so the table is in a
topological order and has no cycle). ``entropy`` is the connection's 64-bit hash input
(ECMP hashing); flows of one connection share it. ``channel`` numbers the parallel
connections (QPs) of one host pair, ``0..c-1`` (software plane pinning spreads them
round-robin over the planes). ``job`` tags tenants.

Memory per flow (:func:`flow_memory_bytes`), measured with tracemalloc on 64-256-GPU
all-to-alls (tests/fabric/test_size_guards.py): the table, its dependencies and the engine's
per-flow state take about 400-440 B per flow with single-path routing (ecmp, flowlet,
pinning) and ``270 + 160 x planes`` B with the split modes (spray, adaptive: one path
share per plane): 430 B at 1 plane, 890 B at 4, 1,530 B at 8.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np

from trainfabric.errors import ConfigError

# The wire of every engine: a flow of ``b`` payload bytes puts ``b (MTU + header) / MTU`` bytes
# on each link it crosses; it is done when what is left is at most ``DONE_RTOL`` of that.
MTU_BYTES = 4096
HEADER_BYTES = 64
DONE_RTOL = 1e-9

SINGLE_PATH_FLOW_BYTES = 450
SPLIT_FLOW_BYTES = 300
SPLIT_FLOW_BYTES_PER_PLANE = 160


def flow_memory_bytes(n_flows: float, planes: int, split: bool) -> float:
    """Peak bytes of simulating ``n_flows`` flows (module doc); ``split``: spray/adaptive."""
    per_flow = (
        SPLIT_FLOW_BYTES + SPLIT_FLOW_BYTES_PER_PLANE * planes if split else SINGLE_PATH_FLOW_BYTES
    )
    return float(n_flows) * per_flow


def coerce_arrays(table, dtypes: dict[str, type], *, length: str, optional: str) -> None:
    """Give the frozen array dataclass ``table`` the arrays the engines read, in place: its
    ``n`` is the size of field ``length``; field ``optional``, when ``None``, becomes ``n``
    zeros; then every field named in ``dtypes`` becomes a C-contiguous array of its dtype
    (copied only where the input's dtype or layout differs)."""
    n = np.asarray(getattr(table, length)).size
    if getattr(table, optional) is None:
        object.__setattr__(table, optional, np.zeros(n, dtypes[optional]))
    for name, dtype in dtypes.items():
        object.__setattr__(table, name, np.ascontiguousarray(getattr(table, name), dtype))
    object.__setattr__(table, "n", n)


_FLOW_DTYPES = {
    "src": np.int64,
    "dst": np.int64,
    "bytes": np.float64,
    "entropy": np.uint64,
    "job": np.int32,
    "deps_ptr": np.int64,
    "deps": np.int64,
    "release_s": np.float64,
    "delay_s": np.float64,
    "channel": np.int64,
}


@dataclass(frozen=True, eq=False)
class FlowTable:
    """Flows as arrays of length ``n`` (see the module doc for the start rule)."""

    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    entropy: np.ndarray
    job: np.ndarray
    deps_ptr: np.ndarray
    deps: np.ndarray
    release_s: np.ndarray
    delay_s: np.ndarray
    channel: np.ndarray | None = None
    n: int = field(init=False)

    def __post_init__(self):
        coerce_arrays(self, _FLOW_DTYPES, length="src", optional="channel")
        self._check()

    def _check(self) -> None:
        n = self.n
        for name in ("dst", "bytes", "entropy", "job", "release_s", "delay_s", "channel"):
            if getattr(self, name).shape != (n,):
                raise ConfigError(f"flows.{name}", f"must have {n} entries like src")
        if self.deps_ptr.shape != (n + 1,) or self.deps_ptr[0] != 0:
            raise ConfigError("flows.deps_ptr", f"must be a CSR pointer of {n + 1} entries from 0")
        if np.any(np.diff(self.deps_ptr) < 0) or self.deps_ptr[-1] != self.deps.size:
            raise ConfigError("flows.deps_ptr", "must be non-decreasing and end at len(deps)")
        if np.any(self.src < 0) or np.any(self.dst < 0):
            raise ConfigError("flows.src", "host ids must be >= 0")
        if np.any(self.src == self.dst):
            raise ConfigError("flows.dst", "a flow needs src != dst")
        if not np.all(self.bytes > 0) or not np.all(np.isfinite(self.bytes)):
            raise ConfigError("flows.bytes", "must be finite and > 0")
        if np.any(self.release_s < 0) or np.any(self.delay_s < 0):
            raise ConfigError("flows.release_s", "release and delay times must be >= 0")
        owner = np.repeat(np.arange(n), np.diff(self.deps_ptr))
        if np.any(self.deps < 0) or np.any(self.deps >= owner):
            raise ConfigError("flows.deps", "a flow may only depend on flows with a lower id")

    @classmethod
    def simple(
        cls, src, dst, nbytes, *, job=0, release_s=0.0, entropy=None, channel=None
    ) -> FlowTable:
        """Independent flows (no dependencies, no delay); entropy = flow index by default."""
        src = np.asarray(src, np.int64)
        n = src.size
        return cls(
            src=src,
            dst=dst,
            bytes=np.broadcast_to(np.asarray(nbytes, float), (n,)),
            entropy=np.arange(n, dtype=np.uint64) if entropy is None else entropy,
            job=np.broadcast_to(np.asarray(job, np.int32), (n,)),
            deps_ptr=np.zeros(n + 1, np.int64),
            deps=np.zeros(0, np.int64),
            release_s=np.broadcast_to(np.asarray(release_s, float), (n,)),
            delay_s=np.zeros(n),
            channel=channel,
        )

    @classmethod
    def concat(cls, tables: list[FlowTable]) -> FlowTable:
        """One table of all flows, in order; dependencies are renumbered."""
        offsets = np.cumsum([0] + [t.n for t in tables])
        ptr = [np.zeros(1, np.int64)]
        for t in tables:
            ptr.append(t.deps_ptr[1:] + ptr[-1][-1])
        cat = {
            name: np.concatenate([getattr(t, name) for t in tables])
            for name in ("src", "dst", "bytes", "entropy", "job", "release_s", "delay_s", "channel")
        }
        deps = np.concatenate([t.deps + off for t, off in zip(tables, offsets[:-1], strict=True)])
        return cls(deps_ptr=np.concatenate(ptr), deps=deps, **cat)

    def successors(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR of the reverse dependencies: ``succ[ptr[d]:ptr[d+1]]`` are the flows waiting on
        ``d``."""
        return _transpose(self.deps_ptr, self.deps, self.n)

    def check_hosts(self, n_hosts: int) -> None:
        """ConfigError unless every endpoint is a host of a fabric with ``n_hosts`` hosts."""
        top = max(int(self.src.max(initial=-1)), int(self.dst.max(initial=-1)))
        if top >= n_hosts:
            raise ConfigError("flows.dst", f"host {top} is not in the fabric ({n_hosts} hosts)")


@numba.njit(cache=True)
def _transpose(deps_ptr, deps, n):
    """CSR transpose by counting sort (``O(n + deps)``): the waiting flows of every flow, in
    increasing id (what a stable sort of ``deps`` gives)."""
    ptr = np.zeros(n + 1, np.int64)
    for d in deps:
        ptr[d + 1] += 1
    for i in range(n):
        ptr[i + 1] += ptr[i]
    out = np.empty(deps.size, np.int64)
    fill = ptr[:-1].copy()
    for f in range(n):
        for e in range(deps_ptr[f], deps_ptr[f + 1]):
            d = deps[e]
            out[fill[d]] = f
            fill[d] += 1
    return ptr, out


def mix64(*keys: np.ndarray, seed: int = 0) -> np.ndarray:
    """SplitMix64 over the keys (vectorised, deterministic across processes; uint64)."""
    with np.errstate(over="ignore"):
        h = np.full(np.broadcast(*keys).shape, np.uint64(seed) ^ np.uint64(0x9E3779B97F4A7C15))
        for k in keys:
            h = h ^ np.asarray(k).astype(np.uint64)
            h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            h = h ^ (h >> np.uint64(31))
    return h
