"""Reading and checking one Chakra execution trace: a ``NAME.RANK.et`` file per rank.

:func:`read_trace` takes a folder holding the files of one trace, one of its files (meaning
the whole trace), or the ``folder/NAME`` prefix astra-sim takes. Each file is the stream of
:mod:`~trainfabric.workloads.chakra.schema`: a GlobalMetadata message, then Node messages.
The nodes that matter to the network:

* ``COMP_NODE``: ``duration_micros`` on the rank;
* ``COMM_COLL_NODE``: attributes ``comm_type`` (:class:`CollectiveCommType`), ``comm_size``
  (bytes) and, optionally, ``pg_name`` (its process group). The ranks of process group ``P``
  are the ranks whose file has a collective on ``P`` (astra-sim's separate comm-group file is
  not read); without ``pg_name`` the collective spans every rank. The ``k``-th collective
  of group ``P`` in one rank's file is the same collective as the ``k``-th of ``P`` in every
  other rank's file (the issue order of NCCL and astra-sim), and must have the same
  ``comm_type`` (and ``comm_size``, except an all-to-all's, which is per rank);
* ``COMM_SEND_NODE`` / ``COMM_RECV_NODE``: ``comm_src``, ``comm_dst`` (ranks), ``comm_tag``
  (default 0) and ``comm_size``; a send's ``comm_src`` and a receive's ``comm_dst`` default
  to the file's rank. The ``k``-th send from ``s`` to ``d`` with tag ``t`` is received by
  the ``k``-th receive on ``d`` from ``s`` with tag ``t``, of the same size;
* ``data_deps``: the nodes of the same file that must end first (the order astra-sim
  runs). ``ctrl_deps`` (in traces converted from PyTorch, the caller of an operator, which
  the converter also encodes as data dependencies) must name nodes of the file too, but
  order nothing: astra-sim reads only ``data_deps``.

Other node types (metadata, memory, storage, ...) take their ``duration_micros`` on the rank.
Attribute values are read from any integer kind of the oneof (``int64_val`` as chakra writes
``comm_size``, ``int32_val`` for ``comm_src``, ...); ``pg_name`` is a ``string_val``.

**Checks.** Every inconsistency is a :class:`~trainfabric.errors.FormatError` whose field is
the bad field (``data_deps``, ``comm_size``, ``GlobalMetadata``, ...) and whose message names
the file, the rank and the node id (or, in a broken stream, the byte offset and the last
good node): a truncated message, bytes that are not a protobuf stream, a first message that
is not a GlobalMetadata, a rank file missing (``NAME.0.et .. NAME.(n-1).et``), files of two
traces (two names, or two schema versions) in one folder, a duplicate node id, a dependency
on a node the file does not have, a dependency cycle, a send without its receive (or the
reverse, or sizes that differ), an unknown ``comm_type``, a collective whose ranks disagree
on it, and sizes out of range (``0 <= comm_size <= 2^50`` bytes, ``duration_micros <=
10^12``, about 11.6 days). Finally the whole trace must be able to run: collectives and
messages couple the ranks, and a trace in which a node waits on itself through them (rank 0
waits in a collective for rank 1, which waits for a message that rank 0 sends after that
collective) is refused as a deadlock.

:func:`trace_counts` counts what the files state (module doc of
:mod:`~trainfabric.workloads.chakra`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError

from trainfabric.errors import ConfigError, FormatError
from trainfabric.limits import check_memory
from trainfabric.workloads.chakra.schema import (
    INTEGER_VALUES,
    CollectiveCommType,
    GlobalMetadata,
    Node,
    NodeType,
    StreamError,
    split_stream,
)
from trainfabric.workloads.dag import topological_order

MAX_COMM_BYTES = 2**50  # a petabyte in one message: far above any real collective
MAX_DURATION_US = 10**12  # about 11.6 days for one node
NODE_FIELDS = 10  # Node's field numbers are 1..10; higher ones are later additions
# Memory per byte of trace files that reading and converting a trace takes: measured with
# tracemalloc at 8 B/B for read_trace and 15 B/B with trace_dag after it, on exported presets
# (80-95 B per node); 40 leaves room for terser nodes (an id, a type and a duration).
TRACE_BYTES_PER_FILE_BYTE = 40
FILE_NAME = re.compile(r"^(?P<name>.+)\.(?P<rank>\d+)\.et$")
COMM_TYPES = frozenset(CollectiveCommType)


@dataclass(frozen=True, slots=True)
class ChakraNode:
    """One node as the trace states it (module doc); ``comm_*`` are None where absent."""

    id: int
    name: str
    type: int
    data_deps: tuple[int, ...]
    ctrl_deps: tuple[int, ...]
    duration_micros: int
    comm_type: int | None = None
    comm_size: int | None = None
    pg_name: str = ""
    comm_src: int | None = None
    comm_dst: int | None = None
    comm_tag: int = 0


@dataclass(frozen=True)
class RankTrace:
    """The nodes of one rank's file, in file order, and its GlobalMetadata version."""

    path: Path
    rank: int
    version: str
    nodes: tuple[ChakraNode, ...]

    def where(self, node: ChakraNode) -> str:
        return f"{self.path.name} rank {self.rank} node {node.id}"


