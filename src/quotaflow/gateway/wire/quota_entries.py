"""DescribeClientQuotas responses (KIP-546, v0 and the flexible v1) encoded straight from the described entities.

A describe of every entity at Kafka's scale (100,000+) is the largest response the gateway makes itself. Built as
kafka-python messages and encoded by its generic encoder it costs ~30 µs an entity (objects per entity, value and
entity part, then a field-by-field walk): seconds of CPU on a thread that shares the GIL with the event loop. Here
each entity goes to bytes directly (its strings and the few keys' encodings cached), the same bytes kafka-python's
encoder gives (tests/gateway/wire/test_quota_entries.py compares them): the entity parts and the values in
``HashMap`` order, as Kafka's ``ClientQuotaEntity`` and its value map iterate.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from quotaflow.admin import DescribedEntity
from quotaflow.core.validation import java_map_order

_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_FIXED: Final = struct.Struct(">ih")  # throttle_time_ms, error_code
_DOUBLE: Final = struct.Struct(">d")
_NO_TAGS: Final = b"\x00"
JOIN_ENTRIES: Final = 1000  # entries encoded and joined per chunk of the response
FLEXIBLE_FROM: Final = 1  # DescribeClientQuotas v1 is flexible (compact strings and arrays, tagged fields)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Encoder:
    """One version's primitives, with the encodings of repeated strings (entity types, quota keys) cached."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.null = b"\x00" if flexible else _INT16.pack(-1)
        self._strings: dict[str, bytes] = {}

    def string(self, s: str) -> bytes:
        b = s.encode()
        return (_uvarint(len(b) + 1) if self.flexible else _INT16.pack(len(b))) + b

    def cached(self, s: str) -> bytes:
        out = self._strings.get(s)
        if out is None:
            out = self._strings[s] = self.string(s)
        return out

    def array(self, n: int | None) -> bytes:
        if n is None:
            return b"\x00" if self.flexible else _INT32.pack(-1)
        return _uvarint(n + 1) if self.flexible else _INT32.pack(n)

    def entry(self, d: DescribedEntity, out: list[bytes]) -> None:
        """One ``EntryData``: the entity's parts, then its values."""
        wire = d.entity.to_wire()
        parts = java_map_order(wire)
        out.append(self.array(len(parts)))
        for t in parts:
            name = wire[t]
            out.append(self.cached(t))
            out.append(self.null if name is None else self.string(name))
            if self.flexible:
                out.append(_NO_TAGS)
        values = d.values
        keys = java_map_order(values)
        out.append(self.array(len(keys)))
        for k in keys:
            out.append(self.cached(k))
            out.append(_DOUBLE.pack(float(values[k])))
            if self.flexible:
                out.append(_NO_TAGS)
        if self.flexible:
            out.append(_NO_TAGS)


def encode_describe_response(version: int, correlation_id: int, entries: Sequence[DescribedEntity] | None, *,
                             error_code: int = 0, error_message: str | None = None, throttle_ms: int = 0) -> bytes:
    """The framed DescribeClientQuotas response (size prefix, header, body) at ``version``: ``entries`` None is the
    null array of an error response."""
    enc = _Encoder(version >= FLEXIBLE_FROM)
    head: list[bytes] = [_INT32.pack(correlation_id)]
    if enc.flexible:
        head.append(_NO_TAGS)  # response header v1
    head.append(_FIXED.pack(throttle_ms, error_code))
    head.append(enc.null if error_message is None else enc.string(error_message))
    head.append(enc.array(None if entries is None else len(entries)))
    chunks = [b"".join(head)]
    # joined a chunk of entries at a time: one join of every piece (~14 an entity) is one C call that holds the GIL
    # for ~60 ms at 110,000 entities, and so is freeing that list of pieces at once
    listed: Sequence[DescribedEntity] = entries or ()
    for start in range(0, len(listed), JOIN_ENTRIES):
        pieces: list[bytes] = []
        for d in listed[start:start + JOIN_ENTRIES]:
            enc.entry(d, pieces)
        chunks.append(b"".join(pieces))
    if enc.flexible:
        chunks.append(_NO_TAGS)
    return b"".join([_INT32.pack(sum(map(len, chunks))), *chunks])
