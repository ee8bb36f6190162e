"""Side by side with htsim (Broadcom/csg-htsim, NDP): scenarios, .cm files, runs, parsing.

htsim is built outside this repository (never copied here); this module only writes its
connection-matrix (``.cm``) input, runs its ``htsim_ndp`` binary and reads its stdout. The same
:class:`Scenario` object feeds our engines (:func:`flow_table`), so both sides simulate exactly
the same flows.

Matched parameters (htsim's defaults as read in its sources; see ``htsim_notes`` in the
README): 2-tier leaf-spine ``-tiers 2 -nodes N`` = ``K`` leaves x ``K/2`` hosts, ``K/2`` spines,
``N = K^2/2``, host ``h`` on leaf ``h // (K/2)`` (our ``leaf_spine(N, K, rate)``); every link
``rate`` = 100 Gb/s with 1 us propagation, no switching delay, store-and-forward at every hop;
MTU 4000 B of payload + 64 B of header on the wire; 64 B ACK/NACK/PULL; switch output queues
of ``q`` = 35 MTU payloads = 140,000 B (data; trimmed headers have their own queue); NDP with an
initial window of ``cwnd`` = 50 packets, receiver-paced pulls at 99% of line rate, packet
trimming. A flow of ``S`` bytes is sent as ``ceil(S / mtu)`` full packets (htsim never
shortens the last one), so our side is given ``ceil(S / mtu) * mtu`` bytes.

Connection semantics: htsim starts a new connection (flow id: new ECMP hash, new spray
permutation, fresh window) for every flow in the ``.cm`` file, including each hop of a ring
(``per_message``); our side gives every flow its own ``entropy`` (a seeded mix of its index).

Completion: htsim's flow finishes when its SOURCE receives the ACK covering the last byte
(``Flow ... finished at T``), and a triggered flow starts at that instant. Our packet engine
reports that instant (``acked_s``) and releases dependants on it (``release_on="acked"``).
The flow engine has no ACKs: its finish is the last byte's arrival, so :func:`flow_table`
delays a dependent flow by the ACK's return latency and :func:`run_flow` adds it to the
completion times (:func:`ack_return_s`: 4 hops x (1 us + 64 B at line rate) across leaves, 2
within a leaf).

End condition: htsim's event list runs to ``-end`` (its retransmission scanner keeps it alive),
so each scenario is run first with a generous ``-end`` (:func:`end_us_for`) and then with
``-end`` = that first run's last completion plus 1% (:func:`calibrated_run`); a run in which
any flow of the ``.cm`` did not finish raises :class:`Unfinished` naming the scenario, never a
shorter run with fewer flows in its percentiles.

Speed against htsim (:func:`whole_process_pairs`): whole process against whole process, both
launched from here and timed from launch to exit, both reading the same ``.cm`` file and
writing their completions to a file (htsim's stdout; ours from ``benchmarks/_htsim_ours.py``),
with warm caches (one untimed run of each first: numba's on-disk cache, Python's bytecode
cache (:func:`bytecode_cache_env`), the page cache), interleaved ours, htsim, ours, htsim ...
for at least 5 pairs; the ratio is ours / htsim, the median of the pair ratios with its min
and max. Our process also reports its engine call's own time, named ``engine_only``.

Strategy correspondence: htsim ``perm`` (per-packet spraying over all spines, source routed)
~ our ``spray``; ``ecmp_host -paths 1`` (per-flow hash at the switches) ~ ``ecmp``;
``ecmp_ar`` (per-packet least-quantised-queue uplink at the leaf) ~ ``adaptive``.
"""

from __future__ import annotations

import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RATE_BPS = 100e9
HOP_S = 1e-6
MTU = 4000
HEADER = 64
ACK = 64
QUEUE_PKTS = 35
CWND_PKTS = 50
STRATS = {"spray": "perm", "ecmp": "ecmp_host -paths 1", "adaptive": "ecmp_ar"}
OUR_MODES = ("spray", "ecmp", "adaptive")
_PS = 1e-12


@dataclass(frozen=True)
class Scenario:
    """Flows on an ``n``-host htsim leaf-spine (radix ``k``, ``n = k^2/2``).

    ``start_s[f]`` is the start time of an untriggered flow (``nan`` when triggered);
    ``pred[f]`` the flow whose completion starts ``f`` (``-1`` if none; ``pred[f] < f``).
    Flow ids in the ``.cm`` file are ``f + 1``.
    """

    name: str
    n: int
    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray
    start_s: np.ndarray
    pred: np.ndarray

    @property
    def k(self) -> int:
        return radix_for(self.n)

    @property
    def n_flows(self) -> int:
        return int(self.src.size)


def radix_for(n: int) -> int:
    """htsim's 2-tier radix ``K`` with ``K^2/2 = n`` (it aborts on other host counts)."""
    k = int(round(math.sqrt(2 * n)))
    if k * k // 2 != n or k % 2:
        raise ValueError(f"htsim's 2-tier fat tree needs n = K^2/2 hosts (even K), got {n}")
    return k


def _scenario(name, n, src, dst, size, start_s=None, pred=None) -> Scenario:
    src = np.asarray(src, np.int64)
    f = src.size
    start = np.zeros(f) if start_s is None else np.asarray(start_s, float)
    pred = np.full(f, -1, np.int64) if pred is None else np.asarray(pred, np.int64)
    sc = Scenario(name, n, src, np.asarray(dst, np.int64), np.asarray(size, np.int64), start, pred)
    radix_for(n)
    if np.any(sc.src == sc.dst) or np.any(sc.src < 0) or np.any(sc.dst >= n):
        raise ValueError("flows need 0 <= src != dst < n")
    if np.any(pred >= np.arange(f)):
        raise ValueError("a flow can only be triggered by an earlier flow")
    return sc


# -- generators ----------------------------------------------------------------------------------
def permutation(n: int, size: int, seed: int = 13) -> Scenario:
    """Every host sends ``size`` bytes to a distinct host (a seeded random derangement)."""
    rng = np.random.default_rng(seed)
    dst = rng.permutation(n)
    for i in np.flatnonzero(dst == np.arange(n)):  # fixed points: swap with the next entry
        j = (i + 1) % n
        dst[i], dst[j] = dst[j], dst[i]
    return _scenario("permutation", n, np.arange(n), dst, np.full(n, size))


