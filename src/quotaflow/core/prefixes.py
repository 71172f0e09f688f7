"""``client-id-prefix`` lookups: the longest configured prefix of a client-id, in time independent of how many
prefixes are configured.

Prefixes are grouped by length; a lookup slices the client-id once per *distinct* length (longest first) and probes
one hash set per length. Distinct lengths are few (bounded by the longest prefix, in practice a handful), so 10,000
prefixes cost the same as ten. Callers cache the answer per client-id (the quota managers cache whole quota-ids).
"""

from __future__ import annotations

from collections.abc import Iterable


class PrefixIndex:
    """A set of prefixes answering "the longest one that ``s`` starts with"."""

    __slots__ = ("_by_length", "_lengths")

    def __init__(self, prefixes: Iterable[str] = ()) -> None:
        self._by_length: dict[int, set[str]] = {}
        self._lengths: list[int] = []  # distinct lengths, longest first
        for p in prefixes:
            self.add(p)

    def add(self, prefix: str) -> None:
        if not prefix:
            raise ValueError("a client-id prefix cannot be empty")
        group = self._by_length.get(len(prefix))
        if group is None:
            group = self._by_length[len(prefix)] = set()
            self._lengths = sorted(self._by_length, reverse=True)
        group.add(prefix)

    def discard(self, prefix: str) -> None:
        group = self._by_length.get(len(prefix))
        if group is None:
            return
        group.discard(prefix)
        if not group:
            del self._by_length[len(prefix)]
            self._lengths = sorted(self._by_length, reverse=True)

    def longest(self, s: str) -> str | None:
        """The longest prefix of ``s`` in the set, or None."""
        n = len(s)
        for length in self._lengths:
            if length <= n:
                head = s[:length]
                if head in self._by_length[length]:
                    return head
        return None

    def matches(self, s: str) -> list[str]:
        """Every prefix of ``s`` in the set, longest first (resolve shows what the winner overrides)."""
        n = len(s)
        return [s[:k] for k in self._lengths if k <= n and s[:k] in self._by_length[k]]

    def __len__(self) -> int:
        return sum(len(g) for g in self._by_length.values())

    def __bool__(self) -> bool:
        return bool(self._lengths)

    def __contains__(self, prefix: object) -> bool:
        return isinstance(prefix, str) and prefix in self._by_length.get(len(prefix), ())
