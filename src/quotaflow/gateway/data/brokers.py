"""N upstream brokers behind one gateway: one gateway port per upstream broker per listener.

The scheme is Kroxylicious' port-per-broker. ``--upstream`` is the cluster's bootstrap list. The gateway learns
the brokers (node id, advertised host and port) from every Metadata, DescribeCluster and FindCoordinator response
that passes through it, and from one Metadata request at startup. Each node gets its own gateway port on every
listener, bound while the gateway runs, the moment the node is first named. A connection accepted on node *n*'s
port is forwarded to node *n*'s advertised address; a connection on the listener's own (bootstrap) port goes to the
first bootstrap address that answers. Rewritten responses name node *n* by its gateway port, so clients only ever
learn gateway addresses and reach every partition leader and coordinator through the port of the broker that
serves it.

The mapping is deterministic: with ``--broker-port-base LISTENER=BASE`` node *n* is served on ``BASE + n`` (an
address out of range or already taken is logged and that node is served on the bootstrap port instead); without
it each node gets a free port, printed on the ready line and served as JSON at ``/brokers`` on the metrics port.
When ``--upstream`` is one address and that address is a broker's own advertised address, that broker is served
on the listener's own port (a one-broker upstream needs no extra port).

Quotas are kept per upstream broker, as on Kafka: :func:`broker_key` names the broker a connection is forwarded
to (its node id), which selects its quota managers and fills the event log's ``broker`` column.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple, TypeAlias

from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import MetadataRequest

from quotaflow.core.addresses import parse_host_port
from quotaflow.core.errors import QuotaflowError
from quotaflow.gateway.wire import protocol

log = logging.getLogger(__name__)

Address: TypeAlias = tuple[str, int]
Streams: TypeAlias = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Bind: TypeAlias = Callable[[str, str, int, int], Address]  # (listener, host, port, node id) -> bound address
Open: TypeAlias = Callable[[Address], Awaitable[Streams]]



class UpstreamLeg(NamedTuple):
    """An upstream connection as :meth:`BrokerRoutes.connect` opened it: its streams, the node it reached (None: a
    bootstrap address whose node is not known) and the address it reached, so a client connection whose idle leg was
    closed reopens it to the same broker (``quotaflow.upstream.connections.max.idle.ms``)."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    node: int | None
    address: Address


DISCOVERY_METADATA_VERSION: Final = 1  # node_id, host, port, rack: every broker since Kafka 0.10 answers it
MAX_PORT: Final = 65535


class UpstreamUnavailableError(QuotaflowError, OSError):
    """No upstream address of the bootstrap list (or the node's own address) accepted a connection."""


def parse_upstreams(value: str | Address | Sequence[Address]) -> list[Address]:
    """``HOST:PORT[,HOST:PORT...]`` (or a tuple, or a list of tuples): the bootstrap list, in order."""
    items: list[Any] = [value] if isinstance(value, str) or isinstance(value[0], str) else list(value)
    out: list[Address] = []
    for item in items:
        if isinstance(item, str):
            out += [parse_host_port(part) for part in item.split(",") if part.strip()]
        else:
            out.append((str(item[0]), int(item[1])))
    if not out:
        raise ValueError("at least one upstream HOST:PORT is required")
    return out


def broker_key(node: int | None, fallback: str) -> str:
    """The ``broker`` of a connection's quotas and events: the upstream node id, else ``fallback`` (``--broker``)
    while the node behind a bootstrap address is not known yet."""
    return fallback if node is None else str(node)