def mixed_permutation(n: int, lo: int, hi: int, seed: int = 13) -> Scenario:
    """:func:`permutation`'s pairs (same ``seed``) with sizes drawn log-uniformly in
    ``[lo, hi]`` bytes (seed ``seed + 1``)."""
    pairs = permutation(n, lo, seed)
    rng = np.random.default_rng(seed + 1)
    size = np.exp(rng.uniform(np.log(lo), np.log(hi), n)).astype(np.int64)
    return _scenario("mixed_permutation", n, pairs.src, pairs.dst, size)


def all_to_all(n: int, size: int) -> Scenario:
    """All ``n (n-1)`` pairs at once, ``size`` bytes each (shift ``s = 1..n-1``, ``i -> i+s``)."""
    i = np.tile(np.arange(n), n - 1)
    dst = (i + np.repeat(np.arange(1, n), n)) % n
    return _scenario("all_to_all", n, i, dst, np.full(i.size, size))


def incast(n: int, senders: int, size: int, seed: int = 13) -> Scenario:
    """``senders`` random hosts (not host 0) each send ``size`` bytes to host 0 at once."""
    src = np.random.default_rng(seed).permutation(np.arange(1, n))[:senders]
    return _scenario("incast", n, src, np.zeros(senders, np.int64), np.full(senders, size))


def ring_chains(n: int, rings: int, ranks: int, size: int, seed: int = 13) -> Scenario:
    """Ring all-reduce as htsim's ``gen_allreduce.py`` builds it: ``rings`` rings of ``ranks``
    ranks on randomly placed hosts; per ring and start rank ``s`` a chain of ``2 ranks - 1``
    flows of ``size`` bytes, hop ``d`` from rank ``(s+d-1) % ranks`` to ``(s+d) % ranks``,
    each hop started by the completion of the previous one (chains are independent)."""
    if rings * ranks > n:
        raise ValueError("rings x ranks must fit the hosts")
    hosts = np.random.default_rng(seed).permutation(n)[: rings * ranks].reshape(rings, ranks)
    hops = 2 * ranks - 1
    r, s, d = np.meshgrid(np.arange(rings), np.arange(ranks), np.arange(1, hops + 1), indexing="ij")
    r, s, d = r.ravel(), s.ravel(), d.ravel()
    src = hosts[r, (s + d - 1) % ranks]
    dst = hosts[r, (s + d) % ranks]
    f = np.arange(src.size)
    pred = np.where(d == 1, -1, f - 1)
    start = np.where(d == 1, 0.0, np.nan)
    return _scenario("ring_allreduce", n, src, dst, np.full(src.size, size), start, pred)


def default_scenarios(quick: bool = True) -> dict[str, Scenario]:
    """The four side-by-side scenarios (issue 14, item 6)."""
    return {
        "permutation": permutation(512, 2_000_000, seed=13),
        "all_to_all": all_to_all(128, 100_000),
        "incast": incast(128, 64, 1_000_000, seed=13),
        "ring_allreduce": ring_chains(128, 8, 16, 250_000, seed=13),
    }


# -- .cm files -----------------------------------------------------------------------------------
def write_cm(sc: Scenario, path: Path) -> Path:
    """htsim's connection-matrix text: start times in picoseconds, one oneshot trigger per
    dependency (trigger ``f + 1`` fires when flow ``f``'s source gets its last ACK)."""
    succ = np.full(sc.n_flows, -1, np.int64)
    has = sc.pred >= 0
    succ[sc.pred[has]] = np.flatnonzero(has)
    lines = [f"Nodes {sc.n}", f"Connections {sc.n_flows}"]
    n_trig = int(has.sum())
    if n_trig:
        lines.append(f"Triggers {n_trig}")
    for f in range(sc.n_flows):
        row = f"{sc.src[f]}->{sc.dst[f]} id {f + 1}"
        if sc.pred[f] >= 0:
            row += f" trigger {sc.pred[f] + 1}"
        else:
            row += f" start {int(round(sc.start_s[f] / _PS))}"
        row += f" size {sc.size[f]}"
        if succ[f] >= 0:
            row += f" send_done_trigger {f + 1}"
        lines.append(row)
    lines += [f"trigger id {p + 1} oneshot" for p in sc.pred[has]]
    path = Path(path)
    path.write_text("\n".join(lines) + "\n")
    return path


_CONN = re.compile(r"^(\d+)->(\d+)\s+(.*)$")


def read_cm(path: Path, name: str | None = None) -> Scenario:
    """A ``.cm`` file (ours or htsim's generators') as a :class:`Scenario`; flows are
    renumbered in file order, ``pred`` follows ``send_done_trigger`` -> ``trigger``."""
    n, rows, fires = 0, [], {}
    for line in Path(path).read_text().splitlines():
        tok = line.split()
        if not tok:
            continue
        if tok[0] == "Nodes":
            n = int(tok[1])
            continue
        m = _CONN.match(line.strip())
        if not m:
            continue
        kv = m.group(3).split()
        opts = dict(zip(kv[::2], kv[1::2], strict=False))
        f = len(rows)
        rows.append((int(m.group(1)), int(m.group(2)), int(opts["size"]), opts))
        if "send_done_trigger" in opts:
            fires[int(opts["send_done_trigger"])] = f
    src, dst, size, start, pred = [], [], [], [], []
    for s, d, b, opts in rows:
        src.append(s)
        dst.append(d)
        size.append(b)
        if "trigger" in opts:
            pred.append(fires[int(opts["trigger"])])
            start.append(np.nan)
        else:
            pred.append(-1)
            start.append(float(opts["start"]) * _PS)
    return _scenario(name or Path(path).stem, n, src, dst, size, start, pred)


# -- running htsim -------------------------------------------------------------------------------
def find_binary(htsim_dir: Path | str) -> Path | None:
    """``htsim_ndp`` under a repository root, its ``sim/`` or ``sim/datacenter/``."""
    base = Path(htsim_dir)
    for cand in (base, base / "datacenter", base / "sim" / "datacenter"):
        exe = cand / "htsim_ndp"
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe
    return None


def add_htsim_argument(p, what: str) -> None:
    """A benchmark's ``--htsim DIR`` option (default ``$HTSIM_DIR``), ``what`` saying what
    ``DIR`` must hold."""
    p.add_argument(
        "--htsim",
        type=Path,
        default=os.environ.get("HTSIM_DIR") or None,
        help=f"{what} (module doc); default: $HTSIM_DIR",
    )


class Unfinished(RuntimeError):
    """A run ended (htsim at its ``-end``, ours at its last event) with flows of the scenario
    not finished: an error, never a shorter run."""


