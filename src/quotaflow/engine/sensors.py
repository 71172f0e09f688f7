"""Per-quota-id quota sensors: what one ``<QuotaType>-<user>:<client-id>`` sensor holds and how it throttles.

Two kinds behind one small interface, as Kafka does with stats on a Sensor: a windowed :class:`Rate` for byte-rate
and request-time (throttle ``X = (O − T)/T·W``, optionally capped), and a :class:`TokenBucket` plus an un-quota'd
``mutation-rate`` for controller mutations (check *before* record; throttle ``round(−tokens/quota·1000)``).
"""

from __future__ import annotations

from typing import Protocol

from quotaflow.engine.quota_utils import java_round, to_int32
from quotaflow.engine.rate import Rate
from quotaflow.engine.token_bucket import TokenBucket


class QuotaSensor(Protocol):
    last_record_ms: int

    @property
    def bound(self) -> float: ...

    def set_bound(self, bound: float) -> None:
        """Replace the metric config's quota; the samples (or tokens) are kept."""
        ...

    def record_and_throttle(self, value: float, now_ms: int, max_ms: int | None = None) -> int:
        """Record with the quota check; the throttle in ms (0 when within quota) as Kafka's long, bounded by
        ``max_ms`` when given (the request quota's one window); the manager narrows it to Kafka's int."""
        ...

    def record(self, value: float, now_ms: int) -> None:
        """Record without a check (network-thread time, un-record)."""
        ...

    def measure(self, now_ms: int) -> float:
        """The quota metric's reading (a rate, or tokens); purges like a JMX read."""
        ...

    def window_size(self, now_ms: int) -> int | None:
        """The rate window the quota metric uses, None for a token bucket."""
        ...


class RateSensor(Rate):
    """The ``Rate`` quota metric of a byte-rate or request-time quota-id: the :class:`Rate` itself (its last record
    time is the sensor's), so the per-request record with its check is one call, not a sensor's call into a rate."""

    __slots__ = ()
    bound: float  # always a quota here: the configured one or UNLIMITED

    def __init__(self, samples: int, window_ms: int, bound: float, now_ms: int) -> None:
        super().__init__(samples, window_ms, bound, now_ms)

    def set_bound(self, bound: float) -> None:
        self.bound = bound


def token_throttle_ms(tokens: float, quota: float) -> int:
    """``ControllerMutationQuotaManager.throttleTimeMs``: ``round(−tokens / quota × 1000)`` (0 with tokens ≥ 0)."""
    if quota == 0.0:
        return to_int32(java_round(float("inf") if tokens < 0 else 0.0))
    return to_int32(java_round(-tokens / quota * 1000))


class TokenBucketSensor:
    """Controller-mutation sensor: ``tokens`` (TokenBucket, quota'd) and ``mutation-rate`` (Rate, no quota)."""

    __slots__ = ("bucket", "last_record_ms", "mutation_rate")

    def __init__(self, samples: int, window_ms: int, bound: float, now_ms: int, rate_samples: int,
                 rate_window_ms: int) -> None:
        self.bucket = TokenBucket(samples, window_ms, bound)
        self.mutation_rate = Rate(rate_samples, rate_window_ms, None)
        self.last_record_ms = now_ms

    @property
    def bound(self) -> float:
        return self.bucket.quota

    def set_bound(self, bound: float) -> None:
        self.bucket.quota = bound

    def check(self, now_ms: int) -> int | None:
        """``Sensor.checkQuotas``: the throttle if the bucket is in debt (tokens < 0, a violation), else None."""
        tokens = self.bucket.measure(now_ms)
        return token_throttle_ms(tokens, self.bucket.quota) if tokens < 0 else None

    def record(self, value: float, now_ms: int) -> None:
        self.last_record_ms = now_ms
        self.mutation_rate.record(value, now_ms)
        self.bucket.record(value, now_ms)

    def record_and_throttle(self, value: float, now_ms: int, max_ms: int | None = None) -> int:
        """Kafka's strict path: check first; on violation nothing is recorded, else record unchecked (a token
        bucket's throttle has no cap: ``max_ms`` is not used)."""
        throttle = self.check(now_ms)
        if throttle is not None:
            return throttle
        self.record(value, now_ms)
        return 0

    def record_checked(self, value: float, now_ms: int) -> int | None:
        """Kafka's permissive path (``record`` with checkQuotas): record, then check (None: no violation)."""
        self.record(value, now_ms)
        return self.check(now_ms)

    def measure(self, now_ms: int) -> float:
        return self.bucket.measure(now_ms)

    def window_size(self, now_ms: int) -> int | None:
        return None
