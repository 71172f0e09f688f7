"""Live quota updates: apply the store's change log to running managers, incrementally, without a restart.

Pure dispatch (polling the store is the gateway's I/O): each client-quota key goes to its manager's
``update_quota`` (raw names; the manager sanitizes users), each ip ``connection_creation_rate`` to
``update_ip_connection_rate_quota`` (Kafka's ``.toInt`` of the double). Changes are duck-typed
(``quotaflow.store.base.Change`` fits) so the engine does not depend on the store layer.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.keys import CONNECTION_CREATION_RATE
from quotaflow.engine.client_quota import ClientQuotaManager, QuotaTypesTracking
from quotaflow.engine.metrics import MetricSample
from quotaflow.engine.quota_type import QuotaType
from quotaflow.engine.stats import DEFAULT_QUOTA_WINDOW_NUM, DEFAULT_QUOTA_WINDOW_SIZE_SECONDS


class QuotaChange(Protocol):
    """One applied key change (``store.base.Change``): value None = the key was removed."""

    @property
    def seq(self) -> int: ...

    @property
    def entity(self) -> QuotaEntity: ...

    @property
    def key(self) -> str: ...

    @property
    def value(self) -> float | None: ...


class IpConnectionRateTarget(Protocol):
    """What receives per-IP connection-rate quotas (``ConnectionQuotas``); ip None = the default."""

    def update_ip_connection_rate_quota(self, ip: str | None, rate: int | None) -> None: ...


@dataclass(frozen=True, slots=True)
class _Change:
    seq: int
    entity: QuotaEntity
    key: str
    value: float | None


@dataclass
class QuotaManagers:
    """Kafka's ``QuotaManagers``: one client-quota manager per type, built from the broker's window settings."""

    produce: ClientQuotaManager
    fetch: ClientQuotaManager
    request: ClientQuotaManager
    controller_mutation: ClientQuotaManager

    @classmethod
    def create(
        cls,
        samples: int = DEFAULT_QUOTA_WINDOW_NUM,
        window_seconds: int = DEFAULT_QUOTA_WINDOW_SIZE_SECONDS,
        controller_samples: int = DEFAULT_QUOTA_WINDOW_NUM,
        controller_window_seconds: int = DEFAULT_QUOTA_WINDOW_SIZE_SECONDS,
        quota_types_tracking: QuotaTypesTracking = "refcount",
    ) -> QuotaManagers:
        def make(t: QuotaType, n: int, w: int) -> ClientQuotaManager:
            return ClientQuotaManager(t, samples=n, window_seconds=w, quota_types_tracking=quota_types_tracking)

        return cls(
            make(QuotaType.PRODUCE, samples, window_seconds),
            make(QuotaType.FETCH, samples, window_seconds),
            make(QuotaType.REQUEST, samples, window_seconds),
            make(QuotaType.CONTROLLER_MUTATION, controller_samples, controller_window_seconds),
        )

    def for_type(self, quota_type: QuotaType) -> ClientQuotaManager:
        return {
            QuotaType.PRODUCE: self.produce,
            QuotaType.FETCH: self.fetch,
            QuotaType.REQUEST: self.request,
            QuotaType.CONTROLLER_MUTATION: self.controller_mutation,
        }[quota_type]

    def __iter__(self) -> Iterator[ClientQuotaManager]:
        return iter((self.produce, self.fetch, self.request, self.controller_mutation))

    def metric_samples(self, now_ms: int) -> Iterator[MetricSample]:
        return itertools.chain.from_iterable(m.metric_samples(now_ms) for m in self)

    def expire_sensors(self, now_ms: int) -> int:
        return sum(m.expire_sensors(now_ms) for m in self)


def java_double_to_int(value: float) -> int:
    """Scala ``Double.toInt``: truncate toward zero, saturate at the int range, NaN → 0."""
    if math.isnan(value):
        return 0
    if value >= 2147483647.0:
        return 2147483647
    if value <= -2147483648.0:
        return -2147483648
    return int(value)


def apply_change(change: QuotaChange, managers: QuotaManagers | Mapping[QuotaType, ClientQuotaManager],
                 connection_quotas: IpConnectionRateTarget | None = None) -> bool:
    """Apply one change; False when nothing here consumes it (unknown key, or no connection target)."""
    entity = change.entity
    if change.key == CONNECTION_CREATION_RATE and entity.user is not None and entity.client_id is None:
        # a principal's connection creation rate (beyond Kafka's model): for the connection quotas, if they take it
        update = getattr(connection_quotas, "update_principal_connection_rate_quota", None)
        if update is None:
            return False
        user = None if entity.user is DEFAULT else str(entity.user)
        update(user, None if change.value is None else java_double_to_int(change.value))
        return True
    if entity.ip is not None:
        if change.key != CONNECTION_CREATION_RATE or connection_quotas is None:
            return False
        ip = None if entity.ip is DEFAULT else str(entity.ip)
        rate = None if change.value is None else java_double_to_int(change.value)
        connection_quotas.update_ip_connection_rate_quota(ip, rate)
        return True
    quota_type = QuotaType.for_key(change.key)
    if quota_type is None:
        return False
    manager = managers.for_type(quota_type) if isinstance(managers, QuotaManagers) else managers.get(quota_type)
    if manager is None:
        return False
    prefix = entity.client_id_prefix
    if prefix is not None:
        if not isinstance(prefix, str):  # validation refuses a default prefix; nothing to apply
            return False
        manager.update_quota(None, None, change.value, client_id_prefix=prefix)
    else:
        manager.update_quota(entity.user, entity.client_id, change.value)
    return True


def apply_changes(changes: Iterable[QuotaChange], managers: QuotaManagers | Mapping[QuotaType, ClientQuotaManager],
                  connection_quotas: IpConnectionRateTarget | None = None) -> int | None:
    """Apply changes in order; returns the last sequence number seen (None if there were none), so the caller
    polls ``changes_since(that)`` next."""
    last: int | None = None
    for change in changes:
        apply_change(change, managers, connection_quotas)
        last = change.seq
    return last


def snapshot_changes(entities: Mapping[QuotaEntity, Mapping[str, float]], seq: int = 0) -> list[QuotaChange]:
    """A snapshot's entities as set-changes (to seed fresh managers, then poll from the snapshot's seq)."""
    return [_Change(seq, entity, key, value) for entity, values in entities.items() for key, value in values.items()]
