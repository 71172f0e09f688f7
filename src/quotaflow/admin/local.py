"""The control-plane API over a quota store: describe, alter and resolve client quotas (KIP-546).

* :meth:`Admin.describe` selects entities with a :class:`~quotaflow.core.filters.QuotaFilter` (KRaft's
  ``ClientQuotasImage.describe``).
* :meth:`Admin.alter` applies alterations with the exact per-entity validation and duplicate rules of KRaft's
  ``ClientQuotaControlManager``; every entity is all-or-nothing and the whole call is one store transaction.
* :meth:`Admin.resolve` answers the question KIP-546 proposed and Kafka never shipped: for a (user, client-id) pair,
  which quota applies for each key, who supplied it (KIP-55's precedence level 1-8), what it overrides, and the
  quota-id (``ClientQuotaManager``'s metric tags) that decides who shares the bucket. :class:`QuotaIndex` does the
  same for many pairs over one snapshot.

Anything that offers ``describe`` / ``alter`` / ``resolve`` / ``resolve_ip`` is an :class:`AdminBackend`; the CLIs
talk to that protocol, so a store-backed :class:`Admin` and a wire client are interchangeable.
"""

from __future__ import annotations

import ipaddress
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeAlias

from quotaflow.core.cidr import RangeIndex, is_cidr, parse_cidr
from quotaflow.core.entities import DEFAULT, Name, Part, QuotaEntity
from quotaflow.core.errors import SUCCESS, ApiError, InvalidRequestError, KafkaError
from quotaflow.core.filters import QuotaFilter
from quotaflow.core.keys import CLIENT_QUOTA_KEYS, CONNECTION_CREATION_RATE
from quotaflow.core.precedence import (
    PREFIX_LEVEL,
    PREFIX_TAG_USER,
    ClientIdPrefix,
    ClientKey,
    candidates,
    entity_bit,
    quota_limit,
    quota_tags,
)
from quotaflow.core.prefixes import PrefixIndex
from quotaflow.core.sanitize import sanitize
from quotaflow.core.validation import (
    HostResolver,
    RawEntity,
    config_keys_for_entity,
    java_map_order,
    render_raw_entity,
    resolves,
    validate_entity,
    validate_quota_key_value,
)
from quotaflow.store.base import Change, EntityChange, QuotaStore, Snapshot, Values

EntityKey: TypeAlias = frozenset[tuple[str | None, str | None]]


# -- alter --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuotaOp:
    """One ``OpData``: set ``key`` to ``value``, or remove it when ``value`` is None."""

    key: str | None
    value: float | None = None

    @property
    def remove(self) -> bool:
        return self.value is None


@dataclass(frozen=True, slots=True)
class Alteration:
    """One ``EntryData``: an entity (type -> name, None = default) and its ops, in request order."""

    entity: RawEntity
    ops: tuple[QuotaOp, ...]

    @classmethod
    def of(
        cls, entity: QuotaEntity | RawEntity, ops: Mapping[str, float | None] | Iterable[QuotaOp]
    ) -> Alteration:
        """Convenience constructor: ``Alteration.of(QuotaEntity(user="u"), {"producer_byte_rate": 1e6})``."""
        source: Mapping[str, str | None] | RawEntity = entity.to_wire() if isinstance(entity, QuotaEntity) else entity
        wire: dict[str | None, str | None] = dict(source.items())
        op_list = tuple(QuotaOp(k, v) for k, v in ops.items()) if isinstance(ops, Mapping) else tuple(ops)
        return cls(wire, op_list)


@dataclass(frozen=True, slots=True)
class AlterResult:
    """The response entry for one distinct entity: success is code 0 with a null message."""

    entity: RawEntity
    error: ApiError

    @property
    def ok(self) -> bool:
        return self.error.is_success


def _entity_key(entity: RawEntity) -> EntityKey:
    return frozenset(entity.items())


# -- describe -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescribedEntity:
    entity: QuotaEntity
    values: Values


# -- resolve ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Contribution:
    """A configured entity that applies to the query, at its precedence level."""

    level: int
    entity: QuotaEntity
    value: float


@dataclass(frozen=True, slots=True)
class ResolvedQuota:
    """The quota one key resolves to. ``value`` None means unlimited (no configured entity supplies it)."""

    key: str
    value: float | None
    entity: QuotaEntity | None
    level: int | None
    overridden: tuple[Contribution, ...]
    quota_id: dict[str, str] | None  # the metric tags naming the shared bucket; None: the key is not tracked

    @property
    def unlimited(self) -> bool:
        return self.value is None


