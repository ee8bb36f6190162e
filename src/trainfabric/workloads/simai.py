"""SimAI / AICB workload files: a strict reader, their counts, and one iteration as a task DAG.

**The format** (AICB writes it, SimAI reads it; the reference is SimAI's parser,
``astra-sim-alibabacloud/astra-sim/workload/Workload.cc`` at aliyun/SimAI commit ``cef83f9d``,
cited below as ``Workload.cc:LINE``; ``Layer.cc``, ``Common.hh`` and ``Sys.cc`` likewise)::

    HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: T ep: E pp: P vpp: V ga: G
        all_gpus: N checkpoints: 0 checkpoint_initiates: 0 pp_comm: BYTES      (one line)
    L                                                  (the number of layer lines)
    name reserved fwd_compute_time fwd_comm_type fwd_comm_bytes ig_compute_time ig_comm_type
        ig_comm_bytes wg_compute_time wg_comm_type wg_comm_bytes wg_update_time   (L lines)

* Header (``Workload.cc:1162-1191``, ``1257-1262``): whitespace-separated ``key: value``
  pairs after the policy; ``pp_comm`` is read with or without its colon (the 9,216-GPU
  example writes ``pp_comm 50331648``). ``T`` is the tensor-parallel group, ``E`` the expert
  group, ``P`` the pipeline stages, ``G`` the micro-batches of one iteration (AICB:
  ``global_batch / (micro_batch · dp)``), ``N`` the GPUs; the data-parallel size is
  ``D = N / (T·P)`` (``Layer.cc:569``). ``V`` ("vpp") is the number of transformer layers of
  one stage (AICB divides ``num_layers`` by ``pp``, ``utils/utils.py:699``, and writes it as
  ``vpp``, ``SimAI_training_workload_generator.py:858`` at aliyun/aicb ``23eec3c``); SimAI
  uses it only in its analytical bubble ``(P-1)/(G·V)`` and PP time ``2·V·G·pp_comm``
  (``Layer.cc:734-737``). ``pp_comm`` is the bytes one rank sends to the next stage per
  micro-batch (AICB: ``2·b·s·h``, divided by ``T`` with sequence parallelism,
  ``SimAI_training_workload_generator.py:844-852``; a Python float such as ``2621440.0`` is
  accepted when it is whole, as SimAI's ``std::stoi`` reads it). SimAI warns when
  ``P > 1`` and ``pp_comm = 0`` or ``P = 1`` and ``pp_comm != 0`` (``Workload.cc:1266-1270``):
  here both are errors. Recomputation checkpoints (``checkpoints: k l1 .. lk``) must be 0.
* Layer lines (``Workload.cc:1283-1310``), read as whitespace-separated tokens: ``reserved``
  is SimAI's ``depen``, never used (AICB's ``placeholder``, always ``-1``); compute times and
  ``wg_update_time`` are ``Tick`` (``unsigned long long``, ``Common.hh:20``), one tick being
  ``CLOCK_PERIOD = 1`` ns (``Common.hh:17``; ``Sys.cc:2142-2147`` schedules ``cycles ·
  CLOCK_PERIOD``, the ns-3 frontend as ``NanoSeconds``, ``AstraSimNetwork.cc:97-104``; the
  reports divide by ``FREQ = 1000`` to print microseconds), so **seconds = ticks / 1e9**;
  comm sizes are ``uint64`` **bytes** (``Layer.cc:1025-1030`` divides them by
  ``GBps = 2^-30``). SimAI scales them by ``compute_scale`` and ``comm_scale``, 1 by default
  (``Workload.cc:1517-1530``), and raises a forward size under 4,096 bytes to 4,096
  (``Workload.cc:813-815``); here the sizes are the file's. ``wg_update_time`` is the delay
  SimAI adds after each of the line's collectives (``Layer.cc:70-72``, ``93-113``): kept in
  :class:`SimaiLayer`, not in the DAG (AICB writes 100 ns).
* Communication types and groups (``Workload.cc:1320-1491``): ``ALLREDUCE``, ``ALLGATHER``,
  ``REDUCESCATTER``, ``ALLTOALL``, each bare, ``_EP`` (the expert group) or ``_DP_EP`` (the
  expert-data-parallel group), or ``NONE``. Bare means the tensor-parallel group in the
  forward and input-gradient passes and the data-parallel group in the weight-gradient
  pass. SimAI tests the ``ALLREDUCE`` prefix before ``ALLREDUCEALLTOALL``, so the latter is
  an all-reduce of no group (``Workload.cc:1320-1330``): refused here, as is any other type
  (SimAI silently runs an unknown type as no communication). A size is NCCL-tests' size
  (``Layer.cc:1024-1031`` charges ``2(n-1)/n`` of it per rank for an all-reduce and
  ``(n-1)/n`` for the others): the per-rank buffer of an all-reduce, the whole array of an
  all-gather or reduce-scatter, a rank's send buffer of an all-to-all — the convention of
  :mod:`~trainfabric.workloads.collectives`.
* The lines are one rank's iteration, the same on every rank: SimAI runs the one file on
  all GPUs. AICB writes a preamble (gradient collectives: ``grad_norm``, ``moe_grad_norm*``,
  ...), then the stage's layers once per micro-batch (``for _ in range(ga_num): for layer
  in layers``, ``SimAI_training_workload_generator.py:270-271``), then a tail
  (``cross_entropy*``, ``optimizer*``). The reader finds the micro-batches as the longest
  run of ``G`` consecutive blocks with equal layer names (values may differ: the first
  micro-batch's embedding has its own weight-gradient time), earliest start first, and
  refuses a file without one.

Every malformed, truncated or inconsistent file raises :class:`~trainfabric.errors.FormatError`
whose field is ``"<file> line <n>"`` and whose message starts with the column or header
field (``gpt7b.txt line 5: fwd_comm_type 'ALLREDUCEX' is not a SimAI communication type``);
a file that cannot be read is a :class:`~trainfabric.errors.ConfigError` naming ``workload``.
Bounds: at most 2^24 GPUs and ``MAX_GA`` micro-batches, times at most ``MAX_SECONDS``,
sizes at most ``MAX_BYTES`` (an exabyte).

**Ranks and groups.** Rank ``r = t + T·(d + D·p)`` for tensor rank ``t``, data-parallel
rank ``d`` and stage ``p``: tensor-parallel innermost, as SimAI's mock NCCL groups
(``MockNcclGroup.cc:50-92`` at SimAI ``f5efb5a9``, since moved to SimCCL: TP group ``i``
is ranks ``i·T .. i·T+T-1``, DP group ``i`` ranks ``i + j·N/D``; SimAI builds them with
``P = 1``, ``Sys.cc:1392-1399``, so stages outermost is Megatron's order, which SimAI does
not model). The expert group of ``(t, p)`` holds ``E`` consecutive data-parallel ranks
``d = g·E .. g·E+E-1``; the expert-data-parallel group the ``D/E`` ranks with
``d ≡ a (mod E)`` (``MockNcclGroup.cc:104-158``). ``D`` must be a multiple of ``E``
(``MockNcclGroup.cc:42``). Pod of a rank: ``r // gpus_per_pod``.

**The DAG of one iteration** (:func:`simai_dag`): one node chain per (stage, pod), every
stage running the file's lines (SimAI's model); per stage, in order: the preamble's forward
``H_f``; the micro-batch operations in 1F1B order (or GPipe), ``F_j`` the forward of block
``j``'s lines and ``B_j`` their backward; the tail's forward and backward ``T_t``; the
preamble's backward ``H_b``. Forward of a line: its compute, then its collective, which the
next line waits for (``Workload.cc:803-818``, blocking). Backward of a line (lines in
reverse): input-gradient compute, its collective (blocking, ``Workload.cc:883-894``),
weight-gradient compute, its collective *not* waited for (``Workload.cc:842-843``): it
starts after that compute and after the stage's previous such collective (SimAI queues
them FIFO), and the iteration ends when it ends. So the preamble's weight-gradient
collectives are the DP gradients after the last backward. Each collective runs on every
group of its kind in the stage at once (one phase per concurrent step, coupling the
groups as :mod:`~trainfabric.workloads.build` couples DP replicas), as ring all-reduce,
reduce-scatter or all-gather, or a one-step all-to-all; one whose flows all stay inside
pods (the tensor-parallel group, when ``T`` divides ``gpus_per_pod``) takes no time (the
scale-up domain is not on the inter-pod network, :mod:`~trainfabric.workloads.dag`) and its
bytes go to one ``intra_pod`` phase per operation, a barrier after it that nothing waits
for. PP sends: after ``F_j`` on stage ``p``, every rank sends ``pp_comm`` bytes to its
peer ``(t, d, p+1)`` before ``F_j`` there (``pp_fwd``); gradients go back after ``B_j``
(``pp_bwd``). With every communication free, and blocks of equal compute ``F`` (forward)
and ``B`` (backward), the critical path is ``H_f + (G + P - 1)(F + B) + T_t + H_b``.
Phase kinds: ``tp_<op>``, ``dp_<op>``, ``moe_<op>`` (expert group), ``dp_expert_<op>``,
``pp_fwd``, ``pp_bwd``, ``intra_pod``.

**Size guard.** Before building, the nodes are counted from the same segments the builder
uses (``DAG_BYTES_PER_NODE`` each, plus ``FLOW_BYTES`` per flow of the largest collective
step), after a cheap lower bound (every pod computes in each of its ``2 G`` operations), and
:func:`trainfabric.limits.check_memory` refuses a DAG over the limit naming ``gpus_per_pod``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from trainfabric.errors import ConfigError, FormatError
from trainfabric.io import read_file
from trainfabric.limits import check_memory
from trainfabric.workloads.build import DAG_BYTES_PER_NODE, FLOW_BYTES, schedule
from trainfabric.workloads.dag import DagBuilder, Phase, TaskDAG
from trainfabric.workloads.interchange import MAX_BYTES, MAX_SECONDS
from trainfabric.workloads.ranks import Aggregated, PodPhases, collective_steps

POLICY = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
TICKS_PER_S = 1e9  # SimAI Ticks per second: CLOCK_PERIOD = 1 ns (Common.hh:17)
COLUMNS = (
    "name",
    "reserved",
    "fwd_compute_time",
    "fwd_comm_type",
    "fwd_comm_bytes",
    "ig_compute_time",
    "ig_comm_type",
    "ig_comm_bytes",
    "wg_compute_time",
    "wg_comm_type",
    "wg_comm_bytes",
    "wg_update_time",
)
_OPS = {
    "ALLREDUCE": "all_reduce",
    "ALLGATHER": "all_gather",
    "REDUCESCATTER": "reduce_scatter",
    "ALLTOALL": "all_to_all",
}
# comm type -> (op, group); group None: the pass decides (tp in fwd/ig, dp in wg)
COMM_TYPES: dict[str, tuple[str, str | None]] = {
    word + suffix: (op, group)
    for word, op in _OPS.items()
    for suffix, group in (("", None), ("_EP", "ep"), ("_DP_EP", "dp_ep"))
}
_HEADER_SIZES = ("model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus")
_HEADER_KEYS = (*_HEADER_SIZES, "checkpoints", "checkpoint_initiates", "pp_comm")
MAX_GPUS = 1 << 24
MAX_GA = 1_000_000
MAX_LAYER_LINES = 100_000_000
MAX_TICKS = round(MAX_SECONDS * TICKS_PER_S)
MAX_GPUS_PER_POD = 1 << 15  # GPU indices within a pod are int16 (dag.GpuTransfers)
PARSE_BYTES_PER_FILE_BYTE = 20  # peak memory of the parse per byte of text (15-17, tracemalloc)
_KIND_PREFIX = {"tp": "tp", "dp": "dp", "ep": "moe", "dp_ep": "dp_expert"}
_UINT = re.compile(r"[0-9]+")
_INT = re.compile(r"[+-]?[0-9]+")
_WHOLE = re.compile(r"([0-9]+)(\.0*)?")


@dataclass(frozen=True)
class SimaiPass:
    """One pass of a layer line: ``compute_s`` seconds of compute (ticks / 1e9), then a
    collective ``comm_type`` (``"NONE"`` for none) of ``comm_bytes`` bytes (NCCL-tests size)."""

    compute_s: float
    comm_type: str
    comm_bytes: int


@dataclass(frozen=True)
class SimaiLayer:
    """One layer line: its forward (``fwd``), input-gradient (``ig``) and weight-gradient
    (``wg``) passes; ``reserved`` is the unused second column, ``update_s`` the delay SimAI
    adds after each of the line's collectives (seconds)."""

    name: str
    reserved: int
    fwd: SimaiPass
    ig: SimaiPass
    wg: SimaiPass
    update_s: float

    def passes(self) -> tuple[tuple[str, SimaiPass], ...]:
        return (("fwd", self.fwd), ("ig", self.ig), ("wg", self.wg))


