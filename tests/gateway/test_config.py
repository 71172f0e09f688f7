from __future__ import annotations

from pathlib import Path

import pytest

from quotaflow.core.errors import CommandError
from quotaflow.gateway.config import GatewayConfig, read_properties


def test_from_properties_types_known_keys_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("# gateway\nsocket.request.max.bytes=1024\nconnections.max.idle.ms = 5000\n"
                    "quota.window.num:3\nmax.connection.creation.rate=10\n")
    config = GatewayConfig.from_properties(read_properties(path))
    assert (config.socket_request_max_bytes, config.connections_max_idle_ms, config.quota_window_num) == (
        1024, 5000, 3)
    assert config.quota_window_size_seconds == 1  # Kafka's default
    assert config.extra == {"max.connection.creation.rate": "10"}


@pytest.mark.parametrize("value", ["abc", "0", "-5"])
def test_invalid_values_are_refused(value: str) -> None:
    with pytest.raises(CommandError, match=r"socket\.request\.max\.bytes"):
        GatewayConfig.from_properties({"socket.request.max.bytes": value})


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CommandError):
        read_properties(tmp_path / "nope.properties")