@dataclass(frozen=True, slots=True)
class Resolution:
    """Every quota key for one client (user, client-id) or one ip, as of store change ``seq``."""

    entity: QuotaEntity
    seq: int
    quotas: dict[str, ResolvedQuota] = field(default_factory=dict)


_CLIENT_KEYS: Final = tuple(sorted(CLIENT_QUOTA_KEYS))
PACE_STEP: Final = 256  # entities matched between two calls of a describe's pace
_NOT_TRACKED: Final = {k: ResolvedQuota(k, None, None, None, (), None) for k in _CLIENT_KEYS}
# quotaLimit(tags) only consults these levels for each shape of the tag pair (``ClientQuotaManager.quotaLimit``)
_LEVELS_FOR_TAGS: dict[tuple[bool, bool], frozenset[int]] = {
    (True, True): frozenset({1, 2, 4, 5}),
    (True, False): frozenset({3, 6}),
    (False, True): frozenset({7, 8}),
    (False, False): frozenset(),
}
IP_LEVEL: Final = 1
IP_DEFAULT_LEVEL: Final = 2
IP_RANGE_LEVEL: Final = 3
"""An ip's own entity (1) beats the longest CIDR range holding it (3), which beats the default ip (2): the range
level is numbered after Kafka's two so theirs do not move."""


