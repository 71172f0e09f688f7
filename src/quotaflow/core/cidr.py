"""CIDR ``ip`` entities (``10.1.0.0/16``, ``2001:db8::/32``) for ``connection_creation_rate``: parsing and the
longest-match lookup.

A range is kept under its canonical text (``ipaddress.ip_network(...).with_prefixlen``) in a dict per (IP version,
prefix length) keyed by the network's integer; a lookup masks the address once per configured prefix length,
longest first, so it costs at most 33 (IPv4) or 129 (IPv6) dict probes whatever the number of ranges.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

V = TypeVar("V")
_BITS = {4: 32, 6: 128}
_V4_MAPPED = 0xFFFF


def is_cidr(name: str) -> bool:
    """Whether an ip entity name is written as a range (it has a ``/``)."""
    return "/" in name


def parse_cidr(name: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """A range with its host bits clear; raises ValueError with the reason otherwise (``10.1.0.5/16``)."""
    return ipaddress.ip_network(name.strip(), strict=True)


def cidr_error(name: str) -> str | None:
    """Why ``name`` is not a valid range, or None when it is."""
    try:
        parse_cidr(name)
    except ValueError as e:
        return str(e)
    return None


def canonical_cidr(name: str) -> str:
    return parse_cidr(name).with_prefixlen


def _parse(address: str) -> tuple[int, int] | None:
    """(IP version, the address as an integer); None for anything else. ``inet_pton`` is several times faster
    than ``ipaddress`` on the per-connection path; a scoped IPv6 literal (``fe80::1%eth0``) goes the slow way. An
    IPv4-mapped IPv6 address counts as its IPv4 address."""
    try:
        return 4, int.from_bytes(socket.inet_pton(socket.AF_INET, address), "big")
    except OSError:
        pass
    try:
        n = int.from_bytes(socket.inet_pton(socket.AF_INET6, address), "big")
    except OSError:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return None
        n = int(ip)
        if ip.version == 4:
            return 4, n
    if n >> 32 == _V4_MAPPED:  # ::ffff:a.b.c.d is the IPv4 address a.b.c.d (Java's InetAddress reads it so)
        return 4, n & 0xFFFFFFFF
    return 6, n


class RangeIndex(Generic[V]):
    """Values keyed by CIDR range; :meth:`longest` finds the most specific range holding an address."""

    __slots__ = ("_lengths", "_tables")

    def __init__(self) -> None:
        self._tables: dict[tuple[int, int], dict[int, tuple[str, V]]] = {}
        self._lengths: dict[int, list[int]] = {4: [], 6: []}  # per version, prefix lengths longest first

    def set(self, cidr: str, value: V) -> None:
        net = parse_cidr(cidr)
        key = (net.version, net.prefixlen)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = {}
            self._lengths[net.version] = sorted((p for v, p in self._tables if v == net.version), reverse=True)
        table[int(net.network_address)] = (net.with_prefixlen, value)

    def remove(self, cidr: str) -> None:
        net = parse_cidr(cidr)
        key = (net.version, net.prefixlen)
        table = self._tables.get(key)
        if table is None:
            return
        table.pop(int(net.network_address), None)
        if not table:
            del self._tables[key]
            self._lengths[net.version] = [p for p in self._lengths[net.version] if p != net.prefixlen]

    def longest(self, address: str) -> tuple[str, V] | None:
        """(canonical range, value) of the longest range holding ``address``; None for none or a non-address."""
        parsed = _parse(address)
        if parsed is None:
            return None
        version, n = parsed
        bits, tables = _BITS[version], self._tables
        for plen in self._lengths[version]:
            found = tables[(version, plen)].get((n >> (bits - plen)) << (bits - plen))
            if found is not None:
                return found
        return None

    def matches(self, address: str) -> list[tuple[str, V]]:
        """Every range holding ``address``, longest first (resolve shows what the winner overrides)."""
        parsed = _parse(address)
        if parsed is None:
            return []
        version, n = parsed
        bits, out = _BITS[version], []
        for plen in self._lengths[version]:
            found = self._tables[(version, plen)].get((n >> (bits - plen)) << (bits - plen))
            if found is not None:
                out.append(found)
        return out

    def items(self) -> Iterator[tuple[str, V]]:
        for table in self._tables.values():
            yield from table.values()

    def __len__(self) -> int:
        return sum(len(t) for t in self._tables.values())

    def rate_for(self, address: str, exact: Mapping[str, V], default: V) -> V:
        """An address's value: its own entry, else the longest range holding it, else ``default``."""
        own = exact.get(address)
        if own is not None:
            return own
        found = self.longest(address) if self._tables else None
        return default if found is None else found[1]

    def __bool__(self) -> bool:
        return bool(self._tables)
