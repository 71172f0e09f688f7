"""DescribeAcls responses (v1, and the flexible v2 and v3) encoded straight from the described bindings.

A describe of every ACL at Kafka's scale (100,000) is, with describe-all of quotas, the largest response the gateway
makes itself. Built as kafka-python messages (a resource and an ACL description object per binding) and encoded by
its generic encoder it costs ~1.9 CPU s at 100,000 on the reference host, and freeing those objects and joining
their pieces held the GIL for ~100 ms at a time, beside the event loop. Here each binding goes to bytes directly
(the resource and entry strings' encodings cached: a few principals and hosts repeat), joined a chunk at a time:
the same bytes kafka-python's encoder gives (tests/gateway/wire/test_acl_entries.py compares them).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Final

from quotaflow.core.acl import AclBinding
from quotaflow.gateway.wire.direct import JOIN_ENTRIES, NO_TAGS, Primitives, unpaced

_BYTE: Final = struct.Struct(">b")
FLEXIBLE_FROM: Final = 2  # DescribeAcls v2 is flexible (compact strings and arrays, tagged fields)
PATTERN_TYPE_FROM: Final = 1
_STEP: Final = 256  # bindings compared between two paces


class _Encoder(Primitives):
    """DescribeAcls's resources, on one version's primitives."""

    def __init__(self, version: int) -> None:
        super().__init__(version >= FLEXIBLE_FROM)
        self.pattern_type = version >= PATTERN_TYPE_FROM
        self._codes = [_BYTE.pack(n) for n in range(16)]  # the enums' codes are all below 16

    def resource(self, group: Sequence[AclBinding], out: list[bytes]) -> None:
        """One ``DescribeAclsResource``: the pattern of ``group`` (all one pattern), then its entries."""
        codes = self._codes
        p = group[0].pattern
        out.append(codes[p.resource_type])
        out.append(self.string(p.name))
        if self.pattern_type:
            out.append(codes[p.pattern_type])
        out.append(self.array(len(group)))
        for b in group:
            e = b.entry
            out.append(self.cached(e.principal))
            out.append(self.cached(e.host))
            out.append(codes[e.operation])
            out.append(codes[e.permission_type])
            if self.flexible:
                out.append(NO_TAGS)
        if self.flexible:
            out.append(NO_TAGS)


def encode_describe_acls_response(version: int, correlation_id: int, bindings: Sequence[AclBinding], *,
                                  throttle_ms: int = 0, pace: Callable[[], None] = unpaced) -> bytes:
    """The framed DescribeAcls response (size prefix, header, body) at ``version`` for ``bindings`` in
    :func:`~quotaflow.admin.acls.sort_bindings` order: one resource per pattern (a pattern's bindings are adjacent
    in that order), its entries in order, as the message form groups them. ``pace`` is called after each resource
    (:class:`~quotaflow.gateway.collector.Pace`)."""
    enc = _Encoder(version)
    starts: list[int] = []
    for lo in range(0, len(bindings), _STEP):  # where each pattern's bindings start, a step at a time
        starts += [i for i in range(lo, min(lo + _STEP, len(bindings)))
                   if i == 0 or bindings[i].pattern != bindings[i - 1].pattern]
        pace()
    chunks = [enc.head(correlation_id, throttle_ms, 0, None), enc.array(len(starts))]
    starts.append(len(bindings))
    pieces: list[bytes] = []
    done = 0
    # joined about JOIN_ENTRIES bindings at a time: one join of every piece is one C call holding the GIL
    for k in range(len(starts) - 1):
        enc.resource(bindings[starts[k]:starts[k + 1]], pieces)
        pace()
        if starts[k + 1] - done >= JOIN_ENTRIES:
            chunks.append(b"".join(pieces))
            pieces = []
            done = starts[k + 1]
    chunks.append(b"".join(pieces))
    return enc.framed(chunks)
