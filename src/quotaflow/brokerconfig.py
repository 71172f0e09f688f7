"""Broker settings from a ``server.properties``-style file: the connection-quota part, reloadable by mtime.

Kafka reads ``max.connection.creation.rate``, ``listener.name.<listener>.max.connection.creation.rate``,
``max.connections`` (also listener-prefixed), ``max.connections.per.ip``, ``max.connections.per.ip.overrides``,
``inter.broker.listener.name`` and the static ``quota.window.num`` / ``quota.window.size.seconds``. Values are
validated as Kafka's ConfigDef does and turned into the engine's :class:`ConnectionQuotaConfig`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from quotaflow.core.errors import InvalidConfigurationError
from quotaflow.core.keys import INT_MAX
from quotaflow.core.principals import EXCLUDED_PRINCIPALS, parse_excluded_principals
from quotaflow.core.properties import parse_properties as parse_properties  # re-exported: gateway.config, tests
from quotaflow.engine.connection import ConnectionQuotaConfig
from quotaflow.engine.stats import DEFAULT_QUOTA_WINDOW_NUM, DEFAULT_QUOTA_WINDOW_SIZE_SECONDS

MAX_CONNECTION_CREATION_RATE: Final = "max.connection.creation.rate"
MAX_CONNECTIONS: Final = "max.connections"
MAX_CONNECTIONS_PER_IP: Final = "max.connections.per.ip"
MAX_CONNECTIONS_PER_IP_OVERRIDES: Final = "max.connections.per.ip.overrides"
INTER_BROKER_LISTENER_NAME: Final = "inter.broker.listener.name"
QUOTA_WINDOW_NUM: Final = "quota.window.num"
QUOTA_WINDOW_SIZE_SECONDS: Final = "quota.window.size.seconds"
_LISTENER_KEY = re.compile(r"^listener\.name\.([^.]+)\.(max\.connection\.creation\.rate|max\.connections)$")


def _int(props: dict[str, str], key: str, default: int, at_least: int) -> int:
    raw = props.get(key)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = None
    if value is None or not -(1 << 31) <= value <= INT_MAX:
        raise InvalidConfigurationError(f"Invalid value {raw} for configuration {key}: Not a number of type INT")
    if value < at_least:
        raise InvalidConfigurationError(
            f"Invalid value {value} for configuration {key}: Value must be at least {at_least}"
        )
    return value


def parse_ip_overrides(raw: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,host:count`` (hosts taken literally, not resolved)."""
    out: dict[str, int] = {}
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        if not sep or not host.strip():
            raise InvalidConfigurationError(
                f"Invalid value {raw} for configuration {MAX_CONNECTIONS_PER_IP_OVERRIDES}: "
                "Map entry must be of form key:value"
            )
        try:
            out[host.strip()] = int(count.strip())
        except ValueError:
            raise InvalidConfigurationError(
                f"Invalid value {raw} for configuration {MAX_CONNECTIONS_PER_IP_OVERRIDES}: "
                f"Value for {host.strip()} is not an integer"
            ) from None
    return out


def connection_quota_config(props: dict[str, str]) -> ConnectionQuotaConfig:
    """The engine config from parsed properties, validated like Kafka's ConfigDef (atLeast 0, windows ≥ 1)."""
    listener_rates: dict[str, int] = {}
    listener_max: dict[str, int] = {}
    for key in props:
        m = _LISTENER_KEY.match(key)
        if m is None:
            continue
        if m.group(2) == MAX_CONNECTION_CREATION_RATE:
            listener_rates[m.group(1)] = _int(props, key, INT_MAX, 0)
        else:
            listener_max[m.group(1)] = _int(props, key, INT_MAX, 0)
    per_ip = _int(props, MAX_CONNECTIONS_PER_IP, INT_MAX, 0)
    overrides = parse_ip_overrides(props.get(MAX_CONNECTIONS_PER_IP_OVERRIDES, ""))
    if per_ip == 0 and not overrides:
        raise InvalidConfigurationError(
            f"Invalid value 0 for configuration {MAX_CONNECTIONS_PER_IP}: "
            f"{MAX_CONNECTIONS_PER_IP} can be set to zero only if {MAX_CONNECTIONS_PER_IP_OVERRIDES} property is set."
        )
    inter_broker = props.get(INTER_BROKER_LISTENER_NAME, "").strip() or None
    return ConnectionQuotaConfig(
        quota_window_num=_int(props, QUOTA_WINDOW_NUM, DEFAULT_QUOTA_WINDOW_NUM, 1),
        quota_window_size_seconds=_int(props, QUOTA_WINDOW_SIZE_SECONDS, DEFAULT_QUOTA_WINDOW_SIZE_SECONDS, 1),
        max_connection_creation_rate=_int(props, MAX_CONNECTION_CREATION_RATE, INT_MAX, 0),
        listener_rates=listener_rates,
        max_connections=_int(props, MAX_CONNECTIONS, INT_MAX, 0),
        listener_max_connections=listener_max,
        max_connections_per_ip=per_ip,
        max_connections_per_ip_overrides=overrides,
        inter_broker_listener=inter_broker,
    )


def load(path: str | os.PathLike[str]) -> ConnectionQuotaConfig:
    return connection_quota_config(parse_properties(Path(path).read_text(encoding="utf-8")))


def excluded_principals(path: str | os.PathLike[str]) -> frozenset[str]:
    """``quotaflow.quota.excluded.principals`` (the gateway's setting) from the same file, for backtest and replay."""
    raw = parse_properties(Path(path).read_text(encoding="utf-8")).get(EXCLUDED_PRINCIPALS, "")
    return parse_excluded_principals(raw)


@dataclass(slots=True)
class BrokerConfigWatcher:
    """Re-reads the file when its mtime or size changes; ``poll`` returns the new config or None."""

    path: Path
    _stamp: tuple[int, int] | None = None

    def _current_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def poll(self) -> ConnectionQuotaConfig | None:
        stamp = self._current_stamp()
        if stamp is None or stamp == self._stamp:
            return None
        config = load(self.path)  # raises on an invalid file; the stamp is kept so it is retried after a fix
        self._stamp = stamp
        return config
