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
from collections.abc import Callable, Sequence
from typing import Final

from quotaflow.admin import DescribedEntity
from quotaflow.core.validation import java_map_order
from quotaflow.gateway.wire.direct import JOIN_ENTRIES, NO_TAGS, Primitives, unpaced

_DOUBLE: Final = struct.Struct(">d")
FLEXIBLE_FROM: Final = 1  # DescribeClientQuotas v1 is flexible (compact strings and arrays, tagged fields)


class _Encoder(Primitives):
    """DescribeClientQuotas's entries, on one version's primitives."""

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
                out.append(NO_TAGS)
        values = d.values
        keys = java_map_order(values)
        out.append(self.array(len(keys)))
        for k in keys:
            out.append(self.cached(k))
            out.append(_DOUBLE.pack(float(values[k])))
            if self.flexible:
                out.append(NO_TAGS)
        if self.flexible:
            out.append(NO_TAGS)


def encode_describe_response(version: int, correlation_id: int, entries: Sequence[DescribedEntity] | None, *,
                             error_code: int = 0, error_message: str | None = None, throttle_ms: int = 0,
                             pace: Callable[[], None] = unpaced) -> bytes:
    """The framed DescribeClientQuotas response (size prefix, header, body) at ``version``: ``entries`` None is the
    null array of an error response. ``pace`` is called after each entry
    (:class:`~quotaflow.gateway.collector.Pace`)."""
    enc = _Encoder(version >= FLEXIBLE_FROM)
    chunks = [enc.head(correlation_id, throttle_ms, error_code, error_message),
              enc.array(None if entries is None else len(entries))]
    listed: Sequence[DescribedEntity] = entries or ()
    for start in range(0, len(listed), JOIN_ENTRIES):
        pieces: list[bytes] = []
        for d in listed[start:start + JOIN_ENTRIES]:
            enc.entry(d, pieces)
            pace()
        chunks.append(b"".join(pieces))
    return enc.framed(chunks)