class QuotaIndex:
    """Per-key override maps and ``quotaTypesEnabled`` masks; resolves are lookups.

    Built from a snapshot, then kept current change by change (:meth:`apply`): every store change touches the one
    entry it names (and its key's bit count), so an index over 100,000 entities costs nothing per change and
    nothing per resolve beyond the lookups. Built from a snapshot or brought to the same state by that snapshot's
    changes, the answers are the same.

    Overrides are keyed by the *sanitized* user, as Kafka's quota managers key them. The mask for a key follows
    Kafka 4.1's reference counting: a bit is set iff some stored entity of that shape holds that key (a count per
    bit). Two stored ips naming one address (``::1`` and ``::0001``), or two spellings of one range, are one entry:
    the one with the greatest entity path supplies it, as the last of them in a path-ordered snapshot did.
    """

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        self.seq = 0
        self.touched = 0
        """Index entries written or removed so far (the work :meth:`apply` does: one per change)."""
        self._overrides: dict[str, dict[ClientKey, tuple[QuotaEntity, float]]] = {k: {} for k in CLIENT_QUOTA_KEYS}
        self._masks: dict[str, int] = dict.fromkeys(CLIENT_QUOTA_KEYS, 0)
        self._bit_counts: dict[str, dict[int, int]] = {k: {} for k in CLIENT_QUOTA_KEYS}
        self._prefixes: dict[str, PrefixIndex] = {k: PrefixIndex() for k in CLIENT_QUOTA_KEYS}
        self._ips: dict[Name, tuple[float, QuotaEntity]] = {}
        self._ip_ranges: RangeIndex[tuple[float, QuotaEntity]] = RangeIndex()
        # the stored entities behind each address / range (aliases: usually one)
        self._ip_entities: dict[Name | tuple[str, str], dict[QuotaEntity, float]] = {}
        self._user_connections: dict[Name, tuple[float, QuotaEntity]] = {}  # raw user -> connection_creation_rate
        if snapshot is not None:
            for entity, values in snapshot.entities.items():
                for key, value in values.items():
                    self._set(entity, key, value)
            self.seq = snapshot.seq

    def apply(self, changes: Iterable[Change]) -> None:
        """Apply store changes (``changes_since(self.seq)``) in order; those at or before :attr:`seq` are skipped.
        Several changes may share one seq (a ``kafka://`` record: one entity's keys, or a whole promotion), so the
        bound is the seq this call started from, not the last change applied."""
        start = self.seq
        for change in changes:
            if change.seq <= start:
                continue
            if change.value is None:
                self._remove(change.entity, change.key)
            else:
                self._set(change.entity, change.key, change.value)
            self.seq = change.seq

    def catch_up(self, store: QuotaStore) -> None:
        """Apply what the store's change log holds past :attr:`seq` (only those records are read)."""
        self.apply(store.changes_since(self.seq))

    def _set(self, entity: QuotaEntity, key: str, value: float) -> None:
        self.touched += 1
        if entity.ip is not None:
            if key == CONNECTION_CREATION_RATE:
                self._set_ip(entity, value)
            return
        ckey = _client_key(entity)
        if key == CONNECTION_CREATION_RATE and entity.user is not None and ckey[1] is None:
            self._user_connections[entity.user] = (value, entity)
        overrides = self._overrides.get(key)
        if overrides is None:
            return
        if ckey not in overrides:
            bit = entity_bit(*ckey)
            counts = self._bit_counts[key]
            counts[bit] = counts.get(bit, 0) + 1
            self._masks[key] |= bit
            if isinstance(ckey[1], ClientIdPrefix):
                self._prefixes[key].add(ckey[1].prefix)
        overrides[ckey] = (entity, value)

    def _remove(self, entity: QuotaEntity, key: str) -> None:
        self.touched += 1
        if entity.ip is not None:
            if key == CONNECTION_CREATION_RATE:
                self._remove_ip(entity)
            return
        ckey = _client_key(entity)
        if key == CONNECTION_CREATION_RATE and entity.user is not None and ckey[1] is None:
            self._user_connections.pop(entity.user, None)
        overrides = self._overrides.get(key)
        if overrides is None or overrides.pop(ckey, None) is None:
            return
        bit = entity_bit(*ckey)
        counts = self._bit_counts[key]
        counts[bit] -= 1
        if not counts[bit]:
            del counts[bit]
            self._masks[key] &= ~bit
        if isinstance(ckey[1], ClientIdPrefix):
            self._prefixes[key].discard(ckey[1].prefix)

    def _ip_slot(self, entity: QuotaEntity) -> tuple[Name | tuple[str, str], str | None]:
        """Where an ip entity's rate lives: its canonical address (or ``("range", canonical)``), and the range
        as stored (None: an address or the default)."""
        ip = entity.ip
        if isinstance(ip, str) and is_cidr(ip):
            return ("range", parse_cidr(ip).with_prefixlen), ip
        assert ip is not None
        return _ip_key(ip), None

    def _set_ip(self, entity: QuotaEntity, value: float) -> None:
        slot, cidr = self._ip_slot(entity)
        self._ip_entities.setdefault(slot, {})[entity] = value
        self._place_ip(slot, cidr)

    def _remove_ip(self, entity: QuotaEntity) -> None:
        slot, cidr = self._ip_slot(entity)
        group = self._ip_entities.get(slot)
        if group is None or group.pop(entity, None) is None:
            return
        if not group:
            del self._ip_entities[slot]
        self._place_ip(slot, cidr)

    def _place_ip(self, slot: Name | tuple[str, str], cidr: str | None) -> None:
        group = self._ip_entities.get(slot)
        found = None
        if group:
            winner = max(group, key=lambda e: e.path) if len(group) > 1 else next(iter(group))
            found = (group[winner], winner)
        if cidr is not None:
            if found is None:
                self._ip_ranges.remove(cidr)
            else:
                self._ip_ranges.set(cidr, found)
        else:
            assert not isinstance(slot, tuple)
            if found is None:
                self._ips.pop(slot, None)
            else:
                self._ips[slot] = found

    def mask(self, key: str) -> int:
        """``quotaTypesEnabled`` of the quota manager that enforces ``key``."""
        return self._masks[key]

    def quota_for_tags(self, key: str, tag_user: str, tag_client_id: str) -> tuple[QuotaEntity, float] | None:
        """``quotaLimit(tags)`` for a metric series: the entity and value that quota-id is held to, None when
        unlimited. ``tag_user`` is sanitized, as the metrics carry it."""
        return quota_limit(self._overrides[key], tag_user, tag_client_id)

    def resolve(self, user: str, client_id: str) -> Resolution:
        """For a connection with principal ``user`` (raw) and ``client_id``: the effective quota of every key."""
        san = sanitize(user)
        out = Resolution(QuotaEntity(user=user, client_id=client_id), self.seq)
        for key in _CLIENT_KEYS:
            overrides, mask, prefixes = self._overrides[key], self._masks[key], self._prefixes[key]
            if not overrides:  # nothing stored for this key: Kafka's manager records nothing, no limit
                out.quotas[key] = _NOT_TRACKED[key]
                continue
            levels = candidates(san, client_id, prefixes)
            matches = [Contribution(lvl, *overrides[ck]) for lvl, ck in levels if ck in overrides]
            tag_user, tag_client = quota_tags(overrides, mask, san, client_id, prefixes) if mask else ("", client_id)
            # what Kafka enforces is quotaLimit(tags); for non-empty names it is the most specific match
            allowed = (frozenset({PREFIX_LEVEL}) if tag_user == PREFIX_TAG_USER
                       else _LEVELS_FOR_TAGS[(bool(tag_user), bool(tag_client))])
            winner = next((c for c in matches if c.level in allowed), None)
            out.quotas[key] = ResolvedQuota(
                key=key,
                value=None if winner is None else winner.value,
                entity=None if winner is None else winner.entity,
                level=None if winner is None else winner.level,
                overridden=tuple(c for c in matches if c is not winner),
                quota_id=None if mask == 0 else {"user": tag_user, "client-id": tag_client},
            )
        if self._user_connections:  # a principal's connection creation rate (beyond Kafka's model)
            out.quotas[CONNECTION_CREATION_RATE] = self._resolve_user_connections(user)
        return out

    def _resolve_user_connections(self, user: str) -> ResolvedQuota:
        matches = [Contribution(level, found[1], found[0])
                   for level, found in ((3, self._user_connections.get(user)), (6, self._user_connections.get(DEFAULT)))
                   if found is not None]  # fmt: skip
        return _resolved(CONNECTION_CREATION_RATE, matches, {"user": user})

    def resolve_ip(self, ip: str) -> Resolution:
        """KIP-612: the ip's own entity (level 1), else the longest CIDR range holding it (level 3, every range
        holding it listed as overridden, longest first), else the default ip (level 2), else unlimited. A range is
        not an address: resolve one of its addresses."""
        if is_cidr(ip):
            first = ip.split("/", 1)[0]
            raise InvalidRequestError(f"{ip} is a CIDR range: resolve an address, e.g. {first}")
        own = self._ips.get(_ip_key(ip))
        ranges = [(IP_RANGE_LEVEL, found) for _cidr, found in self._ip_ranges.matches(ip)]
        found_at = [(IP_LEVEL, own), *ranges, (IP_DEFAULT_LEVEL, self._ips.get(DEFAULT))]
        matches = [Contribution(level, found[1], found[0]) for level, found in found_at if found is not None]
        resolved = _resolved(CONNECTION_CREATION_RATE, matches, {"ip": ip})
        return Resolution(QuotaEntity(ip=ip), self.seq, {CONNECTION_CREATION_RATE: resolved})


