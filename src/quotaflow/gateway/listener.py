"""The gateway's front door: named asyncio listeners that enforce KIP-612 connection quotas on real sockets.

Each listener has one acceptor task, like Kafka's Acceptor thread. It accepts one socket, asks the engine
(:class:`~quotaflow.engine.connection.ConnectionQuotas`) for the broker/listener delay and *sleeps* for it (and
while no connection slot is free). It does not accept again meanwhile, so new connections wait in the OS listen
backlog. Then the per-IP check runs: an IP-throttled socket is held for its throttle time and closed, never handed
to the handler. An admitted socket is counted, wrapped in asyncio streams and handed to the handler; the count is
released when the handler's connection closes.

:class:`ConnectionQuotaReloader` applies quota-store changes (``connection_creation_rate`` on ip entities) and
server.properties edits while the listeners run.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeAlias

from quotaflow.brokerconfig import BrokerConfigWatcher
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.errors import ConnectionThrottledError, TooManyConnectionsError
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.engine.updates import QuotaChange, apply_changes, snapshot_changes
from quotaflow.gateway.auth.tls import accept_tls
from quotaflow.gateway.auth.tls_errors import log_connection_failure, tls_reason
from quotaflow.gateway.observation.ratelog import RateLimitedLog
from quotaflow.store.base import QuotaStore

log = logging.getLogger(__name__)

DEFAULT_BACKLOG: Final = 512
STREAM_LIMIT: Final = 1 << 16  # asyncio's default StreamReader buffer


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class AcceptedConnection:
    listener: str
    client_ip: str
    client_port: int
    accepted_ms: int
    node: int | None = None  # the upstream node whose gateway port accepted it (None: the listener's own port)


Handler: TypeAlias = Callable[[asyncio.StreamReader, asyncio.StreamWriter, AcceptedConnection], Awaitable[None]]
# takes the accepted socket itself (and its TLS, if any) and serves it until it closes: the gateway's protocols
SocketHandler: TypeAlias = Callable[[socket.socket, AcceptedConnection], Awaitable[None]]


@dataclass(slots=True)
class ListenerStats:
    """Per-listener counters of what the acceptor did (for tests, logs and the demo)."""

    accepted: int = 0
    ip_throttled: int = 0
    too_many: int = 0
    blocked_ms: int = 0


class QuotaListener:
    """Accepts connections on named listeners, enforcing the connection quotas before the handler sees them."""

    def __init__(
        self,
        listeners: dict[str, tuple[str, int]],
        quotas: ConnectionQuotas,
        handler: Handler | None,
        *,
        socket_handler: SocketHandler | None = None,
        inter_broker_listener: str | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        backlog: int = DEFAULT_BACKLOG,
        tls: Mapping[str, ssl.SSLContext] | None = None,
        reuse_port: bool = False,
    ) -> None:
        if not listeners:
            raise ValueError("at least one listener is required")
        self._bind = dict(listeners)
        self.quotas = quotas
        if (handler is None) == (socket_handler is None):
            raise ValueError("one of handler (streams) or socket_handler is required")
        self._handler = handler
        self._socket_handler = socket_handler
        self._clock_ms = clock_ms
        self._backlog = backlog
        self._tls = dict(tls or {})  # listener -> server context: TLS handshake before the handler (gateway.auth.tls)
        self._reuse_port = reuse_port  # SO_REUSEPORT: several gateway processes accept on one port (--workers)
        if inter_broker_listener is not None:
            quotas.inter_broker_listener = inter_broker_listener
        for name in listeners:
            if name not in quotas.listeners:
                quotas.add_listener(name)
        self.addresses: dict[str, tuple[str, int]] = {}
        self.stats: dict[str, ListenerStats] = {name: ListenerStats() for name in listeners}
        self._sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._held: dict[socket.socket, asyncio.TimerHandle] = {}
        self._slot_freed = asyncio.Condition()
        self._accept_warnings = RateLimitedLog(log)

    async def start(self) -> None:
        for name, (host, port) in self._bind.items():
            try:
                self.addresses[name] = self.add_port(name, host, port)
            except OSError:
                await self.close()
                raise

    def add_port(self, listener: str, host: str, port: int, node: int | None = None) -> tuple[str, int]:
        """Bind one more port for ``listener`` (while running) and accept on it; its connections carry ``node``
        (the upstream broker this port serves, ``gateway.data.brokers``). Returns the bound address."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self._reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(self._backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sockets.append(sock)
        bound = sock.getsockname()
        suffix = "" if node is None else f"-node-{node}"
        self._acceptors.append(asyncio.get_running_loop().create_task(
            self._accept_loop(listener, sock, node), name=f"acceptor-{listener}{suffix}"))
        return bound[0], bound[1]

    async def close(self) -> None:
        """Stop accepting, close held sockets, cancel the handlers' connections and wait for them."""
        for task in self._acceptors:
            task.cancel()
        await asyncio.gather(*self._acceptors, return_exceptions=True)
        self._acceptors.clear()
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()
        for sock, timer in list(self._held.items()):
            timer.cancel()
            sock.close()
        self._held.clear()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- reconfiguration without restart --------------------------------------------------------------------------
    def update_ip_connection_rate_quota(self, ip: str | None, rate: int | None) -> None:
        self.quotas.update_ip_connection_rate_quota(ip, rate)

    def reconfigure(self, config: ConnectionQuotaConfig) -> None:
        self.quotas.reconfigure(config)
        self._notify_slots()

    # -- the acceptor ------------------------------------------------------------------------------------------
    async def _accept_loop(self, listener: str, sock: socket.socket, node: int | None = None) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, addr = await loop.sock_accept(sock)
            except OSError as e:  # e.g. EMFILE: back off instead of spinning
                self._accept_warnings.warning("accept on %s failed: %s", listener, e)
                await asyncio.sleep(0.1)
                continue
            try:
                await self._admit(listener, conn, str(addr[0]), int(addr[1]), node)
            except asyncio.CancelledError:
                conn.close()
                raise
            except Exception:
                log.exception("admitting a connection on %s failed", listener)
                conn.close()

    async def _admit(self, listener: str, conn: socket.socket, ip: str, port: int, node: int | None = None) -> None:
        quotas = self.quotas
        start = self._clock_ms()
        delay = quotas.record_connection_and_get_throttle_ms(listener, start)
        if delay > 0 or not quotas.connection_slot_available(listener):
            t0 = time.monotonic()
            await self._wait_for_slot(listener, start + delay)
            blocked = round((time.monotonic() - t0) * 1000)
            quotas.record_acceptor_blocked(listener, blocked, self._clock_ms())
            self.stats[listener].blocked_ms += blocked
        now = self._clock_ms()
        try:
            quotas.record_ip_connection_maybe_throttle(listener, ip, now)
        except ConnectionThrottledError as e:
            self.stats[listener].ip_throttled += 1
            self._hold_then_close(conn, e.throttle_ms)
            return
        try:
            quotas.inc_count(listener, ip)
        except TooManyConnectionsError as e:
            log.info("%s", e)
            self.stats[listener].too_many += 1
            quotas.dec(listener, ip)
            conn.close()
            return
        self.stats[listener].accepted += 1
        accepted = AcceptedConnection(listener, ip, port, now, node)
        task = asyncio.get_running_loop().create_task(self._serve(conn, accepted))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _wait_for_slot(self, listener: str, until_ms: int) -> None:
        """Sleep until ``until_ms`` and then until a connection slot is free (woken by every close)."""
        while True:
            remaining = until_ms - self._clock_ms()
            if remaining > 0:
                await asyncio.sleep(remaining / 1000)
                continue
            if self.quotas.connection_slot_available(listener):
                return
            async with self._slot_freed:  # woken by a close or a reconfiguration; re-check at least every 500 ms
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._slot_freed.wait(), 0.5)

    def _hold_then_close(self, conn: socket.socket, throttle_ms: int) -> None:
        """Keep the throttled socket open for its throttle time, then close it (it is never accepted)."""

        def close() -> None:
            self._held.pop(conn, None)
            conn.close()

        self._held[conn] = asyncio.get_running_loop().call_later(throttle_ms / 1000, close)

    async def _serve(self, conn: socket.socket, accepted: AcceptedConnection) -> None:
        if self._socket_handler is not None:
            try:
                await self._socket_handler(conn, accepted)
            except Exception:
                log.exception("handler failed for %s:%d on %s", accepted.client_ip, accepted.client_port,
                              accepted.listener)
            finally:
                self._release(accepted)
            return
        assert self._handler is not None
        try:
            context = self._tls.get(accepted.listener)
            if context is None:
                reader, writer = await asyncio.open_connection(sock=conn)
            else:
                reader, writer = await accept_tls(conn, context, limit=STREAM_LIMIT)
        except ssl.SSLError as e:
            log.info("TLS handshake with %s:%d on %s failed: %s", accepted.client_ip, accepted.client_port,
                     accepted.listener, tls_reason(e))
            conn.close()
            self._release(accepted)
            return
        except OSError as e:
            log.info("connection from %s closed before it was served: %s", accepted.client_ip, e)
            conn.close()
            self._release(accepted)
            return
        try:
            await self._handler(reader, writer, accepted)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception as e:  # a client's TLS error: one INFO line; anything else: a traceback
            log_connection_failure(log, e, accepted.client_ip, accepted.client_port, accepted.listener)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._release(accepted)

    def _release(self, accepted: AcceptedConnection) -> None:
        self.quotas.dec(accepted.listener, accepted.client_ip)
        self._notify_slots()

    def _notify_slots(self) -> None:
        async def notify() -> None:
            async with self._slot_freed:
                self._slot_freed.notify_all()

        with contextlib.suppress(RuntimeError):  # no running loop (closing)
            asyncio.get_running_loop().create_task(notify())


