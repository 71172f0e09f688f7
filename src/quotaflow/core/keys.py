"""Dynamic quota keys (Kafka's ``QuotaConfig``): ConfigDef types, the entity types they apply to, unlimited values."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

LONG_MAX: Final = 9223372036854775807
INT_MAX: Final = 2147483647
DOUBLE_MAX: Final = 1.7976931348623157e308  # Java Double.MAX_VALUE
UNLIMITED: Final = float(LONG_MAX)  # a client quota with no match: Long.MAX_VALUE as a double


class ConfigType(Enum):
    SHORT = "SHORT"
    INT = "INT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"

    @property
    def integral(self) -> bool:
        return self is not ConfigType.DOUBLE


@dataclass(frozen=True, slots=True)
class QuotaKey:
    name: str
    config_type: ConfigType
    for_ip: bool  # True: ip entities only; False: user / client-id / (user, client-id)
    unlimited: float


PRODUCER_BYTE_RATE: Final = "producer_byte_rate"
CONSUMER_BYTE_RATE: Final = "consumer_byte_rate"
REQUEST_PERCENTAGE: Final = "request_percentage"
CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
CONNECTION_CREATION_RATE: Final = "connection_creation_rate"

QUOTA_KEYS: Final[dict[str, QuotaKey]] = {
    k.name: k
    for k in (
        QuotaKey(PRODUCER_BYTE_RATE, ConfigType.LONG, False, float(LONG_MAX)),
        QuotaKey(CONSUMER_BYTE_RATE, ConfigType.LONG, False, float(LONG_MAX)),
        QuotaKey(REQUEST_PERCENTAGE, ConfigType.DOUBLE, False, float(INT_MAX)),
        QuotaKey(CONTROLLER_MUTATION_RATE, ConfigType.DOUBLE, False, float(INT_MAX)),
        QuotaKey(CONNECTION_CREATION_RATE, ConfigType.INT, True, float(INT_MAX)),
    )
}
CLIENT_QUOTA_KEYS: Final = frozenset(k for k, q in QUOTA_KEYS.items() if not q.for_ip)
IP_QUOTA_KEYS: Final = frozenset(k for k, q in QUOTA_KEYS.items() if q.for_ip)
USER_QUOTA_KEYS: Final = CLIENT_QUOTA_KEYS | {CONNECTION_CREATION_RATE}
"""A user-only entity (``user=alice`` or the default user) may also hold a per-principal connection creation rate,
beyond Kafka's model (docs/quota-model.md)."""


def is_client_or_user_quota_config(name: str) -> bool:
    """``QuotaConfig.isClientOrUserQuotaConfig``."""
    return name in CLIENT_QUOTA_KEYS
