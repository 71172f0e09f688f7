"""Where the gateway's authorization decisions go: counters for ``/metrics`` and rows for the event log.

Kafka's authorizer logs a denial at INFO and an allowed decision at DEBUG (``kafka.authorizer.logger``); the gateway
does the same with its event log: every refusal is a row of the ``authorizations`` kind (who, from where, resource
type and name, operation, api, allowed), allowed decisions only with ``quotaflow.authorizer.log.allowed=true`` (a
row per checked resource of every request would cost more than the request). The counters count both, always:
``kafka_server_authorizer_metrics_authorization_{allowed,denied}_total{api,resource_type,operation}``, plus the
refusals of quotaflow's own topics (``hidden_topic_refusals_total``), which no ACL can allow.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Final

from quotaflow.core.acl import AclOperation, ResourceType
from quotaflow.engine.metrics import MetricSample
from quotaflow.gateway.wire import protocol

GROUP: Final = "authorizer-metrics"
LOG_ALLOWED: Final = "quotaflow.authorizer.log.allowed"

AuthorizationSink = Callable[[dict[str, Any]], None]


class AuthzAudit:
    """Counts every decision; hands refusals (and, if asked, allowed decisions) to ``sink`` as event-log rows."""

    def __init__(self, sink: AuthorizationSink | None = None, *, log_allowed: bool = False) -> None:
        self.sink = sink
        self.log_allowed = log_allowed
        self.counts: Counter[tuple[int, int, int, bool]] = Counter()  # (api, resource type, operation, allowed)
        self.hidden: Counter[int] = Counter()  # api -> refusals of quotaflow's own topics

    def decision(self, principal: str, host: str, api: int, resource_type: ResourceType, name: str,
                 operation: AclOperation, allowed: bool) -> None:
        self.counts[(api, int(resource_type), int(operation), allowed)] += 1  # ints: IntEnum hashing is slow
        if self.sink is not None and (not allowed or self.log_allowed):
            self.sink(row(principal, host, api, resource_type, name, operation, allowed))

    def hidden_topic(self, principal: str, host: str, api: int, name: str, operation: AclOperation) -> None:
        """A request named one of quotaflow's own topics: refused whatever the ACLs say."""
        self.hidden[api] += 1
        if self.sink is not None:
            self.sink(row(principal, host, api, ResourceType.TOPIC, name, operation, False, hidden=True))

    def metric_samples(self, now_ms: int) -> Iterable[MetricSample]:
        for (api, rtype, op, allowed), n in sorted(self.counts.items()):
            name = "authorization-allowed-total" if allowed else "authorization-denied-total"
            tags = (("api", protocol.api_name(api)), ("resource-type", ResourceType(rtype).name),
                    ("operation", AclOperation(op).name))
            yield MetricSample(name, GROUP, tags, float(n), "authorization decisions of the gateway's authorizer")
        for api, n in sorted(self.hidden.items()):
            yield MetricSample("hidden-topic-refusals-total", GROUP, (("api", protocol.api_name(api)),), float(n),
                               "requests naming quotaflow's own topics, refused with TOPIC_AUTHORIZATION_FAILED")


def row(principal: str, host: str, api: int, resource_type: ResourceType, name: str, operation: AclOperation,
        allowed: bool, *, hidden: bool = False) -> dict[str, Any]:
    """One ``authorizations`` event-log row (:data:`quotaflow.events.AUTHORIZATION_SCHEMA`)."""
    return {"ts_ms": time.time_ns() // 1_000_000, "principal": principal, "client_ip": host, "api_key": api,
            "resource_type": ResourceType(resource_type).name, "resource_name": name,
            "operation": AclOperation(operation).name, "allowed": allowed, "hidden_topic": hidden}
