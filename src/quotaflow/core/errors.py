"""Errors as types.

    QuotaflowError
    ├── KafkaError                      one class per Kafka error code (``errno``), registry ``for_code``
    │   ├── UnknownServerError          -1  UNKNOWN_SERVER_ERROR
    │   ├── ClusterAuthorizationFailedError 31 CLUSTER_AUTHORIZATION_FAILED
    │   ├── UnsupportedSaslMechanismError 33 UNSUPPORTED_SASL_MECHANISM
    │   ├── IllegalSaslStateError       34  ILLEGAL_SASL_STATE
    │   ├── UnsupportedVersionError     35  UNSUPPORTED_VERSION
    │   ├── InvalidConfigurationError   40  INVALID_CONFIG
    │   ├── InvalidRequestError         42  INVALID_REQUEST
    │   ├── SaslAuthenticationFailedError 58 SASL_AUTHENTICATION_FAILED
    │   └── ThrottlingQuotaExceededError 89 THROTTLING_QUOTA_EXCEEDED
    ├── CommandError                    a CLI argument error (kafka-configs.sh's IllegalArgumentException)
    ├── StoreError                      the quota store cannot be opened or migrated
    ├── ConnectionQuotaError            connection admission refused by the connection-quota engine
    │   ├── ConnectionThrottledError    "<ip> throttled for <ms>" (KIP-612 per-IP rate)
    │   └── TooManyConnectionsError     "Too many connections from <ip> (maximum = <n>)"
    └── UpstreamUnavailableError        the gateway's upstream broker stayed unreachable for the whole retry bound
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

NONE = 0


class QuotaflowError(Exception):
    """Base of every error quotaflow raises on purpose."""


class KafkaError(QuotaflowError):
    """An error that maps to a Kafka protocol error code."""

    errno: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    description: ClassVar[str] = "The server experienced an unexpected error when processing the request."

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message if message is not None else self.description)
        self.message = message

    def to_api_error(self) -> ApiError:
        return ApiError(self.errno, self.message)


class UnknownServerError(KafkaError):
    errno = -1
    name = "UNKNOWN_SERVER_ERROR"


class ClusterAuthorizationFailedError(KafkaError):
    errno = 31
    name = "CLUSTER_AUTHORIZATION_FAILED"
    description = "Cluster authorization failed."


class UnsupportedSaslMechanismError(KafkaError):
    errno = 33
    name = "UNSUPPORTED_SASL_MECHANISM"
    description = "The broker does not support the requested SASL mechanism."


class IllegalSaslStateError(KafkaError):
    errno = 34
    name = "ILLEGAL_SASL_STATE"
    description = "Request is not valid given the current SASL state."


class UnsupportedVersionError(KafkaError):
    errno = 35
    name = "UNSUPPORTED_VERSION"
    description = "The version of API is not supported."


class InvalidConfigurationError(KafkaError):
    errno = 40
    name = "INVALID_CONFIG"
    description = "Configuration is invalid."


class InvalidRequestError(KafkaError):
    errno = 42
    name = "INVALID_REQUEST"
    description = (
        "This most likely occurs because of a request being malformed by the client library or the message "
        "was sent to an incompatible broker. See the broker logs for more details."
    )


class SaslAuthenticationFailedError(KafkaError):
    errno = 58
    name = "SASL_AUTHENTICATION_FAILED"
    description = "SASL Authentication failed."


class ThrottlingQuotaExceededError(KafkaError):
    errno = 89
    name = "THROTTLING_QUOTA_EXCEEDED"
    description = "The throttling quota has been exceeded."


_REGISTRY: dict[int, type[KafkaError]] = {
    cls.errno: cls
    for cls in (
        UnknownServerError,
        ClusterAuthorizationFailedError,
        UnsupportedSaslMechanismError,
        IllegalSaslStateError,
        UnsupportedVersionError,
        InvalidConfigurationError,
        InvalidRequestError,
        SaslAuthenticationFailedError,
        ThrottlingQuotaExceededError,
    )
}


def for_code(code: int) -> type[KafkaError]:
    """The error class for a Kafka error code (``UnknownServerError`` for codes quotaflow does not model)."""
    return _REGISTRY.get(code, UnknownServerError)


@dataclass(frozen=True, slots=True)
class ApiError:
    """Kafka's ``ApiError``: a code and an optional message; success is code 0 with a null message."""

    code: int = NONE
    message: str | None = None

    @property
    def is_success(self) -> bool:
        return self.code == NONE

    @property
    def name(self) -> str:
        return "NONE" if self.code == NONE else for_code(self.code).name

    def exception(self) -> KafkaError:
        return for_code(self.code)(self.message)


SUCCESS = ApiError()


class CommandError(QuotaflowError):
    """Invalid command-line input, with kafka-configs.sh's message."""


class StoreError(QuotaflowError):
    """The quota store cannot be opened, read or migrated."""


class ConnectionQuotaError(QuotaflowError):
    """A connection the connection-quota engine will not admit."""


class ConnectionThrottledError(ConnectionQuotaError):
    """KIP-612 per-IP rate violation: hold the socket ``throttle_ms`` then close it."""

    def __init__(self, ip: str, start_ms: int, throttle_ms: int) -> None:
        super().__init__(f"/{ip} throttled for {throttle_ms}")
        self.ip = ip
        self.start_ms = start_ms
        self.throttle_ms = throttle_ms

    @property
    def end_throttle_ms(self) -> int:
        return self.start_ms + self.throttle_ms


class TooManyConnectionsError(ConnectionQuotaError):
    """``max.connections.per.ip`` exceeded."""

    def __init__(self, ip: str, maximum: int) -> None:
        super().__init__(f"Too many connections from /{ip} (maximum = {maximum})")
        self.ip = ip
        self.maximum = maximum


class UpstreamUnavailableError(QuotaflowError):
    """The gateway retried its upstream broker with backoff for ``quotaflow.upstream.connect.timeout.ms`` in vain."""
