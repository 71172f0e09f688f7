"""Per-request controller-mutation quotas (KIP-599, ``ControllerMutationQuotaManager``): strict, permissive, unbounded.

CreateTopics / CreatePartitions / DeleteTopics get a quota object from
:meth:`~quotaflow.engine.client_quota.ClientQuotaManager.new_controller_mutation_quota` and call ``record`` once per
topic/partition mutation. Strict rejects mutations once the bucket is in debt; permissive only remembers the
throttle. ``throttle_time`` decays with the time elapsed since the violation.
"""

from __future__ import annotations

from typing import Final, Protocol

from quotaflow.core.errors import ThrottlingQuotaExceededError
from quotaflow.engine.sensors import TokenBucketSensor

# The first version of each API that uses the strict quota (lower versions get the permissive one).
STRICT_FROM_VERSION: Final = {19: 6, 37: 3, 20: 5}  # CreateTopics, CreatePartitions, DeleteTopics


def is_strict(api_key: int, api_version: int) -> bool:
    """Whether this request version gets the strict controller-mutation quota."""
    first = STRICT_FROM_VERSION.get(api_key)
    return first is not None and api_version >= first


class MutationThrottledError(ThrottlingQuotaExceededError):
    """A strict quota rejected a mutation; ``throttle_time_ms`` is the throttle Kafka reports."""

    def __init__(self, throttle_time_ms: int) -> None:
        super().__init__(ThrottlingQuotaExceededError.description)
        self.throttle_time_ms = throttle_time_ms


class ControllerMutationQuota(Protocol):
    def is_exceeded(self) -> bool: ...

    def record(self, permits: float, now_ms: int) -> None: ...

    def throttle_time(self, now_ms: int) -> int: ...


class UnboundedControllerMutationQuota:
    """What every request gets while no controller-mutation quota is configured."""

    def is_exceeded(self) -> bool:
        return False

    def record(self, permits: float, now_ms: int) -> None:
        return None

    def throttle_time(self, now_ms: int) -> int:
        return 0


class _TrackedQuota:
    def __init__(self, sensor: TokenBucketSensor) -> None:
        self._sensor = sensor
        self._last_throttle_ms = 0
        self._last_recorded_ms = 0

    def _violated(self, throttle_ms: int, now_ms: int) -> None:
        self._last_throttle_ms = throttle_ms
        self._last_recorded_ms = now_ms

    def throttle_time(self, now_ms: int) -> int:
        """``max(0, lastThrottle − (now − lastRecorded))``."""
        return max(0, self._last_recorded_ms + self._last_throttle_ms - now_ms)


class StrictControllerMutationQuota(_TrackedQuota):
    """Check, then record; a violation records nothing and raises :class:`MutationThrottledError`."""

    def is_exceeded(self) -> bool:
        return self._last_throttle_ms > 0

    def record(self, permits: float, now_ms: int) -> None:
        throttle = self._sensor.check(now_ms)
        if throttle is not None:
            self._violated(throttle, now_ms)
            raise MutationThrottledError(throttle)
        self._sensor.record(permits, now_ms)


class PermissiveControllerMutationQuota(_TrackedQuota):
    """Record with the check; a violation only sets the throttle (never exceeded)."""

    def is_exceeded(self) -> bool:
        return False

    def record(self, permits: float, now_ms: int) -> None:
        throttle = self._sensor.record_checked(permits, now_ms)
        if throttle is not None:
            self._violated(throttle, now_ms)