def ip_entity_address(name: str) -> str | None:
    """An ip entity name as the address key the acceptor sees (a CIDR range in its canonical form); None for a
    hostname (resolve it first)."""
    try:
        if "/" in name:
            return str(ipaddress.ip_network(name, strict=True))
        return str(ipaddress.ip_address(name))
    except ValueError:
        return None


class _AddressedTarget:
    """Passes ip quotas on under the address the acceptor sees (names resolved beforehand, as Kafka's
    ``InetAddress.getByName``); an unresolvable name is logged and skipped."""

    def __init__(self, quotas: ConnectionQuotas, addresses: dict[str, str | None]) -> None:
        self._quotas = quotas
        self._addresses = addresses
        self.applied = 0

    def update_ip_connection_rate_quota(self, ip: str | None, rate: int | None) -> None:
        address = None if ip is None else self._addresses.get(ip, ip)
        if ip is not None and address is None:
            log.warning("Unable to resolve address %s", ip)
            return
        self._quotas.update_ip_connection_rate_quota(address, rate)
        self.applied += 1

    def update_principal_connection_rate_quota(self, principal: str | None, rate: int | None) -> None:
        self._quotas.update_principal_connection_rate_quota(principal, rate)
        self.applied += 1


class ConnectionQuotaReloader:
    """Polls a quota store's change log and a server.properties file; applies changes to the live quotas.

    Store changes go through the engine's dispatcher (:func:`quotaflow.engine.updates.apply_changes`: ``.toInt`` of
    the value, only ``connection_creation_rate`` on ip entities); ip entity names are normalized or resolved to the
    address form the acceptor reports, as Kafka's ClientQuotaMetadataManager does.
    """

    def __init__(
        self,
        quotas: ConnectionQuotas,
        *,
        store: QuotaStore | None = None,
        config_path: str | Path | None = None,
        interval_s: float = 0.25,
        on_reconfigure: Callable[[ConnectionQuotaConfig], None] | None = None,
    ) -> None:
        self.quotas = quotas
        self._store = store
        self._watcher = BrokerConfigWatcher(Path(config_path)) if config_path is not None else None
        self._interval = interval_s
        self._on_reconfigure = on_reconfigure or quotas.reconfigure
        self._seq: int | None = None
        self._task: asyncio.Task[None] | None = None
        self.applied = 0  # ip quota changes applied so far

    async def start(self, *, poll: bool = True) -> None:
        """Apply the store's connection quotas and the config file as they are now, then poll both every interval;
        with ``poll=False`` the owner hands over the store's changes (:meth:`apply_store_changes`) and asks for the
        config file (:meth:`poll_config`) itself: a gateway reads its store's change log once for every kind of
        quota, so one poll wakes its event loop, not one per consumer."""
        await self.poll_once()
        if poll:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="connection-quota-reloader")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.poll_once()
            except Exception:
                log.exception("connection quota reload failed")

    def poll_config(self) -> None:
        """Apply the config file's connection settings if it changed."""
        if self._watcher is not None:
            config = self._watcher.poll()
            if config is not None:
                self._on_reconfigure(config)

    async def poll_once(self) -> None:
        self.poll_config()
        if self._store is None:
            return
        if self._seq is None:
            snapshot = self._store.snapshot()
            self._seq = snapshot.seq
            await self._apply(snapshot_changes(_ip_only(snapshot.entities), snapshot.seq))
        else:
            await self.apply_store_changes(self._store.changes_since(self._seq))

    async def apply_store_changes(self, raw: Sequence[QuotaChange]) -> None:
        """Changes read from the store's change log (in seq order), by this reloader or by its owner: those past
        the last one applied, on the entities connection quotas take."""
        seq = self._seq
        fresh = [c for c in raw if seq is None or c.seq > seq]
        if not fresh:
            return
        self._seq = fresh[-1].seq
        await self._apply([c for c in fresh if _is_ip_entity(c.entity)])

    async def _apply(self, changes: list[QuotaChange]) -> None:
        self.applied += await self._apply_on(self.quotas, changes)

    async def _apply_on(self, quotas: ConnectionQuotas, changes: list[QuotaChange]) -> int:
        target = _AddressedTarget(quotas, await self._addresses(changes))
        apply_changes(changes, {}, target)
        return target.applied

    async def apply_to(self, quotas: ConnectionQuotas, entities: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Seed other connection quotas (a shadow set's, ``gateway.shadow_follower``) with the ip and principal
        rates of ``entities``, names resolved as for the live ones."""
        await self._apply_on(quotas, snapshot_changes(_ip_only(entities)))

    async def apply_changes_to(self, quotas: ConnectionQuotas, changes: Sequence[QuotaChange]) -> None:
        """Changes for other connection quotas (a shadow set's): those on the entities connection quotas take."""
        await self._apply_on(quotas, [c for c in changes if _is_ip_entity(c.entity)])

    async def _addresses(self, changes: list[QuotaChange]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for change in changes:
            ip = change.entity.ip
            if ip is None or ip is DEFAULT or str(ip) in out:
                continue
            name = str(ip)
            address = ip_entity_address(name)
            if address is None:
                try:
                    infos = await asyncio.get_running_loop().getaddrinfo(name, None, type=socket.SOCK_STREAM)
                    infos.sort(key=lambda info: info[0] != socket.AF_INET)  # IPv4 first, as Java's default
                    address = str(infos[0][4][0])
                except (OSError, IndexError):
                    address = None
            out[name] = address
        return out


def _is_ip_entity(entity: QuotaEntity) -> bool:
    """An entity the connection quotas take: an ip (or CIDR range), or a user alone (a per-principal rate)."""
    if entity.client_id is not None or entity.client_id_prefix is not None:
        return False
    return (entity.ip is not None) != (entity.user is not None)


def _ip_only(entities: Mapping[QuotaEntity, Mapping[str, float]]) -> dict[QuotaEntity, Mapping[str, float]]:
    return {e: v for e, v in entities.items() if _is_ip_entity(e)}
