"""Kafka's quota arithmetic: ``QuotaUtils``' throttle formulas and the Java conversions they rely on.

Plain functions of numbers, apart from the :class:`~quotaflow.engine.rate.Rate` that reads the values they take, so
that every form of a quota decision uses the same ones: the ``Rate`` (compiled by Cython), the managers, and the
array kernels, which numba compiles from this very source (``kernel._jitable``; numba needs Python bytecode, so this
module is never Cython-compiled).
"""

from __future__ import annotations

import math
from typing import Final

LONG_MAX: Final = 9223372036854775807
LONG_MIN: Final = -9223372036854775808


def java_round(x: float) -> int:
    """``Math.round(double)``: half-up, NaN → 0, saturating at the long range (``+Inf`` → ``Long.MAX_VALUE``)."""
    if math.isnan(x):
        return 0
    if x >= 9.223372036854775807e18:
        return LONG_MAX
    if x <= -9.223372036854775808e18:
        return LONG_MIN
    return math.floor(x + 0.5)


def to_int32(x: int) -> int:
    """Scala ``.toInt`` / Java ``(int)`` on a long: keep the low 32 bits, signed."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def java_div(a: int, b: int) -> int:
    """Java integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def throttle_time(value: float, bound: float, window_ms: int) -> int:
    """``QuotaUtils.throttleTime``: ``round((O - T) / T * W)``; a zero bound gives ``Long.MAX_VALUE`` as Java's
    ``x / 0.0 = +Infinity`` does."""
    if bound == 0.0:
        diff = value - bound
        return LONG_MAX if diff > 0 else (0 if diff == 0 or math.isnan(diff) else LONG_MIN)
    return java_round((value - bound) / bound * window_ms)


def bounded_throttle_time(value: float, bound: float, window_ms: int, max_ms: int) -> int:
    """``QuotaUtils.boundedThrottleTime``: ``min(throttleTime, max)``."""
    return min(throttle_time(value, bound, window_ms), max_ms)


def keeps_oversized_fetch(value: float, total: float, window_ms: int, bound: float, samples: int,
                          sample_ms: int) -> bool:
    """Whether a throttled consumer fetch keeps its bytes recorded and is delivered (quotaflow's one departure from
    Kafka, which always empties and un-records it): when the response is larger than the quota window can hold
    (``getMaxValueInQuotaWindow`` = ``bound × (samples − 1) × windowSeconds``; Kafka only sends one that large when
    a single record batch is, KIP-74), emptying it could never end, so it is delivered and throttled after, as a
    produce request is, but only when the consumer was within its quota before it (``(total − value) / window ≤
    bound``, read with the same total and window as the check), so a consumer over its quota still gets nothing
    until its rate is back within it, however many connections it opens. ``total`` and ``window_ms`` are the
    quota check's reading after recording ``value``; ``sample_ms`` is ``quota.window.size.seconds × 1000``. The
    Rate path (``throttle.fetch_throttle``) and the kernels' loops call this same function."""
    if not value > bound * (samples - 1) * (sample_ms // 1000):
        return False
    return (total - value) / (window_ms / 1000.0) <= bound
