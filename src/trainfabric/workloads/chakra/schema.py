"""The Chakra execution-trace schema, built here from its published field numbers.

MLCommons Chakra (``schema/protobuf/et_def.proto``, proto3, package ``ChakraProtoMsg``; the
layout since October 2023, when the schema moved to proto3, renamed ``parent`` to
``ctrl_deps`` / ``data_deps`` and added ``GlobalMetadata.version``; traces state version
``0.0.4`` or ``1.0.0``). The messages are declared below as tables of (field, number, type)
and turned into message classes with ``google.protobuf``'s descriptor API; nothing is
generated or copied:

* ``GlobalMetadata``: ``version`` (1, string), ``attr`` (2, repeated AttributeProto);
* ``Node``: ``id`` (1, uint64), ``name`` (2), ``type`` (3, :class:`NodeType`),
  ``ctrl_deps`` (4) and ``data_deps`` (5) (repeated uint64, node ids of the same file),
  ``start_time_micros`` (6), ``duration_micros`` (7) (uint64, microseconds), ``inputs`` (8)
  and ``outputs`` (9) (IOInfo), ``attr`` (10, repeated AttributeProto);
* ``AttributeProto``: ``name`` (1), ``doc_string`` (2) and a oneof ``value``: for each
  scalar type of :data:`VALUE_TYPES` at number ``k``, ``{type}_val = k`` and
  ``{type}_list = k + 1`` (a message ``{Type}List`` of ``repeated {type} values = 1``);
* ``IOInfo``: ``values`` (1), ``shapes`` (2), ``types`` (3) (strings).

Later additions (node types 8-10, ``Node.storage`` = 11) are read as what they are: unknown
node types keep their number, unknown fields are skipped.

**Stream.** A trace file is a sequence of messages, each preceded by its length as a base-128
varint (7 bits per byte, least significant first, high bit set on every byte but the last):
one GlobalMetadata, then the nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from enum import IntEnum

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

SCHEMA_VERSION = "0.0.4"  # what our writer states (as astra-sim's published microbenchmarks)


class NodeType(IntEnum):
    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7
    STORAGE_NODE = 8
    BATCH_NODE = 9
    CHECKPOINT_NODE = 10


class CollectiveCommType(IntEnum):
    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


# AttributeProto's oneof: (scalar type, field number of `{type}_val`; `{type}_list` is +1)
VALUE_TYPES = (
    ("double", 3),
    ("float", 5),
    ("int32", 7),
    ("int64", 9),
    ("uint32", 11),
    ("uint64", 13),
    ("sint32", 15),
    ("sint64", 17),
    ("fixed32", 19),
    ("fixed64", 21),
    ("sfixed32", 23),
    ("sfixed64", 25),
    ("bool", 27),
    ("string", 29),
    ("bytes", 31),
)
INTEGER_VALUES = frozenset(f"{t}_val" for t, _ in VALUE_TYPES if "int" in t or "fixed" in t)

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "chakra"


def _scalar(type_name: str) -> int:
    return getattr(_F, f"TYPE_{type_name.upper()}")


def _field(name, number, type_, label=_F.LABEL_OPTIONAL, ref="", oneof=None):
    f = _F(name=name, number=number, type=type_, label=label)
    if ref:
        f.type_name = f".{_PACKAGE}.{ref}"
    if oneof is not None:
        f.oneof_index = oneof
    return f


def _file() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(
        name="trainfabric_chakra_et.proto", package=_PACKAGE, syntax="proto3"
    )
    rep, msg, enum = _F.LABEL_REPEATED, _F.TYPE_MESSAGE, _F.TYPE_ENUM
    string, uint64 = _F.TYPE_STRING, _F.TYPE_UINT64
    attr = fd.message_type.add(name="AttributeProto")
    attr.field.extend([_field("name", 1, string), _field("doc_string", 2, string)])
    attr.oneof_decl.add(name="value")
    for t, k in VALUE_TYPES:
        lst = f"{t.capitalize()}List"
        fd.message_type.add(name=lst).field.append(_field("values", 1, _scalar(t), rep))
        attr.field.extend([_field(f"{t}_val", k, _scalar(t), oneof=0)])
        attr.field.extend([_field(f"{t}_list", k + 1, msg, ref=lst, oneof=0)])
    meta = fd.message_type.add(name="GlobalMetadata")
    meta.field.extend([_field("version", 1, string), _field("attr", 2, msg, rep, "AttributeProto")])
    io = fd.message_type.add(name="IOInfo")
    io.field.extend(_field(n, k, string) for k, n in enumerate(("values", "shapes", "types"), 1))
    for e in (NodeType, CollectiveCommType):
        fd.enum_type.add(name=e.__name__).value.extend(
            descriptor_pb2.EnumValueDescriptorProto(name=v.name, number=v.value) for v in e
        )
    fd.message_type.add(name="Node").field.extend(
        [
            _field("id", 1, uint64),
            _field("name", 2, string),
            _field("type", 3, enum, ref="NodeType"),
            _field("ctrl_deps", 4, uint64, rep),
            _field("data_deps", 5, uint64, rep),
            _field("start_time_micros", 6, uint64),
            _field("duration_micros", 7, uint64),
            _field("inputs", 8, msg, ref="IOInfo"),
            _field("outputs", 9, msg, ref="IOInfo"),
            _field("attr", 10, msg, rep, "AttributeProto"),
        ]
    )
    return fd


_POOL = descriptor_pool.DescriptorPool()  # our own pool: chakra's generated module may coexist
_POOL.Add(_file())


def _message(name: str) -> type[Message]:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


GlobalMetadata = _message("GlobalMetadata")
Node = _message("Node")
AttributeProto = _message("AttributeProto")
IOInfo = _message("IOInfo")


def attribute(name: str, **value) -> Message:
    """``AttributeProto(name=name, <kind>_val=value)``, e.g. ``attribute("comm_size",
    int64_val=1 << 20)``."""
    return AttributeProto(name=name, **value)


# -- the length-delimited stream ---------------------------------------------------------------
class StreamError(ValueError):
    """A malformed stream at byte ``offset`` (the start of the message at fault)."""

    def __init__(self, offset: int, message: str):
        self.offset = offset
        super().__init__(message)


def encode_varint(value: int) -> bytes:
    """Base-128 varint of ``value >= 0`` (module doc)."""
    if value < 0:
        raise ValueError(f"a length prefix is non-negative, got {value}")
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """``(value, next position)`` of the varint at ``data[pos:]``; a StreamError when it runs
    past the end or over 10 bytes (64 bits)."""
    value = shift = 0
    for i in range(pos, min(pos + 10, len(data))):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    if len(data) - pos < 10:
        raise StreamError(pos, f"truncated: the length prefix runs past the end ({len(data)} B)")
    raise StreamError(pos, "not a length prefix: a varint of more than 10 bytes")


def encode_stream(messages: Iterable[Message]) -> bytes:
    """The messages, each after its varint length (a trace file's bytes)."""
    parts = []
    for m in messages:
        body = m.SerializeToString()
        parts += [encode_varint(len(body)), body]
    return b"".join(parts)


def split_stream(data: bytes) -> Iterator[tuple[int, bytes]]:
    """``(offset, body)`` of each length-delimited message of ``data``; a StreamError at the
    message that runs past the end."""
    pos = 0
    while pos < len(data):
        size, start = decode_varint(data, pos)
        if start + size > len(data):
            raise StreamError(
                pos, f"truncated: the message says {size} B, {len(data) - start} B are left"
            )
        yield pos, data[start : start + size]
        pos = start + size
