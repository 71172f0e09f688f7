"""Pure domain model: entities, keys, sanitization, errors, precedence. No I/O."""

from quotaflow.core.entities import DEFAULT, ENTITY_TYPES, EntityType, Name, Part, QuotaEntity, render_entity
from quotaflow.core.errors import (
    ApiError,
    ClusterAuthorizationFailedError,
    CommandError,
    InvalidConfigurationError,
    InvalidRequestError,
    KafkaError,
    QuotaflowError,
    ThrottlingQuotaExceededError,
    UnsupportedVersionError,
)
from quotaflow.core.keys import (
    CLIENT_QUOTA_KEYS,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    IP_QUOTA_KEYS,
    PRODUCER_BYTE_RATE,
    QUOTA_KEYS,
    REQUEST_PERCENTAGE,
    UNLIMITED,
)
from quotaflow.core.precedence import QuotaTypeBit, quota_limit, quota_tags, resolve
from quotaflow.core.sanitize import desanitize, jmx_sanitize, sanitize

__all__ = [
    "CLIENT_QUOTA_KEYS",
    "CONNECTION_CREATION_RATE",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "DEFAULT",
    "ENTITY_TYPES",
    "IP_QUOTA_KEYS",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "UNLIMITED",
    "ApiError",
    "ClusterAuthorizationFailedError",
    "CommandError",
    "EntityType",
    "InvalidConfigurationError",
    "InvalidRequestError",
    "KafkaError",
    "Name",
    "Part",
    "QuotaEntity",
    "QuotaTypeBit",
    "QuotaflowError",
    "ThrottlingQuotaExceededError",
    "UnsupportedVersionError",
    "desanitize",
    "jmx_sanitize",
    "quota_limit",
    "quota_tags",
    "render_entity",
    "resolve",
    "sanitize",
]