class BrokerRoutes:
    """Upstream nodes, their gateway ports per listener, and the connection to open for a gateway port."""

    def __init__(self, bootstrap: Sequence[Address], listeners: Mapping[str, Address], bind: Bind, open_upstream: Open,
                 *, port_base: Mapping[str, int] | None = None) -> None:
        self.bootstrap = list(bootstrap)
        self.listeners = dict(listeners)  # listener -> its bound (bootstrap) address
        self.port_base = dict(port_base or {})
        unknown = set(self.port_base) - set(self.listeners)
        if unknown:
            raise ValueError(f"--broker-port-base names unknown listeners: {sorted(unknown)}")
        self.upstream: dict[int, Address] = {}  # node id -> its advertised address
        self.ports: dict[str, dict[int, Address]] = {name: {} for name in self.listeners}
        self._bind = bind
        self._open = open_upstream
        self._failed: set[tuple[str, int]] = set()  # (listener, node) whose port could not be bound (logged once)

    # -- learning nodes -------------------------------------------------------------------------------------

    def bootstrap_node(self) -> int | None:
        """The node served on the listeners' own ports: the single bootstrap address's own broker."""
        if len(self.bootstrap) != 1:
            return None
        return self.node_at(self.bootstrap[0])

    def node_at(self, address: Address) -> int | None:
        for node, upstream in self.upstream.items():
            if upstream == address:
                return node
        return None

    def learn(self, node: int, host: str, port: int) -> None:
        """A node named by the upstream: remember its address, give it a port on every listener (while running)."""
        if node < 0:
            return
        previous = self.upstream.get(node)
        if previous != (host, port):
            if previous is not None:
                log.info("upstream node %d moved from %s:%d to %s:%d", node, *previous, host, port)
            self.upstream[node] = (host, port)
        if node == self.bootstrap_node():
            return
        for listener, (bind_host, _port) in self.listeners.items():
            if node not in self.ports[listener] and (listener, node) not in self._failed:
                self._open_port(listener, bind_host, node)

    def _open_port(self, listener: str, host: str, node: int) -> None:
        base = self.port_base.get(listener)
        port = 0 if base is None else base + node
        try:
            if not 0 <= port <= MAX_PORT:
                raise OSError(f"port {base} + node id {node} is out of range")
            self.ports[listener][node] = address = self._bind(listener, host, port, node)
        except OSError as e:
            self._failed.add((listener, node))
            log.error("cannot serve upstream node %d on listener %s port %d (%s): clients are sent to the "
                      "bootstrap port for it", node, listener, port, e)
            return
        log.info("upstream node %d (%s:%d) served on %s %s:%d", node, *self.upstream[node], listener, *address)

    def gateway_address(self, listener: str, node: int, host: str, port: int) -> Address:
        """What clients on ``listener`` are told for upstream node ``node`` advertised at ``host:port``."""
        self.learn(node, host, port)
        return self.ports[listener].get(node, self.listeners[listener])

    def learn_brokers(self, brokers: Sequence[Any]) -> None:
        for broker in brokers:
            self.learn(int(broker.node_id), str(broker.host), int(broker.port))

    # -- connecting -----------------------------------------------------------------------------------------

    async def connect(self, node: int | None, at: Address | None = None) -> UpstreamLeg:
        """The upstream connection for a client on node ``node``'s port (None: a bootstrap port), the node and the
        address it reaches. A bootstrap connection tries the bootstrap addresses in order, unless ``at`` pins it to
        the one it reached before (its node unknown: a reopened leg must reach the same broker)."""
        targets = [at] if node is None and at is not None else self.bootstrap if node is None \
            else [self.upstream[node]]
        errors: list[str] = []
        for address in targets:
            try:
                reader, writer = await self._open(address)
            except OSError as e:
                errors.append(f"{address[0]}:{address[1]}: {e}")
                continue
            return UpstreamLeg(reader, writer, node if node is not None else self.node_at(address), address)
        raise UpstreamUnavailableError("; ".join(errors))

    async def discover(self, timeout_s: float = 5.0) -> bool:
        """Ask the cluster for its brokers once (Metadata v1, no topics) and give each a port now, so the ready line
        can name them. False (logged) when the upstream did not answer: brokers are then learned from traffic."""
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer, _node, _at = await self.connect(None)
                try:
                    brokers = await _metadata_brokers(reader, writer)
                finally:
                    writer.close()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, QuotaflowError) as e:
            log.warning("could not learn the upstream brokers at startup (%s); learning them from traffic", e)
            return False
        self.learn_brokers(brokers)
        return True

    # -- reporting ------------------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """``/brokers``: each listener's bootstrap address and node ports, and each node's upstream address."""
        served = self.bootstrap_node()
        listeners: dict[str, Any] = {}
        for name, (host, port) in self.listeners.items():
            nodes = {str(n): f"{h}:{p}" for n, (h, p) in sorted(self.ports[name].items())}
            if served is not None:
                nodes[str(served)] = f"{host}:{port}"
            listeners[name] = {"bootstrap": f"{host}:{port}", "nodes": dict(sorted(nodes.items()))}
        return {
            "bootstrap": [f"{h}:{p}" for h, p in self.bootstrap],
            "upstream": {str(n): f"{h}:{p}" for n, (h, p) in sorted(self.upstream.items())},
            "listeners": listeners,
        }


async def _metadata_brokers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> list[Any]:
    version = DISCOVERY_METADATA_VERSION
    request = MetadataRequest[version](topics=[])
    request.with_header(correlation_id=1, client_id="quotaflow-gateway")
    writer.write(bytes(request.encode(version=version, header=True, framed=True)))
    await writer.drain()
    size = protocol.SIZE.unpack(await reader.readexactly(4))[0]
    frame = await reader.readexactly(size)
    try:
        response = protocol.decode_response(frame, ApiKey.Metadata, version)
    except Exception as e:  # kafka-python raises assorted errors on malformed input
        raise ValueError(f"undecodable Metadata response: {e}") from e
    return list(response.brokers)