@dataclass(frozen=True)
class Collective:
    """One collective across its ranks: ``nodes[i]`` is its node's index in the file of
    ``ranks[i]`` (ranks ascending); ``group`` is its ``pg_name`` ('' for all ranks) and
    ``seq`` its position among the group's collectives."""

    comm_type: int
    group: str
    seq: int
    ranks: tuple[int, ...]
    nodes: tuple[int, ...]


@dataclass(frozen=True)
class Message:
    """A send (node ``send`` of rank ``src``) and its receive (node ``recv`` of ``dst``)."""

    src: int
    dst: int
    tag: int
    size: int
    send: int
    recv: int


@dataclass(frozen=True)
class ChakraTrace:
    """A checked trace: per-rank files (``ranks[r]`` is rank ``r``), the matched collectives
    and messages, and ``order``: every node as (rank, index in its file), a collective once
    (as its first rank's node), each after its data dependencies, a collective after those
    of all of its nodes, a receive after its send."""

    name: str
    ranks: tuple[RankTrace, ...]
    collectives: tuple[Collective, ...]
    messages: tuple[Message, ...]
    order: tuple[tuple[int, int], ...]

    @property
    def n_ranks(self) -> int:
        return len(self.ranks)


# -- files ----------------------------------------------------------------------------------------
def trace_files(path: str | Path) -> tuple[str, list[Path]]:
    """The trace's name and its files ordered by rank (module doc: a folder, one of its
    files, or ``folder/NAME``); ConfigError naming ``trace`` when there is none, FormatError
    for two traces in one folder or a rank missing."""
    p = Path(path)
    if p.is_dir():
        files, where = sorted(p.glob("*.et")), f"folder {p}"
    elif p.is_file():
        m = FILE_NAME.match(p.name)
        if m is None:
            raise ConfigError("trace", f"{p.name} is not named NAME.RANK.et")
        files, where = _siblings(p.parent, m["name"]), f"{p.parent} (trace {m['name']})"
    else:
        files, where = _siblings(p.parent, p.name), f"{p.parent} (trace {p.name})"
    if not files:
        raise ConfigError("trace", f"no Chakra trace files (NAME.RANK.et) in {where}")
    named = []
    for f in files:
        m = FILE_NAME.match(f.name)
        if m is None:
            raise FormatError("trace", f"{f.name} in {where} is not named NAME.RANK.et")
        named.append((m["name"], int(m["rank"]), f))
    names = sorted({n for n, _, _ in named})
    if len(names) > 1:
        a, b = (next(f.name for n, _, f in named if n == x) for x in names[:2])
        raise FormatError("trace", f"{where} mixes two traces: {a} and {b}")
    by_rank: dict[int, Path] = {}
    for _, r, f in named:
        if r in by_rank:
            raise FormatError(
                "ranks", f"{where} has two files of rank {r}: {by_rank[r].name}, {f.name}"
            )
        by_rank[r] = f
    for r in range(len(by_rank)):
        if r not in by_rank:
            top = max(by_rank)
            raise FormatError(
                "ranks", f"{names[0]}.{r}.et is missing: {where} has ranks up to {top}"
            )
    return names[0], [by_rank[r] for r in range(len(by_rank))]


