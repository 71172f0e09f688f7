"""Gateway settings, under Kafka's broker config names where Kafka has one.

``--config FILE`` is a ``server.properties``-style file. Keys the gateway itself reads are typed here; the
connection-quota keys (``max.connection.creation.rate``, ``listener.name.<l>.max.connection.creation.rate``,
``max.connections*``) are the listener's (``quotaflow.brokerconfig``), which also reloads them when the file changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from quotaflow.brokerconfig import QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE_SECONDS, parse_properties
from quotaflow.core.errors import CommandError, InvalidConfigurationError, map_errors
from quotaflow.core.principals import EXCLUDED_PRINCIPALS, parse_excluded_principals
from quotaflow.engine.stats import DEFAULT_QUOTA_WINDOW_NUM, DEFAULT_QUOTA_WINDOW_SIZE_SECONDS

SOCKET_REQUEST_MAX_BYTES: Final = "socket.request.max.bytes"
CONNECTIONS_MAX_IDLE_MS: Final = "connections.max.idle.ms"
CONTROLLER_QUOTA_WINDOW_NUM: Final = "controller.quota.window.num"
CONTROLLER_QUOTA_WINDOW_SIZE_SECONDS: Final = "controller.quota.window.size.seconds"
QUOTA_POLL_MS: Final = "quotaflow.store.poll.ms"
MAX_IN_FLIGHT: Final = "quotaflow.max.in.flight.requests"
FETCH_MAX_BYTES: Final = "fetch.max.bytes"
QUEUED_MAX_REQUEST_BYTES: Final = "queued.max.request.bytes"
SASL_QUEUED_MAX_REQUEST_BYTES: Final = "quotaflow.sasl.queued.max.request.bytes"
REQUEST_BODY_TIMEOUT_MS: Final = "quotaflow.request.body.timeout.ms"
SASL_SERVER_MAX_RECEIVE_SIZE: Final = "sasl.server.max.receive.size"
FAILED_AUTHENTICATION_DELAY_MS: Final = "connection.failed.authentication.delay.ms"
MAX_UNSENT_RESPONSE_BYTES: Final = "quotaflow.max.unsent.response.bytes"
SASL_VERIFY_THREADS: Final = "quotaflow.sasl.verify.threads"
SASL_FAILED_PER_IP_RATE: Final = "quotaflow.sasl.failed.authentication.rate.per.ip"
SASL_VERIFY_QUEUE_SIZE: Final = "quotaflow.sasl.verify.queue.size"
SASL_VERIFY_QUEUE_TIMEOUT_MS: Final = "quotaflow.sasl.verify.queue.timeout.ms"
SCRAM_LEGACY_CLIENT_NONCE: Final = "quotaflow.sasl.scram.legacy.client.nonce"
UPSTREAM_BACKOFF_MS: Final = "quotaflow.upstream.reconnect.backoff.ms"
UPSTREAM_BACKOFF_MAX_MS: Final = "quotaflow.upstream.reconnect.backoff.max.ms"
UPSTREAM_CONNECT_TIMEOUT_MS: Final = "quotaflow.upstream.connect.timeout.ms"
UPSTREAM_CONNECTIONS_MAX_IDLE_MS: Final = "quotaflow.upstream.connections.max.idle.ms"
LISTENER_SECURITY_PROTOCOL_MAP: Final = "listener.security.protocol.map"
PLAINTEXT: Final = "PLAINTEXT"
SASL_PLAINTEXT: Final = "SASL_PLAINTEXT"
SSL: Final = "SSL"
SASL_SSL: Final = "SASL_SSL"
SECURITY_PROTOCOLS: Final = frozenset({PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL})
TLS_PROTOCOLS: Final = frozenset({SSL, SASL_SSL})  # TLS settings: gateway.auth.tls
SASL_PROTOCOLS: Final = frozenset({SASL_PLAINTEXT, SASL_SSL})


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    socket_request_max_bytes: int = 100 * 1024 * 1024  # Kafka's default (104857600)
    connections_max_idle_ms: int = 600_000  # Kafka's default (10 minutes)
    quota_window_num: int = DEFAULT_QUOTA_WINDOW_NUM
    quota_window_size_seconds: int = DEFAULT_QUOTA_WINDOW_SIZE_SECONDS
    controller_quota_window_num: int = DEFAULT_QUOTA_WINDOW_NUM
    controller_quota_window_size_seconds: int = DEFAULT_QUOTA_WINDOW_SIZE_SECONDS
    store_poll_ms: int = 250  # quota changes apply within a second
    max_in_flight: int = 256  # unanswered requests read per connection; 1 = Kafka's one-at-a-time reading
    fetch_max_bytes: int = 57_671_680  # Kafka's broker default (55 MB): Fetch max_bytes is capped to it
    # the pool for request frames larger than a connection's receive buffer, all connections
    # (gateway.data.request_memory);
    # None: socket.request.max.bytes (Kafka's default is -1, unbounded: one announced frame could hold it all)
    queued_max_request_bytes: int | None = None
    # the same, for frames before SASL authentication (each at most sasl.server.max.receive.size)
    sasl_queued_max_request_bytes: int = 8 * 1024 * 1024
    request_body_timeout_ms: int = 30_000  # a frame begun must be whole within this (the client's request.timeout.ms)
    # responses read from the upstream (or made here) but not yet taken by the client's socket: above this, the
    # gateway stops reading both the client and its upstream connection (docs/gateway.md: memory bound)
    max_unsent_response_bytes: int = 4 * 1024 * 1024
    sasl_server_max_receive_size: int = 524_288  # Kafka's default: larger frames before authentication close
    failed_authentication_delay_ms: int = 100  # Kafka's default: a failed login is answered after this delay
    sasl_verify_threads: int = 1  # the bounded pool that hashes passwords, off the event loop
    sasl_failed_rate_per_ip: int = 1  # password hashes per second per client IP for failing logins (burst 3)
    # logins waiting for a password hash while the pool is busy, and how long one waits; past either the connection
    # is closed (the client reconnects), never told its password is wrong (gateway.auth.sasl.SaslVerifier)
    sasl_verify_queue_size: int = 1_000
    sasl_verify_queue_timeout_ms: int = 10_000  # Kafka clients' socket.connection.setup.timeout.ms default
    # accept librdkafka < 2.6.1's SCRAM client-final nonce (its own nonce repeated), as Kafka 3.8.1-3.9 did
    scram_legacy_client_nonce: bool = False
    upstream_backoff_ms: int = 100  # first wait before retrying an unreachable upstream
    upstream_backoff_max_ms: int = 2_000  # the exponential backoff's ceiling
    upstream_connect_timeout_ms: int = 30_000  # how long a client is held while its upstream is retried
    # a client connection's upstream leg idle this long is closed (nothing in flight; never in SASL passthrough)
    # and reopened to the same broker with its next request: an idle client then holds one descriptor, as on a
    # broker (the Kafka client's connections.max.idle.ms, whose default is 540000; -1: never)
    upstream_connections_max_idle_ms: int = 60_000
    # listener name -> PLAINTEXT | SASL_PLAINTEXT | SSL | SASL_SSL (listener.security.protocol.map); unmapped ones use
    # their own name when it is a protocol name, else PLAINTEXT
    security_protocols: Mapping[str, str] = field(default_factory=dict)
    # principal names never throttled by client quotas (quotaflow.quota.excluded.principals=User:ops;User:repl)
    excluded_principals: frozenset[str] = frozenset()
    extra: Mapping[str, str] = field(default_factory=dict)  # everything else: the listener's connection quotas

    @classmethod
    def from_properties(cls, props: Mapping[str, str], **overrides: object) -> GatewayConfig:
        typed = {
            SOCKET_REQUEST_MAX_BYTES: "socket_request_max_bytes",
            CONNECTIONS_MAX_IDLE_MS: "connections_max_idle_ms",
            QUOTA_WINDOW_NUM: "quota_window_num",
            QUOTA_WINDOW_SIZE_SECONDS: "quota_window_size_seconds",
            CONTROLLER_QUOTA_WINDOW_NUM: "controller_quota_window_num",
            CONTROLLER_QUOTA_WINDOW_SIZE_SECONDS: "controller_quota_window_size_seconds",
            QUOTA_POLL_MS: "store_poll_ms",
            MAX_IN_FLIGHT: "max_in_flight",
            FETCH_MAX_BYTES: "fetch_max_bytes",
            QUEUED_MAX_REQUEST_BYTES: "queued_max_request_bytes",
            SASL_QUEUED_MAX_REQUEST_BYTES: "sasl_queued_max_request_bytes",
            REQUEST_BODY_TIMEOUT_MS: "request_body_timeout_ms",
            MAX_UNSENT_RESPONSE_BYTES: "max_unsent_response_bytes",
            SASL_SERVER_MAX_RECEIVE_SIZE: "sasl_server_max_receive_size",
            FAILED_AUTHENTICATION_DELAY_MS: "failed_authentication_delay_ms",
            SASL_VERIFY_THREADS: "sasl_verify_threads",
            SASL_FAILED_PER_IP_RATE: "sasl_failed_rate_per_ip",
            SASL_VERIFY_QUEUE_SIZE: "sasl_verify_queue_size",
            SASL_VERIFY_QUEUE_TIMEOUT_MS: "sasl_verify_queue_timeout_ms",
            UPSTREAM_BACKOFF_MS: "upstream_backoff_ms",
            UPSTREAM_BACKOFF_MAX_MS: "upstream_backoff_max_ms",
            UPSTREAM_CONNECT_TIMEOUT_MS: "upstream_connect_timeout_ms",
            UPSTREAM_CONNECTIONS_MAX_IDLE_MS: "upstream_connections_max_idle_ms",
        }
        minimum = {FAILED_AUTHENTICATION_DELAY_MS: 0, FETCH_MAX_BYTES: 1024, QUEUED_MAX_REQUEST_BYTES: -1,
                   UPSTREAM_CONNECTIONS_MAX_IDLE_MS: -1}
        values: dict[str, object] = {}
        extra: dict[str, str] = {}
        for key, raw in props.items():
            if key == LISTENER_SECURITY_PROTOCOL_MAP:
                values["security_protocols"] = parse_security_protocol_map(raw)
            elif key == EXCLUDED_PRINCIPALS:
                with map_errors({InvalidConfigurationError: CommandError}):
                    values["excluded_principals"] = parse_excluded_principals(raw)
            elif key == SCRAM_LEGACY_CLIENT_NONCE:
                values["scram_legacy_client_nonce"] = parse_boolean(key, raw)
            elif key in typed:
                try:
                    number = int(raw)
                except ValueError as e:
                    raise CommandError(f"Invalid value {raw} for configuration {key}: Not a number of type INT") from e
                least = minimum.get(key, 1)
                if number < least:
                    raise CommandError(f"Invalid value {raw} for configuration {key}: Value must be at least {least}")
                if key == UPSTREAM_CONNECTIONS_MAX_IDLE_MS and number == 0:
                    raise CommandError(f"Invalid value {raw} for configuration {key}: Value must be -1 (never) or at "
                                       f"least 1")
                values[typed[key]] = number
            else:
                extra[key] = raw
        values["extra"] = extra
        values.update(overrides)
        config = cls(**values)  # type: ignore[arg-type]
        if 0 < (config.queued_max_request_bytes or 0) < config.socket_request_max_bytes:
            raise CommandError(f"{QUEUED_MAX_REQUEST_BYTES} must be larger or equal to {SOCKET_REQUEST_MAX_BYTES}")
        return config

    @property
    def request_pool_bytes(self) -> int:
        """``queued.max.request.bytes`` in force: its value, else ``socket.request.max.bytes`` (-1: unbounded)."""
        q = self.queued_max_request_bytes
        return self.socket_request_max_bytes if q is None else q

    def security_protocol(self, listener: str) -> str:
        default = listener if listener in SECURITY_PROTOCOLS else PLAINTEXT
        return self.security_protocols.get(listener, default)


def parse_boolean(key: str, raw: str) -> bool:
    """A BOOLEAN setting as Kafka's ConfigDef parses one: ``true`` or ``false``, any case, trimmed."""
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise CommandError(f"Invalid value {raw} for configuration {key}: Expected value to be either true or false")
    return value == "true"


def parse_security_protocol_map(raw: str) -> dict[str, str]:
    """``NAME:PROTOCOL,NAME:PROTOCOL`` with PLAINTEXT, SASL_PLAINTEXT, SSL or SASL_SSL."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, protocol = item.partition(":")
        if not sep or not name:
            raise CommandError(f"Invalid value {raw} for configuration {LISTENER_SECURITY_PROTOCOL_MAP}: "
                               f"expected NAME:PROTOCOL pairs")
        if protocol not in SECURITY_PROTOCOLS:
            raise CommandError(f"security protocol {protocol} of listener {name} is not supported by the gateway "
                               f"(PLAINTEXT, SASL_PLAINTEXT, SSL or SASL_SSL)")
        out[name] = protocol
    return out


def read_properties(path: str | Path) -> dict[str, str]:
    """A ``server.properties``-style file, parsed as Java properties (``quotaflow.brokerconfig``)."""
    with map_errors({OSError: CommandError}, f"cannot read config file {path}: "):
        text = Path(path).read_text(encoding="utf-8")
    return parse_properties(text)
