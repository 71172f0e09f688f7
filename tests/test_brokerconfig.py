"""server.properties parsing for the connection quotas, validation as Kafka's ConfigDef, mtime-based reload."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quotaflow.brokerconfig import BrokerConfigWatcher, connection_quota_config, load, parse_properties
from quotaflow.core.errors import CommandError, InvalidConfigurationError
from quotaflow.core.keys import INT_MAX


def test_parse_properties_java_syntax() -> None:
    text = "# comment\n! bang\na=1\nb : 2\nc 3\nd=x\\\n   y\ne\\=k=v\\tw\n  \nf=\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "xy", "e=k": "v\tw", "f": ""}
    assert parse_properties("k\\u0041=\\u00e9t\\u00E9") == {"kA": "\u00e9t\u00e9"}


@pytest.mark.parametrize("text", ["a=\\uZZZZ", "a=\\u12", "\\u=1"])
def test_a_malformed_unicode_escape_is_a_config_error(text: str) -> None:
    with pytest.raises(CommandError, match=r"Malformed \\uxxxx encoding\."):
        parse_properties(text)


def test_connection_quota_config() -> None:
    cfg = connection_quota_config(
        parse_properties(
            "max.connection.creation.rate=30\n"
            "listener.name.external.max.connection.creation.rate=10\n"
            "listener.name.replication.max.connections=5\n"
            "max.connections=100\nmax.connections.per.ip=4\n"
            "max.connections.per.ip.overrides=127.0.0.2:1, 127.0.0.3:8\n"
            "inter.broker.listener.name=REPLICATION\nquota.window.num=2\n"
        )
    )
    assert cfg.max_connection_creation_rate == 30
    assert dict(cfg.listener_rates) == {"external": 10}
    assert dict(cfg.listener_max_connections) == {"replication": 5}
    assert (cfg.max_connections, cfg.max_connections_per_ip) == (100, 4)
    assert dict(cfg.max_connections_per_ip_overrides) == {"127.0.0.2": 1, "127.0.0.3": 8}
    assert cfg.inter_broker_listener == "REPLICATION"
    assert (cfg.quota_window_num, cfg.quota_window_size_seconds) == (2, 1)


def test_defaults_are_unlimited() -> None:
    cfg = connection_quota_config({})
    assert cfg.max_connection_creation_rate == cfg.max_connections == cfg.max_connections_per_ip == INT_MAX
    assert (cfg.quota_window_num, cfg.inter_broker_listener) == (11, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max.connection.creation.rate=-1", "Value must be at least 0"),
        ("max.connections=lots", "Not a number of type INT"),
        ("quota.window.num=0", "Value must be at least 1"),
        ("max.connections.per.ip=0", "can be set to zero only if max.connections.per.ip.overrides"),
        ("max.connections.per.ip.overrides=hostonly", "Map entry must be of form key:value"),
    ],
)
def test_invalid_values(text: str, message: str) -> None:
    with pytest.raises(InvalidConfigurationError, match=message):
        connection_quota_config(parse_properties(text))


def test_watcher_reloads_on_change(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    watcher = BrokerConfigWatcher(path)
    assert watcher.poll() is None  # no file yet
    path.write_text("max.connection.creation.rate=5\n")
    first = watcher.poll()
    assert first is not None and first.max_connection_creation_rate == 5
    assert watcher.poll() is None
    path.write_text("max.connection.creation.rate=50\n")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    second = watcher.poll()
    assert second is not None and second.max_connection_creation_rate == 50
    assert load(path) == second
