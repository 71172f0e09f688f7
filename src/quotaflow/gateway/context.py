"""What a client connection needs from the gateway that serves it, as an interface (``Gateway`` satisfies it).

The connection depends on this, never on :mod:`quotaflow.gateway.server`: settings, per-broker quota managers, the
upstream, SASL verification, the local quota-admin answers, address rewriting and the event-log hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from quotaflow.core.acl import Authorizer
    from quotaflow.engine.connection import ConnectionQuotas
    from quotaflow.gateway.auth.acl_admin import AclAdminHandler
    from quotaflow.gateway.auth.authorize import Access
    from quotaflow.gateway.auth.sasl import SaslVerifier
    from quotaflow.gateway.auth.scram import UnknownUsers
    from quotaflow.gateway.auth.scram_admin import ScramAdmin
    from quotaflow.gateway.config import GatewayConfig
    from quotaflow.gateway.data.addresses import AddressOf
    from quotaflow.gateway.data.broker_quotas import BrokerQuotas
    from quotaflow.gateway.data.brokers import Address, UpstreamLeg
    from quotaflow.gateway.data.partition_counts import PartitionCounts
    from quotaflow.gateway.data.quota_admin import QuotaAdminHandler
    from quotaflow.gateway.data.request_memory import RequestMemory
    from quotaflow.gateway.observation.row_queue import RowQueue
    from quotaflow.store.base import ScramStore


class DecisionClock(Protocol):
    """Wall-clock ms for quota decisions, never behind the previous one (the gateway's is
    ``gateway.data.connection.DecisionClock``, which the compiled core calls in C)."""

    def now_ms(self) -> int: ...


class ConnectionContext(Protocol):
    """Everything a :class:`~quotaflow.gateway.data.connection.ClientConnection` uses of its gateway."""

    @property
    def config(self) -> GatewayConfig: ...
    @property
    def broker(self) -> str:
        """The gateway's own name: the quota managers' key until a bootstrap connection's upstream is known."""
    @property
    def broker_quotas(self) -> BrokerQuotas: ...
    @property
    def request_memory(self) -> RequestMemory:
        """``queued.max.request.bytes``: large request frames of authenticated (or non-SASL) connections."""
    @property
    def preauth_memory(self) -> RequestMemory:
        """``quotaflow.sasl.queued.max.request.bytes``: large frames before SASL authentication."""
    @property
    def sasl_passthrough(self) -> bool:
        """The upstream authenticates: clients' SASL goes to their broker."""
    @property
    def sasl_mechanisms(self) -> tuple[str, ...]: ...
    @property
    def sasl(self) -> SaslVerifier: ...
    @property
    def scram_store(self) -> ScramStore | None: ...
    @property
    def scram_unknown_users(self) -> UnknownUsers:
        """How an unknown user's SCRAM client-first message is answered (shaped like the store's credentials)."""
    @property
    def quota_admin(self) -> QuotaAdminHandler: ...
    @property
    def partition_counts(self) -> PartitionCounts:
        """The upstream's partition counts (KIP-599 permits of DeleteTopics / CreatePartitions)."""
    @property
    def connection_quotas(self) -> ConnectionQuotas:
        """KIP-612 connection quotas (a principal's connection creation rate is checked at authentication)."""
    @property
    def acl_admin(self) -> AclAdminHandler:
        """The local answers to DescribeAcls / CreateAcls / DeleteAcls."""
    @property
    def authorizer(self) -> Authorizer | None:
        """Kafka's authorizer at the gateway (``authorizer.class.name``); None: every request is allowed, as on a
        broker without one (quotaflow's own topics stay hidden either way)."""

    @property
    def request_rows(self) -> RowQueue | None:
        """Where a connection appends each request's event-log row (``pending.request_row``); None: no event log."""
    @property
    def access(self) -> Access:
        """What per-API authorization uses: the authorizer (None in SASL passthrough), quotaflow's hidden topics,
        the audit of decisions (:mod:`quotaflow.gateway.auth.authorize`)."""
    @property
    def scram_admin(self) -> ScramAdmin | None:
        """KIP-554 answers from the gateway's own credentials (None: the store keeps no SCRAM credentials)."""

    async def connect_upstream(self, node: int | None, at: Address | None = None) -> UpstreamLeg: ...
    async def upstream_api_versions(self) -> list[tuple[int, int, int]]: ...
    def address_map(self, listener: str) -> AddressOf: ...
    @property
    def decision_clock(self) -> DecisionClock:
        """Where quota decisions read their time."""