def _siblings(folder: Path, name: str) -> list[Path]:
    return sorted(
        f for f in folder.glob("*.et") if (m := FILE_NAME.match(f.name)) and m["name"] == name
    )


def read_trace(path: str | Path) -> ChakraTrace:
    """Read and check a Chakra trace (module doc). Refuses, before parsing, files whose
    reading and conversion (:func:`~trainfabric.workloads.chakra.convert.trace_dag`) would
    need more than the memory limit: a ConfigError naming ``trace``."""
    name, files = trace_files(path)
    size = sum(f.stat().st_size for f in files)
    check_memory("trace", TRACE_BYTES_PER_FILE_BYTE * float(size), f"a trace of {size:,} B")
    ranks = tuple(_read_rank(f, r, len(files)) for r, f in enumerate(files))
    versions = {rt.version for rt in ranks}
    if len(versions) > 1:
        a, b = (next(rt for rt in ranks if rt.version == v) for v in sorted(versions)[:2])
        raise FormatError(
            "GlobalMetadata",
            f"{a.path.name} states version {a.version!r}, {b.path.name} {b.version!r}: "
            "two traces mixed",
        )
    for rt in ranks:
        _check_rank(rt)
    _check_not_partial(ranks)
    colls = _match_collectives(ranks)
    messages = _match_messages(ranks)
    order = _order(ranks, colls, messages)
    return ChakraTrace(name, ranks, colls, messages, order)


def _check_not_partial(ranks: tuple[RankTrace, ...]) -> None:
    """A single rank's file holding collectives is the first file of a trace whose other
    ranks are missing (a collective over one rank moves nothing): a FormatError naming
    ``ranks``, not a job without communication."""
    if len(ranks) > 1:
        return
    rt = ranks[0]
    coll = next((n for n in rt.nodes if n.type == NodeType.COMM_COLL_NODE), None)
    if coll is not None:
        raise FormatError(
            "ranks",
            f"{rt.where(coll)}: a collective in a trace of one rank file: "
            "the other ranks' files are missing",
        )


