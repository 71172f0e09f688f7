"""Client-quota enforcement at the gateway: the engine's managers, fed by live traffic and the store's change log.

All decisions are the engine's (``quotaflow.engine``: ``ClientQuotaManager`` per quota type, ``produce_throttle`` /
``fetch_throttle`` / ``request_throttle`` to combine them, all when the response is ready and in one step with its
event-log row, ``is_request_quota_exempt``, ``apply_changes``). This
module only decides *what* to feed them: the request size for produce, the upstream response size for fetch, and
the gateway's own thread time for the request quota (docs/gateway.md). Users are keyed by the authenticated
principal name (``ANONYMOUS`` on plaintext), client-ids by the request header's (null = ``""``).

Excluded principals (``quotaflow.quota.excluded.principals``, :mod:`quotaflow.core.principals`) are never
throttled: nothing of theirs is recorded into a client-quota sensor, their thread time goes to
``exempt-request-time``, and their usage is metered in ``excluded-byte-rate`` / ``excluded-request-time`` per user.

Compiled by Cython (``enforcement.pxd`` types :class:`Enforcement` as an extension type), because the connection
core reads three of its facts after every response (a promotion's switch time, a running shadow set, whether network
time is metered): as C fields they cost no attribute lookup. This plain-Python source is its pure twin; ``COMPILED``
says which form was imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Final

import cython

from quotaflow.core.keys import INT_MAX, UNLIMITED
from quotaflow.engine import (
    NANOS_TO_PERCENT,
    NOT_THROTTLED,
    ControllerMutationQuota,
    QuotaChange,
    QuotaManagers,
    Rate,
    ThrottleDecision,
    apply_changes,
    fetch_throttle,
    is_request_quota_exempt,
    is_strict,
    java_double_to_int,
    produce_throttle,
    request_throttle,
    snapshot_changes,
)
from quotaflow.engine.metrics import MetricSample
from quotaflow.gateway.config import GatewayConfig
from quotaflow.gateway.data.shadow import NEVER, ShadowDecisions, ThrottledCounts
from quotaflow.store.base import Snapshot


@dataclass(frozen=True, slots=True)
class RequestDecisions:
    """One request's throttle decisions, named as the event log's columns (``REQUEST_DECISION_FIELDS``): the
    bandwidth quota's (produce or fetch), the request quota's, and the throttle applied (the larger, KIP-219)."""

    throttle_ms_produce: int = 0
    throttle_ms_fetch: int = 0
    throttle_ms_request: int = 0
    throttle_ms: int = 0


NO_DECISIONS: Final = RequestDecisions()
NO_THROTTLE: Final = RequestDecisions()
"""A request decided and not throttled (one shared instance: the common case builds nothing)."""
"""A request no quota decided (SASL authentication, which Kafka's authenticator handles before KafkaApis)."""
COMPILED: bool = cython.compiled
"""True when the Cython-compiled form of this module was imported."""
_USAGE_GROUPS: Final = {"produce": ("Produce", "excluded-byte-rate"), "fetch": ("Fetch", "excluded-byte-rate"),
                        "request": ("Request", "excluded-request-time")}


def _no_switch(_now_ms: int) -> None:
    """``Enforcement.switch`` while no promotion waits (never called: ``switch_ms`` is NEVER)."""


class _ProduceLimits(dict[tuple[str, str], bool]):
    """Whether a finite producer_byte_rate applies to a (user, client-id): its produce requests are then read one at
    a time, so none is read while an earlier one may still be throttled. Asked for every produce request, so a dict:
    a hit is one C-level lookup, a miss asks the manager (``__missing__``). Emptied by every quota change."""

    __slots__ = ("_enforcement",)

    def __init__(self, enforcement: Enforcement) -> None:
        super().__init__()
        self._enforcement = enforcement

    def __missing__(self, key: tuple[str, str]) -> bool:
        user, client_id = key
        e = self._enforcement
        limited = user not in e.excluded and e.managers.produce.quota_limit(user, client_id) < UNLIMITED
        if len(self) >= _LIMITS_CACHED:
            self.clear()
        self[key] = limited
        return limited


_LIMITS_CACHED: Final = 100_000  # (user, client-id) pairs remembered before the cache starts over


class Enforcement:
    def __init__(self, config: GatewayConfig, *, shadow_id: int | None = None) -> None:
        self.config = config
        self.managers = QuotaManagers.create(
            samples=config.quota_window_num,
            window_seconds=config.quota_window_size_seconds,
            controller_samples=config.controller_quota_window_num,
            controller_window_seconds=config.controller_quota_window_size_seconds,
        )
        self.excluded = config.excluded_principals
        self._excluded_usage: dict[tuple[str, str], Rate] = {}  # (kind, principal) -> rate, metrics only
        self.shadow: Enforcement | None = None
        """This broker's managers under the running shadow set (``gateway.data.shadow``), fed the same inputs at
        the same clock reading and never applied; None while no shadow set runs."""
        self.shadow_id = shadow_id
        """Set on a shadow's own managers: the ``ShadowSet.id`` they evaluate."""
        self.switch_ms = NEVER
        """The decision clock reading from which a promotion's batch applies (``gateway.data.shadow``): the
        connection's decision path calls :attr:`switch` first when a decision's ``now_ms`` reaches it."""
        self.switch: Callable[[int], None] = _no_switch
        self.throttled = ThrottledCounts()  # a shadow's: requests it would have throttled, for /metrics
        self.no_throttle: ShadowDecisions | None = None if shadow_id is None else ShadowDecisions(shadow_id)
        """A shadow's: its decision of a request it would not throttle (one shared instance)."""
        self._network_live = bool(self.excluded)
        self.network_metered = bool(self.excluded)
        """Whether :meth:`network_time` has anything to record (a request quota exists, or excluded principals are
        metered): a plain attribute, so a connection asks it after every response without a call."""
        self.produce_limited = _ProduceLimits(self)
        """``produce_limited[user, client_id]``: whether a finite producer_byte_rate applies (read one produce at a
        time); kept until the quotas change."""
        m = self.managers
        # the two per-request decisions: with no principal excluded, the engine's functions bound to this broker's
        # managers (a partial is a C-level call: no frame of this class's between the handler and the engine)
        self.produce: Callable[[str, str, int, int, int, int], ThrottleDecision] = (
            self._produce if self.excluded else partial(produce_throttle, m.produce, m.request))
        """``(user, client_id, size, thread_ns, acks, now_ms)``: ``engine.produce_throttle`` when the response is
        ready (as KafkaApis records it in the produce callback): request size against producer_byte_rate, then
        request time (acks=0 exempt), the combined throttle, and the winner's throttle sensor (request on a tie)."""
        self.fetch: Callable[[str, str, int, int, int], ThrottleDecision] = (
            self._fetch if self.excluded else partial(fetch_throttle, m.fetch, m.request))
        """``(user, client_id, response_size, thread_ns, now_ms)``: response size against consumer_byte_rate; when
        throttled the bytes are un-recorded (empty response), unless the response is larger than the quota window
        holds (``decision.oversized``: delivered, throttled)."""

    def _meter_excluded(self, kind: str, user: str, value: float, now_ms: int) -> None:
        rate = self._excluded_usage.get((kind, user))
        if rate is None:
            rate = self._excluded_usage[(kind, user)] = Rate(2, 30_000)  # Kafka's default MetricConfig
        rate.record(value, now_ms)

    def _exempt(self, kind: str, user: str, value: float, thread_ns: int, now_ms: int) -> None:
        """An excluded principal's request: metered, its thread time exempt, nothing in any quota sensor."""
        self._meter_excluded(kind, user, value, now_ms)
        if kind != "request":
            self._meter_excluded("request", user, thread_ns * NANOS_TO_PERCENT, now_ms)
        self.managers.request.record_exempt_ns(thread_ns, now_ms)

    # -- quota configuration --------------------------------------------------------------------------------

    def load(self, snapshot: Snapshot) -> None:
        self.apply_changes(snapshot_changes(snapshot.entities, snapshot.seq))

    def apply_changes(self, changes: Iterable[QuotaChange]) -> None:
        apply_changes(changes, self.managers)
        self._network_live = bool(self.excluded) or self.managers.request.quotas_enabled
        self.produce_limited.clear()
        self._metered()

    def set_shadow(self, shadow: Enforcement | None) -> None:
        """Start (or end, None) evaluating a shadow set beside this broker's enforced quotas."""
        self.shadow = shadow
        self._metered()

    def _metered(self) -> None:
        shadow = self.shadow
        self.network_metered = self._network_live or (shadow is not None and shadow.network_metered)

    # -- decisions ------------------------------------------------------------------------------------------

    def _produce(self, user: str, client_id: str, size: int, thread_ns: int, acks: int,
                 now_ms: int) -> ThrottleDecision:
        """:attr:`produce` with excluded principals configured."""
        if user in self.excluded:
            self._exempt("produce", user, size, thread_ns, now_ms)
            return NOT_THROTTLED
        m = self.managers
        return produce_throttle(m.produce, m.request, user, client_id, size, thread_ns, acks, now_ms)

    def _fetch(self, user: str, client_id: str, response_size: int, thread_ns: int, now_ms: int) -> ThrottleDecision:
        """:attr:`fetch` with excluded principals configured."""
        if user in self.excluded:
            self._exempt("fetch", user, response_size, thread_ns, now_ms)
            return NOT_THROTTLED
        m = self.managers
        return fetch_throttle(m.fetch, m.request, user, client_id, response_size, thread_ns, now_ms)

    def request(self, api_key: int, user: str, client_id: str, thread_ns: int, now_ms: int,
                error_code: int | None = None) -> int:
        """Any other request: the request quota, unless the request is exempt (KIP-124's exemptions)."""
        if user in self.excluded:
            self._exempt("request", user, thread_ns * NANOS_TO_PERCENT, thread_ns, now_ms)
            return 0
        if is_request_quota_exempt(api_key, error_code=error_code):
            self.managers.request.record_exempt_ns(thread_ns, now_ms)
            return 0
        return request_throttle(self.managers.request, user, client_id, thread_ns, now_ms)

    def fetch_max_bytes(self, user: str, client_id: str) -> int | None:
        """KafkaApis caps a consumer fetch's ``max_bytes`` to what the quota window can hold
        (``getMaxValueInQuotaWindow(...).toInt``), so one response can never be too big to ever be served;
        None when no finite cap applies."""
        if not self.managers.fetch.quotas_enabled or user in self.excluded:
            return None
        cap = java_double_to_int(self.managers.fetch.max_value_in_quota_window(user, client_id))
        return None if cap >= INT_MAX else cap

    def fetch_room(self, user: str, client_id: str, now_ms: int) -> int | None:
        """The bytes a consumer's next fetch response may hold without being throttled now (its quota window's
        room), None while it has no finite consumer quota or nothing recorded."""
        if user in self.excluded:
            return None
        room = self.managers.fetch.room(user, client_id, now_ms)
        return None if room is None else max(0, int(room))

    def mutation_quota(self, user: str, client_id: str, api_key: int, api_version: int,
                       now_ms: int) -> ControllerMutationQuota | None:
        """A per-request controller-mutation quota (strict or permissive by version), or None while no
        controller_mutation_rate quota exists."""
        manager = self.managers.controller_mutation
        if not manager.quotas_enabled or user in self.excluded:
            return None
        return manager.new_controller_mutation_quota(user, client_id, is_strict(api_key, api_version), now_ms)

    def mutations_metered(self, user: str) -> bool:
        """Whether this principal's topic mutations meet a controller-mutation quota (KIP-599), the live one or a
        running shadow's (whose permits need the same partition counts)."""
        if user in self.excluded:
            return False
        shadow = self.shadow
        return self.managers.controller_mutation.quotas_enabled or (
            shadow is not None and shadow.managers.controller_mutation.quotas_enabled)

    def request_with_mutation(self, user: str, client_id: str, thread_ns: int, quota: ControllerMutationQuota,
                              now_ms: int) -> tuple[int, int]:
        """``sendResponseMaybeThrottleWithControllerQuota``: (mutation, request) throttles; the larger one's
        manager throttles the channel, the request quota on a tie."""
        m = self.managers
        req = request_throttle(m.request, user, client_id, thread_ns, now_ms, apply=False)
        mutation = quota.throttle_time(now_ms)
        if mutation > req:
            m.controller_mutation.throttle(user, client_id, mutation, now_ms)
        elif req > 0:
            m.request.throttle(user, client_id, req, now_ms)
        return mutation, req

    def network_time(self, user: str, client_id: str, thread_ns: int, now_ms: int) -> None:
        """Time after the decision (rewrite, encode, socket write), recorded without a check: it only weighs on
        later decisions (KIP-124). A running shadow records it too (:attr:`network_metered` covers both)."""
        shadow = self.shadow
        if shadow is not None and shadow.network_metered:
            shadow.network_time(user, client_id, thread_ns, now_ms)
        if not self._network_live:
            return
        if user in self.excluded:
            self._meter_excluded("request", user, thread_ns * NANOS_TO_PERCENT, now_ms)
            self.managers.request.record_exempt_ns(thread_ns, now_ms)
            return
        self.managers.request.record_network_time_ns(user, client_id, thread_ns, now_ms)

    def exempt_network_time(self, thread_ns: int, now_ms: int) -> None:
        """The network time of an exempt request goes to exempt-request-time, as its io time does."""
        self.managers.request.record_exempt_ns(thread_ns, now_ms)
        if self.shadow is not None:
            self.shadow.managers.request.record_exempt_ns(thread_ns, now_ms)

    @staticmethod
    def is_exempt(api_key: int) -> bool:
        """Exempt from the request quota by its API alone (produce acks=0 is decided by ``produce``)."""
        return is_request_quota_exempt(api_key)

    # -- housekeeping ---------------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """End elapsed throttles (delay queues) and expire inactive sensors, as Kafka's reaper threads do."""
        for manager in self.managers:
            manager.expire_throttles(now_ms)
        self.managers.expire_sensors(now_ms)
        if self.shadow is not None:
            self.shadow.tick(now_ms)

    def metric_samples(self, now_ms: int) -> Iterator[MetricSample]:
        yield from self.managers.metric_samples(now_ms)
        for (kind, user), rate in list(self._excluded_usage.items()):
            group, name = _USAGE_GROUPS[kind]
            yield MetricSample(name, group, (("user", user),), rate.measure(now_ms),
                               "Usage of a principal excluded from client quotas (never throttled)")

    def shadow_samples(self, now_ms: int) -> Iterator[MetricSample]:
        """A shadow's own per-quota-id samples (byte-rate, request-time, throttle-time), under ``Shadow<group>``
        with a ``shadow_id`` tag, and the requests it would have throttled (``Shadow`` / ``throttled-requests-total``
        per quota type, user and client-id)."""
        shadow_id = str(self.shadow_id)
        for manager in (self.managers.produce, self.managers.fetch, self.managers.request):
            for sample in manager.metric_samples(now_ms):
                if sample.tags:
                    yield MetricSample(sample.name, "Shadow" + sample.group, (*sample.tags, ("shadow_id", shadow_id)),
                                       sample.value, sample.description + " (shadow quota set, not enforced)")
        for (quota_type, user, client_id), count in list(self.throttled.counts.items()):
            yield MetricSample("throttled-requests-total", "Shadow",
                               (("quota_type", quota_type), ("user", user), ("client_id", client_id),
                                ("shadow_id", shadow_id)), float(count),
                               "Requests the shadow quota set would have throttled (never enforced)")
