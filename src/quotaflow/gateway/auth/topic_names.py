"""The topic names of a Produce or Fetch request, read from the frame without decoding it (the hot path).

Authorizing Produce and Fetch needs only their topic names; a kafka-python decode would build every partition's
object (and hold the records). These walks read the names and skip everything else by its wire size: Produce v3–9
(``transactional_id``, ``acks``, ``timeout_ms``, then topics with partitions of index + records) and Fetch v4–12
(the fixed head, then topics with fixed-size partition entries). The gateway offers no higher versions (Produce v10+
and Fetch v13+ name topics by id or carry broker addresses: :mod:`quotaflow.gateway.auth.authorize`). Fetch's session
fields sit at fixed offsets, so sessions can be switched off in place (:func:`sessionless_fetch`).

The walks themselves are the data plane's compiled frame readers (:mod:`quotaflow.gateway.wire.frame_facts`: C byte
reads, with their pure-Python twin): an authorizing gateway walks every Produce and Fetch it forwards.
"""

from __future__ import annotations

import struct
from typing import Final

from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import InvalidRequestError
from quotaflow.gateway.wire import frame_facts, protocol

_I32: Final = struct.Struct(">i")
PRODUCE_MAX: Final = 9
FETCH_MAX: Final = 12


def produce_topics(frame: bytes | memoryview, header: protocol.RequestHeader,
                   body: int | None = None) -> tuple[str | None, list[str]]:
    """(transactional_id, topic names in request order) of a Produce request v3–9 (``body``: where its body
    starts, when known)."""
    version = header.api_version
    if not 3 <= version <= PRODUCE_MAX:
        raise InvalidRequestError(f"Produce v{version} is not read by the gateway")
    pos = protocol.body_offset(frame, header) if body is None else body
    return frame_facts.produce_topic_names(frame if type(frame) is bytes else bytes(frame), pos, version >= 9)


def _fetch_head(version: int) -> int:
    """Bytes from the body start to the topics array: replica_id, max_wait_ms, min_bytes, max_bytes, isolation
    level, then session id and epoch (v7+)."""
    return 4 + 4 + 4 + 4 + 1 + (8 if version >= 7 else 0)


def _fetch_partition_size(version: int) -> int:
    return 4 + (4 if version >= 9 else 0) + 8 + (4 if version >= 12 else 0) + (8 if version >= 5 else 0) + 4


_FETCH_HEAD: Final = tuple(_fetch_head(v) for v in range(FETCH_MAX + 1))  # by version: read per request
_FETCH_PARTITION: Final = tuple(_fetch_partition_size(v) for v in range(FETCH_MAX + 1))
_FETCH: Final = int(ApiKey.Fetch)


def fetch_topics(frame: bytes | memoryview, header: protocol.RequestHeader, body: int | None = None) -> list[str]:
    """Topic names of a Fetch request v4–12 (forgotten topics left out: forgetting needs no right; ``body``:
    where its body starts, when known)."""
    version = header.api_version
    if not 4 <= version <= FETCH_MAX:
        raise InvalidRequestError(f"Fetch v{version} is not read by the gateway")
    pos = (protocol.body_offset(frame, header) if body is None else body) + _FETCH_HEAD[version]
    return frame_facts.fetch_topic_names(frame if type(frame) is bytes else bytes(frame), pos, version >= 12,
                                         _FETCH_PARTITION[version])


def sessionless_fetch(frame: bytes, header: protocol.RequestHeader, body: int | None = None) -> bytes:
    """The Fetch request (v7+) with a new session's epoch 0 turned into -1: a full fetch that creates no session
    (KIP-227), so every request names all its partitions and each one is authorized every time, as the broker
    re-authorizes a session's partitions on each fetch."""
    version = header.api_version
    if header.api_key != _FETCH or not 7 <= version <= FETCH_MAX:
        return frame
    pos = (protocol.body_offset(frame, header) if body is None else body) + _FETCH_HEAD[version] - 8
    session_id, epoch = struct.unpack_from(">ii", frame, pos)
    if session_id != 0 or epoch != 0:
        return frame
    out = bytearray(frame)
    _I32.pack_into(out, pos + 4, -1)
    return bytes(out)
