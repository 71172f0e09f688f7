"""Kafka's four client-quota types (``QuotaType``): the metric group, quota metric name and the key each applies."""

from __future__ import annotations

from enum import Enum
from typing import Final

from quotaflow.core.keys import CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE

NO_BYTE_TYPE: Final = 3
"""Byte type of a request no byte-rate manager records (follower fetch, other APIs); produce is 0, consumer fetch 1."""


class QuotaType(Enum):
    """``QuotaType``: value = (metric group, quota metric name, quota key, metric description)."""

    FETCH = ("Fetch", "byte-rate", CONSUMER_BYTE_RATE, "Tracking byte-rate per user/client-id")
    PRODUCE = ("Produce", "byte-rate", PRODUCER_BYTE_RATE, "Tracking byte-rate per user/client-id")
    REQUEST = ("Request", "request-time", REQUEST_PERCENTAGE, "Tracking request-time per user/client-id")
    CONTROLLER_MUTATION = (
        "ControllerMutation",
        "tokens",
        CONTROLLER_MUTATION_RATE,
        "Tracking remaining tokens in the token bucket per user/client-id",
    )

    @property
    def group(self) -> str:
        """Metric group and sensor-name prefix, e.g. ``Produce`` (``Produce-user:client``)."""
        return self.value[0]

    @property
    def metric_name(self) -> str:
        return self.value[1]

    @property
    def key(self) -> str:
        """The dynamic quota key this manager applies, e.g. ``producer_byte_rate``."""
        return self.value[2]

    @property
    def description(self) -> str:
        return self.value[3]

    @classmethod
    def for_key(cls, key: str) -> QuotaType | None:
        """The quota type a client quota key configures (None for other keys)."""
        return _BY_KEY.get(key)


_BY_KEY = {t.key: t for t in QuotaType}
