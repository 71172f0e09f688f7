"""One connection's SASL state machine, in both modes, driven by the connection.

It belongs to the data plane: it answers the connection's requests (a ``Pending``'s local answer) and reads its
gateway through ``ConnectionContext``; the exchanges it runs are auth's, which it calls (auth never imports back).

*Terminate*: the gateway answers SaslHandshake (v0: raw tokens follow; v1+: SaslAuthenticate rounds) and checks
PLAIN against the store's credentials (:mod:`quotaflow.gateway.auth.sasl`, in its bounded pool) or SCRAM-SHA-256/512
against its stored keys (:mod:`quotaflow.gateway.auth.scram`). A failure is answered after
``connection.failed.authentication.delay.ms`` (KIP-306) and closes the connection, as Kafka's
``SaslServerAuthenticator`` does. *Passthrough* (the upstream authenticates): the exchange goes to the broker and
:class:`~quotaflow.gateway.auth.sasl_passthrough.SaslPassthrough` reads the principal from it once the broker accepts.

States: ``none`` -> ``handshaken-v0`` | ``handshaken`` -> ``authenticated``.

A principal with a connection creation rate (``user`` entity, beyond Kafka's model) is checked when its login
succeeds (terminate mode: the gateway's check; passthrough: the broker's accepting answer, which is then not passed
on): over the rate, the connection is held for the throttle and then closed without an answer, as KIP-612 treats
an IP over its rate (an SSL listener's certificate principal is checked in the same way when the gateway accepts
it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import (
    ConnectionClosed,
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from quotaflow.gateway.auth.sasl import PLAIN, SaslAuthenticationError
from quotaflow.gateway.auth.sasl_passthrough import SaslPassthrough
from quotaflow.gateway.auth.scram import ScramServer
from quotaflow.gateway.data.pending import Pending
from quotaflow.gateway.wire import protocol

if TYPE_CHECKING:
    from quotaflow.gateway.context import ConnectionContext

NONE: Final = "none"
HANDSHAKEN_V0: Final = "handshaken-v0"  # SaslHandshake v0: raw length-prefixed tokens follow, no Kafka framing
HANDSHAKEN: Final = "handshaken"
AUTHENTICATED: Final = "authenticated"



class SaslSession:
    """The SASL exchange of one client connection; ``on_authenticated(principal)`` is called when it succeeds.

    The state and what it means are plain attributes, all set by ``_set_state`` (the connection asks on every
    request): ``raw_tokens``, after SaslHandshake v0 the next frame is a raw token, not a Kafka request;
    ``pending_auth``, a SASL listener's client that has not authenticated yet."""

    state: str
    authenticated: bool
    raw_tokens: bool
    pending_auth: bool

    def __init__(self, gateway: ConnectionContext, client_ip: str, *, required: bool,
                 on_authenticated: Callable[[str], None]) -> None:
        self._gateway = gateway
        self._client_ip = client_ip
        self.required = required  # a SASL listener: nothing but SASL and ApiVersions before authentication
        self._scram: ScramServer | None = None  # SaslHandshake chose SCRAM-SHA-256/512 (else PLAIN)
        # the upstream authenticates: SASL goes to the broker, the gateway only reads the principal from it
        self.passthrough = SaslPassthrough() if gateway.sasl_passthrough else None
        self._on_authenticated = on_authenticated
        self._set_state(NONE)

    def _set_state(self, state: str) -> None:
        self.state = state
        self.authenticated = state == AUTHENTICATED
        self.raw_tokens = state == HANDSHAKEN_V0
        self.pending_auth = self.required and not self.authenticated

    def _authenticated(self, principal: str) -> None:
        self._set_state(AUTHENTICATED)
        self._on_authenticated(principal)

    # -- passthrough: the broker answers, the gateway watches ---------------------------------------------------

    def watch_request(self, header: protocol.RequestHeader, frame: bytes) -> None:
        assert self.passthrough is not None
        self.passthrough.request(header, frame)

    def watch_response(self, api_key: int, version: int, frame: bytes) -> int:
        """The broker's answer to the exchange: the principal once it accepts. Returns how long to hold the
        connection before closing it (a principal over its connection creation rate: the broker's answer is not
        passed on), else 0."""
        assert self.passthrough is not None
        principal = self.passthrough.response(api_key, version, frame)
        if principal is None:
            return 0
        throttle = self._principal_throttle(principal)
        if throttle == 0:
            self._authenticated(principal)
        return throttle

    # -- terminate: the gateway answers ---------------------------------------------------------------------

    def handshake(self, request: Any, pending: Pending) -> Pending:
        gateway = self._gateway
        version = pending.header.api_version
        cls = protocol.response_class(ApiKey.SaslHandshake, version)
        if self.state != NONE:
            error = IllegalSaslStateError.errno
            pending.close_after = True
        elif request.mechanism not in gateway.sasl_mechanisms:
            error = UnsupportedSaslMechanismError.errno
        else:
            error = 0
            self._set_state(HANDSHAKEN_V0 if version == 0 else HANDSHAKEN)
            if request.mechanism != PLAIN and gateway.scram_store is not None:
                self._scram = ScramServer(request.mechanism, gateway.scram_store.get_scram_credential,
                                          legacy_client_nonce=gateway.config.scram_legacy_client_nonce,
                                          unknown=gateway.scram_unknown_users.credential)
        mechanisms = list(gateway.sasl_mechanisms)
        pending.local = protocol.encode_response(cls(error_code=error, mechanisms=mechanisms), version,
                                                 pending.header.correlation_id)
        return pending

    async def raw_token(self, token: bytes, pending: Pending) -> Pending:
        """A raw token after SaslHandshake v0, answered with a raw (length-prefixed) server token."""
        principal, answer, error, ns = await self._step(token)
        pending.thread_ns += ns
        if error is not None:
            raise ConnectionClosed(f"SASL authentication failed: {error}")  # v0 has no error response: close
        if principal is not None:
            await self._admit(principal)
            self._authenticated(principal)
        pending.local = protocol.SIZE.pack(len(answer)) + answer  # PLAIN's server token is empty
        return pending

    async def authenticate(self, request: Any, pending: Pending) -> Pending:
        version = pending.header.api_version
        cls = protocol.response_class(ApiKey.SaslAuthenticate, version)
        message: str | None
        answer = b""
        if self.state != HANDSHAKEN:
            error, message = IllegalSaslStateError.errno, "Unexpected SaslAuthenticate request"
        else:
            principal, answer, message, ns = await self._step(bytes(request.auth_bytes))
            pending.thread_ns += ns
            if message is not None:
                error = SaslAuthenticationFailedError.errno
            else:
                error = 0
                if principal is not None:
                    await self._admit(principal)
                    self._authenticated(principal)
        fields: dict[str, Any] = {"error_code": error, "error_message": message, "auth_bytes": answer}
        if version >= 1:
            fields["session_lifetime_ms"] = 0
        pending.close_after = error != 0
        pending.local = protocol.encode_response(cls(**fields), version, pending.header.correlation_id)
        return pending

    def _principal_throttle(self, principal: str) -> int:
        """The principal's connection creation rate at authentication: the throttle in ms, 0 within the rate."""
        quotas = getattr(self._gateway, "connection_quotas", None)
        if quotas is None:
            return 0
        throttle: int = quotas.record_principal_connection_and_get_throttle_ms(principal, time.time_ns() // 1_000_000)
        return throttle

    async def _admit(self, principal: str) -> None:
        """Terminate mode: over the principal's rate, hold the connection for the throttle, then close."""
        throttle = self._principal_throttle(principal)
        if throttle > 0:
            await asyncio.sleep(throttle / 1000)
            raise ConnectionClosed(f"principal {principal} throttled for {throttle} ms (connection_creation_rate)")

    async def _check_plain(self, token: bytes) -> tuple[str | None, str | None, int]:
        """(principal or None, error message, CPU ns): checked in the gateway's bounded SASL pool. A failure is
        answered only after ``connection.failed.authentication.delay.ms``, as Kafka delays it (KIP-306); a login
        the pool could not check within its queue's bounds closes the connection (``ConnectionClosed``)."""
        verdict = await self._gateway.sasl.verify(token, self._client_ip)
        if verdict.busy:  # not checked (the hash queue's bound): the client reconnects, its password is not wrong
            raise ConnectionClosed("SASL/PLAIN login closed unchecked: the password hash queue is full "
                                   "(quotaflow.sasl.verify.queue.size, quotaflow.sasl.verify.queue.timeout.ms)")
        if verdict.principal is None:
            await asyncio.sleep(self._gateway.config.failed_authentication_delay_ms / 1000)
        return verdict.principal, verdict.error, verdict.cpu_ns

    async def _step(self, token: bytes) -> tuple[str | None, bytes, str | None, int]:
        """One client token through the chosen mechanism: (principal once complete, server token, error message,
        CPU ns). PLAIN goes to the gateway's verifier; SCRAM needs no password hash (the stored keys are derived
        already), only one store lookup, done in the default executor. Failures wait as PLAIN's do."""
        scram = self._scram
        if scram is None:
            principal, error, ns = await self._check_plain(token)
            return principal, b"", error, ns

        def run() -> tuple[str | None, bytes, str | None, int]:
            start = time.thread_time_ns()
            try:
                first = scram.user is None
                answer = scram.first(token) if first else scram.final(token)
                return (None if first else scram.user), answer, None, time.thread_time_ns() - start
            except SaslAuthenticationError as e:
                return None, b"", e.message or str(e), time.thread_time_ns() - start

        result = await asyncio.get_running_loop().run_in_executor(None, run)
        if result[2] is not None:
            await asyncio.sleep(self._gateway.config.failed_authentication_delay_ms / 1000)
        return result
