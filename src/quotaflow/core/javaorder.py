"""Java ``HashMap`` iteration order for string keys.

Kafka validates alter ops and renders entities by iterating ``HashMap``s, so the *first* error reported and the
text of ``ClientQuotaEntity(entries={...})`` follow that order. Reproducing it keeps messages identical.
"""

from __future__ import annotations

from collections.abc import Iterable


def java_string_hash(s: str) -> int:
    """``String.hashCode()`` as a signed 32-bit int (over UTF-16 code units)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def hashmap_order(keys: Iterable[str]) -> list[str]:
    """Keys in the order a ``HashMap`` (default capacity 16, load factor 0.75) built by inserting them iterates."""
    unique = list(dict.fromkeys(keys))
    capacity = 16
    while len(unique) > capacity * 3 // 4:
        capacity *= 2

    def bucket(k: str) -> int:
        h = java_string_hash(k) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    # sorted() is stable, so keys sharing a bucket keep insertion order, as HashMap's chains do.
    return sorted(unique, key=bucket)