def check_finished(sc: Scenario, finish_s: np.ndarray, who: str) -> None:
    """Raise :class:`Unfinished` naming the scenario when any flow of ``sc`` has no finish."""
    missing = np.flatnonzero(~np.isfinite(np.asarray(finish_s, float)))
    if missing.size:
        ids = ", ".join(str(i + 1) for i in missing[:10]) + (" ..." if missing.size > 10 else "")
        raise Unfinished(
            f"{who}: scenario {sc.name!r} ended with {missing.size} of {sc.n_flows} flows "
            f"unfinished (flow ids {ids})"
        )


@dataclass(frozen=True)
class HtsimRun:
    """One htsim run: per-flow start/finish (s), packet counts, wall and CPU seconds of the
    whole process (CPU is the steadier figure on a shared machine), the ``-end`` it ran to
    (us) and the lines of its stdout that :func:`parse_output` reads (:func:`trim_output`)."""

    strat: str
    start_s: np.ndarray
    finish_s: np.ndarray
    new_packets: int
    rtx_packets: int
    wall_s: float
    cpu_s: float
    command: str
    end_us: int = 0
    output: str = ""

    @property
    def fct_s(self) -> np.ndarray:
        return self.finish_s - self.start_s


_FIN = re.compile(r"^Flow \S+ flow_id (\d+) finished at (\S+) total bytes", re.M)
_TOT = re.compile(r"^New: (\d+) Rtx: (\d+)", re.M)


def parse_output(text: str, sc: Scenario) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(start_s, finish_s, new, rtx) from htsim_ndp's stdout for the flows of ``sc``: finish
    from ``Flow .. flow_id I finished at T`` (us; ``nan`` when absent), start = the .cm start or
    the predecessor's finish (its trigger fires then)."""
    finish = np.full(sc.n_flows, np.nan)
    for m in _FIN.finditer(text):
        finish[int(m.group(1)) - 1] = float(m.group(2)) * 1e-6
    start = sc.start_s.copy()
    trig = sc.pred >= 0
    start[trig] = finish[sc.pred[trig]]
    tot = _TOT.search(text)
    new, rtx = (int(tot.group(1)), int(tot.group(2))) if tot else (0, 0)
    return start, finish, new, rtx


def trim_output(text: str) -> str:
    """The lines of htsim's stdout that :func:`parse_output` reads (finishes and totals)."""
    keep = (m.group(0) for m in re.finditer(r"^(Flow \S+ flow_id .*|New: .*)$", text, re.M))
    return "\n".join(keep) + "\n"


def htsim_command(
    exe: Path, cm: Path, sc: Scenario, strat: str, end_us: float, log: Path, seed: int = 13
) -> list:
    """htsim_ndp's command line for ``sc`` under our ``strat`` name (``-seed 13`` is its
    default; the seed drives the switches' hash salts and the spray orders)."""
    return [
        str(exe), "-tm", str(cm), "-tiers", "2", "-nodes", str(sc.n),
        "-linkspeed", str(int(RATE_BPS / 1e6)), "-strat", *STRATS[strat].split(),
        "-q", str(QUEUE_PKTS), "-cwnd", str(CWND_PKTS), "-mtu", str(MTU),
        "-end", str(int(math.ceil(end_us))), "-o", str(log), "-seed", str(seed),
    ]  # fmt: skip


def _shown(cmd: list) -> str:
    return " ".join(Path(c).name if "/" in c else c for c in cmd)


def _timed(
    cmd: list, sink: Path, cwd: Path, timeout_s: float, env: dict | None = None
) -> tuple[float, float]:
    """Run ``cmd`` (environment ``env``, default ours) with stdout and stderr to the file
    ``sink``; (wall, CPU) seconds of the whole process from launch to exit. A non-zero exit
    raises with the sink's tail."""
    with open(sink, "w") as out:
        c0, t0 = _child_cpu_s(), time.perf_counter()
        rc = subprocess.run(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, timeout=timeout_s, env=env
        )
        wall, cpu = time.perf_counter() - t0, _child_cpu_s() - c0
    if rc.returncode != 0:
        tail = Path(sink).read_text()[-800:]
        raise RuntimeError(f"{_shown(cmd)} exited {rc.returncode}: {tail}")
    return wall, cpu


def run_htsim(
    exe: Path,
    sc: Scenario,
    strat: str,
    end_us: float,
    timeout_s: float = 600,
    seed: int = 13,
    allow_unfinished: bool = False,
) -> HtsimRun:
    """Run ``sc`` under our ``strat`` name (``STRATS``) and parse it (wall = the process's
    whole run, from launch to exit, including topology and connection set-up; its stdout goes
    to a file). Flows unfinished at ``end_us`` raise :class:`Unfinished` unless
    ``allow_unfinished`` (the calibration's doubling, :func:`calibrated_run`)."""
    with tempfile.TemporaryDirectory(prefix="htsim_") as tmp:
        cm = write_cm(sc, Path(tmp) / f"{sc.name}.cm")
        cmd = htsim_command(exe, cm, sc, strat, end_us, Path(tmp) / "logout.dat", seed)
        sink = Path(tmp) / "htsim.out"
        wall, cpu = _timed(cmd, sink, Path(tmp), timeout_s)
        text = sink.read_text()
    start, finish, new, rtx = parse_output(text, sc)
    if not allow_unfinished:
        check_finished(sc, finish, f"htsim -strat {STRATS[strat]} -end {int(math.ceil(end_us))}")
    return HtsimRun(
        strat, start, finish, new, rtx, wall, cpu, _shown(cmd), int(math.ceil(end_us)),
        trim_output(text),
    )  # fmt: skip


def end_us_past(finish_s: np.ndarray) -> int:
    """htsim's ``-end`` (whole us) for a run whose last flow finished at ``max(finish_s)``:
    that completion plus 1%."""
    return int(math.ceil(float(np.nanmax(finish_s)) * 1e6 * 1.01))