def _read_rank(path: Path, rank: int, n_ranks: int) -> RankTrace:
    """Parse one file (stream, GlobalMetadata, nodes and their attributes)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError("trace", f"cannot read {path}: {exc.strerror}") from None
    head = f"{path.name} rank {rank}"
    nodes: list[ChakraNode] = []
    version = None
    try:
        for offset, body in split_stream(data):
            if version is None:
                version = _metadata(body, _at(head, offset, nodes))
            else:
                nodes.append(_node(body, head, n_ranks, offset, nodes))
    except StreamError as exc:
        raise FormatError("stream", f"{_at(head, exc.offset, nodes)}: {exc}") from None
    if version is None:
        raise FormatError("GlobalMetadata", f"{head}: empty file, no GlobalMetadata message")
    return RankTrace(path, rank, version, tuple(nodes))


def _unknown(msg) -> list[tuple[int, int]]:
    return [(f.field_number, f.wire_type) for f in unknown_fields.UnknownFieldSet(msg)]


def _metadata(body: bytes, at: str) -> str:
    try:
        meta = GlobalMetadata.FromString(body)
    except DecodeError:
        raise FormatError("GlobalMetadata", f"{at}: not a protobuf message") from None
    if bad := _unknown(meta):
        raise FormatError(
            "GlobalMetadata",
            f"{at}: the first message is not a GlobalMetadata (it has field {bad[0][0]}, "
            f"wire type {bad[0][1]}): a trace starts with one",
        )
    return meta.version


def _attr_int(attr, where: str) -> int:
    kind = attr.WhichOneof("value")
    if kind not in INTEGER_VALUES:
        raise FormatError(attr.name, f"{where}: must be an integer attribute, got {kind}")
    return int(getattr(attr, kind))


def _at(head: str, offset: int, nodes: list[ChakraNode]) -> str:
    """Where a message starts: file, rank, byte offset and the last good node."""
    return f"{head}, byte {offset}" + (f" (after node {nodes[-1].id})" if nodes else "")


def _node(body: bytes, head: str, n_ranks: int, offset: int, before: list) -> ChakraNode:
    """One Node message (at byte ``offset``, after the nodes ``before``) as a
    :class:`ChakraNode`, its attributes checked (module doc)."""
    try:
        msg = Node.FromString(body)
    except DecodeError:
        at = _at(head, offset, before)
        raise FormatError("Node", f"{at}: not a protobuf Node message") from None
    where = f"{head} node {msg.id}"
    if bad := [(k, w) for k, w in _unknown(msg) if k <= NODE_FIELDS]:
        raise FormatError("Node", f"{where}: field {bad[0][0]} has the wrong wire type")
    if msg.duration_micros > MAX_DURATION_US:
        raise FormatError(
            "duration_micros",
            f"{where}: at most {MAX_DURATION_US:.0e} us (11.6 days), got {msg.duration_micros}",
        )
    comm: dict = {}
    for attr in msg.attr:
        if attr.name in ("comm_type", "comm_size", "comm_src", "comm_dst", "comm_tag"):
            comm[attr.name] = _attr_int(attr, where)
        elif attr.name == "pg_name":
            if attr.WhichOneof("value") != "string_val":
                raise FormatError("pg_name", f"{where}: must be a string_val attribute")
            comm["pg_name"] = attr.string_val
    node = ChakraNode(
        id=msg.id,
        name=msg.name,
        type=msg.type,
        data_deps=tuple(msg.data_deps),
        ctrl_deps=tuple(msg.ctrl_deps),
        duration_micros=msg.duration_micros,
        **comm,
    )
    if node.type in (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
        _check_comm(node, where, n_ranks)
    return node


def _check_comm(node: ChakraNode, where: str, n_ranks: int) -> None:
    coll = node.type == NodeType.COMM_COLL_NODE
    if coll:
        if node.comm_type is None:
            raise FormatError("comm_type", f"{where}: a COMM_COLL_NODE needs comm_type")
        if node.comm_type not in COMM_TYPES:
            raise FormatError(
                "comm_type",
                f"{where}: unknown collective {node.comm_type} (known: "
                + ", ".join(f"{c.value} {c.name}" for c in CollectiveCommType)
                + ")",
            )
    needs_size = not coll or node.comm_type != CollectiveCommType.BARRIER
    if needs_size and node.comm_size is None:
        raise FormatError("comm_size", f"{where}: a {NodeType(node.type).name} needs comm_size")
    if node.comm_size is not None and not 0 <= node.comm_size <= MAX_COMM_BYTES:
        raise FormatError(
            "comm_size", f"{where}: must be in 0 .. 2^50 bytes (a petabyte), got {node.comm_size}"
        )
    if coll:
        return
    peer = "comm_dst" if node.type == NodeType.COMM_SEND_NODE else "comm_src"
    if getattr(node, peer) is None:
        raise FormatError(peer, f"{where}: a {NodeType(node.type).name} needs {peer}")
    for field in ("comm_src", "comm_dst"):
        r = getattr(node, field)
        if r is not None and not 0 <= r < n_ranks:
            raise FormatError(field, f"{where}: rank {r} is not in the trace's 0..{n_ranks - 1}")


def _check_rank(rt: RankTrace) -> None:
    """Unique node ids and dependencies on nodes of the file."""
    index: dict[int, int] = {}
    for i, node in enumerate(rt.nodes):
        if node.id in index:
            raise FormatError(
                "id",
                f"{rt.where(node)}: the id of two nodes (#{index[node.id] + 1} and #{i + 1} "
                "of the file)",
            )
        index[node.id] = i
    for node in rt.nodes:
        for field in ("data_deps", "ctrl_deps"):
            for d in getattr(node, field):
                if d not in index:
                    raise FormatError(
                        field,
                        f"{rt.where(node)}: depends on node {d}, which rank {rt.rank} "
                        "does not have",
                    )
        if node.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
            _check_peers(rt, node)


def _check_peers(rt: RankTrace, node: ChakraNode) -> None:
    """A send leaves its own rank for another one; a receive arrives at its own rank."""
    send = node.type == NodeType.COMM_SEND_NODE
    own, peer = ("comm_src", "comm_dst") if send else ("comm_dst", "comm_src")
    if getattr(node, own) not in (None, rt.rank):
        raise FormatError(
            own, f"{rt.where(node)}: is rank {getattr(node, own)}, but the file is rank {rt.rank}"
        )
    if getattr(node, peer) == rt.rank:
        raise FormatError(peer, f"{rt.where(node)}: a message from rank {rt.rank} to itself")


def _match_collectives(ranks: tuple[RankTrace, ...]) -> tuple[Collective, ...]:
    """Collectives matched across ranks by process group and position (module doc)."""
    seqs: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for rt in ranks:
        for i, node in enumerate(rt.nodes):
            if node.type == NodeType.COMM_COLL_NODE:
                seqs[node.pg_name][rt.rank].append(i)
    out = []
    for group, per_rank in sorted(seqs.items()):
        members = tuple(range(len(ranks))) if group == "" else tuple(sorted(per_rank))
        label = f"process group {group!r}" if group else "all ranks"
        longest = max(members, key=lambda r: len(per_rank[r]))
        ref_rank = ranks[longest]
        for k, ref in enumerate(per_rank[longest]):
            ref_node = ref_rank.nodes[ref]
            for r in members:
                if k >= len(per_rank[r]):
                    raise FormatError(
                        "pg_name",
                        f"{ref_rank.where(ref_node)}: collective {k + 1} of {label} has no "
                        f"partner on rank {r} ({ranks[r].path.name} has {len(per_rank[r])})",
                    )
                _agree(ranks[r], ranks[r].nodes[per_rank[r][k]], ref_rank, ref_node)
            out.append(
                Collective(
                    ref_node.comm_type,
                    group,
                    k,
                    members,
                    tuple(per_rank[r][k] for r in members),
                )
            )
    return tuple(out)


RANK_SIZED = (CollectiveCommType.ALL_TO_ALL, CollectiveCommType.BARRIER)


def _agree(rt: RankTrace, node: ChakraNode, ref_rt: RankTrace, ref: ChakraNode) -> None:
    """The same collective on two ranks: same comm_type, and same comm_size unless each rank
    states its own (all-to-all) or there is none (barrier)."""
    for field in ("comm_type", "comm_size"):
        if field == "comm_size" and ref.comm_type in RANK_SIZED:
            continue
        a, b = getattr(node, field), getattr(ref, field)
        if a != b:
            show = (lambda v: CollectiveCommType(v).name) if field == "comm_type" else str
            raise FormatError(
                field,
                f"{rt.where(node)}: {field} {show(a)}, but the same collective has "
                f"{show(b)} on rank {ref_rt.rank} (node {ref.id}): the ranks disagree",
            )


def _match_messages(ranks: tuple[RankTrace, ...]) -> tuple[Message, ...]:
    """Sends paired with receives by (source, destination, tag) in file order."""
    sends: dict[tuple, list[int]] = defaultdict(list)
    recvs: dict[tuple, list[int]] = defaultdict(list)
    for rt in ranks:
        for i, node in enumerate(rt.nodes):
            if node.type == NodeType.COMM_SEND_NODE:
                sends[rt.rank, node.comm_dst, node.comm_tag].append(i)
            elif node.type == NodeType.COMM_RECV_NODE:
                recvs[node.comm_src, rt.rank, node.comm_tag].append(i)
    out = []
    for key in sorted(set(sends) | set(recvs)):
        s, d, tag = key
        ss, rr = sends.get(key, []), recvs.get(key, [])
        for k in range(max(len(ss), len(rr))):
            if k >= len(rr):
                node = ranks[s].nodes[ss[k]]
                raise FormatError(
                    "comm_dst",
                    f"{ranks[s].where(node)}: send to rank {d} (comm_tag {tag}, comm_size "
                    f"{node.comm_size}) has no matching receive in {ranks[d].path.name}",
                )
            if k >= len(ss):
                node = ranks[d].nodes[rr[k]]
                raise FormatError(
                    "comm_src",
                    f"{ranks[d].where(node)}: receive from rank {s} (comm_tag {tag}, comm_size "
                    f"{node.comm_size}) has no matching send in {ranks[s].path.name}",
                )
            send, recv = ranks[s].nodes[ss[k]], ranks[d].nodes[rr[k]]
            if send.comm_size != recv.comm_size:
                raise FormatError(
                    "comm_size",
                    f"{ranks[d].where(recv)}: receives {recv.comm_size} B from rank {s} (comm_tag "
                    f"{tag}), but the matching send, node {send.id}, sends {send.comm_size} B",
                )
            out.append(Message(s, d, tag, send.comm_size, ss[k], rr[k]))
    return tuple(out)


def _order(ranks, colls, messages) -> tuple[tuple[int, int], ...]:
    """A run order of the trace (ChakraTrace doc); a cycle is refused, naming a node on it
    (module doc: a dependency cycle or a deadlock)."""
    offset = np.cumsum([0] + [len(rt.nodes) for rt in ranks])
    n = int(offset[-1])
    item = np.arange(n)  # a collective's nodes share one item: its first rank's node
    for c in colls:
        ids = [offset[r] + i for r, i in zip(c.ranks, c.nodes, strict=True)]
        item[ids] = ids[0]
    src: list[int] = []
    dst: list[int] = []
    for rt in ranks:
        index = {node.id: i for i, node in enumerate(rt.nodes)}
        base = offset[rt.rank]
        for i, node in enumerate(rt.nodes):
            src += [item[base + index[d]] for d in node.data_deps]
            dst += [item[base + i]] * len(node.data_deps)
    for m in messages:
        src.append(item[offset[m.src] + m.send])
        dst.append(item[offset[m.dst] + m.recv])
    s, d = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    try:
        order = topological_order(n, s, d)
    except FormatError:
        raise _cycle_error(ranks, offset, item, s, d) from None
    order = order[item[order] == order]  # each collective once
    rank_of = np.searchsorted(offset, order, side="right") - 1
    return tuple(zip(rank_of.tolist(), (order - offset[rank_of]).tolist(), strict=True))


def _cycle_error(ranks, offset, item, src, dst) -> FormatError:
    """A FormatError naming a node on one cycle of the item graph: a dependency cycle when
    the cycle stays in one file, else a deadlock through collectives or messages."""
    import networkx as nx  # here, not at module level: it costs start-up time

    cycle = [u for u, _ in nx.find_cycle(nx.DiGraph(zip(src.tolist(), dst.tolist(), strict=True)))]
    rank_of = (np.searchsorted(offset, cycle, side="right") - 1).tolist()
    shared = np.bincount(item, minlength=item.size)[cycle] > 1  # collectives of >1 rank
    rt = ranks[rank_of[0]]
    node = [ranks[r].nodes[x - offset[r]] for r, x in zip(rank_of, cycle, strict=True)]
    if len(set(rank_of)) == 1 and not shared.any():
        ids = " -> ".join(str(v.id) for v in [*node, node[0]])
        return FormatError("data_deps", f"{rt.where(node[0])}: on a dependency cycle (node {ids})")
    return FormatError(
        "data_deps",
        f"{rt.where(node[0])}: deadlock: it waits on itself through the collectives and "
        f"messages of ranks {sorted(set(rank_of))}",
    )


def trace_counts(trace: ChakraTrace) -> dict[str, int]:
    """What the files state: ``ranks`` (files), ``collectives`` (COMM_COLL_NODEs, one per
    rank of each collective), ``collective_bytes`` (the sum of their ``comm_size``),
    ``p2p_messages`` and ``p2p_bytes`` (COMM_SEND_NODEs and the sum of their ``comm_size``),
    ``compute_nodes`` (COMP_NODEs)."""
    counts = dict.fromkeys(
        ("collectives", "collective_bytes", "p2p_messages", "p2p_bytes", "compute_nodes"), 0
    )
    for rt in trace.ranks:
        for node in rt.nodes:
            if node.type == NodeType.COMM_COLL_NODE:
                counts["collectives"] += 1
                counts["collective_bytes"] += node.comm_size or 0
            elif node.type == NodeType.COMM_SEND_NODE:
                counts["p2p_messages"] += 1
                counts["p2p_bytes"] += node.comm_size
            elif node.type == NodeType.COMP_NODE:
                counts["compute_nodes"] += 1
    return {"ranks": trace.n_ranks, **counts}
