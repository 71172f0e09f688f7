"""One client connection's core: framing, ordering (pipelining), muting, backpressure, forwarding.

What it needs of the gateway is :class:`~quotaflow.gateway.context.ConnectionContext`; what each API does (request
and response hooks, quota decisions, local answers) is the table in :mod:`quotaflow.gateway.api_handlers`; the SASL
exchange is :class:`~quotaflow.gateway.sasl_session.SaslSession`; a request on its way is a
:class:`~quotaflow.gateway.pending.Pending`.

Up to three tasks per connection, joined by one ordered queue so responses leave in request order (Kafka clients
pipeline requests and match responses by order and correlation id):

* ``_read_client``: reads a frame, decides (forward raw / answer locally / fail), queues a ``Pending``; forwarded
  frames are written to the upstream unchanged, so correlation ids are preserved. It reads the next request only
  when fewer than ``quotaflow.max.in.flight.requests`` are unanswered (1 is Kafka's rule, one request at a time), the
  connection is not muted, and the client has taken its responses (``quotaflow.max.unsent.response.bytes``). A
  byte-rate-limited producer is read one produce at a time, so nothing it pipelines slips past its throttle.
* ``_read_upstream`` (started with the upstream connection, which opens with the first request to forward): reads
  upstream responses and completes the oldest forwarded ``Pending``; it too pauses while the client does not drain.
* ``_write_client``: takes each ``Pending`` in order and, in one synchronous step, decides its quotas (KIP-219:
  answer at once with ``throttle_time_ms``, then stop reading this connection for that long), rewrites what must be
  rewritten, writes, and logs the event row, so the log's order is the decisions' order.

Thread time (``time.thread_time_ns``) up to a request's quota decision is its io-thread time, checked against the
request quota; after it (rewrite, encode, write) its network-thread time, recorded unchecked (docs/gateway.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Final

from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import ConnectionClosed, InvalidRequestError, map_errors
from quotaflow.gateway import protocol, versions
from quotaflow.gateway.api_handlers import (
    CLOSE_ON_INVALID,
    DEFAULT,
    HANDLERS,
    LOCAL_APIS,
    PASS_THROUGH,
    prepare_request,
    rewrite,
)
from quotaflow.gateway.brokers import UpstreamUnavailableError, broker_key
from quotaflow.gateway.config import SASL_PROTOCOLS
from quotaflow.gateway.pending import RAW_SASL, Pending
from quotaflow.gateway.sasl import ANONYMOUS
from quotaflow.gateway.sasl_session import SaslSession
from quotaflow.gateway.tls_errors import log_connection_failure
from quotaflow.gateway.versions import PASSTHROUGH_APIS, SASL_APIS

if TYPE_CHECKING:
    from quotaflow.gateway.context import ConnectionContext
    from quotaflow.gateway.enforcement import Enforcement

log = logging.getLogger(__name__)


class ClientConnection:
    """One admitted client connection and, once a request must be forwarded, its upstream connection."""

    def __init__(self, gateway: ConnectionContext, listener: str, client_ip: str, client_port: int,
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, node: int | None = None) -> None:
        self.gateway = gateway
        self.node = node  # the upstream broker whose gateway port this is (None: a bootstrap port)
        # whose quotas apply: the node's, else the gateway's own name until a bootstrap connection's upstream is known
        self.broker = broker_key(node, gateway.broker)
        self.enforcement: Enforcement = gateway.broker_quotas.for_broker(self.broker)
        self.listener = listener
        self.client_ip = client_ip
        self.client_port = client_port
        self.reader = reader
        self.writer = writer
        self.principal = ANONYMOUS
        self.last_active = time.monotonic()
        self.muted_until = 0.0  # monotonic seconds; reading resumes after this
        self._queue: asyncio.Queue[Pending | None] = asyncio.Queue()
        # requests read but not yet answered; 1 = Kafka's rule: the next request is read only after the previous
        # response has been sent (and its throttle mute has passed)
        self._slots = asyncio.Semaphore(gateway.config.max_in_flight)
        self._held = 0  # throttled produce requests whose responses are not sent yet: reading waits for them
        self._released = asyncio.Event()
        self._awaiting: deque[Pending] = deque()
        self._upstream_reader: asyncio.StreamReader | None = None
        self._upstream_writer: asyncio.StreamWriter | None = None
        self.sasl = SaslSession(gateway, client_ip,
                                required=gateway.config.security_protocol(listener) in SASL_PROTOCOLS,
                                on_authenticated=self._authenticated)
        self._auth_ns = 0  # CPU time of authentication, charged as network time to the next request
        self._closing = False
        # bytes of responses read from the upstream or made here and not yet handed to the client's socket
        self._unsent = 0
        self._unsent_local = 0  # the part of it the gateway made itself
        self._drained = asyncio.Event()
        self._tasks: list[asyncio.Future[None]] = []
        self._ended: asyncio.Future[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Read and write the client until either side ends. The upstream connection is opened lazily, by the
        first request that must be forwarded (after authentication on SASL listeners), so a client that never
        sends a whole request holds no upstream socket."""
        self._ended = asyncio.get_running_loop().create_future()
        try:
            self._spawn(self._read_client())
            self._spawn(self._write_client())
            await self._ended
        finally:
            for task in self._tasks:
                task.cancel()
            results = await asyncio.gather(*self._tasks, return_exceptions=True)
            for exc in results:
                if isinstance(exc, Exception) and not isinstance(
                        exc, ConnectionClosed | ConnectionError | asyncio.IncompleteReadError | asyncio.CancelledError):
                    log_connection_failure(log, exc, self.client_ip, self.client_port, self.listener)
            self._fail_awaiting()
            self.close()
            await self._wait_closed()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.append(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, _task: asyncio.Future[None]) -> None:
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    async def _ensure_upstream(self) -> None:
        """Connect the upstream on first use; while it is down the client is held (the gateway retries with
        backoff up to its bound), then the connection is closed."""
        if self._upstream_writer is not None:
            return
        try:
            self._upstream_reader, self._upstream_writer, node = await self.gateway.connect_upstream(self.node)
        except UpstreamUnavailableError as e:
            raise ConnectionClosed(str(e)) from e
        if self._closing:
            self._upstream_writer.close()
            raise ConnectionClosed("closed while connecting upstream")
        self.broker = broker_key(node, self.gateway.broker)
        self.enforcement = self.gateway.broker_quotas.for_broker(self.broker)
        self._spawn(self._read_upstream())

    def close(self) -> None:
        """Close both sockets now (idempotent; safe from other tasks, e.g. the idle reaper)."""
        self._closing = True
        self.writer.close()
        if self._upstream_writer is not None:
            self._upstream_writer.close()

    async def _wait_closed(self) -> None:
        for w in (self.writer, self._upstream_writer):
            if w is not None:
                with contextlib.suppress(Exception):
                    await w.wait_closed()

    def _fail_awaiting(self) -> None:
        while self._awaiting:
            fut = self._awaiting.popleft().upstream
            if fut is not None and not fut.done():
                fut.cancel()  # the writer is cancelled too; nobody is left to read an exception

    # -- client -> gateway ----------------------------------------------------------------------------------

    async def _read_frame(self, reader: asyncio.StreamReader, limit: int, setting: str) -> bytes:
        size = protocol.SIZE.unpack(await reader.readexactly(4))[0]
        if size < 0 or size > limit:
            raise ConnectionClosed(f"Invalid receive (size = {size} larger than {limit}, {setting})")
        return await reader.readexactly(size)

    def _frame_limit(self) -> tuple[int, str]:
        """Kafka's receive limit: ``sasl.server.max.receive.size`` until a SASL listener's client has
        authenticated, ``socket.request.max.bytes`` after."""
        config = self.gateway.config
        if self.sasl.pending_auth:
            return min(config.sasl_server_max_receive_size, config.socket_request_max_bytes), \
                "sasl.server.max.receive.size"
        return config.socket_request_max_bytes, "socket.request.max.bytes"

    async def _read_client(self) -> None:
        while not self._closing:
            await self._slots.acquire()
            await self._ready_to_read()
            size = await self._read_size(*self._frame_limit())
            memory = self.gateway.request_memory
            await memory.acquire(size)  # queued.max.request.bytes, over all connections
            try:
                frame = await self.reader.readexactly(size)
                await self._ready_to_read()  # a mute set while this read was pending holds the request back too
                pending = await self._take_request(frame)
            finally:
                memory.release(size)
            if pending.local:
                self._unsent += len(pending.local)
                self._unsent_local += len(pending.local)
            await self._queue.put(pending)
            if pending.close_after:
                # read no more; the writer sends this last response and then ends the connection
                await asyncio.get_running_loop().create_future()

    async def _read_size(self, limit: int, setting: str) -> int:
        size: int = protocol.SIZE.unpack(await self.reader.readexactly(4))[0]
        if size < 0 or size > limit:
            raise ConnectionClosed(f"Invalid receive (size = {size} larger than {limit}, {setting})")
        return size

    async def _take_request(self, frame: bytes) -> Pending:
        """Decide one request and pass it on: forwarded (its bytes leave when the upstream socket drains) or
        answered here."""
        if self._upstream_writer is None and self._will_forward(frame):
            # connect first: on a bootstrap port the upstream decides which broker's quotas this request meets
            await self._ensure_upstream()
        await prepare_request(self, frame)  # KIP-599 permits that need the upstream's partition counts
        start = time.thread_time_ns()
        self.last_active = time.monotonic()
        pending = self._on_request(frame)
        pending.thread_ns += time.thread_time_ns() - start
        if pending.forward is not None:
            await self._ensure_upstream()
            self._forward(pending)
            assert self._upstream_writer is not None
            await self._upstream_writer.drain()  # a slow upstream: stop reading the client, do not buffer
        elif pending.upstream is None and pending.local is None:
            pending = await self._answer_locally(frame, pending)
        return pending

    def _will_forward(self, frame: bytes) -> bool:
        """Whether this request goes upstream (a peek at its header; ``_on_request`` does the real checks)."""
        if self.sasl.passthrough is not None and not self.sasl.authenticated:
            return True  # SASL passthrough: the exchange itself goes to the broker
        if self.sasl.raw_tokens or self.sasl.pending_auth:
            return False
        try:
            header = protocol.parse_request_header(frame)
        except InvalidRequestError:
            return False
        key, version = header.api_key, header.api_version
        if key == ApiKey.ApiVersions:
            return 0 <= version <= versions.APIVERSIONS_MAX
        return key not in LOCAL_APIS and _supported(key, version)

    async def _ready_to_read(self) -> None:
        await self._unmuted()
        await self._below_unsent_bound()

    def _over_unsent_bound(self, upstream: bool) -> bool:
        # the upstream reader does not count responses made here: one of those queued behind a forwarded request
        # must never stop the response the writer is waiting for from being read
        unsent = self._unsent - self._unsent_local if upstream else self._unsent
        buffered = self.writer.transport.get_write_buffer_size()
        return unsent + buffered > self.gateway.config.max_unsent_response_bytes

    async def _below_unsent_bound(self, *, upstream: bool = False) -> None:
        """Backpressure: while the client has more than ``quotaflow.max.unsent.response.bytes`` of responses it has
        not taken, read neither its requests nor its upstream's responses (the writer wakes this after each drain)."""
        while self._over_unsent_bound(upstream) and not self._closing:
            self._drained.clear()
            await self._drained.wait()

    async def _unmuted(self) -> None:
        while True:
            if self._held:
                self._released.clear()
                await self._released.wait()
                continue
            wait = self.muted_until - time.monotonic()
            if wait <= 0:
                return
            await asyncio.sleep(wait)

    def _on_request(self, frame: bytes) -> Pending:
        now_ms = time.time_ns() // 1_000_000
        if self.sasl.raw_tokens:
            header = protocol.RequestHeader(ApiKey.SaslAuthenticate, RAW_SASL, -1, None, 0)
            return Pending(header, len(frame), now_ms)
        with map_errors(CLOSE_ON_INVALID):
            header = protocol.parse_request_header(frame)
        pending = Pending(header, len(frame), now_ms)
        key = header.api_key
        if self.sasl.pending_auth and key not in _BEFORE_AUTH:
            # Kafka's SaslServerAuthenticator closes the connection on any other request before authentication
            raise ConnectionClosed(f"Unexpected Kafka request of type {protocol.api_name(key)} during SASL handshake.")
        if key == ApiKey.ApiVersions and not 0 <= header.api_version <= versions.APIVERSIONS_MAX:
            pending.local = versions.unsupported_version_response(header.correlation_id)  # KIP-511
            return pending
        if not _supported(key, header.api_version):
            # Kafka closes a connection whose request header names an API or version it cannot parse; the gateway
            # cannot frame a response for it either (its header version depends on the API version)
            raise ConnectionClosed(f"unsupported request {protocol.api_name(key)} v{header.api_version}")
        passthrough = self.sasl.passthrough is not None
        if key in LOCAL_APIS and (not passthrough or key not in PASSTHROUGH_APIS):
            return pending  # answered by _answer_locally
        if passthrough and key in SASL_APIS:
            self.sasl.watch_request(header, frame)  # SASL passthrough: read, then forwarded as it came
        elif key == ApiKey.ApiVersions and self.sasl.pending_auth and not passthrough:
            pending.local_api_versions = True  # no upstream connection before authentication
            return pending
        hook = HANDLERS.get(key, DEFAULT).request
        if hook is not None:
            forward = hook(self, pending, frame)
            if forward is None:  # answered here (every topic refused), or no response will come (acks=0)
                return pending
            frame = forward
        pending.forward = frame
        pending.upstream = asyncio.get_running_loop().create_future()
        self._awaiting.append(pending)
        return pending

    def _forward(self, pending: Pending) -> None:
        assert self._upstream_writer is not None and pending.forward is not None
        frame, pending.forward = pending.forward, None
        start = time.thread_time_ns()
        self._upstream_writer.writelines((protocol.SIZE.pack(len(frame)), frame))  # one writev, no copy
        pending.network_ns += time.thread_time_ns() - start

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

    async def _read_upstream(self) -> None:
        assert self._upstream_reader is not None
        while True:
            await self._below_unsent_bound(upstream=True)
            frame = await self._read_frame(self._upstream_reader, 1 << 31, "upstream")
            self._unsent += len(frame)
            if not self._awaiting:
                raise ConnectionClosed("upstream sent a response nobody asked for")
            pending = self._awaiting.popleft()
            if protocol.response_correlation_id(frame) != pending.header.correlation_id:
                raise ConnectionClosed("upstream response out of order")
            assert pending.upstream is not None
            pending.upstream.set_result(frame)

    # -- gateway -> client ------------------------------------------------------------------------------------

    async def _write_client(self) -> None:
        while True:
            pending = await self._queue.get()
            if pending is None:
                return
            frame = await pending.upstream if pending.upstream is not None else pending.local
            assert frame is not None
            self._send(pending, frame)
            if pending.holds_reading:  # the mute (set in _decide) now runs from this response
                self._held -= 1
                self._released.set()
            await self.writer.drain()
            self._drained.set()
            self._slots.release()
            if pending.close_after:
                raise ConnectionClosed("closing after the response, as Kafka does")
            if pending.hold_then_close_ms:  # a principal over its connection creation rate (passthrough SASL)
                await asyncio.sleep(pending.hold_then_close_ms / 1000)
                raise ConnectionClosed(f"throttled for {pending.hold_then_close_ms} ms at authentication")

    def _send(self, pending: Pending, frame: bytes) -> None:
        """Decide, render and write one response, and log it: all in one synchronous step, so no other request's
        decision comes between them and the event log's ``(ts_ms, seq)`` order is the order of the live decisions.

        One definition of a request's thread time: ``io_thread_ns`` is the CPU time up to its quota decision (read,
        parse, decide, executor work), recorded with the check; everything after the decision (address rewrite,
        re-encoding, the socket write) is ``network_thread_ns``, recorded without one at the same timestamp. Both
        are logged exactly as recorded, which is what ``quotaflow replay`` does with them (docs/gateway.md)."""
        start = time.thread_time_ns()
        key = pending.header.api_key
        sasl = pending.header.api_version == RAW_SASL or key in SASL_APIS
        now_ms = self.gateway.decision_ms()
        throttle, measured = (0, start) if sasl else self._decide(pending, frame, start, now_ms)
        out = self._render(pending, frame, throttle)
        self._unsent -= len(frame)
        if pending.upstream is None:
            self._unsent_local -= len(frame)
        if out is PASS_THROUGH:  # the upstream's bytes as they are: no copy into a new buffer
            self.writer.writelines((protocol.SIZE.pack(len(frame)), frame))
        elif out:
            self.writer.write(out)
        self.last_active = time.monotonic()
        pending.network_ns += time.thread_time_ns() - measured
        if sasl:
            # authentication is not a request to the quota managers (Kafka's authenticator runs before KafkaApis);
            # its CPU time becomes network-thread time of the first request after it, and it is not logged
            self._auth_ns += pending.thread_ns + pending.network_ns
            return
        if self._auth_ns:
            pending.network_ns += self._auth_ns
            self._auth_ns = 0
        enforcement = self.enforcement
        client_id = pending.header.client_id or ""
        if pending.exempt:
            enforcement.exempt_network_time(pending.network_ns, now_ms)
        else:
            enforcement.network_time(self.principal, client_id, pending.network_ns, now_ms)
        if pending.response is not None:  # cut before its decision (a Fetch under a consumer quota)
            frame = pending.response
        response_bytes = len(frame) if pending.upstream is not None else max(len(frame) - 4, 0)
        self.gateway.on_request(self, pending, response_bytes, now_ms)

    def _decide(self, pending: Pending, frame: bytes, start_ns: int, now_ms: int) -> tuple[int, int]:
        """The quota decisions for one response (KIP-219): (throttle to apply, the thread-time reading that ended
        its io time). ``frame`` is the upstream response (unframed) or the gateway's own (framed)."""
        header = pending.header
        key = header.api_key
        enforcement = self.enforcement
        user, client_id = self.principal, header.client_id or ""
        measured = time.thread_time_ns()
        pending.thread_ns += measured - start_ns
        decisions = HANDLERS.get(key, DEFAULT).decide(enforcement, pending, frame, user, client_id,
                                                      pending.thread_ns, now_ms)
        pending.decisions = decisions
        throttle = decisions.throttle_ms
        if throttle > 0:
            self._mute(throttle)
        return throttle, measured

    def _render(self, pending: Pending, frame: bytes, throttle: int) -> bytes:
        """The bytes to send: throttle attached, addresses rewritten, correlation id kept."""
        header = pending.header
        key, version = header.api_key, header.api_version
        hook = HANDLERS.get(key, DEFAULT).response
        if hook is not None:
            out = hook(self, pending, frame, throttle)
            if out is not None:
                return out
        if pending.upstream is None:  # made here: already framed; only the throttle field may change
            if throttle > 0 and frame:
                return protocol.set_throttle(frame[4:], key, version, throttle) or frame
            return frame
        if throttle > 0:
            return rewrite(self, frame, key, version, throttle)
        return PASS_THROUGH

    def hold_reading(self, pending: Pending) -> None:
        """A byte-rate-limited produce: no further reads until its response is sent and its throttle has passed."""
        pending.holds_reading = True
        self._held += 1

    def _authenticated(self, principal: str) -> None:
        self.principal = principal

    def _mute(self, throttle_ms: int) -> None:
        """Stop reading this connection for the throttle time (Kafka mutes the channel; KIP-219)."""
        self.muted_until = max(self.muted_until, time.monotonic() + throttle_ms / 1000)


def _supported(api_key: int, version: int) -> bool:
    """Whether the gateway can take this request header: never a negative version; for the APIs it decodes or
    answers itself, only versions kafka-python models (it could not frame their responses otherwise). Other APIs
    are forwarded as bytes and the upstream judges their versions."""
    if version < 0:
        return False
    if api_key not in versions.DECODED_APIS and api_key not in LOCAL_APIS:
        return True
    cls = protocol.REQUESTS.get(api_key)
    known = protocol.max_known_version(api_key)
    return cls is not None and known is not None and int(cls.min_version) <= version <= known


_BEFORE_AUTH: Final = SASL_APIS | {ApiKey.ApiVersions}
