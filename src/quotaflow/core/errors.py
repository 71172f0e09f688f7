"""Errors as types: every error quotaflow raises on purpose is a :class:`QuotaflowError`.

Catch the branch you can act on; a Kafka error carries its protocol code (``errno``) and name, so a server answers
with it and a client turns a code back into its class (:func:`for_code`). A lower layer's own exceptions (``OSError``,
``sqlite3.Error``, kafka-python's decode errors, Arrow's) are mapped into this tree where that layer is called,
with :func:`map_errors`, chained so the cause stays visible. Classes defined outside this module are noted with it.

    QuotaflowError
    ├── KafkaError                          one class per Kafka error code (``errno``), registry ``for_code``
    │   ├── UnknownServerError              -1  UNKNOWN_SERVER_ERROR (and any code not modelled)
    │   ├── TopicAuthorizationFailedError   29  TOPIC_AUTHORIZATION_FAILED
    │   ├── GroupAuthorizationFailedError   30  GROUP_AUTHORIZATION_FAILED
    │   ├── ClusterAuthorizationFailedError 31  CLUSTER_AUTHORIZATION_FAILED
    │   ├── UnsupportedSaslMechanismError   33  UNSUPPORTED_SASL_MECHANISM
    │   ├── IllegalSaslStateError           34  ILLEGAL_SASL_STATE
    │   ├── UnsupportedVersionError         35  UNSUPPORTED_VERSION
    │   ├── InvalidConfigurationError       40  INVALID_CONFIG
    │   ├── InvalidRequestError             42  INVALID_REQUEST
    │   ├── TransactionalIdAuthorizationFailedError
    │   │                                   53  TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    │   ├── SecurityDisabledError           54  SECURITY_DISABLED (the ACL APIs without an authorizer)
    │   ├── SaslAuthenticationFailedError   58  SASL_AUTHENTICATION_FAILED
    │   │   └── SaslAuthenticationError         a PLAIN message the gateway rejects (gateway.auth.sasl)
    │   ├── ThrottlingQuotaExceededError    89  THROTTLING_QUOTA_EXCEEDED
    │   │   └── MutationThrottledError          a strict controller-mutation quota, with its throttle
    │   │                                       (engine.controller_mutation)
    │   ├── ResourceNotFoundError           91  RESOURCE_NOT_FOUND (a SCRAM credential that does not exist)
    │   ├── DuplicateResourceError          92  DUPLICATE_RESOURCE
    │   └── UnacceptableCredentialError     93  UNACCEPTABLE_CREDENTIAL (KIP-554: too few iterations, ...)
    ├── CommandError                        a CLI argument or config file error (kafka-configs.sh's
    │                                       IllegalArgumentException)
    ├── StoreError                          the quota store cannot be opened, read or migrated
    ├── ShadowStateError                    a shadow-set operation the store's state refuses (none running, a
    │                                       rollback over keys changed since the promotion) (store.shadowing)
    ├── BrokerConnectionError               the admin client's gateway/broker is unreachable or not speaking Kafka
    ├── ConnectionClosed                    the gateway stops serving one client connection
    │   └── LoginQueueFullError             a login found no hash slot in time: closed unanswered
    │                                       (gateway.auth.sasl)
    ├── UpstreamUnavailableError            no upstream broker address accepted a connection (gateway.data.brokers;
    │                                       also an OSError)
    ├── SslPrincipalMappingError            no ssl.principal.mapping.rules rule applies to a client certificate
    │                                       (gateway.auth.ssl_principal)
    ├── UpstreamAuthenticationError         the upstream refused the gateway's own SASL identity
    │                                       (gateway.auth.upstream_sasl)
    ├── ConnectionQuotaError                connection admission refused by the connection-quota engine
    │   ├── ConnectionThrottledError        "<ip> throttled for <ms>" (KIP-612 per-IP rate)
    │   └── TooManyConnectionsError         "Too many connections from <ip> (maximum = <n>)"
    ├── EventsInputError                    an events directory is missing or unreadable (events)
    ├── EventLogError                       the gateway's event log is closed or its writer failed
    │                                       (gateway.observation.eventlog)
    ├── TansuError                          the test broker did not start (testing.tansu)
    └── GatewayProcessError                 the gateway child process did not come up (testing.gateway_process)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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
    """UNKNOWN_SERVER_ERROR: an unexpected server failure, and every error code quotaflow does not model."""

    errno = -1
    name = "UNKNOWN_SERVER_ERROR"


class TopicAuthorizationFailedError(KafkaError):
    """TOPIC_AUTHORIZATION_FAILED: the principal may not do this on the topic (or it is one of quotaflow's own)."""

    errno = 29
    name = "TOPIC_AUTHORIZATION_FAILED"
    description = "Topic authorization failed."


class GroupAuthorizationFailedError(KafkaError):
    """GROUP_AUTHORIZATION_FAILED: the principal may not do this on the consumer group."""

    errno = 30
    name = "GROUP_AUTHORIZATION_FAILED"
    description = "Group authorization failed."


class ClusterAuthorizationFailedError(KafkaError):
    """CLUSTER_AUTHORIZATION_FAILED: the principal may not alter quotas (ALTER_CONFIGS on the cluster)."""

    errno = 31
    name = "CLUSTER_AUTHORIZATION_FAILED"
    description = "Cluster authorization failed."


class UnsupportedSaslMechanismError(KafkaError):
    """UNSUPPORTED_SASL_MECHANISM: the client asked for a mechanism other than PLAIN."""

    errno = 33
    name = "UNSUPPORTED_SASL_MECHANISM"
    description = "The broker does not support the requested SASL mechanism."


class IllegalSaslStateError(KafkaError):
    """ILLEGAL_SASL_STATE: a SASL request out of order (e.g. SaslAuthenticate before SaslHandshake)."""

    errno = 34
    name = "ILLEGAL_SASL_STATE"
    description = "Request is not valid given the current SASL state."


class UnsupportedVersionError(KafkaError):
    """UNSUPPORTED_VERSION: an API or API version one side does not speak."""

    errno = 35
    name = "UNSUPPORTED_VERSION"
    description = "The version of API is not supported."


class InvalidConfigurationError(KafkaError):
    """INVALID_CONFIG: a quota or broker config value Kafka would reject."""

    errno = 40
    name = "INVALID_CONFIG"
    description = "Configuration is invalid."


class InvalidRequestError(KafkaError):
    """INVALID_REQUEST: a malformed request, or one Kafka rejects as a whole (e.g. an unknown entity type)."""

    errno = 42
    name = "INVALID_REQUEST"
    description = (
        "This most likely occurs because of a request being malformed by the client library or the message "
        "was sent to an incompatible broker. See the broker logs for more details."
    )


class TransactionalIdAuthorizationFailedError(KafkaError):
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED: the principal may not use the transactional id."""

    errno = 53
    name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    description = "Transactional Id authorization failed."


class SecurityDisabledError(KafkaError):
    """SECURITY_DISABLED: an ACL API on a gateway with no authorizer configured (as on a broker without one)."""

    errno = 54
    name = "SECURITY_DISABLED"
    description = "Security features are disabled."


class SaslAuthenticationFailedError(KafkaError):
    """SASL_AUTHENTICATION_FAILED: bad credentials or a malformed SASL message."""

    errno = 58
    name = "SASL_AUTHENTICATION_FAILED"
    description = "SASL Authentication failed."


class ThrottlingQuotaExceededError(KafkaError):
    """THROTTLING_QUOTA_EXCEEDED: a controller-mutation quota (KIP-599) rejected the request."""

    errno = 89
    name = "THROTTLING_QUOTA_EXCEEDED"
    description = "The throttling quota has been exceeded."


class ResourceNotFoundError(KafkaError):
    """RESOURCE_NOT_FOUND: e.g. deleting or describing a SCRAM credential that does not exist (KIP-554)."""

    errno = 91
    name = "RESOURCE_NOT_FOUND"
    description = "A request illegally referred to a resource that does not exist."


class DuplicateResourceError(KafkaError):
    """DUPLICATE_RESOURCE: one request names the same resource twice (KIP-554)."""

    errno = 92
    name = "DUPLICATE_RESOURCE"
    description = "A request illegally referred to the same resource twice."


class UnacceptableCredentialError(KafkaError):
    """UNACCEPTABLE_CREDENTIAL: a SCRAM credential the controller refuses (too few or too many iterations)."""

    errno = 93
    name = "UNACCEPTABLE_CREDENTIAL"
    description = "Requested credential would not meet criteria for acceptability."


_REGISTRY: dict[int, type[KafkaError]] = {
    cls.errno: cls
    for cls in (
        UnknownServerError,
        TopicAuthorizationFailedError,
        GroupAuthorizationFailedError,
        ClusterAuthorizationFailedError,
        UnsupportedSaslMechanismError,
        IllegalSaslStateError,
        UnsupportedVersionError,
        InvalidConfigurationError,
        InvalidRequestError,
        TransactionalIdAuthorizationFailedError,
        SecurityDisabledError,
        SaslAuthenticationFailedError,
        ThrottlingQuotaExceededError,
        ResourceNotFoundError,
        DuplicateResourceError,
        UnacceptableCredentialError,
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


class ShadowStateError(QuotaflowError):
    """A shadow-set operation the store's current state refuses: promote or stop with none running, rollback with
    nothing to roll back or over keys changed since the promotion (``quotaflow shadow``)."""


class BrokerConnectionError(QuotaflowError):
    """The gateway or broker an admin client talks to could not be reached, closed the connection, or did not speak
    Kafka (or its ``/resolve`` endpoint answered something else)."""


class ConnectionClosed(QuotaflowError):
    """Stop serving this connection (protocol violation, oversize frame, peer gone); the gateway serves the rest."""


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


@contextmanager
def map_errors(mapping: Mapping[type[BaseException], type[QuotaflowError]], prefix: str = "") -> Iterator[None]:
    """Re-raise a lower layer's exception as the quotaflow error it maps to, chained (``raise ... from``).

    The first entry whose type matches wins, so list specific types before general ones; the new error's message
    is ``prefix`` + the original's. An error already in the tree is only mapped by an entry that names a type of
    the tree (``{InvalidRequestError: ConnectionClosed}``), never by a general one such as ``Exception``; anything
    the mapping does not match passes through untouched::

        with map_errors({sqlite3.Error: StoreError}, f"cannot open quota store {path}: "):
            conn = sqlite3.connect(path)
    """
    try:
        yield
    except Exception as e:
        ours = isinstance(e, QuotaflowError)
        for source, target in mapping.items():
            if isinstance(e, source) and (not ours or issubclass(source, QuotaflowError)):
                raise target(f"{prefix}{e}") from e
        raise