def calibrated_run(
    exe: Path, sc: Scenario, strat: str, seed: int = 13, timeout_s: float = 600
) -> HtsimRun:
    """htsim on ``sc`` to ``-end`` just past its last completion: a first run to a generous
    ``-end`` (:func:`end_us_for`, doubled while flows are unfinished, at most 4 times), then the
    run that counts with ``-end`` = that run's last completion plus 1%. Raises
    :class:`Unfinished` if either leaves a flow unfinished, and RuntimeError if the two runs'
    completion times differ (htsim is deterministic for a seed)."""
    end = end_us_for(sc)
    for _ in range(5):
        first = run_htsim(exe, sc, strat, end, timeout_s, seed, allow_unfinished=True)
        if np.all(np.isfinite(first.finish_s)):
            break
        end *= 2
    check_finished(
        sc, first.finish_s, f"htsim -strat {STRATS[strat]} (calibration, -end {first.end_us})"
    )
    run = run_htsim(exe, sc, strat, end_us_past(first.finish_s), timeout_s, seed)
    if not np.array_equal(run.finish_s, first.finish_s):
        raise RuntimeError(f"htsim's completions on {sc.name!r} moved with -end")
    return run


def htsim_build(exe: Path) -> dict:
    """htsim's commit (and whether its tree has local changes) and the compiler flags of its
    Makefiles (``sim/`` builds ``libhtsim.a``, ``sim/datacenter/`` links ``htsim_ndp``)."""
    dc = Path(exe).resolve().parent

    def git(*args):
        try:
            r = subprocess.run(["git", "-C", str(dc.parent), *args], capture_output=True, text=True)
        except OSError:
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    flags = {}
    for name, mk in (("libhtsim", dc.parent / "Makefile"), ("htsim_ndp", dc / "Makefile")):
        if mk.is_file():
            lines = [ln.strip() for ln in mk.read_text().splitlines()]
            flags[name] = " ; ".join(ln for ln in lines if re.match(r"^(CC|CFLAGS)\s*\+?=", ln))
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".")
    return {
        "repository": "Broadcom/csg-htsim",
        "commit": git("rev-parse", "HEAD"),
        "dirty_sim": bool(status) if status is not None else None,
        "binary": "sim/datacenter/htsim_ndp",
        "flags": flags,
    }


def _child_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


