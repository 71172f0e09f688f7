"""The pieces shared by the responses the gateway encodes straight to bytes (``quota_entries``: DescribeClientQuotas;
``acl_entries``: DescribeAcls), the largest it makes itself: the primitives of one version (flexible or not), the
encodings of repeated strings cached, and the response's head and framing. The bodies are joined a chunk of
:data:`JOIN_ENTRIES` entries at a time: one join of every piece is one C call that holds the GIL for tens of ms at
100,000 entries, and so is freeing that list of pieces at once. The encoders call a ``pace`` between entries (the
gateway's ``collector.Pace``: yield the GIL and the CPU after each half millisecond of work)."""

from __future__ import annotations

import struct
from typing import Final

INT16: Final = struct.Struct(">h")
INT32: Final = struct.Struct(">i")
NO_TAGS: Final = b"\x00"
JOIN_ENTRIES: Final = 1000  # entries encoded and joined per chunk of a response
_FIXED: Final = struct.Struct(">ih")  # throttle_time_ms, error_code
_CACHED: Final = 65_536  # strings whose encodings are kept (names, principals, keys), then the cache starts over


def unpaced() -> None:
    """The pace of an encode that shares the GIL with no one (the default where a pace is optional: see
    ``gateway.collector.Pace``, which the gateway's describes pass)."""


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class Primitives:
    """One version's strings and arrays (compact with tagged fields when ``flexible``), with the encodings of
    repeated strings cached."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.null = b"\x00" if flexible else INT16.pack(-1)
        self._strings: dict[str, bytes] = {}

    def string(self, s: str) -> bytes:
        b = s.encode()
        return (uvarint(len(b) + 1) if self.flexible else INT16.pack(len(b))) + b

    def cached(self, s: str) -> bytes:
        out = self._strings.get(s)
        if out is None:
            if len(self._strings) >= _CACHED:
                self._strings.clear()
            out = self._strings[s] = self.string(s)
        return out

    def array(self, n: int | None) -> bytes:
        if n is None:
            return b"\x00" if self.flexible else INT32.pack(-1)
        return uvarint(n + 1) if self.flexible else INT32.pack(n)

    def head(self, correlation_id: int, throttle_ms: int, error_code: int, error_message: str | None) -> bytes:
        """The response header, then the body's throttle_time_ms, error_code and error_message."""
        parts = [INT32.pack(correlation_id)]
        if self.flexible:
            parts.append(NO_TAGS)  # response header v1
        parts.append(_FIXED.pack(throttle_ms, error_code))
        parts.append(self.null if error_message is None else self.string(error_message))
        return b"".join(parts)

    def framed(self, chunks: list[bytes]) -> bytes:
        """The response whose head and body are ``chunks``: the body's tagged fields closed, the size prefixed."""
        if self.flexible:
            chunks.append(NO_TAGS)
        return b"".join([INT32.pack(sum(map(len, chunks))), *chunks])
