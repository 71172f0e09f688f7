"""Client quotas per upstream broker, as on Kafka: each broker enforces the full quota on its own traffic.

A client writing to three brokers through the gateway gets three times its quota, as it would on Kafka, and the
event log's ``broker`` column says which broker's managers decided, so the backtest replays each broker's decisions
on its own. One :class:`~quotaflow.gateway.data.enforcement.Enforcement` (one set of engine managers) per broker, made
when the broker's first connection comes, seeded with the quota configuration as it is now.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from quotaflow.core.entities import QuotaEntity
from quotaflow.engine.metrics import MetricSample
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.data.enforcement import Enforcement
from quotaflow.store.base import Change, Snapshot


class BrokerQuotas:
    """``for_broker(key)`` gives that broker's managers; configuration changes reach every broker's."""

    def __init__(self, config: GatewayConfig) -> None:
        self._config = config
        self._entities: dict[QuotaEntity, dict[str, float]] = {}
        self._seq = 0
        self.brokers: dict[str, Enforcement] = {}

    def load(self, snapshot: Snapshot) -> None:
        self._entities = {entity: dict(values) for entity, values in snapshot.entities.items()}
        self._seq = snapshot.seq
        for enforcement in self.brokers.values():
            enforcement.load(snapshot)

    def apply_changes(self, changes: Sequence[Change]) -> None:
        for change in changes:
            values = self._entities.setdefault(change.entity, {})
            if change.value is None:
                values.pop(change.key, None)
                if not values:
                    del self._entities[change.entity]
            else:
                values[change.key] = change.value
        if changes:
            self._seq = changes[-1].seq
        for enforcement in self.brokers.values():
            enforcement.apply_changes(changes)

    def for_broker(self, broker: str) -> Enforcement:
        enforcement = self.brokers.get(broker)
        if enforcement is None:
            enforcement = self.brokers[broker] = Enforcement(self._config)
            enforcement.load(Snapshot(self._seq, self._entities))
        return enforcement

    def tick(self, now_ms: int) -> None:
        for enforcement in self.brokers.values():
            enforcement.tick(now_ms)

    def metric_samples(self, now_ms: int) -> Iterator[MetricSample]:
        """Every broker's quota sensors, tagged with ``broker`` (the upstream node id)."""
        for broker, enforcement in self.brokers.items():
            for sample in enforcement.metric_samples(now_ms):
                yield MetricSample(sample.name, sample.group, (("broker", broker), *sample.tags), sample.value,
                                   sample.description)