@dataclass(frozen=True)
class SimaiWorkload:
    """A SimAI workload file (module doc): the header's sizes, the layer lines, and where its
    ``ga`` micro-batches are (lines ``first_block + j·block_lines``, 0-based in ``layers``)."""

    name: str
    tp: int
    ep: int
    pp: int
    vpp: int
    ga: int
    all_gpus: int
    pp_comm_bytes: int
    layers: tuple[SimaiLayer, ...]
    first_block: int
    block_lines: int

    @property
    def dp(self) -> int:
        """Data-parallel size ``all_gpus / (tp · pp)``."""
        return self.all_gpus // (self.tp * self.pp)


def collective(pass_name: str, comm_type: str) -> tuple[str, str] | None:
    """``(op, group)`` of a communication entry (module doc), None for ``NONE``; ``group`` is
    ``tp``, ``dp``, ``ep`` or ``dp_ep``."""
    if comm_type == "NONE":
        return None
    op, group = COMM_TYPES[comm_type]
    return op, group or ("dp" if pass_name == "wg" else "tp")


# -- reading -------------------------------------------------------------------------------


def is_simai_file(path: str | Path) -> bool:
    """Whether ``path`` is a regular file whose first word is the SimAI policy (a cheap
    test for dispatching a workload argument; reading it is :func:`read_simai`)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(POLICY) + 1)
    except OSError:
        return False
    return head.startswith(POLICY.encode()) and head[len(POLICY) :] in (
        b"",
        b" ",
        b"\t",
        b"\r",
        b"\n",
    )


def read_simai(path: str | Path) -> SimaiWorkload:
    """Read a SimAI workload file strictly (module doc).

    Raises FormatError ``"<file> line <n>: <field> ..."`` for a malformed, truncated or
    inconsistent file, ConfigError ``workload`` for one that cannot be read (missing, a
    directory, not UTF-8, too large to parse in memory)."""
    path = Path(path)
    data = read_file(
        path, "workload", "SimAI workload file", parse_factor=PARSE_BYTES_PER_FILE_BYTE
    )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("workload", f"{path}: not a UTF-8 text file (byte {exc.start})") from None
    return _parse(text, path.name, path.stem)


def _error(label: str, line: int, message: str) -> FormatError:
    return FormatError(f"{label} line {line}", message)


def _uint(label: str, line: int, field: str, token: str, high: int, low: int = 0) -> int:
    """A non-negative integer token in ``[low, high]``."""
    if not _UINT.fullmatch(token):
        what = "is negative" if _INT.fullmatch(token) else "is not an integer"
        raise _error(label, line, f"{field} {token!r} {what}")
    value = int(token)
    if value < low:
        raise _error(label, line, f"{field} {token!r} must be >= {low}")
    if value > high:
        raise _error(label, line, f"{field} {token!r} is over the bound {high:,}")
    return value


def _parse(text: str, label: str, name: str) -> SimaiWorkload:
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    head = _header(lines[0].split(), label)
    if len(lines) < 2 or not lines[1].strip():
        raise _error(label, 2, "layer count missing (expected the number of layer lines)")
    count = lines[1].split()
    if len(count) != 1:
        raise _error(label, 2, f"layer count must be one integer, got {lines[1].strip()!r}")
    n = _uint(label, 2, "layer count", count[0], MAX_LAYER_LINES, low=1)
    body = lines[2:]
    while body and not body[-1].strip():
        body.pop()
    if len(body) < n:
        raise _error(
            label,
            3 + len(body),
            f"layer count: line 2 announces {n:,} layer lines, the file ends after {len(body):,}",
        )
    if len(body) > n:
        raise _error(
            label,
            3 + n,
            f"layer count: line 2 announces {n:,} layer lines, the file has {len(body):,}",
        )
    layers = tuple(_layer(body[i].split(), label, 3 + i) for i in range(n))
    blocks = _micro_batches([layer.name for layer in layers], head["ga"])
    if blocks is None:
        raise _error(
            label,
            1,
            f"ga {head['ga']}: the {n:,} layer lines hold no {head['ga']} consecutive blocks "
            "with the same layer names (AICB writes one block per micro-batch)",
        )
    return SimaiWorkload(
        name=name,
        tp=head["model_parallel_NPU_group"],
        ep=head["ep"],
        pp=head["pp"],
        vpp=head["vpp"],
        ga=head["ga"],
        all_gpus=head["all_gpus"],
        pp_comm_bytes=head["pp_comm"],
        layers=layers,
        first_block=blocks[0],
        block_lines=blocks[1],
    )


def _header(tokens: list[str], label: str) -> dict[str, int]:
    """The header's fields (module doc), checked for presence, range and consistency."""
    if not tokens:
        raise _error(
            label, 1, f"header missing: expected '{POLICY} model_parallel_NPU_group: T ...'"
        )
    if tokens[0] != POLICY:
        raise _error(label, 1, f"policy {tokens[0]!r} is not {POLICY} (AICB's training workloads)")
    values: dict[str, int] = {}
    for i in range(1, len(tokens), 2):
        token = tokens[i]
        key = token.removesuffix(":")
        if key not in _HEADER_KEYS:
            raise _error(
                label, 1, f"header field {token!r} is not one of {', '.join(_HEADER_KEYS)}"
            )
        if key == token and key != "pp_comm":  # SimAI matches "pp_comm" alone, no other key
            raise _error(label, 1, f"header field {token!r} needs its colon: '{key}:'")
        if key in values:
            raise _error(label, 1, f"{key} given twice")
        if i + 1 == len(tokens):
            raise _error(label, 1, f"{key} has no value")
        values[key] = _header_value(label, key, tokens[i + 1])
        if key in ("checkpoints", "checkpoint_initiates") and values[key]:
            raise _error(label, 1, f"{key} {values[key]}: recomputation checkpoints are not read")
    for key in _HEADER_SIZES:
        if key not in values:
            raise _error(label, 1, f"{key} missing from the header")
    values.setdefault("pp_comm", 0)
    tp, pp, ep, n = (values[k] for k in ("model_parallel_NPU_group", "pp", "ep", "all_gpus"))
    if n % (tp * pp):
        raise _error(
            label,
            1,
            f"all_gpus {n} is not a multiple of model_parallel_NPU_group x pp = {tp} x {pp} "
            "(the data-parallel size is their quotient)",
        )
    if (n // (tp * pp)) % ep:
        raise _error(
            label,
            1,
            f"ep {ep} does not divide the data-parallel size {n // (tp * pp)} "
            "(all_gpus / (model_parallel_NPU_group x pp))",
        )
    if (pp > 1) != (values["pp_comm"] > 0):
        raise _error(
            label,
            1,
            f"pp_comm {values['pp_comm']} with pp {pp}: pipeline stages send pp_comm > 0 bytes, "
            "a single stage none",
        )
    return values


def _header_value(label: str, key: str, token: str) -> int:
    if key == "pp_comm":
        whole = _WHOLE.fullmatch(token)
        return _uint(label, 1, key, whole.group(1) if whole else token, round(MAX_BYTES))
    if key in ("checkpoints", "checkpoint_initiates"):
        return _uint(label, 1, key, token, MAX_GPUS)
    high = MAX_GA if key == "ga" else MAX_GPUS
    return _uint(label, 1, key, token, high, low=1)


def _layer(tokens: list[str], label: str, line: int) -> SimaiLayer:
    if len(tokens) < len(COLUMNS):
        raise _error(
            label,
            line,
            f"{COLUMNS[len(tokens)]} missing: {len(tokens)} of {len(COLUMNS)} columns "
            f"({' '.join(COLUMNS)})",
        )
    if len(tokens) > len(COLUMNS):
        raise _error(
            label,
            line,
            f"wg_update_time is followed by {len(tokens) - len(COLUMNS)} more columns "
            f"(expected {len(COLUMNS)}: {' '.join(COLUMNS)})",
        )
    if not _INT.fullmatch(tokens[1]) or abs(int(tokens[1])) >= 1 << 31:
        raise _error(label, line, f"reserved {tokens[1]!r} is not a 32-bit integer")

    def one(k: int, pass_name: str) -> SimaiPass:
        ticks = _uint(label, line, COLUMNS[k], tokens[k], MAX_TICKS)
        comm = tokens[k + 1]
        if comm != "NONE" and comm not in COMM_TYPES:
            why = (
                " (SimAI reads it as an all-reduce of no group)"
                if comm.startswith("ALLREDUCEALLTOALL")
                else ""
            )
            raise _error(
                label, line, f"{COLUMNS[k + 1]} {comm!r} is not a SimAI communication type{why}"
            )
        nbytes = _uint(label, line, COLUMNS[k + 2], tokens[k + 2], round(MAX_BYTES))
        return SimaiPass(ticks / TICKS_PER_S, comm, nbytes)

    update = _uint(label, line, "wg_update_time", tokens[11], MAX_TICKS)
    return SimaiLayer(
        tokens[0], int(tokens[1]), one(2, "fwd"), one(5, "ig"), one(8, "wg"), update / TICKS_PER_S
    )


def _micro_batches(names: list[str], ga: int) -> tuple[int, int] | None:
    """``(a, k)``: the longest block length ``k`` (then the earliest start ``a``) with
    ``names[a : a + ga·k]`` equal to ``ga`` copies of ``names[a : a + k]``; None if none.

    For each ``k``, ``same[i] = names[i] == names[i + k]``; the blocks start at ``a`` iff
    ``same[a : a + (ga-1)·k]`` is all true (a window sum over a cumulative count): cost
    ``O(L²/ga)`` for ``L`` lines."""
    n = len(names)
    if ga == 1:
        return 0, n
    index: dict[str, int] = {}
    ids = np.array([index.setdefault(x, len(index)) for x in names], dtype=np.int64)
    for k in range(n // ga, 0, -1):
        span = (ga - 1) * k
        misses = np.concatenate([[0], np.cumsum(ids[:-k] != ids[k:])])
        starts = np.arange(n - ga * k + 1)
        ok = misses[starts + span] == misses[starts]
        if ok.any():
            return int(np.argmax(ok)), k
    return None


# -- counts --------------------------------------------------------------------------------


def simai_counts(w: SimaiWorkload) -> dict[str, int]:
    """What ``workloads show --json`` reports for a SimAI file, counted as the file states it:

    * ``ranks``: ``all_gpus``;
    * ``collectives``: the communication entries (three per line) that are not ``NONE``,
      one iteration as the file lists it (one rank's view: not multiplied by ranks);
    * ``collective_bytes``: the sum of their stated sizes (a ``NONE`` entry's size is not
      counted);
    * ``p2p_messages``: the iteration's PP sends over the whole job, send side: per
      micro-batch and stage boundary every one of the ``tp · dp`` ranks of the stage sends
      its activations forward and every rank of the next stage its gradients back,
      ``2 (pp - 1) · ga · tp · dp``; 0 for one stage;
    * ``p2p_bytes``: ``p2p_messages · pp_comm`` (each send is one rank's ``pp_comm``);
    * ``compute_nodes``: the compute entries (three per line) with a positive time (SimAI
      waits only for a positive time, ``Workload.cc:806``).
    """
    comm = [p for layer in w.layers for _, p in layer.passes() if p.comm_type != "NONE"]
    sends = 2 * (w.pp - 1) * w.ga * w.tp * w.dp
    return {
        "ranks": w.all_gpus,
        "collectives": len(comm),
        "collective_bytes": sum(p.comm_bytes for p in comm),
        "p2p_messages": sends,
        "p2p_bytes": sends * w.pp_comm_bytes,
        "compute_nodes": sum(p.compute_s > 0 for layer in w.layers for _, p in layer.passes()),
    }


def dp_gradient_bytes(w: SimaiWorkload) -> int:
    """Bytes of one DP replica's gradient all-reduce per iteration (DiLoCo sync sizing).

    The file states one rank's gradient buffers: the sizes ``S_dp`` of its reducing
    collectives (all-reduce, reduce-scatter; an all-gather moves parameters) on the
    data-parallel group, and ``S_ep`` on the expert-data-parallel group. A replica (one
    copy of the model) is ``tp · pp`` dense shards and ``tp · pp · ep`` expert shards, so
    its gradient is ``tp · pp · (S_dp + ep · S_ep)`` bytes, in the file's gradient dtype
    (AICB: fp32, 4 bytes per parameter)."""
    per_group = {"dp": 0, "dp_ep": 0}
    for layer in w.layers:
        for pass_name, p in layer.passes():
            found = collective(pass_name, p.comm_type)
            if found and found[0] in ("all_reduce", "reduce_scatter") and found[1] in per_group:
                per_group[found[1]] += p.comm_bytes
    return w.tp * w.pp * (per_group["dp"] + w.ep * per_group["dp_ep"])


# -- the task DAG --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Coll:
    """A collective of one operation: ``size`` bytes on every ``group`` of the stage;
    ``blocking``: the next compute waits for it."""

    group: str
    op: str
    size: float
    blocking: bool
    label: str


def _phase_nodes(pairs: int) -> int:
    """Nodes of a DagBuilder phase: its comm nodes, plus an entry and an exit barrier (one
    barrier without pairs, none for a single pair)."""
    return pairs if pairs == 1 else pairs + (1 if pairs == 0 else 2)


def _forward(layers, rows) -> list:
    """Events (compute seconds or :class:`_Coll`) of the forward of lines ``rows``."""
    out: list = []
    for i in rows:
        layer = layers[i]
        out.append(layer.fwd.compute_s)
        out += _colls(layer, "fwd", True)
    return out


def _backward(layers, rows) -> list:
    """Events of the backward of lines ``rows``, in reverse line order."""
    out: list = []
    for i in reversed(rows):
        layer = layers[i]
        out.append(layer.ig.compute_s)
        out += _colls(layer, "ig", True)
        out.append(layer.wg.compute_s)
        out += _colls(layer, "wg", False)
    return out


def _colls(layer: SimaiLayer, pass_name: str, blocking: bool) -> list[_Coll]:
    p = getattr(layer, pass_name)
    found = collective(pass_name, p.comm_type)
    if found is None or p.comm_bytes == 0:
        return []
    op, group = found
    return [_Coll(group, op, float(p.comm_bytes), blocking, f"{layer.name} {pass_name}")]


class _Builder:
    """Assembles the DAG of one iteration (module doc) on a DagBuilder."""

    def __init__(self, w: SimaiWorkload, gpus_per_pod: int, latency_s: float, kind: str):
        self.w, self.g, self.kind = w, gpus_per_pod, kind
        self.n_pods = w.all_gpus // gpus_per_pod
        self.b = DagBuilder(self.n_pods, gpus_per_pod)
        self.pod_phases = PodPhases(self.b, gpus_per_pod, latency_s)
        self._steps: dict[tuple, list[Aggregated]] = {}
        self._pods: dict[int, list[int]] = {}
        self.max_flows = 0
        layers, a, k = w.layers, w.first_block, w.block_lines
        pre, tail = range(a), range(a + w.ga * k, len(layers))
        blocks = [range(a + j * k, a + (j + 1) * k) for j in range(w.ga)]
        self.ops: dict[tuple[str, int], list] = {("head", 0): _forward(layers, pre)}
        for j, rows in enumerate(blocks):
            self.ops["F", j] = _forward(layers, rows)
            self.ops["B", j] = _backward(layers, rows)
        self.ops["tail", 0] = _forward(layers, tail) + _backward(layers, tail)
        self.ops["foot", 0] = _backward(layers, pre)

    # -- placement -------------------------------------------------------------------------
    def ranks(self, p: int) -> np.ndarray:
        """Ranks of stage ``p`` as ``[dp, tp]``: ``t + tp·(d + dp·p)``."""
        w = self.w
        return (w.tp * (np.arange(w.dp)[:, None] + w.dp * p) + np.arange(w.tp)[None, :]).astype(
            np.int64
        )

    def group_shape(self, group: str) -> tuple[int, int]:
        """``(groups per stage, ranks per group)`` of kind ``group``."""
        w = self.w
        return {
            "tp": (w.dp, w.tp),
            "dp": (w.tp, w.dp),
            "ep": (w.dp // w.ep * w.tp, w.ep),
            "dp_ep": (w.ep * w.tp, w.dp // w.ep),
        }[group]

    def groups(self, p: int, group: str) -> np.ndarray:
        """The groups of kind ``group`` in stage ``p``, one row of ranks each (module doc)."""
        w, r = self.w, self.ranks(p)
        blocks = r.reshape(w.dp // w.ep, w.ep, w.tp)  # [g, a, t]: d = g·ep + a
        return {
            "tp": r,
            "dp": r.T,
            "ep": blocks.transpose(0, 2, 1).reshape(-1, w.ep),
            "dp_ep": blocks.transpose(1, 2, 0).reshape(-1, w.dp // w.ep),
        }[group]

    def stage_pods(self, p: int) -> list[int]:
        """The pods that hold a rank of stage ``p``."""
        if p not in self._pods:
            self._pods[p] = np.unique(self.ranks(p) // self.g).tolist()
        return self._pods[p]

    # -- flows -> pod pairs ----------------------------------------------------------------
    def steps(self, p: int, group: str, op: str) -> list[Aggregated]:
        """The steps of a 1-byte collective ``op`` on every ``group`` of stage ``p``, as pod
        pairs (:meth:`PodPhases.aggregate_steps`; a ring's shared step aggregated once)."""
        key = (p, group, op)
        if key not in self._steps:
            rows = self.groups(p, group)
            n = rows.shape[1]
            per_group = [collective_steps(op, row, 1.0) for row in rows] if n > 1 else []
            self.max_flows = max(self.max_flows, rows.size * (n - 1 if op == "all_to_all" else 1))
            self._steps[key] = self.pod_phases.aggregate_steps(per_group)
        return self._steps[key]

    def send(self, a: int, c: int) -> Aggregated:
        """Every rank of stage ``a`` sending 1 byte to its peer in stage ``c``."""
        key = ("pp", a, c)
        if key not in self._steps:
            self._steps[key] = [self.pod_phases.aggregate(self.ranks(a), self.ranks(c), 1.0)]
        return self._steps[key][0]

    def segments(self, p: int, events: list) -> tuple[list[float], list, float]:
        """An operation of stage ``p`` cut at its inter-pod collectives: the compute
        durations between them (one more than collectives), the collectives with their
        steps, and the bytes of the collectives kept inside pods."""
        durations, colls, intra, acc = [], [], 0.0, 0.0
        for ev in events:
            if not isinstance(ev, _Coll):
                acc += ev
                continue
            steps = self.steps(p, ev.group, ev.op)
            if any(step[0].size for step in steps):
                durations.append(acc)
                colls.append((ev, steps))
                acc = 0.0
            else:
                intra += ev.size * sum(step[2] for step in steps)
        durations.append(acc)
        return durations, colls, intra

    # -- size ------------------------------------------------------------------------------
    def count_nodes(self) -> int:
        """Nodes :meth:`build` will add (module doc), from the same segments."""
        w, nodes = self.w, 0
        for p in range(w.pp):
            pods = len(self.stage_pods(p))
            for events in self.ops.values():
                durations, colls, intra = self.segments(p, events)
                nodes += len(durations) * pods + (intra > 0)
                nodes += sum(_phase_nodes(s[0].size) for _, steps in colls for s in steps)
            if p + 1 < w.pp:
                for a, c in ((p, p + 1), (p + 1, p)):
                    nodes += w.ga * _phase_nodes(self.send(a, c)[0].size)
        return nodes

    # -- assembly --------------------------------------------------------------------------
    def phase(self, kind, name, step: Aggregated, size, preds, meta, succs=()):
        """Phase of the 1-byte ``step`` scaled to ``size`` bytes (inter- and intra-pod)."""
        keys, unit, intra, pattern = step
        return self.pod_phases.add(
            kind, name, (keys, size * unit, size * intra, pattern), preds, succs, meta
        )

    def operation(self, p, tag, events, last, fifo):
        """Add one operation of stage ``p`` after ``last`` (pod -> node); returns its entry
        and exit nodes per pod. ``fifo``: the exit of the stage's last non-blocking
        collective (a one-element list, updated)."""
        pods = self.stage_pods(p)
        durations, colls, intra = self.segments(p, events)
        entry: dict[int, int] = {}
        for k, dur in enumerate(durations):
            for pod in pods:
                node = self.b.compute(pod, dur, f"{tag} s{p} c{k} pod{pod}")
                if pod in last:
                    self.b.edge(last[pod], node)
                entry.setdefault(pod, node)
                last[pod] = node
            if k == len(colls):
                break
            ev, steps = colls[k]
            name = f"{ev.label} {tag} s{p}"
            n_groups, n_ranks = self.group_shape(ev.group)
            meta = Phase("", "", group=name, op=ev.op, n_ranks=n_ranks, n_collectives=n_groups)
            kind = f"{_KIND_PREFIX[ev.group]}_{ev.op}"
            preds = list(last.values()) + ([] if ev.blocking else fifo)
            for i, step in enumerate(steps):
                label = name if len(steps) == 1 else f"{name} k{i}"
                _, exit_ = self.phase(kind, label, step, ev.size, preds, meta)
                preds = [exit_]
            if ev.blocking:
                last.update(dict.fromkeys(pods, preds[0]))
            else:
                fifo[:] = preds
        exit_nodes = {pod: last[pod] for pod in pods}
        if intra > 0:
            nothing = (np.zeros(0, np.int64), np.zeros(0), intra, None)
            self.pod_phases.add(
                "intra_pod", f"intra_pod {tag} s{p}", nothing, list(exit_nodes.values())
            )
        return entry, exit_nodes

    def build(self) -> TaskDAG:
        w = self.w
        ops: dict[tuple[int, str, int], tuple[dict, dict]] = {}
        for p in range(w.pp):
            last: dict[int, int] = {}
            fifo: list[int] = []
            order = [("head", 0), *schedule(w.pp, w.ga, p, self.kind), ("tail", 0), ("foot", 0)]
            for direction, j in order:
                tag = f"{direction}{j}" if direction in ("F", "B") else direction
                ops[p, direction, j] = self.operation(p, tag, self.ops[direction, j], last, fifo)
        for p in range(w.pp - 1):
            for j in range(w.ga):
                for kind, a, c, direction in (("pp_fwd", p, p + 1, "F"), ("pp_bwd", p + 1, p, "B")):
                    step, name = self.send(a, c), f"{kind} s{a}->s{c} mb{j}"
                    meta = Phase(
                        "", "", group=name, op="send_recv", n_ranks=2, n_collectives=w.tp * w.dp
                    )
                    self.phase(
                        kind,
                        name,
                        step,
                        float(w.pp_comm_bytes),
                        list(ops[a, direction, j][1].values()),
                        meta,
                        succs=list(ops[c, direction, j][0].values()),
                    )
        return self.b.build()


def simai_dag(
    w: SimaiWorkload,
    gpus_per_pod: int = 8,
    latency_s: float = 5e-6,
    schedule_kind: str = "1f1b",
) -> TaskDAG:
    """The pod-level task DAG of one iteration of ``w`` (module doc), with GPU transfers.

    ``gpus_per_pod`` must divide ``all_gpus`` (pod of rank ``r``: ``r // gpus_per_pod``);
    ``latency_s``: each comm node's start-up latency; ``schedule_kind``: ``"1f1b"`` or
    ``"gpipe"``. A DAG over the memory limit is refused (ConfigError ``gpus_per_pod``)."""
    if not 1 <= gpus_per_pod <= MAX_GPUS_PER_POD or w.all_gpus % gpus_per_pod:
        raise ConfigError(
            "gpus_per_pod",
            f"must divide all_gpus = {w.all_gpus} and be at most {MAX_GPUS_PER_POD}, "
            f"got {gpus_per_pod}",
        )
    if not 0 <= latency_s <= MAX_SECONDS:
        raise ConfigError("latency_s", f"must be in [0, {MAX_SECONDS:g}] s, got {latency_s}")
    if schedule_kind not in ("1f1b", "gpipe"):
        raise ConfigError("schedule", f"must be '1f1b' or 'gpipe', got {schedule_kind!r}")
    n_pods = w.all_gpus // gpus_per_pod
    floor = DAG_BYTES_PER_NODE * 2.0 * w.ga * n_pods + FLOW_BYTES * float(w.all_gpus)
    check_memory("gpus_per_pod", floor, f"the task DAG of {w.name} (lower bound)")
    builder = _Builder(w, gpus_per_pod, latency_s, schedule_kind)
    nodes = builder.count_nodes()
    check_memory(
        "gpus_per_pod",
        DAG_BYTES_PER_NODE * float(nodes) + FLOW_BYTES * float(builder.max_flows),
        f"the task DAG of {w.name} (~{nodes:,} nodes)",
    )
    return builder.build()


class LoadedSimai(NamedTuple):
    """What :func:`load_simai` returns (for ``load_workload`` and ``workloads show``)."""

    name: str
    dag: TaskDAG
    counts: dict[str, int]
    dp_gradient_bytes: int


def load_simai(path: str | Path, gpus_per_pod: int = 8, latency_s: float = 5e-6) -> LoadedSimai:
    """Read a SimAI file and build its DAG: ``(name, dag, counts, dp_gradient_bytes)``
    (:func:`read_simai`, :func:`simai_dag`, :func:`simai_counts`, :func:`dp_gradient_bytes`)."""
    w = read_simai(path)
    dag = simai_dag(w, gpus_per_pod, latency_s)
    return LoadedSimai(w.name, dag, simai_counts(w), dp_gradient_bytes(w))
