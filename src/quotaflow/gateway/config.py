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

from quotaflow.brokerconfig import parse_properties
from quotaflow.core.errors import CommandError, map_errors

SOCKET_REQUEST_MAX_BYTES: Final = "socket.request.max.bytes"
CONNECTIONS_MAX_IDLE_MS: Final = "connections.max.idle.ms"
QUOTA_WINDOW_NUM: Final = "quota.window.num"
QUOTA_WINDOW_SIZE_SECONDS: Final = "quota.window.size.seconds"
CONTROLLER_QUOTA_WINDOW_NUM: Final = "controller.quota.window.num"
CONTROLLER_QUOTA_WINDOW_SIZE_SECONDS: Final = "controller.quota.window.size.seconds"
QUOTA_POLL_MS: Final = "quotaflow.store.poll.ms"
MAX_IN_FLIGHT: Final = "quotaflow.max.in.flight.requests"
LISTENER_SECURITY_PROTOCOL_MAP: Final = "listener.security.protocol.map"
PLAINTEXT: Final = "PLAINTEXT"
SASL_PLAINTEXT: Final = "SASL_PLAINTEXT"
SECURITY_PROTOCOLS: Final = frozenset({PLAINTEXT, SASL_PLAINTEXT})  # no TLS at the gateway


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    socket_request_max_bytes: int = 100 * 1024 * 1024  # Kafka's default (104857600)
    connections_max_idle_ms: int = 600_000  # Kafka's default (10 minutes)
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    controller_quota_window_num: int = 11
    controller_quota_window_size_seconds: int = 1
    store_poll_ms: int = 250  # quota changes apply within a second
    max_in_flight: int = 256  # unanswered requests read per connection; 1 = Kafka's one-at-a-time reading
    # listener name -> PLAINTEXT | SASL_PLAINTEXT (Kafka's listener.security.protocol.map); unmapped listeners use
    # their own name when it is a protocol name, else PLAINTEXT
    security_protocols: Mapping[str, str] = field(default_factory=dict)
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
        }
        values: dict[str, object] = {}
        extra: dict[str, str] = {}
        for key, raw in props.items():
            if key == LISTENER_SECURITY_PROTOCOL_MAP:
                values["security_protocols"] = parse_security_protocol_map(raw)
            elif key in typed:
                try:
                    number = int(raw)
                except ValueError as e:
                    raise CommandError(f"Invalid value {raw} for configuration {key}: Not a number of type INT") from e
                if number < 1:
                    raise CommandError(f"Invalid value {raw} for configuration {key}: Value must be at least 1")
                values[typed[key]] = number
            else:
                extra[key] = raw
        values["extra"] = extra
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]


    def security_protocol(self, listener: str) -> str:
        default = listener if listener in SECURITY_PROTOCOLS else PLAINTEXT
        return self.security_protocols.get(listener, default)


def parse_security_protocol_map(raw: str) -> dict[str, str]:
    """``NAME:PROTOCOL,NAME:PROTOCOL``; only PLAINTEXT and SASL_PLAINTEXT (the gateway does not terminate TLS)."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, protocol = item.partition(":")
        if not sep or not name:
            raise CommandError(f"Invalid value {raw} for configuration {LISTENER_SECURITY_PROTOCOL_MAP}: "
                               f"expected NAME:PROTOCOL pairs")
        if protocol not in SECURITY_PROTOCOLS:
            raise CommandError(f"security protocol {protocol} of listener {name} is not supported by the gateway "
                               f"(PLAINTEXT or SASL_PLAINTEXT)")
        out[name] = protocol
    return out


def read_properties(path: str | Path) -> dict[str, str]:
    """A ``server.properties``-style file, parsed as Java properties (``quotaflow.brokerconfig``)."""
    with map_errors({OSError: CommandError}, f"cannot read config file {path}: "):
        text = Path(path).read_text(encoding="utf-8")
    return parse_properties(text)
