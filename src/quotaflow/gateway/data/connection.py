# cython: annotation_typing=False
"""One client connection's core: framing, ordering (pipelining), muting, backpressure, forwarding, on callbacks.

What it needs of the gateway is :class:`~quotaflow.gateway.context.ConnectionContext`; what each API does (request
and response hooks, quota decisions, local answers) is the table in :mod:`quotaflow.gateway.data.api_handlers`; the SASL
exchange is :class:`~quotaflow.gateway.data.sasl_session.SaslSession`; a request on its way is a
:class:`~quotaflow.gateway.data.pending.Pending`.

Two asyncio protocols per connection and no task of their own: :class:`ClientConnection` on the client's socket
and :class:`UpstreamProtocol` on the upstream's (opened with the first request to forward, so a client that never
sends a whole request holds no upstream socket). Both cut frames from a receive buffer
(:class:`~quotaflow.gateway.data.framing.FrameBuffer`) in ``buffer_updated``; everything else happens in one step,
:meth:`ClientConnection._pump`, run whenever something changes (bytes arrive on either side, a mute ends, the
client's socket drains, memory is released, an async step ends):

* upstream responses are matched to the oldest forwarded request (order and correlation id checked);
* responses leave in request order (Kafka clients pipeline requests and match responses by order and correlation
  id); each is decided (KIP-219: answered at once with ``throttle_time_ms``, then the connection is not read for
  that long), rewritten where it must be, written with one call, and logged, in one synchronous step, so the event
  log's order is the decisions' order. Requests are cut with their size prefix and forwarded as they came, one
  buffer (the transport's single-write path: one system call, nothing allocated); so is the response to a Produce
  decided through the kept sensor (below), read with its prefix. Other unchanged responses are written after their
  size (``writelines``: no copy into a new buffer; on TLS a small frame is joined to its size, so that it is one
  record); the API hooks read frames without the prefix;
* a Produce is decided through the producer quota sensor the connection keeps for its principal and client id
  (:class:`ProduceBinding`), and one without authorization work is forwarded without the API hooks;
* the next request is taken only while fewer than ``quotaflow.max.in.flight.requests`` are unanswered (1 is Kafka's
  rule), the connection is not muted, no byte-rate-limited produce is waiting for its response and throttle (such a
  producer is read one produce at a time, so nothing it pipelines slips past its throttle), the upstream socket is
  not backed up, and the client has taken its responses (``quotaflow.max.unsent.response.bytes``); otherwise the
  socket is not read (``pause_reading``) and TCP holds the rest in the client. The upstream socket is not read
  either while the client has not taken its responses.

Two steps may wait: connecting the upstream and the answers the gateway makes itself (the handler table's async
``local`` hooks: SASL, DescribeClientQuotas/AlterClientQuotas, ApiVersions before authentication). Each runs as a
task while the connection takes no further request, which keeps responses in order.

Frames larger than the receive buffer draw on a memory pool as their bodies arrive (``gateway.data.request_memory``);
a frame begun must be finished within ``quotaflow.request.body.timeout.ms`` (the gateway's housekeeping closes the
connection otherwise).

The event loop's time on a request (``time.monotonic_ns``, Kafka's ``System.nanoTime``) up to its quota decision is its
io-thread time, checked against the request quota; after it (rewrite, encode, write) its network-thread time,
recorded unchecked (docs/gateway.md).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Coroutine
from time import monotonic, monotonic_ns, time_ns
from typing import TYPE_CHECKING, Any, Final, cast

import cython
from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import ConnectionClosed, InvalidRequestError, map_errors
from quotaflow.engine import bandwidth_throttle
from quotaflow.gateway.auth.authorize import SCAN_ONLY, granted
from quotaflow.gateway.auth.sasl import ANONYMOUS
from quotaflow.gateway.auth.ssl_principal import SslPrincipalMappingError
from quotaflow.gateway.auth.tls_errors import log_connection_failure
from quotaflow.gateway.config import SASL_PROTOCOLS
from quotaflow.gateway.data import versions
from quotaflow.gateway.data.api_handlers import (
    CLOSE_ON_INVALID,
    COUNTED_API_KEYS,
    DEFAULT,
    HANDLERS,
    LOCAL_APIS,
    PASS_THROUGH,
    decide_shadow,
    needs_partition_counts,
    prepare_request,
    produce_decisions,
    rewrite,
)
from quotaflow.gateway.data.brokers import UpstreamUnavailableError, broker_key
from quotaflow.gateway.data.enforcement import NO_THROTTLE
from quotaflow.gateway.data.framing import FrameBuffer
from quotaflow.gateway.data.pending import RAW_SASL, Pending, new_pending, request_row
from quotaflow.gateway.data.sasl_session import SaslSession
from quotaflow.gateway.data.versions import PASSTHROUGH_APIS, SASL_APIS
from quotaflow.gateway.observation.row_queue import RowQueue
from quotaflow.gateway.wire import protocol
from quotaflow.gateway.wire.frame_facts import ACKS_UNREADABLE, correlation_id, read_request
from quotaflow.gateway.wire.protocol import FLEXIBLE_FROM, SIZE, RequestHeader

if TYPE_CHECKING:
    from quotaflow.gateway.auth.tls import ListenerTls
    from quotaflow.gateway.context import ConnectionContext
    from quotaflow.gateway.data.enforcement import Enforcement
    from quotaflow.gateway.data.request_memory import RequestMemory

log = logging.getLogger(__name__)

# the upstream receive buffer's most (it starts at framing.INITIAL_BUFFER and grows to fit); responses are larger
# than requests; larger ones are read into chunks
UPSTREAM_BUFFER: Final = 64 * 1024
UPSTREAM_FRAME_LIMIT: Final = (1 << 31) - 1
_EXPECTED: Final = (ConnectionClosed, ConnectionError, asyncio.CancelledError)
_STOP, _BUFFER, _TAKE = 0, 1, 2  # ClientConnection._gate
COMPILED: bool = cython.compiled
"""True when the Cython-compiled form of this module was imported (``make setup``; connection.pxd types it)."""


class DecisionClock:
    """Wall-clock ms for the gateway's quota decisions, never behind the previous one: decisions and their event-log
    rows then stay in ``(ts_ms, seq)`` order even if the system clock steps back, which is the order replay uses.
    One per gateway (``Gateway.decision_clock``); compiled with the core (connection.pxd), so reading it, once per
    response, is a C call."""

    last_ms: int

    def __init__(self) -> None:
        self.last_ms = 0

    def now_ms(self) -> int:
        now: int = _wall_ms()
        if now < self.last_ms:
            now = self.last_ms
        self.last_ms = now
        return now


class ProduceBinding:
    """The producer quota sensor one connection's Produce requests from one (principal, client id) record into,
    found through the produce manager once and kept while it is the one the manager's own record would use
    (``ClientQuotaManager.recording_sensor``: the manager's ``generation`` unchanged and the sensor not expired), so
    a Produce's quota decision is one compiled call into the sensor, not the handler table's, the engine's and the
    manager's calls and their dictionary lookups. ``sensor`` None: no producer quota exists (nothing is recorded).
    ``limited``: a finite producer_byte_rate applies (``Enforcement.produce_limited``, cleared when the quotas
    change, which also moves the manager's generation): the producer is read one produce at a time."""

    manager: Any
    request: Any
    generation: int
    user: str
    client_id: str
    sensor: Any
    expiration_ms: int
    limited: bool

    def __init__(self, enforcement: Enforcement, user: str, client_id: str, now_ms: int) -> None:
        managers = enforcement.managers
        self.manager = managers.produce
        self.request = managers.request
        self.generation = self.manager.generation
        self.user = user
        self.client_id = client_id
        self.sensor = self.manager.recording_sensor(user, client_id, now_ms)
        self.expiration_ms = self.manager.sensor_expiration_ms
        self.limited = enforcement.produce_limited[user, client_id]

    def holds(self, user: str, client_id: str, now_ms: int) -> bool:
        """Whether a record for ``user``/``client_id`` at ``now_ms`` goes to this binding's sensor."""
        generation: int = self.manager.generation  # (compiled: compared as C integers)
        if self.generation != generation or client_id != self.client_id or user != self.user:
            return False
        return self.sensor is None or now_ms - self.sensor.last_record_ms <= self.expiration_ms


class ConnectionCore:
    """One admitted client connection (the protocol on its socket) and, once a request must be forwarded, its
    upstream connection: everything but the asyncio base class (:class:`ClientConnection`).

    Compiled by Cython as an extension type (``connection.pxd`` declares its fields, C-typed where they are flags
    and counters, and its per-request methods); this plain-Python source is its pure twin."""

    def __init__(self, gateway: ConnectionContext, listener: str, client_ip: str, client_port: int, *,
                 node: int | None = None, tls: ListenerTls | None = None) -> None:
        self.gateway = gateway
        self.node = node  # the upstream broker whose gateway port this is (None: a bootstrap port)
        # whose quotas apply: the node's, else the gateway's own name until a bootstrap connection's upstream is known
        self.broker = broker_key(node, gateway.broker)
        self.enforcement: Enforcement = gateway.broker_quotas.for_broker(self.broker)
        self._produce_binding: ProduceBinding | None = None  # of self.enforcement, made by the first Produce decided
        access = gateway.access  # (its authorizer and hidden topics are the gateway's for its lifetime)
        # principals excluded from quotas are metered apart (Enforcement.produce): no Produce is decided through
        # the binding then; the request side's test (_binds_produce) is the hidden-name scan without an authorizer,
        # and with one the authorization plane's cached answer (authorize.granted)
        self._binds_decisions = not self.enforcement.excluded
        self._produce_scan = access.hidden.needles if access.authorizer is None and self._binds_decisions else None
        self._produce_access = access if access.authorizer is not None and self._binds_decisions else None
        self._clock = gateway.decision_clock  # the gateway's for its lifetime (compiled: a DecisionClock, C calls)
        self.listener = listener
        self.client_ip = client_ip
        self.client_port = client_port
        self.principal = ANONYMOUS
        self._tls = tls  # an SSL listener: the principal is the client certificate's mapped DN
        self.last_active = monotonic()
        self.muted_until = 0.0  # monotonic seconds; reading resumes after this
        config = gateway.config
        self._max_in_flight = config.max_in_flight
        self._max_unsent = config.max_unsent_response_bytes
        # Kafka's receive limit: socket.request.max.bytes, and sasl.server.max.receive.size until a SASL listener's
        # client has authenticated (the config does not change while the gateway runs)
        self._limit = (config.socket_request_max_bytes, "socket.request.max.bytes")
        self._preauth_limit = (min(config.sasl_server_max_receive_size, config.socket_request_max_bytes),
                               "sasl.server.max.receive.size")
        self.sasl = SaslSession(gateway, client_ip, required=config.security_protocol(listener) in SASL_PROTOCOLS,
                                on_authenticated=self._authenticated)
        # the gate's table: what ApiVersions advertises in this connection's mode, and all it accepts
        # no SASL exchange to consult for a request: no SASL listener's authentication pending, no passthrough, no
        # SASL request taken (one ends it for as long as an exchange may run); authenticated (_authenticated) it
        # holds again: a request then reads no attribute of the exchange's state
        self._sasl_quiet = not self.sasl.pending_auth and self.sasl.passthrough is None
        self._offered = versions.gate_table(sasl_passthrough=self.sasl.passthrough is not None,
                                            authorizer=access.authorizer is not None)
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._frames = FrameBuffer()
        self._upstream: UpstreamCore | None = None
        # (node, address) the upstream leg reached first (None: not opened yet): a leg released while idle reopens
        # there (release_upstream)
        self._upstream_route: tuple[int | None, tuple[str, int]] | None = None
        # lists, not deques: compiled, appending, taking the first and reading it are C calls (a deque's are Python
        # method calls); they hold at most quotaflow.max.in.flight.requests, so taking the first moves few pointers
        self._queue: list[Pending] = []  # taken, response not sent yet: in request order
        self._awaiting: list[Pending] = []  # forwarded, upstream response not read yet
        self._held = 0  # throttled produce requests whose responses are not sent yet: no reading meanwhile
        self._busy: asyncio.Task[None] | None = None  # an async step of the request being taken
        self._pool: RequestMemory | None = None  # the pool the large frame being read draws on
        self._progress = 0.0  # monotonic: when the large frame last received bytes
        self._waiting_since = 0.0  # monotonic: when it began waiting for pool memory
        self._waiting_memory = False
        self._stopped = False  # close_after: read nothing more
        self._closing = False
        self._reading = True
        self._upstream_reading = True
        self._upstream_blocked = False  # the upstream socket's write buffer is full
        self._write_paused = False  # the client's socket holds more than the unsent bound (pause_writing)
        self._mute_timer: asyncio.TimerHandle | None = None
        self._hold_timer: asyncio.TimerHandle | None = None  # held, then closed
        self._admitted = tls is None  # an SSL listener's client waits for its principal's connection rate
        self._pumping = False
        self._again = False
        self._cut = False  # a frame was cut since the body clock last started
        self.frame_since = 0.0  # monotonic: when the partial frame being read began (0: none)
        self._auth_ns = 0  # thread time of authentication, charged as network time to the next request
        # bytes of responses read from the upstream or made here and not yet handed to the client's socket
        self._unsent = 0
        self._unsent_local = 0  # the part of it the gateway made itself
        self._closed: asyncio.Future[None] = self._loop.create_future()

    # -- lifecycle ------------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio's subclasses
        self._write = transport.write  # bound once: no method lookup for each response
        # over the unsent bound with nothing left to send, only the socket's draining can wake the connection:
        # resume_writing comes once its buffer falls from the bound
        transport.set_write_buffer_limits(high=self._max_unsent)
        if self._tls is not None:
            transport.pause_reading()  # until admit()
            self._reading = False
            try:  # an SSL listener's principal is the client certificate's mapped DN (SASL_SSL: the SASL identity)
                self.principal = self._tls.principal(transport.get_extra_info("peercert"))
            except SslPrincipalMappingError as e:
                log.info("closing TLS connection from %s: %s", self.client_ip, e)
                self.close()

    @property
    def closing(self) -> bool:
        return self._closing

    def admit(self) -> None:
        """Serve a connection held at accept (an SSL listener's, until its principal's connection rate allowed it)."""
        self._admitted = True
        self._pump()

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, ssl.SSLError):  # e.g. a refused renegotiation: the client's doing, one INFO line
            log_connection_failure(log, exc, self.client_ip, self.client_port, self.listener)
        self._closing = True
        if self._upstream is not None:
            self._upstream.close()
        if self._busy is not None:
            self._busy.cancel()
        for timer in (self._mute_timer, self._hold_timer):
            if timer is not None:
                timer.cancel()
        self._awaiting.clear()
        self._release_memory()
        if not self._closed.done():
            self._closed.set_result(None)

    def eof_received(self) -> bool | None:
        return False  # a client that stops sending is done (Kafka closes the channel too)

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    def close(self, *, abort: bool = False) -> None:
        """Close both sockets (idempotent). Responses already written are still delivered, unless ``abort``."""
        self._closing = True
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()
        if self._upstream is not None:
            self._upstream.close()

    def _fail(self, exc: BaseException) -> None:
        if not isinstance(exc, _EXPECTED):  # a client's TLS error: one INFO line; anything else: a traceback
            log_connection_failure(log, exc, self.client_ip, self.client_port, self.listener)
        else:
            log.debug("closing connection from %s:%s: %s", self.client_ip, self.client_port, exc)
        self.close()

    def body_overdue(self, now: float, timeout_s: float) -> bool:
        """A frame begun more than ``timeout_s`` ago (while the gateway was reading) is still not complete."""
        return bool(self.frame_since) and now - self.frame_since > timeout_s

    def stalls_pool(self, now: float, stall_s: float, neediest: dict[RequestMemory, int]) -> bool:
        """Holds memory of a contended pool (``neediest``: the least any of its waiters still needs) for a frame
        that either received nothing for ``stall_s`` while the gateway was reading it, or has waited that long for
        more memory while it still needs more than a waiter that could finish sooner (announcing far more than
        one sends must not keep the pool from frames about to finish)."""
        pool = self._pool
        if pool is None or pool not in neediest or not pool.held(self):
            return False
        if self._reading:
            return now - self._progress > stall_s
        return (self._waiting_memory and now - self._waiting_since > stall_s
                and self._frames.unreserved > neediest[pool])

    def release_buffers(self) -> None:
        """Shrink both sockets' receive buffers back to their initial size where they hold nothing (the gateway's
        housekeeping, for a connection idle a while): an idle client costs ~1 KiB per socket, not its capacity."""
        self._frames.release()
        if self._upstream is not None:
            self._upstream.frames.release()

    @property
    def upstream_open(self) -> bool:
        """Whether this connection holds an upstream socket now (the ``/metrics`` count of upstream connections)."""
        return self._upstream is not None

    def release_upstream(self) -> bool:
        """Close the upstream leg of a connection idle past ``quotaflow.upstream.connections.max.idle.ms`` (the
        gateway's housekeeping), as a Kafka client closes its idle connections: an idle client then holds one
        descriptor, its own socket, as on a broker. The next request to forward reopens the leg
        (:meth:`_ensure_upstream`) to the broker it reached first, authenticated as the gateway was, under the same
        quotas: the quota state is the broker's managers', never the leg's.

        Only with nothing in flight on it: no request forwarded and unanswered, no response not yet sent, no async
        step running (a connect, a local answer), no byte of a response read, nothing unwritten to the upstream.
        Never in SASL passthrough: there the leg carries the client's own authentication, which a new leg would not.
        Returns whether the leg was closed."""
        upstream = self._upstream
        if (upstream is None or self._closing or self._stopped or self.sasl.passthrough is not None
                or self._awaiting or self._queue or self._busy is not None or upstream.frames.partial
                or self._upstream_blocked or upstream.transport.get_write_buffer_size()):
            return False
        self._upstream = None  # first: the leg's connection_lost is then not the client's loss (UpstreamCore)
        self._upstream_reading = True  # a new leg is read from its start
        upstream.close()
        return True

    def _release_memory(self) -> None:
        if self._pool is not None:
            self._pool.release(self)
            self._pool = None
        self._waiting_memory = False

    # -- flow control callbacks -----------------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._frames.updated(nbytes)
        if self._pool is not None:
            self._progress = monotonic()
        self._pump()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._pump()

    def _memory_freed(self) -> None:
        """The pool has room again: take the chunk now (or queue again) and go on reading."""
        pool = self._pool
        need = self._frames.wants()
        if self._closing or pool is None or not need:
            self._waiting_memory = False
            return
        if pool.reserve(self, need, self._memory_freed, self._frames.unreserved):
            self._frames.grant(need)
            self._waiting_memory = False
            self._loop.call_soon(self._pump)

    # -- the one step ---------------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Do everything that can be done now: read upstream responses, send what is ready in order, take
        requests, and set which sockets are read."""
        if self._pumping:
            self._again = True
            return
        if self._closing:
            return
        self._pumping = True
        try:
            again = True
            gate = _STOP
            while again and not self._closing:
                self._again = False
                upstream = self._upstream
                if upstream is not None and upstream.frames.partial:
                    self._read_upstream(upstream)
                if self._queue:
                    self._flush()
                gate = self._take()
                again = self._again
            if not self._closing:
                self._set_reading(gate)
        except Exception as e:  # closes the connection; logged unless expected
            self._fail(e)
        finally:
            self._pumping = False

    def _set_reading(self, gate: int) -> None:
        """Read the client's socket, or not, by ``gate`` (``_gate()`` as the last ``_take`` left it), and the
        upstream's by the unsent bound."""
        # waiting only for a response (its own, or one in flight): bytes may still come into the receive buffer,
        # taken when the gate opens (Kafka mutes the channel; the small buffer only extends the kernel's), which
        # spares a pause and a resume per request for a producer read one produce at a time
        want = (gate == _TAKE or (gate == _BUFFER and self._frames.room())) and not self._waiting_memory
        assert self.transport is not None
        if want != self._reading:
            self._reading = want
            _read(self.transport, want)
            if want and self._pool is not None:
                self._progress = monotonic()  # a stall is the client's only while the gateway reads
        # the body clock runs while the gateway reads (or waits for pool memory): a frame must be finished in time
        if self._frames.partial and (gate == _TAKE or self._waiting_memory):
            if self._cut or not self.frame_since:
                self.frame_since = monotonic()
        else:
            self.frame_since = 0.0
        self._cut = False
        upstream = self._upstream
        if upstream is not None:
            want = not self._over_unsent_bound(upstream=True)
            if want != self._upstream_reading:
                self._upstream_reading = want
                _read(upstream.transport, want)

    def _gate(self) -> int:
        """Whether the next request may be taken now (``_TAKE``), only read into the receive buffer (``_BUFFER``),
        or not read at all (``_STOP``); see the module docstring."""
        if self._closing or self._stopped or self._upstream_blocked or not self._admitted:
            return _STOP
        if self.muted_until:
            wait = self.muted_until - monotonic()
            if wait > 0:
                if self._mute_timer is None:  # one that ends early (the mute grew) just looks again
                    self._mute_timer = self._loop.call_later(wait, self._unmute)
                return _STOP
            self.muted_until = 0.0
        if self._over_unsent_bound(upstream=False):
            return _STOP
        if self._busy is not None or self._held or len(self._queue) >= self._max_in_flight:
            return _BUFFER
        return _TAKE

    def _unmute(self) -> None:
        self._mute_timer = None
        self._pump()

    def _over_unsent_bound(self, upstream: bool) -> bool:
        """Backpressure: while the client has more than ``quotaflow.max.unsent.response.bytes`` of responses it has
        not taken, read neither its requests nor its upstream's responses. The upstream side does not count
        responses made here: one of those queued behind a forwarded request must never stop the response it waits
        for from being read."""
        unsent = self._unsent - self._unsent_local if upstream else self._unsent
        if not unsent and not self._write_paused:
            return False  # the transport pauses writing above the bound (its high-water mark): below it until then
        assert self.transport is not None
        return unsent + self.transport.get_write_buffer_size() > self._max_unsent

    # -- client -> gateway ----------------------------------------------------------------------------------

    def _frame_limit(self) -> tuple[int, str]:
        """Kafka's receive limit and its setting's name: ``sasl.server.max.receive.size`` until a SASL listener's
        client has authenticated, ``socket.request.max.bytes`` after."""
        return self._limit if self._sasl_quiet or not self.sasl.pending_auth else self._preauth_limit

    def _take(self) -> int:
        """Take every whole request the gate lets in; returns the gate as it stands after."""
        frames: FrameBuffer = self._frames
        gate = self._gate()
        if not frames.partial:
            return gate
        limit, setting = self._frame_limit()  # authentication only changes in an async step, which ends this loop
        while gate == _TAKE:
            # with its size prefix (off 4): forwarded as it came, one buffer; a frame larger than the receive buffer
            # comes without it (off 0)
            frame = frames.pop(limit, setting, True)
            if frame is None:
                need = frames.wants()
                if not need or self._waiting_memory:
                    return gate
                if self._pool is None:  # a large frame begins: before authentication it has a pool of its own
                    self._pool = self.gateway.preauth_memory if self.sasl.pending_auth \
                        else self.gateway.request_memory
                    self._progress = monotonic()
                if not self._pool.reserve(self, need, self._memory_freed, frames.unreserved):
                    self._waiting_memory = True
                    self._waiting_since = monotonic()
                    return gate
                frames.grant(need)
                continue
            self._cut = True
            pool, self._pool = self._pool, None
            rest: Coroutine[Any, Any, None] | None
            # connect first: on a bootstrap port the upstream decides which broker's quotas this request meets
            off = 4 if frames.framed else 0
            connect = self._upstream is None and self._will_forward(frame, off)
            if connect or (len(frame) > off + 1 and _in(_COUNTED, (frame[off] << 8) | frame[off + 1])
                           and needs_partition_counts(self, frame[off:])):
                rest = self._prepare_then_take(frame, off, connect)
            else:
                rest = self._take_request(frame, off)
            if rest is not None:
                self._run_async(rest, pool)
            elif pool is not None:
                pool.release(self)
            gate = self._gate()
        return gate

    def _run_async(self, step: Coroutine[Any, Any, None], pool: RequestMemory | None) -> None:
        """A step that waits (upstream connect, local answer): no further request is taken until it ends; the
        frame's pool memory is held until then."""
        task = self._loop.create_task(step)
        self._busy = task

        def done(_task: asyncio.Task[None]) -> None:
            self._busy = None
            if pool is not None:
                pool.release(self)
            if task.cancelled():
                return
            exc = task.exception()
            if exc is not None:
                self._fail(exc)
            else:
                self._pump()

        task.add_done_callback(done)

    async def _prepare_then_take(self, frame: bytes, off: int, connect: bool) -> None:
        if connect:
            await self._ensure_upstream()
        await prepare_request(self, frame[off:])  # KIP-599 permits that need the upstream's partition counts
        rest = self._take_request(frame, off)
        if rest is not None:
            await rest

    def _take_request(self, frame: bytes, off: int) -> Coroutine[Any, Any, None] | None:
        """Decide one request (``frame``, its size prefix the first ``off`` bytes: 4 or none) and pass it on:
        forwarded (its bytes go to the upstream socket now) or answered here. Returns what is left to do when that
        must wait (an upstream connect, a local answer)."""
        start = _clock_ns()
        self.last_active = start / 1e9  # time.monotonic's clock, from the reading just taken
        pending: Pending = self._on_request(frame, off)
        if pending.forward is not None:
            if self._upstream is None:
                now = _clock_ns()
                pending.thread_ns += now - start
                return self._forward_later(pending)
            self._forward(pending)
        elif not pending.forwarded and pending.local is None:
            now = _clock_ns()
            pending.thread_ns += now - start
            return self._answer_later(frame[off:], pending)
        now = _clock_ns()
        pending.thread_ns += now - start  # up to its decision, forwarding included: io time
        self._enqueue(pending)
        return None

    async def _forward_later(self, pending: Pending) -> None:
        await self._ensure_upstream()
        start = _clock_ns()
        self._forward(pending)
        pending.thread_ns += _clock_ns() - start
        self._enqueue(pending)

    async def _answer_later(self, frame: bytes, pending: Pending) -> None:
        self._enqueue(await self._answer_locally(frame, pending))

    def _enqueue(self, pending: Pending) -> None:
        if pending.local:
            self._unsent += len(pending.local)
            self._unsent_local += len(pending.local)
        self._queue.append(pending)
        if pending.close_after:
            self._stopped = True  # read no more; this last response is sent and then the connection ends
        if not pending.forwarded:
            self._again = True  # ready to send now

    def _will_forward(self, frame: bytes, off: int) -> bool:
        """Whether this request (its size prefix the first ``off`` bytes) goes upstream (a peek at its header;
        ``_on_request`` does the real checks)."""
        if self.sasl.passthrough is not None and not self.sasl.authenticated:
            return True  # SASL passthrough: the exchange itself goes to the broker
        if self.sasl.raw_tokens or self.sasl.pending_auth:
            return False
        try:
            header = protocol.parse_request_header(frame[off:])
        except InvalidRequestError:
            return False
        key, version = header.api_key, header.api_version
        if key == ApiKey.ApiVersions:
            return 0 <= version <= versions.APIVERSIONS_MAX
        return not _in(_LOCAL, key) and _supported(self._offered, key, version)

    def _on_request(self, framed: bytes, off: int) -> Pending:
        """The request ``framed`` (its size prefix the first ``off`` bytes: 4, or none for a frame larger than the
        receive buffer) read and decided: answered here (``local``), or to be forwarded (``forward``: ``framed``
        itself unless a hook rewrote it)."""
        now_ms = _wall_ms()
        if not self._sasl_quiet and self.sasl.raw_tokens:
            header = protocol.RequestHeader(ApiKey.SaslAuthenticate, RAW_SASL, -1, None, 0)
            return Pending(header, len(framed) - off, now_ms)
        try:
            # protocol.read_request without its Python frame, read past the size prefix in place
            header, acks = read_request(framed, FLEXIBLE_FROM, RequestHeader, off)
        except InvalidRequestError as e:  # Kafka closes a connection whose request it cannot parse
            raise ConnectionClosed(str(e)) from e
        pending: Pending = new_pending(header, len(framed) - off, now_ms)
        key = _header(pending)[_API_KEY]
        if acks != ACKS_UNREADABLE:
            pending.acks = acks
        if self._sasl_quiet:
            if key in (_SASL_HANDSHAKE, _SASL_AUTHENTICATE):
                self._sasl_quiet = False  # an exchange may begin: its state is read from here on
        elif self.sasl.pending_auth and key not in _BEFORE_AUTH:
            # Kafka's SaslServerAuthenticator closes the connection on any other request before authentication
            raise ConnectionClosed(f"Unexpected Kafka request of type {protocol.api_name(key)} during SASL handshake.")
        if key == _API_VERSIONS and not 0 <= header.api_version <= versions.APIVERSIONS_MAX:
            pending.local = versions.unsupported_version_response(header.correlation_id)  # KIP-511
            return pending
        if not _supported(self._offered, key, _header(pending)[_API_VERSION]):
            # the gate: an API or version the gateway does not advertise is never forwarded. Kafka closes a
            # connection whose request names an API or version it does not support; the gateway cannot frame a
            # response for it either (its header version depends on the API version)
            raise ConnectionClosed(f"unsupported request {protocol.api_name(key)} v{header.api_version}")
        passthrough = not self._sasl_quiet and self.sasl.passthrough is not None
        if _in(_LOCAL, key) and (not passthrough or key not in PASSTHROUGH_APIS):
            return pending  # answered by _answer_locally
        if passthrough and key in SASL_APIS:
            self.sasl.watch_request(header, framed[off:])  # SASL passthrough: read, then forwarded as it came
        elif key == _API_VERSIONS and not passthrough and not self._sasl_quiet and self.sasl.pending_auth:
            pending.local_api_versions = True  # no upstream connection before authentication
            return pending
        forward = framed
        if key != _PRODUCE or not self._binds_produce(pending, framed, off):
            pending.handler = handler = HANDLERS.get(key, DEFAULT)
            hook = handler.request
            if hook is not None:
                frame = framed[off:]  # what the hooks read: the frame without its size prefix (off 0: itself)
                rewritten = hook(self, pending, frame)
                if rewritten is None:  # answered here (every topic refused), or no response will come (acks=0)
                    if pending.forward is frame:  # forwarded unchanged (acks=0): as it came
                        pending.forward = framed
                        pending.framed = off == 4
                    return pending
                if rewritten is not frame:
                    forward = rewritten
        pending.forward = forward
        pending.framed = off == 4 and forward is framed
        pending.forwarded = True
        self._awaiting.append(pending)
        return pending

    def _binds_produce(self, pending: Pending, framed: bytes, off: int) -> bool:
        """Whether this Produce is forwarded as it came, without the handler table's request hooks: when those
        would only pass it on (acks 1 or all, as acks=0 is answered by nobody; no principal excluded from quotas;
        and without an authorizer no hidden topic's name in it, ``authorize.SCAN_ONLY``, with one every topic
        already allowed, ``authorize.granted``: the authorization hook's own tests, which count the decisions). The
        produce hook's one rule that still applies is applied here (:meth:`hold_limited_produce`)."""
        acks = pending.acks
        if acks is None or acks == 0:
            return False
        scan = self._produce_scan
        if scan is not None:  # (the size prefix cannot hold a name: its 4 bytes plus the API key's 2 are no topic)
            if len(framed) - off > _PRODUCE_SCAN_LIMIT or _names_any(framed, scan):
                return False
        elif self._produce_access is None:
            return False
        else:
            try:
                if granted(self._produce_access, self.principal, self.client_ip, pending.header,
                           framed[off:]) is not None:
                    return False  # UNDECIDED: the hook plans it
            except InvalidRequestError:
                return False  # the hook reads it again and closes the connection as it does
        if self._binding(pending, pending.received_ms).limited:  # hold_limited_produce's test, from the binding
            self._hold_reading(pending)
        pending.handler = _PRODUCE_HANDLER
        pending.bound = True
        return True

    def _binding(self, pending: Pending, now_ms: int) -> ProduceBinding:
        """The connection's :class:`ProduceBinding` for this Produce's principal and client id at ``now_ms``: the
        one kept while it holds, else a new one, kept."""
        client_id = _header(pending)[_CLIENT_ID] or ""
        binding = self._produce_binding
        if binding is None or not binding.holds(self.principal, client_id, now_ms):
            binding = self._produce_binding = ProduceBinding(self.enforcement, self.principal, client_id, now_ms)
        return binding

    def _decide_bound_produce(self, pending: Pending, now_ms: int) -> Any:
        """A Produce's decisions (acks 1 or all, authorized or not: ``engine.produce_throttle``'s, made through the
        kept sensor), or None when a request quota is in force, whose request time the handler table's decision
        (``api_handlers._decide_produce``) records."""
        binding = self._binding(pending, now_ms)
        if binding.request.quotas_enabled:
            return None
        sensor = binding.sensor
        if sensor is None:
            return NO_THROTTLE
        throttle = sensor.record_and_throttle(pending.request_bytes, now_ms)  # a byte rate's throttle has no cap
        if not throttle:
            return NO_THROTTLE
        return produce_decisions(bandwidth_throttle(binding.manager, self.principal, binding.client_id, throttle,
                                                    now_ms))

    def _forward(self, pending: Pending) -> None:
        """Write the request to the upstream socket: as it came, one buffer (the transport's fast path: one
        ``write`` system call, nothing allocated), or a rewritten frame after its size (one writev, no copy)."""
        assert self._upstream is not None and pending.forward is not None
        frame, pending.forward = pending.forward, None
        if pending.framed:
            self._upstream.write(frame)
        else:
            self._upstream.transport.writelines((_size(len(frame)), frame))

    # -- answered by the gateway itself -----------------------------------------------------------------------

    async def _answer_locally(self, frame: bytes, pending: Pending) -> Pending:
        header = pending.header
        with map_errors(CLOSE_ON_INVALID):
            if header.api_version == RAW_SASL:
                return await self.sasl.raw_token(frame, pending)
            request = protocol.decode_request(frame, header)
            local = HANDLERS[header.api_key].local  # ApiVersions comes here only before authentication
            assert local is not None
            return await local(self, request, pending)

    # -- upstream -> gateway ----------------------------------------------------------------------------------

    async def _ensure_upstream(self) -> None:
        """Connect the upstream on first use, and again after an idle leg was released (:meth:`release_upstream`):
        then to the node it reached first (on a bootstrap port whose node is not known, the same address), whose
        quotas stay this connection's. While the upstream is down the client is held (the gateway retries with
        backoff up to its bound), then the connection is closed."""
        if self._upstream is not None:
            return
        route = self._upstream_route
        try:
            if route is None:
                reader, writer, node, address = await self.gateway.connect_upstream(self.node)
            else:
                reader, writer, node, address = await self.gateway.connect_upstream(
                    route[0], route[1] if route[0] is None else None)
        except UpstreamUnavailableError as e:
            raise ConnectionClosed(str(e)) from e
        if self._closing:
            writer.close()
            raise ConnectionClosed("closed while connecting upstream")
        self._upstream = UpstreamProtocol.take_over(self, reader, writer)
        if route is None:
            self._upstream_route = (node, address)
            self.broker = broker_key(node, self.gateway.broker)
            self.enforcement = self.gateway.broker_quotas.for_broker(self.broker)
            self._produce_binding = None

    def _read_upstream(self, upstream: UpstreamCore) -> None:
        frames: FrameBuffer = upstream.frames
        while frames.partial and not self._over_unsent_bound(upstream=True):
            # a bound Produce's response is read with its size prefix: it goes back as it came, one buffer
            bound = bool(self._awaiting) and cython.cast(Pending, self._awaiting[0]).bound
            frame = frames.pop(UPSTREAM_FRAME_LIMIT, "upstream", bound)
            framed = frames.framed
            if frame is None:
                need = frames.wants()
                if not need:
                    return
                frames.grant(need)  # responses are bounded by the unsent bound and fetch.max.bytes, not a pool
                continue
            self._unsent += len(frame)
            if not self._awaiting:
                raise ConnectionClosed("upstream sent a response nobody asked for")
            awaiting = self._awaiting
            pending: Pending = awaiting[0]
            del awaiting[0]  # (compiled: a C call; list.pop(0) would be a Python method call)
            expected: int = _header(pending)[_CORRELATION_ID]  # (compiled: compared as C integers)
            if correlation_id(frame, 4 if framed else 0) != expected:
                raise ConnectionClosed("upstream response out of order")
            pending.reply = frame
            pending.framed = framed  # (the request's own flag is done with: it was forwarded)

    def _upstream_lost(self) -> None:
        self.close()  # the client reconnects; its requests in flight have no answer to wait for

    def _upstream_writing(self, blocked: bool) -> None:
        """A slow upstream: stop taking requests rather than buffer them."""
        self._upstream_blocked = blocked
        if not blocked:
            self._pump()

    # -- gateway -> client ------------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Send every response that is ready, in request order."""
        queue = self._queue
        sent = False
        clock = 0  # the thread-time reading where the last response's work ended (0: none yet)
        while queue and not self._closing:
            pending: Pending = queue[0]
            if pending.forwarded:
                frame = pending.reply
                if frame is None:
                    break
            else:
                assert pending.local is not None
                frame = pending.local
            del queue[0]
            clock = self._send(pending, frame, clock or _clock_ns())
            sent = True
            if pending.holds_reading:  # the mute (set in _decide) now runs from this response
                self._held -= 1
            if pending.close_after:
                self.close()  # closing after the response, as Kafka does
                return
            if pending.hold_then_close_ms:  # a principal over its connection creation rate (passthrough SASL)
                self._stopped = True  # nothing more is read or sent; held, then closed (KIP-612's way)
                self._queue.clear()
                self._hold_timer = self._loop.call_later(pending.hold_then_close_ms / 1000, self.close)
                return
        upstream_side = self._upstream
        if sent and upstream_side is not None and upstream_side.frames.partial:
            self._again = True  # responses left unread while over the unsent bound may fit now

    def _send(self, pending: Pending, frame: bytes, start: int) -> int:
        """Decide, render and write one response, and log it: all in one synchronous step, so no other request's
        decision comes between them and the event log's ``(ts_ms, seq)`` order is the order of the live decisions.

        One definition of a request's thread time: ``io_thread_ns`` is the time the event loop spent on it up to its
        quota decision (read, parse, decide, forward; plus the CPU time of its executor work), recorded with the
        check; everything after the decision (address rewrite, re-encoding, the socket write) is
        ``network_thread_ns``, recorded without one at the same timestamp. Both are logged exactly as recorded, which
        is what ``quotaflow replay`` does with them (docs/gateway.md). The clock (monotonic, read through the vDSO:
        no system call, unlike a thread CPU clock) is read where one part ends and the next begins (four readings
        per forwarded request: where its request is taken and where it has been forwarded, where its response's
        work begins and ends; consecutive responses share the reading between them). ``start`` is the reading where
        this response's work began; returns the one where it ended."""
        header = _header(pending)
        key = header[_API_KEY]
        sasl = key in (_SASL_HANDSHAKE, _SASL_AUTHENTICATE) or header[_API_VERSION] == RAW_SASL
        now_ms = self._clock.now_ms()
        throttle = 0 if sasl else self._decide(pending, frame, now_ms)
        out = self._render(pending, frame, throttle)
        self._unsent -= len(frame)
        if not pending.forwarded:
            self._unsent_local -= len(frame)
        assert self.transport is not None
        if out is PASS_THROUGH:  # the upstream's bytes as they are
            if pending.framed:  # read with its size prefix: one buffer, the transport's fast path
                self._write(frame)
            elif self._tls is None or len(frame) > _TLS_RECORD:
                self.transport.writelines((_size(len(frame)), frame))  # one writev, no copy
            else:  # a TLS transport makes a record of each buffer it is given: one record, not a 4-byte one too
                self._write(_size(len(frame)) + frame)
        elif out:
            self._write(out)
        end = _clock_ns()
        self.last_active = end / 1e9  # time.monotonic's clock, from the reading just taken
        pending.network_ns += end - start
        if sasl:
            # authentication is not a request to the quota managers (Kafka's authenticator runs before KafkaApis);
            # its thread time becomes network-thread time of the first request after it, and it is not logged
            self._auth_ns += pending.thread_ns + pending.network_ns
            return end
        if self._auth_ns:
            pending.network_ns += self._auth_ns
            self._auth_ns = 0
        enforcement = self.enforcement
        client_id = header[_CLIENT_ID] or ""
        if pending.exempt:
            enforcement.exempt_network_time(pending.network_ns, now_ms)
        elif enforcement.network_metered:
            enforcement.network_time(self.principal, client_id, pending.network_ns, now_ms)
        rows: RowQueue | None = self.gateway.request_rows
        if rows is not None:  # the usage event log is on: the request's row, built and appended in C
            if pending.response is not None:  # cut before its decision (a Fetch under a consumer quota)
                response_bytes = len(pending.response)
            else:  # the response's size without its size prefix (the gateway's own and a bound one have it)
                response_bytes = len(frame) if pending.forwarded and not pending.framed else max(len(frame) - 4, 0)
            rows.append(request_row(self.broker, self.listener, self.principal, self.client_ip, pending,
                                    response_bytes, now_ms, rows.next_seq()))
        return end

    def _decide(self, pending: Pending, frame: bytes, now_ms: int) -> int:
        """The quota decisions for one response (KIP-219): the throttle to apply. ``frame`` is the upstream
        response (unframed, framed when ``pending.framed``) or the gateway's own (framed)."""
        enforcement = self.enforcement
        switch_ms: int = enforcement.switch_ms  # (compiled: compared as C integers)
        if now_ms >= switch_ms:  # a promotion's batch takes effect now (gateway.data.shadow)
            enforcement.switch(now_ms)
        decisions = None
        if pending.handler is _PRODUCE_HANDLER and pending.acks != 0 and self._binds_decisions:
            decisions = self._decide_bound_produce(pending, now_ms)
        if decisions is None:
            header = _header(pending)
            handler = pending.handler or HANDLERS.get(header[_API_KEY], DEFAULT)
            decisions = handler.decide(enforcement, pending, _body(pending, frame), self.principal,
                                       header[_CLIENT_ID] or "", pending.thread_ns, now_ms)
        pending.decisions = decisions
        shadow = enforcement.shadow
        if shadow is not None:  # a shadow quota set runs: the same request decided under it, never applied
            pending.shadow = decide_shadow(shadow, pending, _body(pending, frame), self.principal, now_ms)
        if decisions is NO_THROTTLE:
            return 0
        throttle = decisions.throttle_ms
        if throttle > 0:
            self._mute(throttle)
        return throttle

    def _render(self, pending: Pending, frame: bytes, throttle: int) -> bytes:
        """The bytes to send: throttle attached, addresses rewritten, correlation id kept (``frame`` as in
        :meth:`_decide`)."""
        header = _header(pending)
        key, version = header[_API_KEY], header[_API_VERSION]
        if pending.bound:  # a bound Produce is planned by no authorization hook (pending.authz None)
            hook = _PRODUCE_RESPONSE
        else:
            handler = pending.handler or HANDLERS.get(key, DEFAULT)
            hook = handler.response if pending.authz is None or handler.planned_response is None \
                else handler.planned_response
        if hook is not None:
            out = hook(self, pending, _body(pending, frame), throttle)
            if out is not None:
                return out
        if not pending.forwarded:  # made here: already framed; only the throttle field may change
            if throttle > 0 and frame:
                return protocol.set_throttle(frame[4:], key, version, throttle) or frame
            return frame
        if throttle > 0:
            return rewrite(self, _body(pending, frame), key, version, throttle)
        return PASS_THROUGH

    def hold_limited_produce(self, pending: Pending) -> None:
        """A producer under a finite producer_byte_rate is read one produce at a time (Kafka's rule): nothing more
        is read until this produce's response is decided and sent and its throttle has passed, so nothing it
        pipelines slips past the throttle. Both Produce paths ask this (the handler table's hook and the bound one)."""
        if self.enforcement.produce_limited[self.principal, _header(pending)[_CLIENT_ID] or ""]:
            self._hold_reading(pending)

    def _hold_reading(self, pending: Pending) -> None:
        """Read nothing more until ``pending``'s response is sent and its throttle has passed."""
        pending.holds_reading = True
        self._held += 1

    def _authenticated(self, principal: str) -> None:
        self.principal = principal
        self._sasl_quiet = self.sasl.passthrough is None  # authenticated: no exchange runs again (SaslSession)

    def _mute(self, throttle_ms: int) -> None:
        """Stop reading this connection for the throttle time (Kafka mutes the channel; KIP-219)."""
        self.muted_until = max(self.muted_until, monotonic() + throttle_ms / 1000)


class ClientConnection(ConnectionCore, asyncio.BufferedProtocol):
    """A client connection's protocol: :class:`ConnectionCore` as an asyncio ``BufferedProtocol`` (asyncio's own
    loop recognises buffered protocols by their class, uvloop by their ``get_buffer``). No fields of its own: every
    one is the core's."""

    __slots__ = ()


class UpstreamCore:
    """The protocol on a client's upstream socket: frames cut here, everything else done by its connection.
    Compiled as an extension type (``connection.pxd``), as :class:`ConnectionCore` is, so the core reads its
    transport and frames as C fields and a response arriving calls the core's pump in C."""

    conn: ConnectionCore
    transport: asyncio.Transport
    write: Callable[[bytes], None]
    frames: FrameBuffer
    _writer: asyncio.StreamWriter | None

    def __init__(self, conn: ConnectionCore, transport: asyncio.Transport,
                 writer: asyncio.StreamWriter | None = None) -> None:
        self.conn = conn
        self.transport = transport
        self.write = transport.write  # bound once: no method lookup for each request forwarded
        self.frames = FrameBuffer(UPSTREAM_BUFFER)
        self._writer = writer  # kept: a StreamWriter closes its transport when it is collected

    def close(self) -> None:
        self.transport.close()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.frames.updated(nbytes)
        self.conn._pump()

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn._upstream is self:  # not a leg released while idle (ConnectionCore.release_upstream)
            self.conn._upstream_lost()

    def pause_writing(self) -> None:
        self.conn._upstream_writing(True)

    def resume_writing(self) -> None:
        self.conn._upstream_writing(False)


class UpstreamProtocol(UpstreamCore, asyncio.BufferedProtocol):
    """The upstream side's :class:`UpstreamCore` as an asyncio ``BufferedProtocol``."""

    __slots__ = ()

    @classmethod
    def take_over(cls, conn: ConnectionCore, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter) -> UpstreamProtocol:
        """Move a freshly opened (and, when the gateway has an upstream identity, authenticated) stream connection
        onto this protocol. Nothing has been asked on it for the client yet, so its reader holds nothing."""
        transport = cast(asyncio.Transport, writer.transport)
        upstream = cls(conn, transport, writer)
        transport.set_protocol(upstream)
        leftover = bytes(getattr(reader, "_buffer", b""))
        if leftover:
            upstream.frames.feed(leftover)  # answered before it was asked: _read_upstream refuses it
        if transport.is_closing() or reader.exception() is not None or reader.at_eof():
            transport.close()
            raise ConnectionClosed("the upstream closed the connection as it was opened")
        return upstream


def _header(pending: Pending) -> tuple[Any, ...]:
    """``pending.header`` (a ``RequestHeader``, a tuple) read by position: compiled, ``header[_API_KEY]`` is a C
    array read where ``header.api_key`` is a Python attribute lookup through the NamedTuple's class (the core reads
    a request's header fields a dozen times between its request and its response)."""
    return cython.cast(tuple, pending.header)  # type: ignore[no-any-return]  # (a cast: no exact-tuple test)


_API_KEY, _API_VERSION, _CORRELATION_ID, _CLIENT_ID = 0, 1, 2, 3  # RequestHeader's fields by position
assert RequestHeader._fields[:4] == ("api_key", "api_version", "correlation_id", "client_id")


def _body(pending: Pending, frame: bytes) -> bytes:
    """A response as the API hooks read it: an upstream response without its size prefix (cut off when it was read
    with it, ``pending.framed``), the gateway's own as it is (framed)."""
    return frame[4:] if pending.forwarded and pending.framed else frame


def _names_any(frame: bytes, needles: tuple[bytes, ...]) -> bool:
    """``HiddenTopics.may_name``'s test (any of its ``needles``, the bytes of the hidden names, occurs in the
    frame) made by the core itself: compiled, libc's ``memmem`` over the frame's own bytes per needle (no method
    call, no argument parsing), without the regular-expression engine ``may_name`` runs; the twin, ``bytes.find``."""
    for needle in needles:  # (compiled: a C loop)
        if cython.compiled:  # the bytes objects' own buffers
            if memmem(cython.cast(cython.p_const_char, frame), len(frame),  # type: ignore[name-defined]  # noqa: F821
                      cython.cast(cython.p_const_char, needle), len(needle)) != cython.NULL:
                return True
        elif frame.find(needle) >= 0:
            return True
    return False


def _read(transport: asyncio.Transport, on: bool) -> None:
    if on:
        transport.resume_reading()
    else:
        transport.pause_reading()


def _clock_ns() -> int:
    """``monotonic_ns()``: the event loop's clock for a request's thread time (four readings a forwarded request).
    Compiled, while the module's ``monotonic_ns`` is ``time.monotonic_ns`` (tests replace it, in both forms, to
    give them one clock), the same clock (``CLOCK_MONOTONIC``) read by ``clock_gettime`` in C, through the vDSO:
    no Python call and no int object each time."""
    if cython.compiled and monotonic_ns is _MONOTONIC_NS:
        ts = cython.declare(timespec)  # type: ignore[name-defined]  # noqa: F821
        clock_gettime(CLOCK_MONOTONIC, cython.address(ts))  # type: ignore[name-defined]  # noqa: F821
        return ts.tv_sec * 1_000_000_000 + ts.tv_nsec  # type: ignore[no-any-return]
    return monotonic_ns()


def _wall_ms() -> int:
    """``time_ns() // 1_000_000``: the wall clock in ms a request's decision is timed by, compiled as
    :func:`_clock_ns` is (``CLOCK_REALTIME``, ``time.time_ns``'s clock, read in C while ``time_ns`` is time's)."""
    if cython.compiled and time_ns is _TIME_NS:
        ts = cython.declare(timespec)  # type: ignore[name-defined]  # noqa: F821
        clock_gettime(CLOCK_REALTIME, cython.address(ts))  # type: ignore[name-defined]  # noqa: F821
        return ts.tv_sec * 1_000 + ts.tv_nsec // 1_000_000  # type: ignore[no-any-return]
    ms: int = cython.cast(cython.longlong, time_ns()) // 1_000_000  # (compiled: a C division)
    return ms


_MONOTONIC_NS: Final = monotonic_ns
_TIME_NS: Final = time_ns


def _key_table(keys: frozenset[int]) -> bytes:
    """A set of API keys as a table read by :func:`_in`: a byte per key, 1 for a member."""
    return bytes(key in keys for key in range(max(keys) + 1))


def _in(table: bytes, api_key: int) -> bool:
    """``api_key`` in the set ``table`` was made of (compiled: a byte read, not a set lookup of a boxed key)."""
    return 0 <= api_key < len(table) and table[api_key] != 0


def _supported(table: bytes, api_key: int, version: int) -> bool:
    """The gate: whether the gateway takes this request header, by its mode's table (``versions.gate_table``: per
    API key the lowest and highest version it advertises). Everything else (an API it does not offer, a version
    above what it advertises, whatever the upstream speaks) is never read further nor forwarded."""
    if api_key < 0 or version < 0 or 2 * api_key + 1 >= len(table):
        return False
    return table[2 * api_key] <= version <= table[2 * api_key + 1]


_size: Final = SIZE.pack  # a frame's 4-byte size prefix; bound once: no method lookup twice a request
_API_VERSIONS: Final = int(ApiKey.ApiVersions)  # a plain int: an IntEnum member is a slower lookup, twice a request
_PRODUCE: Final = int(ApiKey.Produce)
_SASL_HANDSHAKE: Final = int(ApiKey.SaslHandshake)
_SASL_AUTHENTICATE: Final = int(ApiKey.SaslAuthenticate)
_PRODUCE_HANDLER: Final = HANDLERS[ApiKey.Produce]
_PRODUCE_RESPONSE: Final = _PRODUCE_HANDLER.response
_PRODUCE_SCAN_LIMIT: Final = SCAN_ONLY[ApiKey.Produce]
_TLS_RECORD: Final = 16 * 1024  # a TLS record's most plaintext: a larger frame is several records, copied for nothing
_BEFORE_AUTH: Final = SASL_APIS | {ApiKey.ApiVersions}
_LOCAL: Final = _key_table(LOCAL_APIS)  # the API key sets a request is looked up in on the common path, as tables
_COUNTED: Final = _key_table(COUNTED_API_KEYS)
