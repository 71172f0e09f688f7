"""The gateway's own SASL identity at an authenticating upstream (terminate mode in front of a SASL cluster).

With ``quotaflow.upstream.security.protocol=SASL_PLAINTEXT|SASL_SSL`` and a service identity,
``quotaflow.upstream.sasl.mechanism`` (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512) and
``quotaflow.upstream.sasl.jaas.config`` (Kafka's JAAS line: ``... required username="svc" password="...";``), the
gateway terminates its clients' SASL itself and authenticates every upstream connection it opens as that identity
(SaslHandshake v1, then SaslAuthenticate rounds), before the first forwarded request. Without an identity, clients'
SASL is passed through instead (``gateway.auth.sasl_passthrough``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kafka.protocol.api_key import ApiKey
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from quotaflow.admin.wire import jaas_options
from quotaflow.core.errors import CommandError, QuotaflowError
from quotaflow.gateway.auth.sasl import PLAIN, SaslAuthenticationError
from quotaflow.gateway.auth.scram import ScramClient
from quotaflow.gateway.wire import protocol
from quotaflow.store.scram import HASHES

SASL_MECHANISM: Final = "quotaflow.upstream.sasl.mechanism"
SASL_JAAS_CONFIG: Final = "quotaflow.upstream.sasl.jaas.config"
_AUTHENTICATE_VERSION: Final = 1


class UpstreamAuthenticationError(QuotaflowError):
    """The upstream refused the gateway's own SASL identity (or answered the exchange with nonsense): not an
    outage, so not retried."""


@dataclass(frozen=True, slots=True)
class ServiceIdentity:
    mechanism: str
    username: str
    password: str = ""

    def __repr__(self) -> str:  # never print the password
        return f"ServiceIdentity({self.mechanism}, {self.username})"


def service_identity(props: Mapping[str, str]) -> ServiceIdentity | None:
    jaas = props.get(SASL_JAAS_CONFIG)
    mechanism = (props.get(SASL_MECHANISM) or "").strip().upper()
    if jaas is None:
        if mechanism:
            raise CommandError(f"{SASL_MECHANISM} needs {SASL_JAAS_CONFIG} (the gateway's own username and password)")
        return None
    mechanism = mechanism or "GSSAPI"  # Kafka's default sasl.mechanism
    if mechanism != PLAIN and mechanism not in HASHES:
        raise CommandError(f"{SASL_MECHANISM}={mechanism} is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
    options = jaas_options(jaas)
    if not options.get("username") or "password" not in options:
        raise CommandError(f"{SASL_JAAS_CONFIG} needs username=\"...\" and password=\"...\"")
    return ServiceIdentity(mechanism, options["username"], options["password"])


async def _round_trip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: Any, api_key: int,
                      version: int, correlation_id: int) -> Any:
    request.with_header(correlation_id=correlation_id, client_id="quotaflow-gateway")
    writer.write(bytes(request.encode(version=version, header=True, framed=True)))
    await writer.drain()
    size = protocol.SIZE.unpack(await reader.readexactly(4))[0]
    return protocol.decode_response(await reader.readexactly(size), api_key, version)


async def authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, identity: ServiceIdentity) -> None:
    """Authenticate a fresh upstream connection as ``identity``; ``UpstreamAuthenticationError`` when refused."""
    try:
        handshake = await _round_trip(reader, writer, SaslHandshakeRequest[1](mechanism=identity.mechanism),
                                      ApiKey.SaslHandshake, 1, 1)
        if handshake.error_code != 0:
            raise UpstreamAuthenticationError(f"the upstream does not offer {identity.mechanism} "
                                              f"(it offers {list(handshake.mechanisms)})")
        if identity.mechanism == PLAIN:
            tokens = [f"\x00{identity.username}\x00{identity.password}".encode()]
            scram = None
        else:
            scram = ScramClient(identity.mechanism, identity.username, identity.password)
            tokens = [scram.first()]
        cid = 2
        while tokens:
            response = await _round_trip(reader, writer, SaslAuthenticateRequest[_AUTHENTICATE_VERSION](
                auth_bytes=tokens.pop()), ApiKey.SaslAuthenticate, _AUTHENTICATE_VERSION, cid)
            cid += 1
            if response.error_code != 0:
                raise UpstreamAuthenticationError(f"the upstream refused {identity!r}: {response.error_message}")
            if scram is not None and cid == 3:
                tokens.append(scram.final(bytes(response.auth_bytes)))
            elif scram is not None:
                scram.verify(bytes(response.auth_bytes))
    except SaslAuthenticationError as e:
        raise UpstreamAuthenticationError(str(e)) from e
    except asyncio.IncompleteReadError as e:
        raise UpstreamAuthenticationError(f"the upstream closed the connection while authenticating {identity!r}") \
            from e
