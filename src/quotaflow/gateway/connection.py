"""One client connection: framing, pipelining, SASL, local answers, forwarding, throttling.

Three tasks per connection, joined by one ordered queue so responses leave in request order (Kafka clients
pipeline requests and match responses by order and correlation id):

* ``_read_client``: reads a frame, decides (forward raw / answer locally / fail), queues a ``Pending``; forwarded
  frames are written to the upstream unchanged, so correlation ids are preserved. It reads the next request only
  when fewer than ``quotaflow.max.in.flight.requests`` are unanswered (1 is Kafka's rule, one request at a time).
  Pipelining is allowed by default, and still no request slips past a throttle: the produce byte rate is decided
  when the request is read, and the mute starts then and lasts until the response is sent plus the throttle time.
* ``_read_upstream``: reads upstream responses and completes the oldest forwarded ``Pending``.
* ``_write_client``: takes each ``Pending`` in order, applies quotas (KIP-219: answer at once with
  ``throttle_time_ms``, then stop reading this connection for that long), rewrites what must be rewritten, writes.

Thread time (``time.thread_time_ns``) is measured around every synchronous step a request takes on the event
loop, plus work done for it in executor threads, and fed to the request quota (SPEC §5; docs/gateway.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import ConnectionClosed, InvalidRequestError
from quotaflow.gateway import mutations, protocol, versions
from quotaflow.gateway.addresses import REWRITTEN_APIS, rewrite_addresses
from quotaflow.gateway.brokers import broker_key
from quotaflow.gateway.config import SASL_PLAINTEXT
from quotaflow.gateway.mutations import TopicQuotaDecision
from quotaflow.gateway.sasl import ANONYMOUS, PLAIN, SaslAuthenticationError, authenticate_plain

if TYPE_CHECKING:
    from quotaflow.gateway.enforcement import Enforcement
    from quotaflow.gateway.server import Gateway

log = logging.getLogger(__name__)

SASL_AUTHENTICATION_FAILED: Final = 58
UNSUPPORTED_SASL_MECHANISM: Final = 33
ILLEGAL_SASL_STATE: Final = 34
_RAW_SASL: Final = -1  # pseudo api version marking a SaslHandshake-v0 raw token exchange


@dataclass(slots=True)
class Pending:
    """One request on its way through the gateway."""

    header: protocol.RequestHeader
    request_bytes: int
    received_ms: int
    thread_ns: int = 0  # event-loop (and executor) CPU time spent on this request so far ("io thread")
    network_ns: int = 0  # CPU time spent in socket writes for it ("network thread")
    acks: int | None = None
    local: bytes | None = None  # a response the gateway made itself
    upstream: asyncio.Future[bytes] | None = None
    close_after: bool = False
    holds_reading: bool = False  # produce throttled on read: no further reads until its response + throttle
    mutations: TopicQuotaDecision | None = None  # CreateTopics under a controller-mutation quota
    decisions: dict[str, int] = field(default_factory=dict)


class ClientConnection:
    def __init__(self, gateway: Gateway, listener: str, client_ip: str, client_port: int,
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, node: int | None = None) -> None:
        self.gateway = gateway
        self.node = node  # the upstream broker whose gateway port this is (None: a bootstrap port)
        self.broker = broker_key(node, gateway.broker)  # whose quotas apply: known once the upstream is connected
        self.enforcement: Enforcement
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
        self._sasl_state = "none"  # none | handshaken-v0 | handshaken | authenticated
        self._auth_ns = 0  # CPU time of authentication, charged as network time to the next request
        self.require_sasl = gateway.config.security_protocol(listener) == SASL_PLAINTEXT
        self._closing = False

    # -- lifecycle ------------------------------------------------------------------------------------------

    async def serve(self) -> None:
        try:
            assert self.gateway.brokers is not None
            try:
                self._upstream_reader, self._upstream_writer, node = await self.gateway.brokers.connect(self.node)
            except OSError as e:
                log.warning("upstream unreachable for %s: %s", self.client_ip, e)
                return
            self.broker = broker_key(node, self.gateway.broker)
            self.enforcement = self.gateway.broker_quotas.for_broker(self.broker)
            tasks = [asyncio.ensure_future(t) for t in (self._read_client(), self._read_upstream(),
                                                          self._write_client())]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
                results = await asyncio.gather(*tasks, return_exceptions=True)
            for exc in results:
                if isinstance(exc, Exception) and not isinstance(
                        exc, ConnectionClosed | ConnectionError | asyncio.IncompleteReadError | asyncio.CancelledError):
                    log.error("connection from %s:%s failed", self.client_ip, self.client_port, exc_info=exc)
        finally:
            self._fail_awaiting()
            self.close()
            await self._wait_closed()

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
                fut.set_exception(ConnectionClosed("upstream connection closed"))

    # -- client -> gateway ----------------------------------------------------------------------------------

    async def _read_frame(self, reader: asyncio.StreamReader, limit: int) -> bytes:
        size = protocol.SIZE.unpack(await reader.readexactly(4))[0]
        if size < 0 or size > limit:
            raise ConnectionClosed(f"frame of {size} bytes exceeds socket.request.max.bytes ({limit})")
        return await reader.readexactly(size)

    async def _read_client(self) -> None:
        limit = self.gateway.config.socket_request_max_bytes
        while not self._closing:
            await self._slots.acquire()
            await self._unmuted()
            frame = await self._read_frame(self.reader, limit)
            await self._unmuted()  # a mute set while this read was pending holds the request back too
            start = time.thread_time_ns()
            self.last_active = time.monotonic()
            pending = self._on_request(frame)
            pending.thread_ns += time.thread_time_ns() - start
            if pending.upstream is None and pending.local is None:
                pending = await self._answer_locally(frame, pending)
            await self._queue.put(pending)
            if pending.close_after:
                # read no more; the writer sends this last response and then ends the connection
                await asyncio.get_running_loop().create_future()

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
        if self._sasl_state == "handshaken-v0":
            header = protocol.RequestHeader(ApiKey.SaslAuthenticate, _RAW_SASL, -1, None, 0)
            return Pending(header, len(frame), now_ms)
        try:
            header = protocol.parse_request_header(frame)
        except InvalidRequestError as e:
            raise ConnectionClosed(str(e)) from e
        pending = Pending(header, len(frame), now_ms)
        key = header.api_key
        if self.require_sasl and self._sasl_state != "authenticated" and key not in _BEFORE_AUTH:
            # Kafka's SaslServerAuthenticator closes the connection on any other request before authentication
            raise ConnectionClosed(f"Unexpected Kafka request of type {protocol.api_name(key)} during SASL handshake.")
        if key in _LOCAL_APIS:
            return pending  # answered by _answer_locally
        if key == ApiKey.ApiVersions and header.api_version > versions.APIVERSIONS_MAX:
            pending.local = versions.unsupported_version_response(header.correlation_id)
            return pending
        if key == ApiKey.Produce:
            try:
                pending.acks = protocol.produce_acks(frame, header)
            except InvalidRequestError as e:
                raise ConnectionClosed(str(e)) from e
            bandwidth_ms = self.enforcement.produce_bytes(self.principal, header.client_id or "",
                                                                  pending.request_bytes, now_ms)
            pending.decisions["throttle_ms_produce"] = bandwidth_ms
            if bandwidth_ms > 0:  # read nothing more until this response is sent and its throttle has passed
                pending.holds_reading = True
                self._held += 1
            if pending.acks == 0:  # no response will come; the writer still applies the byte-rate mute
                self._forward(frame, pending)
                pending.local = b""
                return pending
        if key == ApiKey.Fetch and header.api_version >= 3:
            frame = self._cap_fetch(frame, header)
        elif key == ApiKey.CreateTopics:
            forward = self._mutation_quota(frame, pending)
            if forward is None:  # every topic refused: answered here
                return pending
            frame = forward
        self._forward(frame, pending)
        pending.upstream = asyncio.get_running_loop().create_future()
        self._awaiting.append(pending)
        return pending

    def _mutation_quota(self, frame: bytes, pending: Pending) -> bytes | None:
        """KIP-599 on CreateTopics: the request to forward (refused topics cut out), or None if none is left."""
        header = pending.header
        quota = self.enforcement.mutation_quota(self.principal, header.client_id or "", header.api_key,
                                                        header.api_version, pending.received_ms)
        if quota is None:
            return frame
        try:
            pending.mutations = mutations.decide(frame, header, quota, pending.received_ms)
        except InvalidRequestError as e:
            raise ConnectionClosed(str(e)) from e
        if pending.mutations.forward is None:
            pending.local = mutations.local_response(header.api_version, header.correlation_id,
                                                     pending.mutations.refused)
        return pending.mutations.forward

    def _cap_fetch(self, frame: bytes, header: protocol.RequestHeader) -> bytes:
        """Cap ``max_bytes`` to the consumer quota's window (KafkaApis does the same): without it, a response
        larger than the window allows would be throttled, answered empty and re-fetched forever."""
        cap = self.enforcement.fetch_max_bytes(self.principal, header.client_id or "")
        if cap is None:
            return frame
        try:
            request = protocol.decode_request(frame, header)
        except InvalidRequestError as e:
            raise ConnectionClosed(str(e)) from e
        if request.max_bytes <= cap:
            return frame
        request.max_bytes = cap
        return protocol.encode_request(request, header)

    def _forward(self, frame: bytes, pending: Pending) -> None:
        assert self._upstream_writer is not None
        start = time.thread_time_ns()
        self._upstream_writer.writelines((protocol.SIZE.pack(len(frame)), frame))  # one writev, no copy
        pending.network_ns += time.thread_time_ns() - start

    # -- answered by the gateway itself -----------------------------------------------------------------------

    async def _answer_locally(self, frame: bytes, pending: Pending) -> Pending:
        header = pending.header
        try:
            if header.api_version == _RAW_SASL:
                return await self._raw_sasl(frame, pending)
            request = protocol.decode_request(frame, header)
            if header.api_key == ApiKey.SaslHandshake:
                return self._sasl_handshake(request, pending)
            if header.api_key == ApiKey.SaslAuthenticate:
                return await self._sasl_authenticate(request, pending)
            response, executor_ns = await self.gateway.quota_admin.handle(header.api_key, header.api_version,
                                                                           request, self.principal)
            pending.thread_ns += executor_ns
            pending.local = protocol.encode_response(response, header.api_version, header.correlation_id)
        except InvalidRequestError as e:
            raise ConnectionClosed(str(e)) from e
        return pending

    def _sasl_handshake(self, request: Any, pending: Pending) -> Pending:
        version = pending.header.api_version
        cls = protocol.response_class(ApiKey.SaslHandshake, version)
        if self._sasl_state != "none":
            error = ILLEGAL_SASL_STATE
            pending.close_after = True
        elif request.mechanism != PLAIN:
            error = UNSUPPORTED_SASL_MECHANISM
        else:
            error = 0
            self._sasl_state = "handshaken-v0" if version == 0 else "handshaken"
        pending.local = protocol.encode_response(cls(error_code=error, mechanisms=[PLAIN]), version,
                                                 pending.header.correlation_id)
        return pending

    async def _check_plain(self, token: bytes) -> tuple[str | None, str | None, int]:
        def run() -> tuple[str | None, str | None, int]:
            start = time.thread_time_ns()
            try:
                return authenticate_plain(self.gateway.store, token), None, time.thread_time_ns() - start
            except SaslAuthenticationError as e:
                return None, str(e), time.thread_time_ns() - start

        return await asyncio.get_running_loop().run_in_executor(None, run)

    async def _raw_sasl(self, token: bytes, pending: Pending) -> Pending:
        principal, _error, ns = await self._check_plain(token)
        pending.thread_ns += ns
        if principal is None:
            raise ConnectionClosed("SASL/PLAIN authentication failed")  # v0 has no error response: close
        self.principal = principal
        self._sasl_state = "authenticated"
        pending.local = protocol.SIZE.pack(0)  # PLAIN's server token is empty
        return pending

    async def _sasl_authenticate(self, request: Any, pending: Pending) -> Pending:
        version = pending.header.api_version
        cls = protocol.response_class(ApiKey.SaslAuthenticate, version)
        message: str | None
        if self._sasl_state != "handshaken":
            error, message = ILLEGAL_SASL_STATE, "Unexpected SaslAuthenticate request"
        else:
            principal, message, ns = await self._check_plain(bytes(request.auth_bytes))
            pending.thread_ns += ns
            if principal is None:
                error = SASL_AUTHENTICATION_FAILED
            else:
                error, message = 0, None
                self.principal = principal
                self._sasl_state = "authenticated"
        fields: dict[str, Any] = {"error_code": error, "error_message": message, "auth_bytes": b""}
        if version >= 1:
            fields["session_lifetime_ms"] = 0
        pending.close_after = error != 0
        pending.local = protocol.encode_response(cls(**fields), version, pending.header.correlation_id)
        return pending

    # -- upstream -> gateway ----------------------------------------------------------------------------------

    async def _read_upstream(self) -> None:
        assert self._upstream_reader is not None
        while True:
            frame = await self._read_frame(self._upstream_reader, 1 << 31)
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
            start = time.thread_time_ns()
            now_ms = time.time_ns() // 1_000_000
            out = self._respond(pending, frame, start, now_ms)
            written = time.thread_time_ns()
            if out is _PASS_THROUGH:  # the upstream's bytes as they are: no copy into a new buffer
                self.writer.writelines((protocol.SIZE.pack(len(frame)), frame))
                sent = len(frame) + 4
            else:
                if out:
                    self.writer.write(out)
                sent = len(out)
            self.last_active = time.monotonic()
            done = time.thread_time_ns()
            pending.thread_ns += written - start
            pending.network_ns += done - written
            self.enforcement.network_time(self.principal, pending.header.client_id or "",
                                                  pending.network_ns, now_ms)
            self.gateway.on_request(self, pending, sent, now_ms)
            if pending.holds_reading:  # the mute (set in _respond) now runs from this response
                self._held -= 1
                self._released.set()
            await self.writer.drain()
            self._slots.release()
            if pending.close_after:
                raise ConnectionClosed("closing after the response, as Kafka does")

    def _respond(self, pending: Pending, frame: bytes, start_ns: int, now_ms: int) -> bytes:
        """The bytes to send: quotas applied (KIP-219), addresses rewritten, correlation id kept."""
        header = pending.header
        key, version = header.api_key, header.api_version
        if version == _RAW_SASL or key in _SASL_APIS:
            # authentication is not a request to the quota managers (Kafka's authenticator runs before KafkaApis);
            # its CPU time becomes network-thread time of the first request after it (SPEC §5)
            self._auth_ns += pending.thread_ns + time.thread_time_ns() - start_ns
            return frame
        if self._auth_ns:
            pending.network_ns += self._auth_ns
            self._auth_ns = 0
        enforcement = self.enforcement
        user, client_id = self.principal, header.client_id or ""
        thread_ns = pending.thread_ns + time.thread_time_ns() - start_ns
        d = pending.decisions
        if key == ApiKey.Produce:
            decision = enforcement.produce_request_time(user, client_id, d.get("throttle_ms_produce", 0), thread_ns,
                                                        -1 if pending.acks is None else pending.acks, now_ms)
            d["throttle_ms_request"] = decision.request_ms
            throttle = decision.throttle_ms
        elif key == ApiKey.Fetch and pending.upstream is not None:
            decision = enforcement.fetch(user, client_id, len(frame), thread_ns, now_ms)
            d["throttle_ms_fetch"], d["throttle_ms_request"] = decision.bandwidth_ms, decision.request_ms
            throttle = decision.throttle_ms
        elif pending.mutations is not None:
            mutation, d["throttle_ms_request"] = enforcement.request_with_mutation(
                user, client_id, thread_ns, pending.mutations.quota, now_ms)
            throttle = max(mutation, d["throttle_ms_request"])
            d["throttle_ms"] = throttle
            if throttle > 0:
                self._mute(throttle)
            if pending.upstream is None:
                return protocol.set_throttle(frame[4:], key, version, throttle) or frame
            return mutations.merge_response(frame, version, pending.mutations.refused, throttle)
        else:
            throttle = d["throttle_ms_request"] = enforcement.request(key, user, client_id, thread_ns, now_ms)
        d["throttle_ms"] = throttle
        if throttle > 0:
            self._mute(throttle)
        if pending.upstream is None:  # made here: already framed; only the throttle field may change
            if throttle > 0 and frame:
                return protocol.set_throttle(frame[4:], key, version, throttle) or frame
            return frame
        if key == ApiKey.Fetch and throttle > 0:
            return protocol.empty_fetch_response(frame, version, throttle)
        if key == ApiKey.ApiVersions:
            return versions.rewrite_response(frame, version, throttle)
        if key in REWRITTEN_APIS or throttle > 0:
            return self._rewrite(frame, key, version, throttle)
        return _PASS_THROUGH

    def _rewrite(self, frame: bytes, key: int, version: int, throttle: int) -> bytes:
        known = protocol.max_known_version(key)
        if known is None or version > known:  # forwarded undecoded: the client is muted, not told
            return protocol.SIZE.pack(len(frame)) + frame
        message = protocol.decode_response(frame, key, version)
        if key in REWRITTEN_APIS:
            rewrite_addresses(message, key, self.gateway.address_map(self.listener))
        if throttle > 0 and protocol.has_throttle_field(message):
            message.throttle_time_ms = max(int(message.throttle_time_ms), throttle)
        return protocol.encode_response(message, version, protocol.response_correlation_id(frame))

    def _mute(self, throttle_ms: int) -> None:
        """Stop reading this connection for the throttle time (Kafka mutes the channel; KIP-219)."""
        self.muted_until = max(self.muted_until, time.monotonic() + throttle_ms / 1000)


_PASS_THROUGH: Final = b"<pass-through>"  # sentinel (identity-compared): send the upstream frame unchanged

_SASL_APIS: Final = frozenset({ApiKey.SaslHandshake, ApiKey.SaslAuthenticate})
_BEFORE_AUTH: Final = _SASL_APIS | {ApiKey.ApiVersions}
_LOCAL_APIS: Final = _SASL_APIS | {ApiKey.DescribeClientQuotas, ApiKey.AlterClientQuotas}
