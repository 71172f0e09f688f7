"""Broker-address rewriting: clients must only ever learn the gateway's addresses, never the upstream's.

Metadata (brokers), FindCoordinator (v0–3 host/port, v4+ coordinators) and DescribeCluster (brokers) carry broker
addresses and are rewritten: each upstream node id maps to its gateway address (``gateway.data.brokers``: one gateway
port per upstream node per listener).

Other API versions that name brokers are not decoded on the hot path; ApiVersions offers them only up to the last
version without addresses (:data:`ADDRESS_VERSION_CAPS`): Produce v10+ and Fetch v16+ carry KIP-951 ``NodeEndpoints``
(a moved leader's host and port), DescribeQuorum v2+ the controllers' listener endpoints. ShareFetch and
ShareAcknowledge (KIP-932) carry ``NodeEndpoints`` in every version and are not offered (:data:`NEVER_OFFERED`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from kafka.protocol.api_key import ApiKey

REWRITTEN_APIS: Final = frozenset({ApiKey.Metadata, ApiKey.FindCoordinator, ApiKey.DescribeCluster})
ADDRESS_VERSION_CAPS: Final[dict[int, int]] = {
    ApiKey.Produce: 9,  # v10+: NodeEndpoints (KIP-951)
    ApiKey.Fetch: 15,  # v16+: NodeEndpoints (KIP-951)
    ApiKey.DescribeQuorum: 1,  # v2+: controller Nodes with their listener endpoints
}
NEVER_OFFERED: Final = frozenset({ApiKey.ShareFetch, ApiKey.ShareAcknowledge})  # NodeEndpoints in every version


class AddressOf(Protocol):
    """Upstream node (id, advertised host, port) -> the gateway (host, port) a client must use for it."""

    def __call__(self, node_id: int, host: str, port: int) -> tuple[str, int]: ...


@dataclass(frozen=True, slots=True)
class AddressMap:
    """A fixed node id -> gateway address map (``gateway.data.brokers.BrokerRoutes`` is the live one)."""

    default: tuple[str, int]
    by_node: Mapping[int, tuple[str, int]] = field(default_factory=dict)

    def __call__(self, node_id: int, host: str = "", port: int = 0) -> tuple[str, int]:
        return self.by_node.get(node_id, self.default)


def _rewrite_node(obj: Any, node_attr: str, address_of: AddressOf) -> None:
    node_id = int(getattr(obj, node_attr))
    if node_id < 0:  # "no coordinator" / error placeholders carry node -1 and no usable address
        return
    obj.host, obj.port = address_of(node_id, str(obj.host), int(obj.port))


def rewrite_addresses(message: Any, api_key: int, address_of: AddressOf) -> None:
    """Rewrite every broker address in a decoded response, in place."""
    if api_key == ApiKey.Metadata:
        for broker in message.brokers:
            _rewrite_node(broker, "node_id", address_of)
    elif api_key == ApiKey.DescribeCluster:
        for broker in message.brokers:
            _rewrite_node(broker, "broker_id", address_of)
    elif api_key == ApiKey.FindCoordinator:
        if message.API_VERSION >= 4:
            for coordinator in message.coordinators:
                _rewrite_node(coordinator, "node_id", address_of)
        else:
            _rewrite_node(message, "node_id", address_of)
