"""The gateway: named listeners in front of an upstream cluster, quotas from the store, usage events out.

``Gateway`` is the programmatic entry point (``await start()`` / ``await stop()``, bound ``addresses``); tests, the
demo and the bench use it in-process, through ``GatewayThread`` from synchronous code, or as the
``quotaflow gateway`` subprocess. The front door is the connection-quota listener (KIP-612); every admitted client
connection gets its own upstream connection (:mod:`quotaflow.gateway.data.connection`), to the broker whose gateway port
it came in on (:mod:`quotaflow.gateway.data.brokers`), closed while the client is idle and reopened with its next
request (``quotaflow.upstream.connections.max.idle.ms``).
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kafka.protocol.api_key import ApiKey
from kafka.protocol.metadata import ApiVersionsRequest

from quotaflow.admin import Admin
from quotaflow.admin.acls import AclAdmin
from quotaflow.admin.codec import resolution_to_json
from quotaflow.brokerconfig import connection_quota_config
from quotaflow.core.acl import Authorizer
from quotaflow.core.addresses import parse_host_port
from quotaflow.core.authorizer import AclIndex, StandardAuthorizer, authorizer_from_properties
from quotaflow.core.errors import CommandError, QuotaflowError, StoreError
from quotaflow.engine.connection import ConnectionQuotaConfig
from quotaflow.engine.metrics import MetricSample, MetricSource
from quotaflow.gateway.auth.acl_admin import AclAdminHandler
from quotaflow.gateway.auth.authorize import Access
from quotaflow.gateway.auth.authz_audit import LOG_ALLOWED, AuthzAudit
from quotaflow.gateway.auth.hidden_topics import hidden_topics_for
from quotaflow.gateway.auth.sasl import PLAIN, SaslVerifier
from quotaflow.gateway.auth.scram import MECHANISMS, UnknownUsers, unknown_user_secret
from quotaflow.gateway.auth.scram_admin import ScramAdmin
from quotaflow.gateway.auth.tls import (
    HANDSHAKE_TIMEOUT_S,
    listener_tls,
    open_upstream,
    upstream_security_protocol,
    upstream_tls,
)
from quotaflow.gateway.auth.tls_errors import tls_reason
from quotaflow.gateway.auth.upstream_sasl import UpstreamAuthenticationError, authenticate, service_identity
from quotaflow.gateway.collector import collector_paused, drop_gradually, freeze_long_lived, loop_first
from quotaflow.gateway.config import REQUEST_BODY_TIMEOUT_MS, SSL, TLS_PROTOCOLS, GatewayConfig, read_properties
from quotaflow.gateway.data.addresses import AddressOf
from quotaflow.gateway.data.broker_quotas import BrokerQuotas
from quotaflow.gateway.data.brokers import (
    Address,
    BrokerRoutes,
    Streams,
    UpstreamLeg,
    UpstreamUnavailableError,
    parse_upstreams,
)
from quotaflow.gateway.data.cluster_quota import cluster_quotas_for
from quotaflow.gateway.data.connection import ClientConnection, DecisionClock
from quotaflow.gateway.data.partition_counts import PartitionCounts
from quotaflow.gateway.data.quota_admin import QuotaAdminHandler
from quotaflow.gateway.data.request_memory import STALLED_S, RequestMemory
from quotaflow.gateway.descriptors import (
    DESCRIPTORS_PER_IDLE_CONNECTION,
    bounded_by_descriptors,
    connection_budget,
    legs_over,
    raise_nofile_limit,
)
from quotaflow.gateway.listener import AcceptedConnection, ConnectionQuotaReloader, QuotaListener
from quotaflow.gateway.observation.connection_events import ObservedConnectionQuotas
from quotaflow.gateway.observation.ratelog import RateLimitedLog
from quotaflow.gateway.shadow_follower import ShadowFollower, ShadowState
from quotaflow.gateway.wire import protocol
from quotaflow.store import open_store
from quotaflow.store.base import AclStore, Change, QuotaStore, ScramStore, net_acl_change

if TYPE_CHECKING:  # imported when a log is opened: pyarrow is only loaded by gateways that log
    from quotaflow.gateway.observation.eventlog import EventLog
    from quotaflow.gateway.observation.row_queue import RowQueue

log = logging.getLogger(__name__)

STREAM_LIMIT: Final = 1 << 20  # StreamReader buffer: large frames arrive in fewer wake-ups
API_VERSIONS_TTL_S: Final = 60.0  # how long the upstream's ApiVersions list is reused for unauthenticated clients
BUFFER_RELEASE_S: Final = 1.0  # a connection idle this long has its receive buffers shrunk (housekeeping)
UPSTREAM_FRAME_LIMIT: Final = 1 << 20  # the ApiVersions probe's answer is a few hundred bytes
EVENT_LOG_BUFFER_MAX_BYTES: Final = "quotaflow.event.log.buffer.max.bytes"  # rows waiting for a refusing disk
UPSTREAM_METRICS_GROUP: Final = "Upstream"  # kafka_server_upstream_*: the gateway's own connections to its brokers
RELOAD_ACLS_ATTEMPTS: Final = 3  # delta reads raced by another loader before the whole set is read instead


class Gateway:
    def __init__(
        self,
        upstream: str | Address | Sequence[Address],
        listeners: Mapping[str, tuple[str, int] | str],
        store: QuotaStore | str | Path,
        *,
        config: GatewayConfig | None = None,
        config_path: str | Path | None = None,
        admin_principals: frozenset[str] | None = None,
        event_log: str | Path | None = None,
        metrics_port: int | None = None,
        inter_broker_listener: str | None = None,
        broker: str = "gateway",
        broker_port_base: Mapping[str, int] | None = None,
        reuse_port: bool = False,
        authorizer: Authorizer | None = None,
        freeze_loaded: bool = False,
    ) -> None:
        self.upstreams = parse_upstreams(upstream)  # the cluster's bootstrap list
        self.upstream = self.upstreams[0]
        self.broker_port_base = dict(broker_port_base or {})
        self.listen = {name: parse_host_port(a) if isinstance(a, str) else a for name, a in listeners.items()}
        if not self.listen:
            raise ValueError("at least one listener is required")
        self.config_path = Path(config_path) if config_path is not None else None
        props = read_properties(self.config_path) if self.config_path is not None else {}
        self.config = config or GatewayConfig.from_properties(props)
        self.event_log_buffer_bytes = _positive_int(self.config.extra, EVENT_LOG_BUFFER_MAX_BYTES)
        # TLS settings (Kafka's ssl.* names, PEM): refused here, before anything is bound, when incomplete
        self.listener_tls = {name: listener_tls(self.config.extra, name) for name in self.listen
                             if self.config.security_protocol(name) in TLS_PROTOCOLS}
        self.upstream_tls = upstream_tls(self.config.extra)
        # the upstream authenticates: the gateway's own identity there (terminate mode), else clients' SASL goes to
        # their broker (gateway.auth.sasl_passthrough)
        upstream_sasl = upstream_security_protocol(self.config.extra).startswith("SASL_")
        self.upstream_identity = service_identity(self.config.extra) if upstream_sasl else None
        self.sasl_passthrough = upstream_sasl and self.upstream_identity is None
        # max.connections within what the descriptors allow (the soft limit raised to the hard one first), so too
        # many clients meet Kafka's clean refusal, not EMFILE; set explicitly, up to one descriptor a client while
        # idle upstream legs are closed (gateway.descriptors)
        self.nofile = nofile = raise_nofile_limit()
        self.connection_budget = connection_budget(nofile)
        self.releases_idle_legs = self.config.upstream_connections_max_idle_ms > 0 and not self.sasl_passthrough
        self.connection_ceiling = connection_budget(nofile, DESCRIPTORS_PER_IDLE_CONNECTION) \
            if self.releases_idle_legs else self.connection_budget
        conn_config = bounded_by_descriptors(connection_quota_config(props), self.connection_budget,
                                             self.connection_ceiling)
        self._owns_store = isinstance(store, str | Path)
        self.store: QuotaStore = open_store(store) if isinstance(store, str | Path) else store
        # SCRAM is offered when the store keeps SCRAM credentials (the SQLite store), PLAIN always
        self.scram_store = self.store if isinstance(self.store, ScramStore) else None
        self.sasl_mechanisms = MECHANISMS if self.scram_store is not None else (PLAIN,)
        # an unknown user answered like the store's users, under a secret the fleet shares when the store signs
        self.scram_unknown_users = UnknownUsers(self.scram_store, secret=unknown_user_secret(self.store))
        self.admin_principals = admin_principals
        self.event_log_dir = Path(event_log) if event_log is not None else None
        self.metrics_port = metrics_port
        self.inter_broker_listener = inter_broker_listener or conn_config.inter_broker_listener
        self.broker = broker
        self.reuse_port = reuse_port  # several processes on the same ports (quotaflow gateway --workers)
        # a gateway process (the CLI's) owns its interpreter: what start loaded leaves the cycle collector's walks
        # (gateway.collector); a gateway inside another program (tests, demo) leaves that program's collector alone
        self.freeze_loaded = freeze_loaded
        self.stream_limit = STREAM_LIMIT
        self.broker_quotas = BrokerQuotas(self.config)
        self.brokers: BrokerRoutes | None = None  # after start
        self.admin = Admin(self.store)
        self.quota_admin = QuotaAdminHandler(self.admin, admin_principals)
        # authorizer.class.name in --config (the --admin-principal list are super users too), unless one is given
        if authorizer is None:
            authorizer = authorizer_from_properties(props, admin_principals or ())
        self.authorizer = authorizer
        # per-API authorization: Kafka's authorizer in terminate mode (in SASL passthrough the upstream authorizes
        # each client's own principal), quotaflow's own topics hidden in every mode
        self.authz_audit = AuthzAudit(self._on_authorization,
                                      log_allowed=self.config.extra.get(LOG_ALLOWED, "false").strip() == "true")
        self.access = Access(None if self.sasl_passthrough else authorizer,
                             hidden_topics_for(self.store, self.config.extra), self.authz_audit, own=authorizer)
        self.scram_admin = ScramAdmin(self.scram_store) if self.scram_store is not None else None
        self.acl_store = self.store if isinstance(self.store, AclStore) else None
        if isinstance(authorizer, StandardAuthorizer) and authorizer.store_backed and self.acl_store is None:
            raise StoreError(f"the quota store {getattr(self.store, 'path', self.store)} keeps no ACLs; the "
                             f"authorizer needs one")
        self.acl_admin = AclAdminHandler(AclAdmin(self.acl_store) if self.acl_store is not None else None,
                                         authorizer, admin_principals, reload=self.reload_acls,
                                         sync=self.synced_acl_index)
        self.sasl = SaslVerifier(self.store, threads=self.config.sasl_verify_threads,
                                 failed_rate_per_ip=self.config.sasl_failed_rate_per_ip,
                                 queue_size=self.config.sasl_verify_queue_size,
                                 queue_timeout_ms=self.config.sasl_verify_queue_timeout_ms)
        self.connection_quotas = ObservedConnectionQuotas(conn_config, self._on_connection)
        # quotaflow.quota.scope=cluster: shares of each quota from every gateway's usage, per-IP
        # connection rates included (None: Kafka's per broker)
        self.cluster_quotas = cluster_quotas_for(self.config.extra, self.broker_quotas, self.upstreams,
                                                 self.config.quota_window_size_seconds, broker,
                                                 self.connection_quotas)
        self.addresses: dict[str, tuple[str, int]] = {}
        self.metrics_address: tuple[str, int] | None = None
        self.connections: set[ClientConnection] = set()
        self.upstream_legs_released = 0  # upstream legs closed idle (quotaflow.upstream.connections.max.idle.ms)
        self._listener: QuotaListener | None = None
        self._reloader: ConnectionQuotaReloader | None = None
        self._metrics: Any = None
        self._metric_sources: list[MetricSource] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._event_log: EventLog | None = None
        self.request_rows: RowQueue | None = None  # the event log's, while it is open (ConnectionContext)
        self._store_seq = 0
        self._acls_loaded = False
        # wall-clock ms for quota decisions, never behind the previous one: a connection reads it once a response
        # (compiled, a C call), the shadow follower too
        self.decision_clock = DecisionClock()
        self.upstream_warnings = RateLimitedLog(log)
        self.descriptor_warnings = RateLimitedLog(log)  # idle upstream legs closed early, near the open-file limit
        self.request_memory = RequestMemory(self.config.request_pool_bytes)
        self.preauth_memory = RequestMemory(self.config.sasl_queued_max_request_bytes)
        self._api_versions: tuple[float, list[tuple[int, int, int]]] | None = None
        self._api_versions_lock: asyncio.Lock | None = None
        self.partition_counts = PartitionCounts(lambda: self.connect_upstream(None), self.upstream_api_versions)
        # the store's shadow quota set and promotions (issue 36; a store without them: nothing runs)
        self.shadow = ShadowFollower(self.store, self.broker_quotas, self.connection_quotas, self.decision_clock.now_ms,
                                     self._shadow_rows)

    # -- lifecycle ------------------------------------------------------------------------------------------

    def _managed_authorizer(self) -> tuple[StandardAuthorizer, AclStore] | None:
        """The authorizer whose ACLs come from the store (one built from ``--config``, or given store-backed)."""
        a = self.authorizer
        if isinstance(a, StandardAuthorizer) and a.store_backed and self.acl_store is not None:
            return a, self.acl_store
        return None

    def reload_acls(self) -> None:
        """Bring the authorizer's index to the store's ACLs when their version moved (any thread, off the event loop).
        The store's changes since the version held are read and applied (:meth:`AclStore.acl_changes_since`,
        :meth:`StandardAuthorizer.update`): the work is the change's, at any number of ACLs. The whole set is read
        only at the first load and when the store no longer holds the changes (a compacted or bounded log); then the
        difference from the current index is indexed. The swap is one assignment, and an older state never
        replaces a newer one (a change applied by another thread meanwhile is read again from there)."""
        managed = self._managed_authorizer()
        if managed is None:
            return
        authorizer, store = managed
        for _attempt in range(RELOAD_ACLS_ATTEMPTS):
            if not self._acls_loaded:
                break
            held = authorizer.version
            if store.acl_version() == held:
                return
            changes = store.acl_changes_since(held)
            if changes is None:
                break
            if not changes:
                return
            added, removed = net_acl_change(changes)
            if authorizer.update(added, removed, held, changes[-1].version):
                return
        self._load_all_acls(authorizer, store)

    def synced_acl_index(self) -> AclIndex | None:
        """The authorizer's ACL index brought up to the store's ACLs first (:meth:`reload_acls`: the changes since
        the version held), so a DescribeAcls / DeleteAcls answered from it sees every change made before it through
        this gateway, another one or the CLI; None when the authorizer's ACLs are not the store's (any thread, off
        the event loop)."""
        managed = self._managed_authorizer()
        if managed is None:
            return None
        self.reload_acls()
        return managed[0].index

    def _load_all_acls(self, authorizer: StandardAuthorizer, store: AclStore) -> None:
        """The store's whole ACL set into the authorizer (the first load; a delta the store no longer holds)."""
        # the store's whole set: ~400,000 short-lived objects at 100,000 ACLs, made while clients are served
        with collector_paused(), loop_first():
            snapshot = store.acls()
            version, bindings = snapshot.version, snapshot.bindings
            del snapshot
            authorizer.load(bindings, version)
            held = list(bindings)
            del bindings  # what the new index did not keep is freed a chunk at a time, not in one GIL-long cascade
            drop_gradually(held)
        self._acls_loaded = True

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._managed_authorizer() is not None:  # every ACL loaded before the first client is accepted
            await loop.run_in_executor(None, self.reload_acls)
        snapshot = await loop.run_in_executor(None, self.store.snapshot)
        await loop.run_in_executor(None, self.admin.follow, snapshot)  # /resolve's index, then kept by the poll
        self.broker_quotas.load(snapshot)
        self._store_seq = snapshot.seq
        if self.cluster_quotas is not None:
            await self.cluster_quotas.start()
        if self.event_log_dir is not None:
            from quotaflow.gateway.observation.eventlog import MAX_BUFFERED_BYTES, EventLog

            self._event_log = EventLog(self.event_log_dir, broker=self.broker,
                                       max_buffered_bytes=self.event_log_buffer_bytes or MAX_BUFFERED_BYTES)
            # pyarrow's first conversion and Parquet write cost ~0.3 s of CPU: done before the first client is served
            await loop.run_in_executor(None, self._event_log.wait_ready)
            self.request_rows = self._event_log.request_rows
        self._reloader = ConnectionQuotaReloader(self.connection_quotas, store=self.store,
                                                 config_path=self.config_path, on_reconfigure=self._reconfigure)
        await self._reloader.start(poll=False)  # fed by _poll_store: one read of the change log per poll
        self.shadow.reloader = self._reloader
        await self.shadow.start(snapshot.seq)
        self._listener = QuotaListener(self.listen, self.connection_quotas, None, socket_handler=self.handle,
                                       inter_broker_listener=self.inter_broker_listener,
                                       reuse_port=self.reuse_port)
        await self._listener.start()
        self.addresses = dict(self._listener.addresses)
        self.brokers = BrokerRoutes(self.upstreams, self.addresses, self._listener.add_port, self.open_upstream,
                                    port_base=self.broker_port_base)
        if not self.sasl_passthrough:  # an authenticating upstream answers nothing before SASL: learn from traffic
            await self.brokers.discover()
        if self.metrics_port is not None:
            await self._start_metrics()
        if self.freeze_loaded:  # the entities and ACLs just loaded live as long as the gateway
            await loop.run_in_executor(None, freeze_long_lived)
        self._tasks.append(asyncio.create_task(self._poll_store()))
        if self._managed_authorizer() is not None:
            self._tasks.append(asyncio.create_task(self._poll_acls()))
        self._tasks.append(asyncio.create_task(self._housekeeping()))
        log.info("gateway up: %s -> upstream %s", self.addresses, self.brokers.describe())

    def _reconfigure(self, config: ConnectionQuotaConfig) -> None:
        """An edited server.properties: its connection settings, max.connections still within the descriptors."""
        self.connection_quotas.reconfigure(bounded_by_descriptors(config, self.connection_budget,
                                                                  self.connection_ceiling))

    async def _start_metrics(self) -> None:
        from quotaflow.gateway.observation.metrics_http import MetricsServer

        self._metrics = MetricsServer("127.0.0.1", self.metrics_port or 0,
                                      sources=[self.broker_quotas, self.connection_quotas, self.sasl,
                                               self.authz_audit, self])
        if self.cluster_quotas is not None:
            self._metrics.add_source(self.cluster_quotas)
        if self._event_log is not None:
            self._metrics.add_source(self._event_log)
        if hasattr(self.store, "metric_samples"):  # the kafka:// store: records it refused
            self._metrics.add_source(self.store)
        for source in self._metric_sources:
            self._metrics.add_source(source)
        self._metrics.add_json_route("/resolve", self._resolve_route)
        self._metrics.add_json_route("/brokers", lambda _query: self.brokers.describe() if self.brokers else {})
        await self._metrics.start()
        self.metrics_address = self._metrics.address

    def metric_samples(self, now_ms: int) -> Iterator[MetricSample]:
        """The upstream legs of client connections (the gateway as a Kafka client of its brokers): how many are
        open now (the descriptors beyond the clients' own) and how many were closed idle."""
        yield MetricSample("connection-count", UPSTREAM_METRICS_GROUP, (),
                           float(sum(1 for conn in list(self.connections) if conn.upstream_open)),
                           "client connections' upstream connections open now")
        yield MetricSample("idle-connection-close-total", UPSTREAM_METRICS_GROUP, (),
                           float(self.upstream_legs_released),
                           "upstream connections closed idle past quotaflow.upstream.connections.max.idle.ms, "
                           "reopened with their client's next request")

    def add_metric_source(self, source: MetricSource) -> None:
        """One more source for ``/metrics`` (the ``--workers`` supervisor's slot board); before or after start."""
        self._metric_sources.append(source)
        if self._metrics is not None:
            self._metrics.add_source(source)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self.shadow.close()
        if self.cluster_quotas is not None:
            await self.cluster_quotas.stop()
        for conn in list(self.connections):
            conn.close()
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        if self._reloader is not None:
            await self._reloader.close()
            self._reloader = None
        if self._metrics is not None:
            await self._metrics.close()
            self._metrics = None
        if self._event_log is not None:
            event_log, self._event_log, self.request_rows = self._event_log, None, None
            try:
                await asyncio.get_running_loop().run_in_executor(None, event_log.close)
            except QuotaflowError as e:  # rows the disk refused: already logged with their seq ranges
                log.error("%s", e)
        self.sasl.close()
        if self._owns_store:
            self.store.close()

    async def serve_forever(self) -> None:
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    # -- connections ----------------------------------------------------------------------------------------

    async def handle(self, sock: socket.socket, accepted: AcceptedConnection) -> None:
        """Serve one admitted socket until it closes (the listener's handler): TLS first on SSL and SASL_SSL
        listeners, then the connection's protocol (:class:`~quotaflow.gateway.data.connection.ClientConnection`)."""
        tls = self.listener_tls.get(accepted.listener)
        ssl_principal = tls is not None and self.config.security_protocol(accepted.listener) == SSL
        conn = ClientConnection(self, accepted.listener, accepted.client_ip, accepted.client_port,
                                node=accepted.node, tls=tls if ssl_principal else None)
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: conn, sock, ssl=None if tls is None else tls.context,
                ssl_handshake_timeout=None if tls is None else HANDSHAKE_TIMEOUT_S)
        except ssl.SSLError as e:
            log.info("TLS handshake with %s:%d on %s failed: %s", accepted.client_ip, accepted.client_port,
                     accepted.listener, tls_reason(e))
            sock.close()
            return
        except OSError as e:
            log.info("connection from %s closed before it was served: %s", accepted.client_ip, e)
            sock.close()
            return
        if ssl_principal and not conn.closing:
            # the certificate authenticated this principal: its connection creation rate, if it has one; the
            # connection reads nothing until admitted
            throttle = self.connection_quotas.record_principal_connection_and_get_throttle_ms(
                conn.principal, time.time_ns() // 1_000_000)
            if throttle > 0:
                try:
                    await asyncio.sleep(throttle / 1000)  # held, then closed, as KIP-612 treats an ip over its rate
                finally:
                    conn.close()
                return
            conn.admit()
        self.connections.add(conn)
        try:
            await conn.wait_closed()
        finally:
            conn.close()
            self.connections.discard(conn)

    def _release_legs_early(self, over: int) -> None:
        """Descriptors short (a ``max.connections`` above two a client, gateway.descriptors): close up to ``over``
        upstream legs with nothing in flight before their time, the longest idle first."""
        legs = [conn for conn in self.connections if conn.upstream_open]
        released = sum(conn.release_upstream() for conn in heapq.nsmallest(over, legs, key=_last_active))
        self.upstream_legs_released += released
        self.descriptor_warnings.warning("open-file limit %d nearly reached: %d idle upstream connections closed "
                                         "before quotaflow.upstream.connections.max.idle.ms", self.nofile, released)

    async def connect_upstream(self, node: int | None, at: Address | None = None) -> UpstreamLeg:
        """An upstream connection for a client on node ``node``'s port (None: a bootstrap port, or pinned to the
        address ``at`` it reached before), the node and the address it reaches (``BrokerRoutes.connect``). While
        the upstream is unreachable the caller is held: retried with exponential backoff
        (``quotaflow.upstream.reconnect.backoff.ms`` doubling up to ``...backoff.max.ms``, ±20 % jitter) for at most
        ``quotaflow.upstream.connect.timeout.ms``, then ``UpstreamUnavailableError``. Failures are logged through one
        rate-limited warning, never one line per attempt."""
        cfg = self.config
        deadline = time.monotonic() + cfg.upstream_connect_timeout_ms / 1000
        backoff = cfg.upstream_backoff_ms / 1000
        while True:
            remaining = deadline - time.monotonic()
            assert self.brokers is not None
            try:
                return await asyncio.wait_for(self.brokers.connect(node, at), timeout=max(remaining, 0.05))
            except UpstreamAuthenticationError as e:  # a refused identity is not an outage: no retry
                self.upstream_warnings.warning("upstream refused the gateway's identity: %s", e)
                raise UpstreamUnavailableError(str(e)) from e
            except (OSError, TimeoutError) as e:
                error: Exception = e
            self.upstream_warnings.warning("upstream unreachable, clients held while it is retried: %s",
                                           str(error) or "timed out")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise UpstreamUnavailableError(
                    f"upstream unreachable for {cfg.upstream_connect_timeout_ms} ms: {str(error) or 'timed out'}"
                ) from error
            await asyncio.sleep(min(backoff * random.uniform(0.8, 1.2), remaining))
            backoff = min(backoff * 2, cfg.upstream_backoff_max_ms / 1000)

    async def upstream_api_versions(self) -> list[tuple[int, int, int]]:
        """The upstream's (api key, min, max) list, for clients that may not reach the upstream yet (before SASL
        authentication): fetched over one short gateway-owned connection, shared by all and reused for a minute."""
        if self._api_versions_lock is None:
            self._api_versions_lock = asyncio.Lock()
        async with self._api_versions_lock:
            if self._api_versions is not None and time.monotonic() - self._api_versions[0] < API_VERSIONS_TTL_S:
                return self._api_versions[1]
            reader, writer, _node, _at = await self.connect_upstream(None)
            try:
                request = ApiVersionsRequest[0]()
                request.with_header(correlation_id=0, client_id="quotaflow-gateway")
                writer.write(bytes(request.encode(header=True, framed=True)))
                await writer.drain()
                size = protocol.SIZE.unpack(await reader.readexactly(4))[0]
                if not 0 < size <= UPSTREAM_FRAME_LIMIT:
                    raise UpstreamUnavailableError(f"upstream answered ApiVersions with a {size}-byte frame")
                response = protocol.decode_response(await reader.readexactly(size), ApiKey.ApiVersions, 0)
            except (OSError, asyncio.IncompleteReadError) as e:
                raise UpstreamUnavailableError(f"upstream ApiVersions failed: {e}") from e
            finally:
                writer.close()
            triples = [(a.api_key, a.min_version, a.max_version) for a in response.api_keys]
            self._api_versions = (time.monotonic(), triples)
            return triples

    @property
    def ports(self) -> dict[str, int]:
        """Bound port of each listener (after ``start``)."""
        return {name: port for name, (_host, port) in self.addresses.items()}

    @property
    def node_addresses(self) -> dict[str, dict[int, Address]]:
        """Listener -> upstream node id -> the gateway address serving it (after ``start``; grows as brokers
        appear). The node served on the listener's own port (a one-broker upstream) is included."""
        assert self.brokers is not None
        out = {name: dict(ports) for name, ports in self.brokers.ports.items()}
        served = self.brokers.bootstrap_node()
        if served is not None:
            for name, address in self.addresses.items():
                out[name][served] = address
        return out

    def address_map(self, listener: str) -> AddressOf:
        """How clients on ``listener`` reach each upstream node (learning nodes as responses name them)."""
        assert self.brokers is not None
        return functools.partial(self.brokers.gateway_address, listener)

    async def open_upstream(self, address: Address) -> Streams:
        """A connection to one upstream broker (TLS with the ``quotaflow.upstream.*`` settings), authenticated as
        the gateway's own identity when one is configured."""
        reader, writer = await open_upstream(address, self.upstream_tls, self.stream_limit)
        if self.upstream_identity is not None:
            try:
                await authenticate(reader, writer, self.upstream_identity)
            except BaseException:
                writer.close()
                raise
        return reader, writer

    # -- resolve (no Kafka API key: JSON on the metrics endpoint) -------------------------------------------

    def _resolve_route(self, query: dict[str, list[str]]) -> Any:
        if "ip" in query:
            return resolution_to_json(self.admin.resolve_ip(query["ip"][0]))
        if "user" not in query and "client-id" not in query:
            raise ValueError("pass user=..&client-id=.. or ip=..")
        return resolution_to_json(self.admin.resolve(query.get("user", [""])[0], query.get("client-id", [""])[0]))

    # -- usage events ---------------------------------------------------------------------------------------

    def _on_authorization(self, row: dict[str, Any]) -> None:
        if self._event_log is not None:
            row["broker"] = self.broker
            self._event_log.authorization(row)

    def _shadow_rows(self, on: bool) -> None:
        """While a shadow set runs, request rows go to the event log's shadow queue (their ``shadow_*`` columns);
        switched in the same step as the managers, so every row decided under the shadow lands there."""
        if self._event_log is not None:
            self.request_rows = self._event_log.shadow_request_rows if on else self._event_log.request_rows

    def _on_connection(self, row: dict[str, Any]) -> None:
        if self._event_log is not None:
            self._event_log.connection(row)

    # -- background -----------------------------------------------------------------------------------------

    async def _poll_store(self) -> None:
        """Quota changes apply within a second, without restart: the change log, read once per poll (off the event
        loop), feeds the client-quota managers and the connection quotas; the config file's connection settings
        are looked at in the same turn."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.store_poll_ms / 1000)
            reloader = self._reloader
            if reloader is not None:  # the config file, whether or not the store answers
                try:
                    reloader.poll_config()
                except Exception:
                    log.exception("reloading the connection settings of %s failed", self.config_path)
            try:
                changes, shadow_state = await loop.run_in_executor(None, self._read_store, self._store_seq)
            except Exception:
                log.exception("polling the quota store failed; retrying")
                continue
            if changes:
                self.admin.apply_changes(changes)  # the store, describe and /resolve show the new values at once
                self._store_seq = changes[-1].seq
            try:
                enforced = await self.shadow.update(shadow_state, changes)
            except Exception:
                log.exception("following the shadow quota set failed")
                enforced = list(changes)
            if enforced:
                self.broker_quotas.apply_changes(enforced)
                if reloader is not None:
                    try:
                        await reloader.apply_store_changes(enforced)
                        await self.shadow.enforced_changes(enforced)
                    except Exception:
                        log.exception("connection quota reload failed")

    def _read_store(self, seq: int) -> tuple[list[Change], ShadowState | None]:
        """One poll's reads (executor): the change log, then the shadow state when it moved. In this order a
        promotion's batch read from the log always has its promotion read with it (``gateway.shadow_follower``)."""
        return self.store.changes_since(seq), self.shadow.read()

    async def _poll_acls(self) -> None:
        """ACL changes (through any gateway, the CLI or the console) reach this authorizer within a second: poll the
        store's ACL version; when it moved, apply the changes since to the index, off the event loop."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.store_poll_ms / 1000)
            try:
                await loop.run_in_executor(None, self.reload_acls)
            except Exception:
                log.exception("reloading ACLs from the store failed; retrying")

    async def _housekeeping(self) -> None:
        """Close connections idle longer than connections.max.idle.ms (as Kafka's Selector does), those that
        began a frame and did not finish it within quotaflow.request.body.timeout.ms (the memory it holds is
        released), and, while others wait for pool memory, those whose frame holds some and stalls; end elapsed
        throttles and expire idle sensors (Kafka's reaper threads). A connection idle longer than
        quotaflow.upstream.connections.max.idle.ms has its upstream leg closed when nothing is in flight on it
        (``ClientConnection.release_upstream``; its next request reopens it), as a Kafka client closes its idle
        connections."""
        idle_s = self.config.connections_max_idle_ms / 1000
        body_s = self.config.request_body_timeout_ms / 1000
        upstream_idle_ms = self.config.upstream_connections_max_idle_ms
        upstream_idle_s = upstream_idle_ms / 1000 if upstream_idle_ms > 0 else float("inf")
        period = min(1.0, max(min(idle_s, body_s, upstream_idle_s) / 10, 0.01))
        last_tick = 0.0
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            cutoff = now - idle_s
            release_cutoff = now - BUFFER_RELEASE_S
            upstream_cutoff = now - upstream_idle_s
            neediest = {pool: pool.neediest() for pool in (self.request_memory, self.preauth_memory)
                        if pool.contended}
            stall_s = min(STALLED_S, body_s)
            legs = 0
            for conn in list(self.connections):
                legs += conn.upstream_open
                if neediest and conn.stalls_pool(now, stall_s, neediest):
                    log.info("closing connection from %s:%s: its request holds pool memory others wait for and has "
                             "not progressed for %.0f s", conn.client_ip, conn.client_port, stall_s)
                    conn.close(abort=True)
                elif conn.last_active < cutoff:
                    log.info("closing idle connection from %s:%s", conn.client_ip, conn.client_port)
                    conn.close()
                elif conn.body_overdue(now, body_s):
                    log.info("closing connection from %s:%s: a request begun %d ms ago is still incomplete (%s)",
                             conn.client_ip, conn.client_port, self.config.request_body_timeout_ms,
                             REQUEST_BODY_TIMEOUT_MS)
                    conn.close(abort=True)
                else:
                    if conn.last_active < upstream_cutoff and conn.release_upstream():
                        self.upstream_legs_released += 1  # idle: one descriptor, its own socket, until it sends
                    if conn.last_active < release_cutoff:
                        conn.release_buffers()  # idle: its receive buffers back to their initial size
            over = legs_over(self.nofile, len(self.connections), legs) if self.releases_idle_legs else 0
            if over:
                self._release_legs_early(over)
            if now - last_tick >= 1.0:
                self.broker_quotas.tick(time.time_ns() // 1_000_000)
                last_tick = now


class GatewayThread:
    """A ``Gateway`` on its own event loop in a daemon thread, for synchronous callers (tests, bench, demo).

    ``with GatewayThread(...) as gw: gw.address("PLAINTEXT")``; stops cleanly on exit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args = args
        self._kwargs = kwargs
        self.gateway: Gateway | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> GatewayThread:
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._run, name="quotaflow-gateway", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        try:
            self.gateway = Gateway(*self._args, **self._kwargs)
            self._loop.run_until_complete(self.gateway.start())
        except BaseException as e:
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the gateway's loop and return its result."""
        assert self._loop is not None
        async def run() -> Any:
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def address(self, listener: str | None = None) -> tuple[str, int]:
        assert self.gateway is not None
        return self.gateway.addresses[listener or next(iter(self.gateway.addresses))]

    def bootstrap(self, listener: str | None = None) -> str:
        host, port = self.address(listener)
        return f"{host}:{port}"

    def stop(self) -> None:
        if self._loop is None or self.gateway is None:
            return
        asyncio.run_coroutine_threadsafe(self.gateway.stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(30)
        self._loop.close()
        self._loop = None

    def __enter__(self) -> GatewayThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _last_active(conn: ClientConnection) -> float:
    return conn.last_active


def _positive_int(props: Mapping[str, str], key: str) -> int | None:
    """An optional positive integer setting, with Kafka's wording when it is not one."""
    raw = props.get(key)
    if raw is None:
        return None
    if not raw.strip().isdigit() or int(raw) < 1:
        raise CommandError(f"Invalid value {raw} for configuration {key}: Value must be at least 1")
    return int(raw)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (faster sockets), else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop
