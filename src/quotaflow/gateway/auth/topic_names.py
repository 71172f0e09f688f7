"""The topic names of a Produce or Fetch request, read from the frame without decoding it (the hot path).

Authorizing Produce and Fetch needs only their topic names; a kafka-python decode would build every partition's
object (and hold the records). These walks read the names and skip everything else by its wire size: Produce v3–9
(``transactional_id``, ``acks``, ``timeout_ms``, then topics with partitions of index + records) and Fetch v4–12
(the fixed head, then topics with fixed-size partition entries). The gateway offers no higher versions (Produce v10+
and Fetch v13+ name topics by id or carry broker addresses: :mod:`quotaflow.gateway.auth.authorize`). Fetch's session
fields sit at fixed offsets, so sessions can be switched off in place (:func:`sessionless_fetch`).
"""

from __future__ import annotations

import struct
from typing import Final

from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import InvalidRequestError
from quotaflow.gateway.data import protocol

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
PRODUCE_MAX: Final = 9
FETCH_MAX: Final = 12


def _uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:  # the common case: one byte
        return b, pos + 1
    value, shift = b & 0x7F, 7
    while True:
        pos += 1
        if shift > 28:
            raise InvalidRequestError("oversized unsigned varint")
        b = data[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7


def _skip_tags(data: bytes | memoryview, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


def body_offset(frame: bytes | memoryview, header: protocol.RequestHeader) -> int:
    """``protocol.body_offset`` for Produce (flexible from v9) and Fetch (from v12) without asking the schema."""
    key, version = header.api_key, header.api_version
    if (key == ApiKey.Produce and version >= 9) or (key == ApiKey.Fetch and version >= 12):
        try:
            pos = _skip_tags(frame, header.end)
        except IndexError as e:
            raise InvalidRequestError("request header runs past the end of the frame") from e
        if pos > len(frame):
            raise InvalidRequestError("request header runs past the end of the frame")
        return pos
    return header.end


def _name(data: bytes | memoryview, pos: int, n: int) -> str:
    if n < 0 or pos + n > len(data):
        raise InvalidRequestError("topic name missing or running past the end of the request")
    return bytes(data[pos:pos + n]).decode("utf-8")


def _compact_name(data: bytes | memoryview, pos: int) -> tuple[str, int]:
    """A non-null COMPACT_STRING (length + 1 as an unsigned varint) and the offset after it."""
    n, pos = _uvarint(data, pos)
    return _name(data, pos, n - 1), pos + n - 1


def _name16(data: bytes | memoryview, pos: int) -> tuple[str, int]:
    """A non-null STRING (int16 length) and the offset after it."""
    (n,) = _I16.unpack_from(data, pos)
    return _name(data, pos + 2, n), pos + 2 + n


def produce_topics(frame: bytes | memoryview, header: protocol.RequestHeader,
                   body: int | None = None) -> tuple[str | None, list[str]]:
    """(transactional_id, topic names in request order) of a Produce request v3–9 (``body``: where its body
    starts, when known)."""
    version = header.api_version
    if not 3 <= version <= PRODUCE_MAX:
        raise InvalidRequestError(f"Produce v{version} is not read by the gateway")
    data = frame
    pos = body_offset(frame, header) if body is None else body
    names: list[str] = []
    try:
        if version >= 9:  # flexible: compact strings and arrays, tagged fields (the hot path: one-byte varints
            # and empty tag sections read inline)
            n, pos = _uvarint(data, pos)
            transactional_id = None if n == 0 else _name(data, pos, n - 1)
            pos += max(n - 1, 0) + 6  # acks, timeout_ms
            topics, pos = _uvarint(data, pos)
            for _ in range(topics - 1):
                name, pos = _compact_name(data, pos)
                names.append(name)
                partitions, pos = _uvarint(data, pos)
                for _ in range(partitions - 1):
                    size, pos = _uvarint(data, pos + 4)  # index, then the records' length + 1
                    pos += max(size - 1, 0)
                    pos = pos + 1 if data[pos] == 0 else _skip_tags(data, pos)
                pos = pos + 1 if data[pos] == 0 else _skip_tags(data, pos)
        else:
            (n,) = _I16.unpack_from(data, pos)
            transactional_id = None if n < 0 else _name(data, pos + 2, n)
            pos += 2 + max(n, 0) + 6
            (topics,) = _I32.unpack_from(data, pos)
            pos += 4
            for _ in range(topics):
                name, pos = _name16(data, pos)
                names.append(name)
                (partitions,) = _I32.unpack_from(data, pos)
                pos += 4
                for _ in range(partitions):
                    (size,) = _I32.unpack_from(data, pos + 4)
                    pos += 8 + max(size, 0)
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise InvalidRequestError(f"malformed Produce request: {e}") from e
    if pos > len(data):
        raise InvalidRequestError("Produce request truncated")
    return transactional_id, names


def _fetch_head(version: int) -> int:
    """Bytes from the body start to the topics array: replica_id, max_wait_ms, min_bytes, max_bytes, isolation
    level, then session id and epoch (v7+)."""
    return 4 + 4 + 4 + 4 + 1 + (8 if version >= 7 else 0)


def _fetch_partition_size(version: int) -> int:
    return 4 + (4 if version >= 9 else 0) + 8 + (4 if version >= 12 else 0) + (8 if version >= 5 else 0) + 4


def fetch_topics(frame: bytes | memoryview, header: protocol.RequestHeader, body: int | None = None) -> list[str]:
    """Topic names of a Fetch request v4–12 (forgotten topics left out: forgetting needs no right; ``body``:
    where its body starts, when known)."""
    version = header.api_version
    if not 4 <= version <= FETCH_MAX:
        raise InvalidRequestError(f"Fetch v{version} is not read by the gateway")
    data = frame
    pos = (body_offset(frame, header) if body is None else body) + _fetch_head(version)
    size = _fetch_partition_size(version)
    names: list[str] = []
    try:
        if version >= 12:
            topics, pos = _uvarint(data, pos)
            for _ in range(topics - 1):
                name, pos = _compact_name(data, pos)
                names.append(name)
                partitions, pos = _uvarint(data, pos)
                for _ in range(partitions - 1):
                    pos = _skip_tags(data, pos + size)
                pos = _skip_tags(data, pos)
        else:
            (topics,) = _I32.unpack_from(data, pos)
            pos += 4
            for _ in range(topics):
                name, pos = _name16(data, pos)
                names.append(name)
                (partitions,) = _I32.unpack_from(data, pos)
                pos += 4 + max(partitions, 0) * size
    except (struct.error, IndexError, UnicodeDecodeError) as e:
        raise InvalidRequestError(f"malformed Fetch request: {e}") from e
    if pos > len(data):
        raise InvalidRequestError("Fetch request truncated")
    return names


def sessionless_fetch(frame: bytes, header: protocol.RequestHeader, body: int | None = None) -> bytes:
    """The Fetch request (v7+) with a new session's epoch 0 turned into -1: a full fetch that creates no session
    (KIP-227), so every request names all its partitions and each one is authorized every time, as the broker
    re-authorizes a session's partitions on each fetch."""
    if header.api_key != ApiKey.Fetch or header.api_version < 7:
        return frame
    pos = (body_offset(frame, header) if body is None else body) + _fetch_head(header.api_version) - 8
    session_id, epoch = struct.unpack_from(">ii", frame, pos)
    if session_id != 0 or epoch != 0:
        return frame
    out = bytearray(frame)
    _I32.pack_into(out, pos + 4, -1)
    return bytes(out)
