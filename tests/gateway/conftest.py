"""Real parts for the gateway proof: one tansu broker per session (loopback, memory storage), free ports."""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


def _preload_kafka_protocol() -> None:
    """kafka-python 3.0.12 loads its JSON schemas with the deprecated ``importlib.resources.read_text``; the
    warning fires once per module at import, and pytest runs with ``filterwarnings = error``. Import them here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka.protocol

        for mod in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
            importlib.import_module(mod.name)


_preload_kafka_protocol()

from quotaflow.testing.tansu import Tansu, free_port  # noqa: E402  (after the preload on purpose)


@pytest.fixture(scope="session")
def tansu() -> Iterator[Tansu]:
    """The session's upstream broker. Tests that restart it must use their own :class:`Tansu` instead."""
    with Tansu() as broker:
        yield broker


@pytest.fixture
def port() -> int:
    """A free loopback port."""
    return free_port()


@dataclass
class RunningGateway:
    """A gateway on its own thread in front of the session's tansu, with its own store and event log."""

    thread: Any  # quotaflow.gateway.server.GatewayThread
    store_path: Path
    events: Path

    @property
    def bootstrap(self) -> str:
        return str(self.thread.bootstrap())

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.thread.address()
        return str(host), int(port)

    @property
    def http_url(self) -> str:
        assert self.thread.gateway.metrics_address is not None, "start the gateway with metrics_port=0"
        host, port = self.thread.gateway.metrics_address
        return f"http://{host}:{port}"

    def flush_events(self) -> None:
        log = self.thread.gateway._event_log
        if log is not None:
            log.flush()


GatewayFactory = Callable[..., RunningGateway]


@pytest.fixture
def gateway_factory(tansu: Tansu, tmp_path: Path) -> Iterator[GatewayFactory]:
    """``gateway_factory(**Gateway kwargs)``: start gateways (loopback, port 0); all stopped at teardown."""
    from quotaflow.gateway.server import GatewayThread

    started: list[Any] = []

    def start(upstream: str | None = None, **kwargs: Any) -> RunningGateway:
        n = len(started)
        store_path = Path(kwargs.pop("store", tmp_path / f"quotas-{n}.db"))
        events = Path(kwargs.pop("event_log", tmp_path / f"events-{n}"))
        listeners = kwargs.pop("listeners", {"PLAINTEXT": "127.0.0.1:0"})
        thread = GatewayThread(upstream or tansu.bootstrap, listeners, store_path, event_log=events, **kwargs)
        thread.start()
        started.append(thread)
        return RunningGateway(thread, store_path, events)

    yield start
    for thread in reversed(started):
        thread.stop()


@pytest.fixture
def gateway(gateway_factory: GatewayFactory) -> RunningGateway:
    """One gateway, no admin list (every principal may manage quotas), HTTP endpoint on a free port."""
    return gateway_factory(metrics_port=0)


@pytest.fixture(scope="session")
def mock_cluster() -> Iterator[dict[int, tuple[str, int]]]:
    """librdkafka's mock cluster: 3 real Kafka-protocol brokers inside this process, alive while its handle is.
    Node id -> (host, port), all on 127.0.0.1."""
    from confluent_kafka import Producer

    handle = Producer({"test.mock.num.brokers": 3, "bootstrap.servers": "", "log_level": 3})
    brokers = {b.id: (b.host, b.port) for b in handle.list_topics(timeout=10).brokers.values()}
    assert len(brokers) == 3 and {host for host, _ in brokers.values()} == {"127.0.0.1"}
    yield brokers
    handle.flush(1)
    del handle
