"""Client quotas per upstream broker, as on Kafka: each broker enforces the full quota on its own traffic.

A client writing to three brokers through the gateway gets three times its quota, as it would on Kafka, and the
event log's ``broker`` column says which broker's managers decided, so the backtest replays each broker's decisions
on its own. One :class:`~quotaflow.gateway.data.enforcement.Enforcement` (one set of engine managers) per broker, made
when the broker's first connection comes, seeded with the quota configuration as it is now.

A running shadow set (``gateway.data.shadow``) gives each broker's managers a twin under the shadow's quotas
(:meth:`BrokerQuotas.start_shadow`); enforced changes reach the twins too, except on the keys the shadow sets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from quotaflow.core.entities import QuotaEntity
from quotaflow.engine.metrics import MetricSample
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.data.enforcement import Enforcement
from quotaflow.gateway.data.shadow import NEVER, Overrides, overrides_of, passed_on, shadow_entities
from quotaflow.store.base import Change, ShadowSet, Snapshot


class BrokerQuotas:
    """``for_broker(key)`` gives that broker's managers; configuration changes reach every broker's."""

    def __init__(self, config: GatewayConfig) -> None:
        self._config = config
        self._entities: dict[QuotaEntity, dict[str, float]] = {}
        self._seq = 0
        self.brokers: dict[str, Enforcement] = {}
        self.shadow: ShadowSet | None = None
        self._overrides: Overrides = {}
        self.switch_ms = NEVER
        self.switch: Callable[[int], None] | None = None  # set by the gateway (gateway.data.promotion)

    def load(self, snapshot: Snapshot) -> None:
        self._entities = {entity: dict(values) for entity, values in snapshot.entities.items()}
        self._seq = snapshot.seq
        for enforcement in self.brokers.values():
            enforcement.load(snapshot)
        if self.shadow is not None:
            self.start_shadow(self.shadow)

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
        shadowed = passed_on(changes, self._overrides) if self.shadow is not None else ()
        for enforcement in self.brokers.values():
            enforcement.apply_changes(changes)
            if enforcement.shadow is not None and shadowed:
                enforcement.shadow.apply_changes(shadowed)

    @property
    def entities(self) -> dict[QuotaEntity, dict[str, float]]:
        """The enforced quotas as this gateway applies them now."""
        return self._entities

    def for_broker(self, broker: str) -> Enforcement:
        enforcement = self.brokers.get(broker)
        if enforcement is None:
            enforcement = self.brokers[broker] = Enforcement(self._config)
            enforcement.load(Snapshot(self._seq, self._entities))
            enforcement.switch_ms = self.switch_ms
            if self.switch is not None:
                enforcement.switch = self.switch
            if self.shadow is not None:
                enforcement.set_shadow(self._shadow_managers(self.shadow))
        return enforcement

    # -- shadow quota set (issue 36) --------------------------------------------------------------------------

    @property
    def overrides(self) -> Overrides:
        """The running shadow's changes per entity and key ({} while none runs)."""
        return self._overrides

    def shadow_entities(self) -> dict[QuotaEntity, dict[str, float]]:
        """The quotas evaluated in shadow now: the enforced ones with the running shadow's changes applied."""
        return shadow_entities(self._entities, self._overrides)

    def _shadow_managers(self, shadow: ShadowSet) -> Enforcement:
        managers = Enforcement(self._config, shadow_id=shadow.id)
        managers.load(Snapshot(self._seq, self.shadow_entities()))
        return managers

    def start_shadow(self, shadow: ShadowSet) -> None:
        """Evaluate ``shadow`` beside the enforced quotas on every broker (fresh managers: a new set starts from
        empty sensors, as a gateway starting would)."""
        self.shadow = shadow
        self._overrides = overrides_of(shadow.changes)
        for enforcement in self.brokers.values():
            enforcement.set_shadow(self._shadow_managers(shadow))

    def stop_shadow(self) -> None:
        self.shadow = None
        self._overrides = {}
        for enforcement in self.brokers.values():
            enforcement.set_shadow(None)

    def set_switch(self, switch_ms: int, switch: Callable[[int], None]) -> None:
        """The first decision at or after ``switch_ms`` calls ``switch`` first (``Enforcement.switch_ms``)."""
        self.switch_ms = switch_ms
        self.switch = switch
        for enforcement in self.brokers.values():
            enforcement.switch_ms = switch_ms
            enforcement.switch = switch

    def tick(self, now_ms: int) -> None:
        for enforcement in self.brokers.values():
            enforcement.tick(now_ms)

    def metric_samples(self, now_ms: int) -> Iterator[MetricSample]:
        """Every broker's quota sensors, tagged with ``broker`` (the upstream node id), and its shadow's."""
        for broker, enforcement in list(self.brokers.items()):
            for sample in enforcement.metric_samples(now_ms):
                yield MetricSample(sample.name, sample.group, (("broker", broker), *sample.tags), sample.value,
                                   sample.description)
            shadow = enforcement.shadow
            if shadow is not None:
                for sample in shadow.shadow_samples(now_ms):
                    yield MetricSample(sample.name, sample.group, (("broker", broker), *sample.tags), sample.value,
                                       sample.description)
