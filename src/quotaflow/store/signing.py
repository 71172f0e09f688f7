"""Signed records for quotaflow's own topics (the ``kafka://`` store's topic, ``__quotaflow_usage``): HMAC-SHA256
under a fleet key, so that someone who can write to the topic but lacks the key cannot forge a quota, a credential
or a usage report.

The key file holds one key per line (blank lines and ``#`` comments ignored), at least 32 characters each, e.g.
from ``openssl rand -base64 32``. The first key signs; every key verifies, which is how a key is rotated: add the
new key as the second line everywhere, then move it first everywhere (writers sign with it, readers still accept
the old one), then remove the old line once every record signed with it has been superseded (``store copy`` into a
fresh topic re-signs everything with the destination's key).

A signature travels in record headers, so the record's key and value keep their format: ``quotaflow.signature``
(32 bytes of HMAC), ``quotaflow.timestamp`` (the writer's clock, ms, 8 bytes big-endian) and, for the store topic,
``quotaflow.offset`` (the offset the record was written for, 8 bytes big-endian). The MAC covers a version tag,
the topic, the key, the value (null and empty told apart: a tombstone is signed too), that timestamp and that
offset, so a record can be neither moved to another topic, re-dated, nor written again anywhere else in the log: an
offset is used once, so a copy of a record lands at another offset and every reader refuses it, at any age
(:mod:`quotaflow.store.records`). Records without an offset (the usage topic's reports, which are only ever fresh)
are bound to their time instead (:class:`ReplayGuard`).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from quotaflow.core.errors import StoreError

SIGNATURE_HEADER: Final = "quotaflow.signature"
TIMESTAMP_HEADER: Final = "quotaflow.timestamp"
OFFSET_HEADER: Final = "quotaflow.offset"
MIN_KEY_CHARS: Final = 32
REPLAY_WINDOW_MS: Final = 5 * 60_000  # how far a record's signed time may lie behind the newest one seen
_DOMAIN: Final = b"quotaflow-record-v1"
_DOMAIN_AT: Final = b"quotaflow-record-v2"  # bound to an offset as well
_TS: Final = struct.Struct(">q")
_NULL: Final = _TS.pack(-1)

Headers = Sequence[tuple[str, bytes | None]]


def _field(data: bytes | None) -> bytes:
    return _NULL if data is None else _TS.pack(len(data)) + data


def _message(topic: str, key: bytes | None, value: bytes | None, ts_ms: int, offset: int | None) -> bytes:
    parts = [_DOMAIN if offset is None else _DOMAIN_AT, _field(topic.encode()), _field(key), _field(value),
             _TS.pack(ts_ms)]
    if offset is not None:
        parts.append(_TS.pack(offset))
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class Verified:
    """A record's signature check: ``ts_ms`` (its signed timestamp) and ``offset`` (the offset it was signed for,
    None when it was signed without one) when good, else ``error``."""

    ts_ms: int | None
    error: str | None = None
    offset: int | None = None


class RecordSigner:
    """Signs with the first key, verifies with any (rotation). Stateless, thread-safe."""

    def __init__(self, keys: Sequence[bytes], source: str = "key list") -> None:
        if not keys:
            raise StoreError(f"signing keys {source}: no key")
        for key in keys:
            if len(key) < MIN_KEY_CHARS:
                raise StoreError(f"signing keys {source}: a key shorter than {MIN_KEY_CHARS} characters "
                                 f"(make one with `openssl rand -base64 32`)")
        self.keys = tuple(keys)
        self.source = source

    @classmethod
    def from_file(cls, path: str | Path) -> RecordSigner:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise StoreError(f"cannot read the signing key file {path}: {e}") from e
        keys = [line.strip().encode() for line in text.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
        return cls(keys, str(path))

    def sign(self, topic: str, key: bytes | None, value: bytes | None, ts_ms: int, offset: int | None = None
             ) -> list[tuple[str, bytes]]:
        """The headers that make the record verifiable; with ``offset``, valid only at that offset."""
        mac = hmac.new(self.keys[0], _message(topic, key, value, ts_ms, offset), hashlib.sha256).digest()
        headers = [(SIGNATURE_HEADER, mac), (TIMESTAMP_HEADER, _TS.pack(ts_ms))]
        if offset is not None:
            headers.append((OFFSET_HEADER, _TS.pack(offset)))
        return headers

    def verify(self, topic: str, key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]]
               ) -> Verified:
        found = dict(headers or ())
        signature, stamp = found.get(SIGNATURE_HEADER), found.get(TIMESTAMP_HEADER)
        if signature is None or stamp is None:
            return Verified(None, "unsigned record")
        if len(stamp) != _TS.size:
            return Verified(None, "malformed signature timestamp")
        at = found.get(OFFSET_HEADER)
        if at is not None and len(at) != _TS.size:
            return Verified(None, "malformed signature offset")
        ts_ms = int(_TS.unpack(stamp)[0])
        offset = None if at is None else int(_TS.unpack(at)[0])
        message = _message(topic, key, value, ts_ms, offset)
        # every key is tried, whichever matches, so the time taken does not tell which key (or none) matched
        good = [hmac.compare_digest(hmac.new(k, message, hashlib.sha256).digest(), signature) for k in self.keys]
        if not any(good):
            return Verified(None, "bad signature (not signed with a configured key)")
        return Verified(ts_ms, offset=offset)


class ReplayGuard:
    """For records signed without an offset (usage reports, fresh by nature; the store topic binds every record to
    its offset instead): refuses a validly signed record that is an old one written again: its signed time must
    not lie more than ``window_ms`` behind the newest signed time accepted so far.
    Writers stamp ``max(their clock, the newest time they have read)``, so the times only move forward along the log
    (concurrent writers differ by their clock skew, which the window absorbs) and one writer's fast clock cannot
    lock the others out. Deterministic over the log: every reader accepts the same records; compaction keeps the
    newest record of each key, which stays acceptable."""

    def __init__(self, window_ms: int = REPLAY_WINDOW_MS) -> None:
        self.window_ms = window_ms
        self.newest_ms = 0

    def admit(self, ts_ms: int) -> str | None:
        """None (and the record's time noted) when fresh enough, else why not."""
        if ts_ms < self.newest_ms - self.window_ms:
            return (f"replayed record: signed at {ts_ms} ms, {self.newest_ms - ts_ms} ms before the newest "
                    f"(more than {self.window_ms} ms)")
        self.newest_ms = max(self.newest_ms, ts_ms)
        return None

    def stamp(self, now_ms: int) -> int:
        """The time a writer signs with: after everything it has read (a logical clock riding on the wall
        clock), so one writer's records carry increasing times."""
        return max(now_ms, self.newest_ms + 1)
