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


def test_hardening_settings_have_kafkas_names_and_defaults() -> None:
    default = GatewayConfig.from_properties({})
    assert (default.sasl_server_max_receive_size, default.failed_authentication_delay_ms,
            default.fetch_max_bytes, default.queued_max_request_bytes) == (524_288, 100, 57_671_680, -1)
    tuned = GatewayConfig.from_properties({"connection.failed.authentication.delay.ms": "0",
                                           "quotaflow.max.unsent.response.bytes": "1048576",
                                           "queued.max.request.bytes": "209715200"})
    assert (tuned.failed_authentication_delay_ms, tuned.max_unsent_response_bytes) == (0, 1 << 20)
    with pytest.raises(CommandError, match=r"queued\.max\.request\.bytes must be larger or equal"):
        GatewayConfig.from_properties({"queued.max.request.bytes": "1000"})
    with pytest.raises(CommandError, match="Value must be at least 1024"):
        GatewayConfig.from_properties({"fetch.max.bytes": "10"})


def test_request_memory_holds_readers_while_the_pool_is_full() -> None:
    import asyncio

    from quotaflow.gateway.request_memory import RequestMemory

    async def run() -> list[str]:
        pool, order = RequestMemory(100), []

        async def reader(name: str, size: int, hold: float) -> None:
            await pool.acquire(size)
            order.append(f"{name}+")
            await asyncio.sleep(hold)
            pool.release(size)

        await asyncio.gather(reader("a", 80, 0.05), reader("b", 80, 0.0), reader("huge", 500, 0.0))
        assert pool.used == 0
        return order

    order = asyncio.run(run())
    assert order[0] == "a+" and set(order) == {"a+", "b+", "huge+"}  # b and huge waited for a's bytes
