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
            default.fetch_max_bytes) == (524_288, 100, 57_671_680)
    # queued.max.request.bytes is bounded by default (Kafka's -1 let one announced frame hold every client): one
    # socket.request.max.bytes, and the frames before authentication have a pool of their own
    assert (default.queued_max_request_bytes, default.request_pool_bytes) == (None, 104_857_600)
    assert (default.sasl_queued_max_request_bytes, default.request_body_timeout_ms) == (8 << 20, 30_000)
    assert GatewayConfig.from_properties({"queued.max.request.bytes": "-1"}).request_pool_bytes == -1
    tuned = GatewayConfig.from_properties({"connection.failed.authentication.delay.ms": "0",
                                           "quotaflow.max.unsent.response.bytes": "1048576",
                                           "queued.max.request.bytes": "209715200"})
    assert (tuned.failed_authentication_delay_ms, tuned.max_unsent_response_bytes) == (0, 1 << 20)
    with pytest.raises(CommandError, match=r"queued\.max\.request\.bytes must be larger or equal"):
        GatewayConfig.from_properties({"queued.max.request.bytes": "1000"})
    with pytest.raises(CommandError, match="Value must be at least 1024"):
        GatewayConfig.from_properties({"fetch.max.bytes": "10"})


def test_request_memory_holds_readers_while_the_pool_is_full() -> None:
    from quotaflow.gateway.data.request_memory import RequestMemory

    pool, woken = RequestMemory(100), []
    a, b, c = object(), object(), object()
    assert pool.reserve(a, 60, lambda: None)
    assert pool.reserve(b, 30, lambda: None)
    # b's next chunk does not fit: it waits; a, the oldest holder, may always go on (two half-read frames
    # must never wait on each other for ever), which bounds the pool at capacity + one frame
    assert not pool.reserve(b, 20, lambda: woken.append("b"))
    assert not pool.reserve(c, 20, lambda: woken.append("c") or pool.reserve(c, 20, lambda: None))
    assert pool.reserve(a, 50, lambda: None) and pool.used == 140
    assert woken == []
    pool.release(a)  # a's frame passed on: the waiters are woken in order while there is room
    assert woken == ["b", "c"] and pool.used == 50 and pool.held(c) == 20
    pool.release(b)
    pool.release(c)
    assert pool.used == 0
    unbounded = RequestMemory(-1)
    assert unbounded.reserve(a, 1 << 40, lambda: None)


def test_request_memory_wakes_the_frames_closest_to_done_first() -> None:
    """Waiters needing the least go first: a frame that announced 100 MiB and sent little waits behind one about to
    finish, whatever the order they came in."""
    from quotaflow.gateway.data.request_memory import RequestMemory

    pool, woken = RequestMemory(100), []
    holder, hog, small = object(), object(), object()
    assert pool.reserve(holder, 100, lambda: None)
    assert not pool.reserve(hog, 50, lambda: woken.append("hog") or pool.reserve(hog, 50, lambda: None),
                            remaining=100 << 20)
    assert not pool.reserve(small, 50, lambda: woken.append("small") or pool.reserve(small, 50, lambda: None),
                            remaining=50)
    pool.release(holder)
    assert woken == ["small", "hog"] and pool.used == 100


def test_upstream_idle_setting_is_minus_one_or_positive() -> None:
    """``quotaflow.upstream.connections.max.idle.ms``: the Kafka client's ``connections.max.idle.ms`` for the
    gateway's upstream legs; -1 never closes one (as Kafka's Selector reads a negative value), 0 is refused."""
    assert GatewayConfig.from_properties({}).upstream_connections_max_idle_ms == 60_000
    for raw, value in (("-1", -1), ("1", 1), ("540000", 540_000)):
        config = GatewayConfig.from_properties({"quotaflow.upstream.connections.max.idle.ms": raw})
        assert config.upstream_connections_max_idle_ms == value
    for raw in ("0", "-2", "soon"):
        with pytest.raises(CommandError, match=r"quotaflow\.upstream\.connections\.max\.idle\.ms"):
            GatewayConfig.from_properties({"quotaflow.upstream.connections.max.idle.ms": raw})
