"""Port per broker: nodes learned while running get their own listening port; addresses move; bad bases are logged."""

from __future__ import annotations

import asyncio
import socket

import pytest

from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.gateway.data.brokers import BrokerRoutes, UpstreamUnavailableError, broker_key, parse_upstreams
from quotaflow.gateway.listener import AcceptedConnection, QuotaListener


def test_parse_upstreams() -> None:
    assert parse_upstreams("a:1, b:2,[::1]:3") == [("a", 1), ("b", 2), ("::1", 3)]
    assert parse_upstreams(("a", 1)) == [("a", 1)]
    assert parse_upstreams([("a", 1), ("b", 2)]) == [("a", 1), ("b", 2)]
    with pytest.raises(ValueError):
        parse_upstreams("a")
    with pytest.raises(ValueError):
        parse_upstreams("")
    assert broker_key(3, "gw") == "3" and broker_key(None, "gw") == "gw"


async def _refuse(_address: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    raise ConnectionRefusedError("refused")


def test_nodes_learned_while_running_are_served_and_routed() -> None:
    async def run() -> None:
        seen: list[AcceptedConnection] = []

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          accepted: AcceptedConnection) -> None:
            seen.append(accepted)
            writer.close()

        listener = QuotaListener({"PLAINTEXT": ("127.0.0.1", 0)}, ConnectionQuotas(ConnectionQuotaConfig()), handler)
        await listener.start()
        try:
            routes = BrokerRoutes([("up", 1), ("up", 2)], listener.addresses, listener.add_port, _refuse)
            assert routes.bootstrap_node() is None  # two bootstrap addresses: every node gets its own port
            first = routes.gateway_address("PLAINTEXT", 7, "up", 2)
            assert first != listener.addresses["PLAINTEXT"] and routes.node_at(("up", 2)) == 7
            reader, writer = await asyncio.open_connection(*first)  # the new port accepts at once
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            assert seen[-1].node == 7 and seen[-1].listener == "PLAINTEXT"
            # a moved broker keeps its gateway port; clients are forwarded to its new address
            assert routes.gateway_address("PLAINTEXT", 7, "moved", 9) == first
            assert routes.upstream[7] == ("moved", 9)
            assert routes.gateway_address("PLAINTEXT", -1, "", -1) == listener.addresses["PLAINTEXT"]
            assert -1 not in routes.upstream
            with pytest.raises(UpstreamUnavailableError):
                await routes.connect(7)
        finally:
            await listener.close()

    asyncio.run(run())


def test_base_plus_node_id_and_an_unusable_port_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        async def handler(*_args: object) -> None:
            return None

        listener = QuotaListener({"PLAINTEXT": ("127.0.0.1", 0)}, ConnectionQuotas(ConnectionQuotaConfig()), handler)
        await listener.start()
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        try:
            base = taken.getsockname()[1] - 2
            routes = BrokerRoutes([("up", 1)], listener.addresses, listener.add_port, _refuse,
                                  port_base={"PLAINTEXT": base})
            assert routes.gateway_address("PLAINTEXT", 2, "up", 9)  == listener.addresses["PLAINTEXT"]  # in use
            assert "cannot serve upstream node 2" in caplog.text
            assert routes.gateway_address("PLAINTEXT", 70000, "up", 10) == listener.addresses["PLAINTEXT"]
            assert "out of range" in caplog.text
            with pytest.raises(ValueError):
                BrokerRoutes([("up", 1)], listener.addresses, listener.add_port, _refuse, port_base={"NOPE": 1})
        finally:
            taken.close()
            await listener.close()

    asyncio.run(run())


def test_a_pinned_bootstrap_connection_tries_only_its_address() -> None:
    """A leg reopened after an idle close, on a bootstrap port whose node is not known, goes to the address it
    reached before (``at``), never to the bootstrap list's first answer."""
    async def run() -> None:
        tried: list[tuple[str, int]] = []

        async def record(address: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            tried.append(address)
            raise ConnectionRefusedError("refused")

        routes = BrokerRoutes([("a", 1), ("b", 2)], {}, lambda *_a: ("x", 0), record)
        with pytest.raises(UpstreamUnavailableError):
            await routes.connect(None)
        assert tried == [("a", 1), ("b", 2)]
        tried.clear()
        with pytest.raises(UpstreamUnavailableError, match="b:2"):
            await routes.connect(None, ("b", 2))
        assert tried == [("b", 2)]

    asyncio.run(run())