def _resolved(key: str, matches: list[Contribution], quota_id: dict[str, str]) -> ResolvedQuota:
    """The first match wins; the rest are what it overrides."""
    winner = matches[0] if matches else None
    return ResolvedQuota(
        key=key,
        value=None if winner is None else winner.value,
        entity=None if winner is None else winner.entity,
        level=None if winner is None else winner.level,
        overridden=tuple(matches[1:]),
        quota_id=quota_id,
    )


def _client_key(entity: QuotaEntity) -> ClientKey:
    """A client entity's key in the override maps: (sanitized user, client-id), or a prefix's."""
    if isinstance(entity.client_id_prefix, str):
        return (None, ClientIdPrefix(entity.client_id_prefix))
    user: Part = sanitize(entity.user) if isinstance(entity.user, str) else entity.user
    return (user, entity.client_id)


def _ip_key(ip: Name) -> Name:
    """Compare ips as addresses when they parse (``::0001`` is ``::1``), else as given."""
    if ip is DEFAULT or not isinstance(ip, str):
        return ip
    try:
        return str(ipaddress.ip_address(ip))
    except ValueError:
        return ip


# -- the API ------------------------------------------------------------------------------------------------------


class AdminBackend(Protocol):
    """What the CLIs need; implemented over a store by :class:`Admin` and over the wire by a client."""

    def describe(self, quota_filter: QuotaFilter) -> list[DescribedEntity]: ...

    def alter(self, alterations: Sequence[Alteration], validate_only: bool = False) -> list[AlterResult]: ...

    def resolve(self, user: str, client_id: str) -> Resolution: ...

    def resolve_ip(self, ip: str) -> Resolution: ...

    def close(self) -> None: ...


