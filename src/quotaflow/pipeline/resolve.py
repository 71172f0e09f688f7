"""Resolve events to quota-ids and limits once per distinct (user, client-id), with the core's precedence code.

A backtest's config is a store snapshot: for each client quota type (produce, fetch, request) the override map
keyed like Kafka's (sanitized user, raw client-id), and the ``quotaTypesEnabled`` mask that the entities holding
that type's key set. ``resolve_clients`` maps the few distinct (user, client_id) pairs of the events to the quota-id
(tags) and limit of every type; drivers join the result onto the rows (a broadcast join in Spark), so nothing is
resolved per row in Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pyarrow as pa

from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.keys import CONNECTION_CREATION_RATE, UNLIMITED
from quotaflow.core.precedence import ClientIdPrefix, ClientKey, entity_bit, prefix_index, quota_limit, quota_tags
from quotaflow.core.prefixes import PrefixIndex
from quotaflow.core.sanitize import sanitize
from quotaflow.engine.quota_type import NO_BYTE_TYPE, QuotaType
from quotaflow.store.base import EntityChange, Snapshot

QUOTA_TYPES: Final = ("produce", "fetch", "request")
TYPE_OF: Final = {"produce": QuotaType.PRODUCE, "fetch": QuotaType.FETCH, "request": QuotaType.REQUEST}
TYPE_CODE: Final = {"produce": 0, "fetch": 1, "request": 2}
NO_TYPE: Final = NO_BYTE_TYPE  # rows no byte-rate manager records (follower fetches, other APIs)


@dataclass(frozen=True, slots=True)
class TypeConfig:
    """One quota manager's view: override map keyed like Kafka's, its ``quotaTypesEnabled`` mask and the
    client-id prefixes among the overrides."""

    overrides: dict[ClientKey, float] = field(default_factory=dict)
    mask: int = 0
    prefixes: PrefixIndex = field(default_factory=PrefixIndex)


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    """The client and IP quotas a backtest applies (static for the whole run), and the principals excluded from
    client quotas (``quotaflow.quota.excluded.principals`` of the broker config, as the gateway reads it)."""

    types: dict[str, TypeConfig]
    ip_rates: dict[str | None, int]  # ip or CIDR range -> connection_creation_rate; None is the default ip entity
    excluded: frozenset[str] = frozenset()

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, excluded: frozenset[str] = frozenset()) -> QuotaConfig:
        types: dict[str, TypeConfig] = {}
        for name in QUOTA_TYPES:
            key = TYPE_OF[name].key
            overrides: dict[ClientKey, float] = {}
            mask = 0
            for entity, values in snapshot.entities.items():
                if entity.is_ip() or key not in values:
                    continue
                ckey = client_key(entity)
                overrides[ckey] = values[key]
                mask |= int(entity_bit(*ckey))
            types[name] = TypeConfig(overrides, mask, prefix_index(overrides))
        ip_rates: dict[str | None, int] = {}
        for entity, values in snapshot.entities.items():
            if entity.is_ip() and CONNECTION_CREATION_RATE in values:
                ip = None if entity.ip is DEFAULT else str(entity.ip)
                ip_rates[ip] = int(values[CONNECTION_CREATION_RATE])
        return cls(types, ip_rates, excluded)

    def with_changes(self, changes: Sequence[EntityChange]) -> QuotaConfig:
        """This config with ``changes`` applied as ``alter`` applies them to a store (a value sets a key, None
        removes it): the config :meth:`from_snapshot` gives of the store after that alter. The advisor's proposal
        config and a shadow set's config (the enforced quotas with the shadow's changes) are both made here. Keys
        a backtest does not apply (``controller_mutation_rate``) change nothing."""
        types = dict(self.types)
        for name in QUOTA_TYPES:
            key = TYPE_OF[name].key
            touched = [(entity, values[key]) for entity, values in changes if key in values and not entity.is_ip()]
            if not touched:
                continue
            overrides = dict(types[name].overrides)
            for entity, value in touched:
                if value is None:
                    overrides.pop(client_key(entity), None)
                else:
                    overrides[client_key(entity)] = float(value)
            mask = 0
            for ckey in overrides:  # the entities holding the key, as from_snapshot counts them
                mask |= int(entity_bit(*ckey))
            types[name] = TypeConfig(overrides, mask, prefix_index(overrides))
        ip_rates = dict(self.ip_rates)
        for entity, values in changes:
            if entity.is_ip() and CONNECTION_CREATION_RATE in values:
                ip = None if entity.ip is DEFAULT else str(entity.ip)
                rate = values[CONNECTION_CREATION_RATE]
                if rate is None:
                    ip_rates.pop(ip, None)
                else:
                    ip_rates[ip] = int(rate)
        return QuotaConfig(types, ip_rates, self.excluded)


def client_key(entity: QuotaEntity) -> ClientKey:
    """Kafka keys user overrides by the sanitized user name; client-ids stay raw; a prefix is its own kind."""
    if isinstance(entity.client_id_prefix, str):
        return (None, ClientIdPrefix(entity.client_id_prefix))
    user = entity.user
    return (sanitize(user) if isinstance(user, str) else user, entity.client_id)


def load_config(store: str | Path, excluded: frozenset[str] = frozenset()) -> QuotaConfig:
    """The quota config in a store (a snapshot); a missing file is an error (a backtest never creates a store)."""
    from quotaflow.store.factory import open_reader

    st = open_reader(store)
    try:
        return QuotaConfig.from_snapshot(st.snapshot(), excluded)
    finally:
        st.close()


RESOLUTION_SCHEMA: Final = pa.schema(
    [
        pa.field("user", pa.string()),
        pa.field("client_id", pa.string()),
        *(
            f
            for t in QUOTA_TYPES
            for f in (
                pa.field(f"{t}_tag_user", pa.string()),
                pa.field(f"{t}_tag_client_id", pa.string()),
                pa.field(f"{t}_limit", pa.float64()),  # null = unlimited (no matching quota)
                pa.field(f"{t}_enabled", pa.bool_()),  # quotaTypesEnabled != 0: the manager records at all
                pa.field(f"{t}_qid", pa.int64()),  # dense id of (tag_user, tag_client_id) within the type
            )
        ),
    ]
)


def resolve_clients(config: QuotaConfig, pairs: Iterable[tuple[str, str]]) -> pa.Table:
    """One row per distinct (raw user, client_id): every type's quota-id tags, limit, enabled flag and dense id."""
    distinct = sorted(set(pairs))
    cols: dict[str, list[object]] = {f.name: [] for f in RESOLUTION_SCHEMA}
    for user, client_id in distinct:
        cols["user"].append(user)
        cols["client_id"].append(client_id)
    su = [sanitize(u) for u, _ in distinct]
    excluded = [u in config.excluded for u, _ in distinct]  # record nothing: never throttled (exempt)
    for t in QUOTA_TYPES:
        tc = config.types[t]
        tags = [quota_tags(tc.overrides, tc.mask, s, c, tc.prefixes) for s, (_, c) in zip(su, distinct, strict=True)]
        ids = {tag: i for i, tag in enumerate(sorted(set(tags)))}
        for tag, skip in zip(tags, excluded, strict=True):
            cols[f"{t}_tag_user"].append(tag[0])
            cols[f"{t}_tag_client_id"].append(tag[1])
            cols[f"{t}_limit"].append(quota_limit(tc.overrides, *tag))
            cols[f"{t}_enabled"].append(tc.mask != 0 and not skip)
            cols[f"{t}_qid"].append(ids[tag])
    return pa.table(cols, schema=RESOLUTION_SCHEMA)


def components(res: pa.Table, *more: Sequence[int]) -> list[int]:
    """Per resolution row, the id of its connected component: pairs sharing any quota-id (of any type) belong
    together, so partitioning rows by (broker, component) keeps every quota-id of every type in one partition.
    Each of ``more`` is one more grouping of the rows (a group id per row: another config's quota-ids, an
    entity) whose groups are kept together too."""
    parent = list(range(res.num_rows))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    groupings = [res.column(f"{t}_qid").to_pylist() for t in QUOTA_TYPES] + [list(m) for m in more]
    for ids in groupings:
        first: dict[int, int] = {}
        for row, qid in enumerate(ids):
            other = first.setdefault(qid, row)
            a, b = find(row), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return [find(i) for i in range(res.num_rows)]


def kernel_bound(limit: float | None) -> float:
    """An unmatched quota-id still has Kafka's ``Long.MAX_VALUE`` quota (checked, never violated in practice)."""
    return UNLIMITED if limit is None else float(limit)