# -- our side ------------------------------------------------------------------------------------
def ack_return_s(sc: Scenario) -> np.ndarray:
    """Per flow: the last ACK's trip back to the source (htsim's completion is its arrival):
    per hop 1 us + 64 B at line rate, 4 hops across leaves, 2 within a leaf."""
    per_host = sc.k // 2
    hops = np.where(sc.src // per_host == sc.dst // per_host, 2, 4)
    return hops * (HOP_S + ACK * 8 / RATE_BPS)


def wire_bytes(sc: Scenario) -> np.ndarray:
    """Payload bytes htsim actually sends per flow: whole MTU packets."""
    return -(-sc.size // MTU) * MTU


def flow_table(sc: Scenario, seed: int = 0, ack_delay: bool = True):
    """Our :class:`FlowTable` of ``sc``: htsim's payload per flow, one connection (entropy) per
    flow, a triggered flow depends on its predecessor and (``ack_delay``) waits for the
    predecessor's ACK return after its last byte arrived (the flow engine's stand-in for
    htsim's trigger; the packet engine releases on the ACK itself)."""
    from trainfabric.fabric.flows import FlowTable, mix64

    f = sc.n_flows
    trig = sc.pred >= 0
    deps_ptr = np.r_[0, np.cumsum(trig)].astype(np.int64)
    delay = np.where(trig & ack_delay, ack_return_s(sc)[np.maximum(sc.pred, 0)], 0.0)
    return FlowTable(
        src=sc.src,
        dst=sc.dst,
        bytes=wire_bytes(sc).astype(float),
        entropy=mix64(np.arange(f), seed=seed),
        job=np.zeros(f, np.int32),
        deps_ptr=deps_ptr,
        deps=sc.pred[trig],
        release_s=np.where(trig, 0.0, sc.start_s),
        delay_s=delay,
    )


def topology(sc: Scenario):
    """Our leaf-spine equal to htsim's ``-tiers 2 -nodes n``."""
    from trainfabric.fabric import topology as T

    return T.leaf_spine(sc.n, sc.k, RATE_BPS, hop_latency_s=HOP_S)


def packet_config(**overrides):
    """Our packet engine's settings matched to htsim's NDP run (module doc)."""
    from trainfabric.fabric.packet import PacketConfig

    kw = dict(
        mtu_bytes=MTU,
        header_bytes=HEADER,
        queue_packets=QUEUE_PKTS,
        switch_mode="trim",
        initial_window_packets=CWND_PKTS,
    )
    kw.update(overrides)
    return PacketConfig(**kw)


# -- metrics -------------------------------------------------------------------------------------
def summary(sc: Scenario, start_s, finish_s, wall_s: float, rtx: int, new: int) -> dict:
    """FCT p50/p99 (us), completion = last finish (us), aggregate goodput (Gb/s of payload
    over the whole run) and as a fraction of ``min(#senders, #receivers)`` host links
    (the edge bound: 1 link for an incast), retransmitted / new data packets, wall (s)."""
    done = np.isfinite(finish_s)
    fct = (finish_s - start_s)[done]
    t_end = float(np.max(finish_s[done])) if done.any() else float("nan")
    t0 = float(np.nanmin(sc.start_s))
    sent = float(wire_bytes(sc)[done].sum())
    links = min(np.unique(sc.src).size, np.unique(sc.dst).size)
    return {
        "fct_p50_us": float(np.percentile(fct, 50) * 1e6) if fct.size else None,
        "fct_p99_us": float(np.percentile(fct, 99) * 1e6) if fct.size else None,
        "completion_us": (t_end - t0) * 1e6,
        "goodput_gbps": sent * 8 / (t_end - t0) / 1e9 if done.any() else None,
        "goodput_fraction": sent * 8 / (t_end - t0) / (links * RATE_BPS) if done.any() else None,
        "unfinished": int((~done).sum()),
        "retransmit_fraction": rtx / new if new else 0.0,
        "wall_s": float(wall_s),
    }


def end_us_for(sc: Scenario) -> float:
    """A generous ``-end`` for htsim's first (calibration) run: 4x the busiest host's
    serialisation time plus 1 ms (htsim's retransmission scanner keeps the event list alive
    until ``-end``, so the run that is reported ends just past its last completion instead:
    :func:`calibrated_run`)."""
    per_pkt = (MTU + HEADER) * 8 / RATE_BPS
    pk = -(-sc.size // MTU)
    load = np.bincount(sc.src, pk, sc.n)
    load = np.maximum(load, np.bincount(sc.dst, pk, sc.n))
    return 4 * float(load.max()) * per_pkt * 1e6 + 1000.0


# -- our engines on a scenario -------------------------------------------------------------------
def our_queue_packets() -> int:
    """htsim's ``-q`` in our units. Both count MTU payloads: a switch port's data class holds
    ``q x mtu`` bytes (35 x 4000 = 140,000 B: 34 whole 4064 B wire packets), the packet in
    service included (our packet engine's driver: capacity ``queue_packets x mtu_bytes``)."""
    return QUEUE_PKTS


def new_packets(sc: Scenario) -> int:
    return int((wire_bytes(sc) // MTU).sum())


def packet_completions(sc: Scenario, mode: str, seed: int = 0, **cfg):
    """Our packet engine on ``sc`` (htsim-matched config): (start_s, finish_s, result, wall,
    CPU) with htsim's completion, the engine's own ``acked_s`` (the source has the last ACK),
    and dependants released then (``release_on="acked"``, htsim's ``send_done_trigger``).
    Wall and CPU cover the engine call only (topology and flows are built before)."""
    from trainfabric.fabric.packet import simulate_packets

    topo, flows = topology(sc), flow_table(sc, seed, ack_delay=False)
    config = packet_config(queue_packets=our_queue_packets(), release_on="acked", **cfg)
    c0, t0 = time.process_time(), time.perf_counter()
    res = simulate_packets(topo, flows, mode, config=config, seed=seed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    check_finished(sc, res.acked_s, f"our packet engine ({mode})")
    return res.start_s, res.acked_s, res, wall, cpu


def flow_completions(sc: Scenario, mode: str, seed: int = 0):
    """Our flow engine on ``sc``: (start_s, finish_s, result, wall, CPU), finish = the last
    byte's arrival plus the ACK's return (:func:`ack_return_s`); wall and CPU cover routing
    and simulation (topology and flows are built before)."""
    from trainfabric.fabric.flow.engine import simulate
    from trainfabric.fabric.routing import Router

    topo, flows = topology(sc), flow_table(sc, seed)
    c0, t0 = time.process_time(), time.perf_counter()
    res = simulate(topo, flows, Router(topo, mode, seed=seed), mtu_bytes=MTU, header_bytes=HEADER)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finish = res.finish_s + ack_return_s(sc)
    check_finished(sc, finish, f"our flow engine ({mode})")
    return res.start_s, finish, res, wall, cpu


def run_packet(sc: Scenario, mode: str, seed: int = 0, **cfg) -> tuple[dict, object]:
    """Our packet engine on ``sc`` (:func:`packet_completions`), summarised on htsim's FCT
    definition; ``wall_s`` is the engine call only."""
    start, finish, res, wall, cpu = packet_completions(sc, mode, seed, **cfg)
    out = summary(sc, start, finish, wall, int(res.retransmitted), new_packets(sc))
    out.update(cpu_s=cpu, events=int(res.n_events), packets=int(res.n_packets))
    return out, res


def run_flow(sc: Scenario, mode: str, seed: int = 0) -> dict:
    """Our flow engine on ``sc`` (:func:`flow_completions`; ``wall_s``: routing and
    simulation)."""
    start, finish, res, wall, cpu = flow_completions(sc, mode, seed)
    out = summary(sc, start, finish, wall, 0, new_packets(sc))
    out.update(cpu_s=cpu, events=int(res.n_events))
    return out


def warm_up(engines: tuple[str, ...]) -> None:
    """Compile the numba kernels on tiny instances (never timed)."""
    tiny = [permutation(8, 8000, seed=1), ring_chains(8, 1, 3, 8000, seed=1)]
    for sc in tiny:
        for mode in OUR_MODES:
            if "packet" in engines:
                run_packet(sc, mode)
            if "flow" in engines:
                run_flow(sc, mode)


# -- the side-by-side table ----------------------------------------------------------------------
def _ratio(a, b):
    return a / b if a is not None and b else None


def mode_ratios(rows: dict, key: str) -> dict:
    """``ecmp / spray`` and ``adaptive / spray`` of one side's ``key``."""
    return {m: _ratio(rows[m][key], rows["spray"][key]) for m in ("ecmp", "adaptive")}


def ordering(rows: dict, key: str, tie: float = 0.03) -> str:
    """Modes sorted by ``key``; neighbours within ``tie`` (relative) are written ``~``."""
    ms = sorted(rows, key=lambda m: rows[m][key])
    out = ms[0]
    for a, b in zip(ms, ms[1:], strict=False):
        out += (" ~ " if rows[b][key] <= rows[a][key] * (1 + tie) else " < ") + b
    return out


def compare(table: dict, engine: str) -> dict:
    """Per scenario: ``engine``/htsim ratios per mode (p50, p99, completion), the mode
    ratios on each side and whether ours are within 25% of htsim's."""
    out = {}
    for name, rows in table.items():
        h = {m: rows[m]["htsim"] for m in rows if "htsim" in rows[m]}
        o = {m: rows[m][engine] for m in rows if engine in rows[m]}
        if set(h) != set(OUR_MODES) or set(o) != set(OUR_MODES):
            continue
        c = {"ratio_vs_htsim": {}, "mode_ratios": {}}
        for m in OUR_MODES:
            c["ratio_vs_htsim"][m] = {
                k: _ratio(o[m][k], h[m][k]) for k in ("fct_p50_us", "fct_p99_us", "completion_us")
            }
        for k in ("fct_p50_us", "fct_p99_us", "completion_us"):
            ours, theirs = mode_ratios(o, k), mode_ratios(h, k)
            c["mode_ratios"][k] = {
                m: {
                    "ours": ours[m],
                    "htsim": theirs[m],
                    "within_25pct": None
                    if ours[m] is None or theirs[m] is None
                    else bool(abs(ours[m] / theirs[m] - 1) <= 0.25),
                }
                for m in ours
            }
        c["ordering"] = {
            "ours": ordering(o, "completion_us"),
            "htsim": ordering(h, "completion_us"),
        }
        out[name] = c
    return out


def mean_rows(rows: list[dict]) -> dict:
    """The mean of each numeric field over seeds; ``per_seed`` keeps the FCTs and completion."""
    if len(rows) == 1:
        return rows[0]
    out = dict(rows[0])
    for k, v in rows[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            vals = [r[k] for r in rows if r.get(k) is not None]
            out[k] = float(np.mean(vals)) if vals else None
    keep = ("fct_p50_us", "fct_p99_us", "completion_us", "retransmit_fraction")
    out["per_seed"] = [{k: r.get(k) for k in keep} for r in rows]
    return out


def side_by_side(
    scenarios: dict[str, Scenario],
    exe: Path | None,
    engines: tuple[str, ...] = ("packet", "flow"),
    log=None,
    ecmp_seeds: int = 1,
) -> dict:
    """``table[scenario][mode][side]`` = :func:`summary` for htsim (if ``exe``) and ours.

    ECMP's completion times depend on one hash draw (which flows collide), so its rows are
    the mean over ``ecmp_seeds`` draws on each side (htsim ``-seed 13, 14, ..``; ours seeds
    0, 1, ..: entropy mix and engine seed); spray and adaptive use one seed. htsim runs to
    ``-end`` just past its last completion (:func:`calibrated_run`; its row's ``wall_s`` is
    that run's whole process); ours' ``wall_s`` is the engine call only."""
    table: dict = {}
    for name, sc in scenarios.items():
        table[name] = {}
        for mode in OUR_MODES:
            seeds = range(ecmp_seeds if mode == "ecmp" else 1)
            row = {}
            if exe is not None:
                hs = []
                for k in seeds:
                    r = calibrated_run(exe, sc, mode, seed=13 + k)
                    hs.append(
                        summary(sc, r.start_s, r.finish_s, r.wall_s, r.rtx_packets, r.new_packets)
                    )
                    hs[-1].update(cpu_s=r.cpu_s, command=r.command, end_us=r.end_us)
                row["htsim"] = mean_rows(hs)
            if "packet" in engines:
                row["packet"] = mean_rows([run_packet(sc, mode, seed=k)[0] for k in seeds])
            if "flow" in engines:
                row["flow"] = mean_rows([run_flow(sc, mode, seed=k) for k in seeds])
            table[name][mode] = row
            if log:
                log(name, mode, row)
    return table


def flow_speedups(table: dict, key: str = "wall_s") -> dict:
    """Engine only: htsim's whole process (to ``-end`` just past its last completion) / the
    flow engine's engine call (routing and simulation) of ``key`` (wall or CPU seconds), per
    scenario and mode (both ran, one run each: see :func:`whole_process_pairs` for the
    like-for-like figure)."""
    return {
        f"{name}/{m}": rows[m]["htsim"][key] / rows[m]["flow"][key]
        for name, rows in table.items()
        for m in rows
        if "htsim" in rows[m] and "flow" in rows[m]
    }


def rank_sync_ring(seed: int = 13) -> dict:
    """The flow engine alone on its own rank-synchronised ring all-reduce (``collective_flows``
    with ``per_message`` connections: 8 concurrent rings of 16 ranks, 250 KB chunks, 30
    dependent steps each) on the hosts of :func:`ring_chains`: engine-only wall (flows, routing
    and simulation) per mode. Not compared with htsim, whose ring is the chained one."""
    from trainfabric.fabric.flow import collectives as fc
    from trainfabric.fabric.flow.engine import simulate
    from trainfabric.fabric.flows import FlowTable
    from trainfabric.fabric.routing import Router

    topo = topology(ring_chains(128, 8, 16, 250_000, seed=seed))
    hosts = np.random.default_rng(seed).permutation(128).reshape(8, 16)
    steps = fc.collective_steps("all_reduce", 16, 16 * 250_000)
    out = {}
    for mode in OUR_MODES:
        c0, t0 = time.process_time(), time.perf_counter()
        rings = [
            fc.collective_flows(steps, h, job=j, connections="per_message").flows
            for j, h in enumerate(hosts)
        ]
        res = simulate(
            topo, FlowTable.concat(rings), Router(topo, mode), mtu_bytes=MTU, header_bytes=HEADER
        )
        out[mode] = {
            "flow_engine_only_wall_s": time.perf_counter() - t0,
            "flow_engine_only_cpu_s": time.process_time() - c0,
            "completion_us": res.makespan_s * 1e6,
        }
    return out


# -- whole process against whole process -----------------------------------------------------------
OURS_SCRIPT = Path(__file__).resolve().with_name("_htsim_ours.py")
_OURS_FIN = re.compile(r"^flow_id (\d+) start_us (\S+) finish_us (\S+)$", re.M)
_OURS_ENGINE = re.compile(
    r"^engine_only_wall_s (\S+) engine_only_cpu_s (\S+) kernel_load_s (\S+)", re.M
)


def ours_command(cm: Path, engine: str, mode: str, seed: int = 0) -> list:
    """Our side as a process (``benchmarks/_htsim_ours.py``): reads the ``.cm``, builds the
    topology and flows, runs ``engine`` and prints one completion line per flow."""
    return [sys.executable, str(OURS_SCRIPT), "--cm", str(cm), "--engine", engine,
            "--mode", mode, "--seed", str(seed)]  # fmt: skip


def parse_ours(text: str, sc: Scenario) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(start_s, finish_s, engine-only wall, kernel load) from our process's output."""
    start, finish = np.full(sc.n_flows, np.nan), np.full(sc.n_flows, np.nan)
    for m in _OURS_FIN.finditer(text):
        i = int(m.group(1)) - 1
        start[i], finish[i] = float(m.group(2)) * 1e-6, float(m.group(3)) * 1e-6
    eng = _OURS_ENGINE.search(text)
    wall, load = (float(eng.group(1)), float(eng.group(3))) if eng else (math.nan, math.nan)
    return start, finish, wall, load


def bytecode_cache_env(folder: Path) -> dict:
    """Our process's environment for the timed pairs: Python's bytecode cache on, in
    ``folder`` (``PYTHONPYCACHEPREFIX``; ``PYTHONDONTWRITEBYTECODE`` dropped), so that the
    untimed run compiles our modules once and the timed runs load them, as an installed
    program does (the caches are warm on both sides: htsim is a compiled binary)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(folder)
    return env


def _spread(values: list[float]) -> dict:
    return {
        "median": float(np.median(values)),
        "min": float(np.min(values)),
        "max": float(np.max(values)),
    }


def whole_process_pairs(
    exe: Path,
    sc: Scenario,
    mode: str,
    engine: str = "packet",
    pairs: int = 5,
    ours_seed: int = 0,
    htsim_seed: int = 13,
    timeout_s: float = 600,
    log=None,
) -> dict:
    """Ours / htsim, whole process against whole process (module doc): the same ``.cm``, htsim
    to ``-end`` just past its last completion (:func:`calibrated_run`, which also warms its
    caches), one untimed run of ours (numba's on-disk cache; Python's bytecode cache, in a
    temporary folder: :func:`bytecode_cache_env`), then ``pairs`` pairs launched strictly in
    turn, ours then htsim, each timed from launch to exit with its stdout and stderr written
    to a file. Every run of either side must finish every flow
    (:class:`Unfinished`). ``ratio``: ours / htsim per pair; ``engine_only_ratio``: our
    engine call (reported by our process, kernels loaded first: ``benchmarks/_htsim_ours.py``)
    / htsim's whole process, named as such."""
    if pairs < 5:
        raise ValueError("like-for-like timing needs at least 5 pairs")
    cal = calibrated_run(exe, sc, mode, seed=htsim_seed, timeout_s=timeout_s)
    with tempfile.TemporaryDirectory(prefix="pairs_") as tmp:
        tmp = Path(tmp)
        cm = write_cm(sc, tmp / f"{sc.name}.cm")
        hcmd = htsim_command(exe, cm, sc, mode, cal.end_us, tmp / "logout.dat", htsim_seed)
        ocmd = ours_command(cm, engine, mode, ours_seed)
        ours_env = bytecode_cache_env(tmp / "pycache")
        sink_o, sink_h = tmp / "ours.out", tmp / "htsim.out"

        def ours():
            wall, cpu = _timed(ocmd, sink_o, tmp, timeout_s, ours_env)
            start, finish, ew, load = parse_ours(sink_o.read_text(), sc)
            check_finished(sc, finish, f"our {engine} engine process ({mode})")
            same["ours"] = summary(sc, start, finish, 0.0, 0, 0)
            return wall, cpu, ew, load

        def theirs():
            wall, cpu = _timed(hcmd, sink_h, tmp, timeout_s)
            _, finish, _, _ = parse_output(sink_h.read_text(), sc)
            check_finished(sc, finish, f"htsim -strat {STRATS[mode]} -end {cal.end_us}")
            return wall, cpu, finish

        same: dict = {}
        ours()  # warm-up, not timed (htsim's is the calibration)
        rows = []
        for k in range(pairs):
            ow, oc, ew, load = ours()
            hw, hc, hfin = theirs()
            if not np.array_equal(hfin, cal.finish_s):
                raise RuntimeError(f"htsim's completions on {sc.name!r} moved between runs")
            rows.append({"ours_wall_s": ow, "htsim_wall_s": hw, "ours_cpu_s": oc,
                         "htsim_cpu_s": hc, "ours_engine_only_wall_s": ew,
                         "ours_kernel_load_s": load,
                         "ratio": ow / hw, "engine_only_ratio": ew / hw})  # fmt: skip
            if log:
                log(f"pair {k + 1}/{pairs} {sc.name}/{mode}: ours {ow:.3f} s, htsim {hw:.3f} s")
    ratio = _spread([r["ratio"] for r in rows])
    eng = _spread([r["engine_only_ratio"] for r in rows])
    theirs = summary(sc, cal.start_s, cal.finish_s, 0.0, 0, 0)
    work = {
        f"{k}_{side}": row[k]
        for side, row in (("ours", same["ours"]), ("htsim", theirs))
        for k in ("fct_p50_us", "fct_p99_us", "completion_us")
    }
    return {
        "scenario": sc.name,
        "hosts": sc.n,
        "flows": sc.n_flows,
        "mode": mode,
        "engine": engine,
        "pairs": pairs,
        "cache": "warm",
        "caches": "numba's on-disk cache, Python's bytecode cache (PYTHONPYCACHEPREFIX in the "
        "pairs' temporary folder), the page cache: filled by the untimed runs",
        "warm_up": "one untimed run of each side before the pairs (htsim's: its -end calibration)",
        "order": "strictly alternating, ours then htsim, in every pair",
        "sink": "a file: each process's stdout and stderr redirected to a file",
        "end_condition": "htsim: -end = its first run's last completion + 1%; ours: its last "
        "event; every flow finished on both sides in every run",
        "htsim_end_us": cal.end_us,
        "htsim_last_completion_us": float(np.max(cal.finish_s) * 1e6),
        "ours_command": "python benchmarks/" + _shown(ocmd[1:]),
        "htsim_command": _shown(hcmd),
        "same_work": work,
        "ratio_median": ratio["median"],
        "ratio_min": ratio["min"],
        "ratio_max": ratio["max"],
        "engine_only_ratio_median": eng["median"],
        "engine_only_ratio_min": eng["min"],
        "engine_only_ratio_max": eng["max"],
        "ours_wall_s_median": float(np.median([r["ours_wall_s"] for r in rows])),
        "htsim_wall_s_median": float(np.median([r["htsim_wall_s"] for r in rows])),
        "ours_engine_only_wall_s_median": float(
            np.median([r["ours_engine_only_wall_s"] for r in rows])
        ),
        "ours_kernel_load_s_median": float(np.median([r["ours_kernel_load_s"] for r in rows])),
        "engine_only": "our engine call inside our process, after an 8-host run of the same "
        "engine and mode has loaded the compiled kernels from numba's cache (both inside the "
        "whole process)",
        "per_pair": rows,
    }


# -- captured htsim runs for the tests (tests/data/htsim/) --------------------------------------
def pinned_scenarios() -> dict[str, Scenario]:
    """Small scenarios whose htsim outputs are stored under ``tests/data/htsim/`` and checked
    against our engines in the default test run (``tests/fabric/test_peers_pinned.py``)."""
    return {
        "perm32": permutation(32, 1_000_000, seed=13),
        "incast32": incast(32, 8, 200_000, seed=13),
        "ring32": ring_chains(32, 2, 8, 50_000, seed=13),
    }


PIN_GENERATORS = {
    "perm32": "permutation(32, 1_000_000, seed=13)",
    "incast32": "incast(32, 8, 200_000, seed=13)",
    "ring32": "ring_chains(32, 2, 8, 50_000, seed=13)",
}


def pin(exe: Path, out_dir: Path, scenarios: dict[str, Scenario] | None = None) -> dict:
    """Capture htsim on the pinned scenarios into ``out_dir``: per scenario its ``.cm`` and, per
    strategy, the lines of htsim's stdout the parser reads (``NAME.MODE.out``, from the run to
    ``-end`` just past its last completion); ``htsim.json`` names htsim's commit, build flags
    and every command line; under ECMP also the spines htsim's flows crossed
    (``NAME.ecmp.paths``, :mod:`_htsim_paths`)."""
    import json

    import _htsim_paths as HP

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"htsim": htsim_build(exe), "matched": matched(), "scenarios": {}}
    with tempfile.TemporaryDirectory(prefix="htsim_log_") as work:
        exe_log = HP.build_path_logger(Path(exe).resolve().parents[2], Path(work))
        for name, sc in (scenarios or pinned_scenarios()).items():
            cm = write_cm(sc, out_dir / f"{name}.cm")
            entry = {"cm": cm.name, "generator": PIN_GENERATORS.get(name), "runs": {}}
            for mode in OUR_MODES:
                run = calibrated_run(exe, sc, mode)
                out = out_dir / f"{name}.{mode}.out"
                out.write_text(run.output)
                cmd = run.command.replace(f"-tm {sc.name}.cm", f"-tm {cm.name}")
                entry["runs"][mode] = {"output": out.name, "command": cmd, "end_us": run.end_us}
                if mode == "ecmp":  # htsim's own paths, for replay (benchmarks/_htsim_paths.py)
                    paths = out_dir / f"{name}.ecmp.paths"
                    paths.write_text(HP.logged_run(exe_log, sc, 13, run))
                    entry["runs"][mode]["paths"] = paths.name
            meta["scenarios"][name] = entry
    (out_dir / "htsim.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


# -- the whole table (benchmarks/vs_htsim.sh) ----------------------------------------------------
def _engines_available() -> tuple[str, ...]:
    try:
        from trainfabric.fabric.packet import simulate_packets  # noqa: F401
    except ImportError:
        return ("flow",)
    return ("packet", "flow")


CONNECTIONS = (
    "per_message: a new connection (ECMP hash, spray order, window) per flow and per ring hop, "
    "as htsim's connection matrices"
)


def matched() -> dict:
    """The parameters both sides share (module doc)."""
    return {
        "topology": "htsim -tiers 2 -nodes N = leaf_spine(N, K, 100G), N = K^2/2",
        "link": "100 Gb/s, 1 us per hop, no switch latency, store-and-forward",
        "mtu_payload_bytes": MTU,
        "header_bytes": HEADER,
        "queue": f"-q {QUEUE_PKTS} = {QUEUE_PKTS * MTU} B per switch port "
        f"(queue_packets = {our_queue_packets()} MTU payloads)",
        "initial_window_packets": CWND_PKTS,
        "transport": "NDP with trimming (htsim_ndp; our transport='ndp', switch_mode='trim')",
        "completion": "source receives the last ACK (ours: last byte + ACK return)",
        "strategies": STRATS,
    }


def table_result(
    exe: Path, engines: tuple[str, ...], log=None, ecmp_seeds: int = 3, pairs: int = 5
) -> dict:
    """The side-by-side table, per-engine comparisons and the flow engine's speed-ups:
    engine only from the table (htsim's whole process / our engine call, one run each), and
    like for like on the chained ECMP ring (:func:`whole_process_pairs`, ``pairs`` pairs)."""
    warm_up(engines)
    table = side_by_side(default_scenarios(), exe, engines, log, ecmp_seeds)
    every = flow_speedups(table)
    every_cpu = flow_speedups(table, "cpu_s")
    out = {
        "engines": list(engines),
        "connection_semantics": CONNECTIONS,
        "matched": matched(),
        "htsim_build": htsim_build(exe),
        "ecmp_seeds": ecmp_seeds,
        "table": table,
        "compare": {e: compare(table, e) for e in engines},
        "flow_engine_speedups_engine_only": every,
        "flow_engine_speedup_vs_htsim_min_engine_only": min(every.values()) if every else None,
        "flow_engine_speedups_cpu_engine_only": every_cpu,
        "flow_engine_speedup_ring_min_engine_only": min(
            [v for k, v in every.items() if k.startswith("ring")], default=None
        ),
        "rank_sync_ring_flow_engine_only": rank_sync_ring(),
    }
    if "flow" in engines:

        def say(line):
            if log:
                log("ring_allreduce", "ecmp", line)

        sc = default_scenarios()["ring_allreduce"]
        wp = whole_process_pairs(exe, sc, "ecmp", "flow", pairs, log=say)
        inv = [r["htsim_wall_s"] / r["ours_wall_s"] for r in wp["per_pair"]]
        inv_e = [r["htsim_wall_s"] / r["ours_engine_only_wall_s"] for r in wp["per_pair"]]
        out.update(
            {
                "flow_engine_speedup_ring_ecmp_engine_only_median": float(np.median(inv_e)),
                "flow_engine_speedup_ring_ecmp_engine_only_min": float(np.min(inv_e)),
                "flow_engine_speedup_ring_ecmp_engine_only_max": float(np.max(inv_e)),
                "flow_engine_speedup_ring_ecmp_whole_process_median": float(np.median(inv)),
                "flow_engine_speedup_ring_ecmp_whole_process_min": float(np.min(inv)),
                "flow_engine_speedup_ring_ecmp_whole_process_max": float(np.max(inv)),
                "flow_engine_whole_process_ratio_vs_htsim_ring_ecmp": wp["ratio_median"],
                "flow_engine_ring_ecmp_pairs": wp["pairs"],
                "flow_engine_ring_ecmp_cache": wp["cache"],
                "flow_engine_ring_ecmp_vs_htsim": wp,
            }
        )
    return out


def main(argv=None) -> int:
    from _common import emit, parser

    p = parser("htsim side by side: the four scenarios on htsim and on our engines")
    p.add_argument(
        "htsim_dir", type=Path, help="Broadcom/csg-htsim build (root, sim/ or datacenter/)"
    )
    p.add_argument(
        "--pin",
        type=Path,
        default=None,
        help="capture htsim on the pinned scenarios into this folder (tests/data/htsim) instead",
    )
    args = p.parse_args(argv)
    exe = find_binary(args.htsim_dir)
    if exe is None:
        print(
            f"no htsim build (htsim_ndp) under {args.htsim_dir}: nothing compared", file=sys.stderr
        )
        return 0
    if args.pin is not None:
        pin(exe, args.pin)
        print(f"htsim outputs pinned under {args.pin}", file=sys.stderr)
        return 0

    def log(name, mode, row):
        if isinstance(row, str):  # a line of the timed pairs
            print(row, file=sys.stderr, flush=True)
            return
        brief = {
            s: {k: row[s].get(k) for k in ("fct_p50_us", "fct_p99_us", "completion_us", "wall_s")}
            for s in row
        }
        print(name, mode, brief, file=sys.stderr, flush=True)

    seeds = 1 if args.quick else 3
    emit("vs_htsim", table_result(exe, _engines_available(), log, seeds), args.out)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