class Admin:
    """:class:`AdminBackend` over a :class:`~quotaflow.store.base.QuotaStore`."""

    def __init__(self, store: QuotaStore, *, resolver: HostResolver = resolves) -> None:
        self.store = store
        self._resolver = resolver
        self._live: QuotaIndex | None = None  # resolve's index, built once, then kept current from the change log
        self._live_lock = threading.Lock()

    def describe(self, quota_filter: QuotaFilter, pace: Callable[[], None] | None = None) -> list[DescribedEntity]:
        """Entities matching the filter with all their values, in snapshot order (entity path for SQLite).

        Raises the whole-request error (``InvalidRequestError`` / ``UnsupportedVersionError``) for a bad filter.
        A strict filter of exact / default components names one entity, which is read directly. ``pace`` (a
        gateway's ``collector.Pace``) is called after every ``PACE_STEP`` entities matched.
        """
        quota_filter.validate()
        single = quota_filter.exact_entity()
        if single is not None:
            values = self.store.get(single)
            return [DescribedEntity(single, values)] if values else []
        snapshot = self.store.snapshot()  # its dicts are this call's own (QuotaStore.snapshot): no second copy
        if pace is None:
            return [DescribedEntity(e, v) for e, v in snapshot.entities.items() if quota_filter.matches(e)]
        found: list[DescribedEntity] = []
        items = iter(snapshot.entities.items())
        while step := list(itertools.islice(items, PACE_STEP)):
            found += [DescribedEntity(e, v) for e, v in step if quota_filter.matches(e)]
            pace()
        return found

    def plan(self, alterations: Sequence[Alteration]) -> tuple[list[AlterResult], list[EntityChange]]:
        """Validate as ``ClientQuotaControlManager.alterClientQuotas``: the per-entity results and the changes
        to apply. A duplicate key, or an entity seen before in the request, ends as "Ignoring duplicate entity";
        for a duplicate entity the first occurrence's changes still apply."""
        results: dict[EntityKey, AlterResult] = {}
        changes: list[EntityChange] = []
        for alteration in alterations:
            ekey = _entity_key(alteration.entity)
            ops: dict[str | None, float | None] = {}
            for op in alteration.ops:
                if op.key in ops:
                    message = (
                        f"Duplicate quota key {op.key} not updating quota for this entity "
                        f"{render_raw_entity(alteration.entity)}"
                    )
                    results[ekey] = AlterResult(alteration.entity, ApiError(InvalidRequestError.errno, message))
                else:
                    ops[op.key] = op.value
            if ekey in results:
                message = f"Ignoring duplicate entity {render_raw_entity(alteration.entity)}"
                results[ekey] = AlterResult(alteration.entity, ApiError(InvalidRequestError.errno, message))
                continue
            try:
                change = self._plan_entity(alteration.entity, ops)
            except KafkaError as e:
                results[ekey] = AlterResult(alteration.entity, e.to_api_error())
                continue
            results[ekey] = AlterResult(alteration.entity, SUCCESS)
            if change[1]:
                changes.append(change)
        return list(results.values()), changes

    def _plan_entity(self, entries: RawEntity, ops: Mapping[str | None, float | None]) -> EntityChange:
        validate_entity(entries)
        allowed = config_keys_for_entity(entries, self._resolver)
        entity = QuotaEntity.from_wire({k: v for k, v in entries.items() if k is not None})
        records: dict[str, float | None] = {}
        for key in java_map_order(ops):
            value = ops[key]
            if value is None:
                if key is not None:  # removals are not validated; removing an absent key is a no-op
                    records[key] = None
                continue
            validate_quota_key_value(allowed, key, value)
            assert key is not None
            records[key] = value
        return (entity, records)

    def alter(self, alterations: Sequence[Alteration], validate_only: bool = False) -> list[AlterResult]:
        """Validate and apply; one result per distinct entity, in order of first appearance.

        The store skips sets equal to the current value and removals of absent keys, so neither is logged.
        With ``validate_only`` the results are the same and nothing is written.
        """
        results, changes = self.plan(alterations)
        if changes and not validate_only:
            self.store.alter(changes)
        return results

    def index(self) -> QuotaIndex:
        """A resolver over the current snapshot, for resolving many clients at once (the caller's own: nothing
        changes it after it is returned)."""
        return QuotaIndex(self.store.snapshot())

    def resolve(self, user: str, client_id: str) -> Resolution:
        """As of the store's latest change: one index, built on the first resolve, then brought up to date from
        the change log (only the changes since the previous resolve are read)."""
        with self._live_lock:
            return self._current().resolve(user, client_id)

    def resolve_ip(self, ip: str) -> Resolution:
        with self._live_lock:
            return self._current().resolve_ip(ip)

    def follow(self, snapshot: Snapshot) -> None:
        """Seed resolve's index from a snapshot already read (a gateway's start; build it off the event loop)."""
        index = QuotaIndex(snapshot)
        with self._live_lock:
            self._live = index

    def apply_changes(self, changes: Sequence[Change]) -> None:
        """Changes a poll of the change log read (a gateway's): resolve's index takes them now, O(changes)."""
        with self._live_lock:
            if self._live is not None:
                self._live.apply(changes)

    def _current(self) -> QuotaIndex:
        if self._live is None:
            self._live = QuotaIndex(self.store.snapshot())
        self._live.catch_up(self.store)
        return self._live

    def close(self) -> None:
        self.store.close()

