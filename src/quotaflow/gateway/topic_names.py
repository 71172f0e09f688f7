"""The topic names of a Produce or Fetch request, read from the frame without decoding it (the hot path).

Authorizing Produce and Fetch needs only their topic names; a kafka-python decode would build every partition's
object (and hold the records). These walks read the names and skip everything else by its wire size: Produce v3–9
(``transactional_id``, ``acks``, ``timeout_ms``, then topics with partitions of index + records) and Fetch v4–12
(the fixed head, then topics with fixed-size partition entries). The gateway offers no higher versions (Produce v10+
and Fetch v13+ name topics by id or carry broker addresses: :mod:`quotaflow.gateway.authorize`). Fetch's session
fields sit at fixed offsets, so sessions can be switched off in place (:func:`sessionless_fetch`).
"""

from __future__ import annotations

import struct
from typing import Final

from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import InvalidRequestError
from quotaflow.gateway import protocol

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
PRODUCE_MAX: Final = 9
FETCH_MAX: Final = 12


class _Reader:
    __slots__ = ("data", "flexible", "pos")

    def __init__(self, data: bytes | memoryview, pos: int, flexible: bool) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def uvarint(self) -> int:
        value = shift = 0
        data = self.data
        while True:
            if self.pos >= len(data) or shift > 28:
                raise InvalidRequestError("truncated or oversized unsigned varint")
            b = data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def skip(self, n: int) -> None:
        self.pos += n
        if self.pos > len(self.data):
            raise InvalidRequestError("request truncated")

    def count(self) -> int:
        """An array's length (-1: null)."""
        if self.flexible:
            return self.uvarint() - 1
        (n,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(n)

    def string(self) -> str | None:
        if self.flexible:
            n = self.uvarint() - 1
        else:
            (n,) = _I16.unpack_from(self.data, self.pos)
            self.pos += 2
        if n < 0:
            return None
        end = self.pos + n
        if end > len(self.data):
            raise InvalidRequestError("string runs past the end of the request")
        raw = bytes(self.data[self.pos:end])
        self.pos = end
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidRequestError("topic name is not UTF-8") from e

    def skip_bytes(self) -> None:
        if self.flexible:
            n = self.uvarint() - 1
        else:
            (n,) = _I32.unpack_from(self.data, self.pos)
            self.pos += 4
        if n > 0:
            self.skip(n)

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.skip(self.uvarint())


def produce_topics(frame: bytes | memoryview, header: protocol.RequestHeader) -> tuple[str | None, list[str]]:
    """(transactional_id, topic names in request order) of a Produce request v3–9."""
    version = header.api_version
    if not 3 <= version <= PRODUCE_MAX:
        raise InvalidRequestError(f"Produce v{version} is not read by the gateway")
    r = _Reader(frame, protocol.body_offset(frame, header), version >= 9)
    try:
        transactional_id = r.string()
        r.skip(6)  # acks, timeout_ms
        names: list[str] = []
        for _ in range(max(r.count(), 0)):
            name = r.string()
            if name is None:
                raise InvalidRequestError("Produce topic without a name")
            names.append(name)
            for _ in range(max(r.count(), 0)):
                r.skip(4)  # partition index
                r.skip_bytes()  # records
                r.skip_tags()
            r.skip_tags()
    except struct.error as e:
        raise InvalidRequestError("Produce request truncated") from e
    return transactional_id, names


def _fetch_head(version: int) -> int:
    """Bytes from the body start to the topics array: replica_id, max_wait_ms, min_bytes, max_bytes, isolation
    level, then session id and epoch (v7+)."""
    return 4 + 4 + 4 + 4 + 1 + (8 if version >= 7 else 0)


def _fetch_partition_size(version: int) -> int:
    return 4 + (4 if version >= 9 else 0) + 8 + (4 if version >= 12 else 0) + (8 if version >= 5 else 0) + 4


def fetch_topics(frame: bytes | memoryview, header: protocol.RequestHeader) -> list[str]:
    """Topic names of a Fetch request v4–12 (forgotten topics left out: forgetting needs no right)."""
    version = header.api_version
    if not 4 <= version <= FETCH_MAX:
        raise InvalidRequestError(f"Fetch v{version} is not read by the gateway")
    r = _Reader(frame, protocol.body_offset(frame, header) + _fetch_head(version), version >= 12)
    size = _fetch_partition_size(version)
    try:
        names: list[str] = []
        for _ in range(max(r.count(), 0)):
            name = r.string()
            if name is None:
                raise InvalidRequestError("Fetch topic without a name")
            names.append(name)
            for _ in range(max(r.count(), 0)):
                r.skip(size)
                r.skip_tags()
            r.skip_tags()
    except struct.error as e:
        raise InvalidRequestError("Fetch request truncated") from e
    return names


def sessionless_fetch(frame: bytes, header: protocol.RequestHeader) -> bytes:
    """The Fetch request (v7+) with a new session's epoch 0 turned into -1: a full fetch that creates no session
    (KIP-227), so every request names all its partitions and each one is authorized every time, as the broker
    re-authorizes a session's partitions on each fetch."""
    if header.api_key != ApiKey.Fetch or header.api_version < 7:
        return frame
    pos = protocol.body_offset(frame, header) + _fetch_head(header.api_version) - 8
    session_id, epoch = struct.unpack_from(">ii", frame, pos)
    if session_id != 0 or epoch != 0:
        return frame
    out = bytearray(frame)
    _I32.pack_into(out, pos + 4, -1)
    return bytes(out)
