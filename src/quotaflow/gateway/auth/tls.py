"""TLS on both sides of the gateway, configured with Kafka's own config names and PEM material (stdlib ``ssl``).

Listeners mapped to SSL or SASL_SSL in ``listener.security.protocol.map`` terminate TLS with the broker's ``ssl.*``
settings, each also settable per listener as ``listener.name.<listener>.ssl.*`` (the listener name lower-cased, as
Kafka prefixes it): ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (the private key and its certificate
chain in one PEM file) or ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain`` (the PEM text itself);
``ssl.key.password`` for an encrypted key; ``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` (a PEM file of
CA certificates) or ``ssl.truststore.certificates`` (PEM text), which verify client certificates;
``ssl.client.auth=none|requested|required``; ``ssl.enabled.protocols``; ``ssl.principal.mapping.rules``. On an SSL
listener the principal is the client certificate's mapped DN (``gateway.auth.ssl_principal``), ``ANONYMOUS`` without
one; on SASL_SSL it is the SASL identity.

The upstream connection has settings of its own, Kafka's client config names under the ``quotaflow.upstream.``
prefix: ``quotaflow.upstream.security.protocol=PLAINTEXT|SSL``, ``quotaflow.upstream.ssl.truststore.location`` /
``.ssl.truststore.certificates`` (the CAs that sign the brokers' certificates; the system's when unset),
``.ssl.keystore.*`` and ``.ssl.key.password`` (a client certificate, when the brokers require one),
``.ssl.endpoint.identification.algorithm`` (``https``, the default, checks the broker's host name; empty turns it off)
and ``.ssl.enabled.protocols``.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from quotaflow.core.errors import CommandError
from quotaflow.gateway.auth.sasl import ANONYMOUS
from quotaflow.gateway.auth.ssl_principal import SslPrincipalMapper, distinguished_name

SSL_KEYSTORE_TYPE: Final = "ssl.keystore.type"
SSL_KEYSTORE_LOCATION: Final = "ssl.keystore.location"
SSL_KEYSTORE_KEY: Final = "ssl.keystore.key"
SSL_KEYSTORE_CERTIFICATE_CHAIN: Final = "ssl.keystore.certificate.chain"
SSL_KEY_PASSWORD: Final = "ssl.key.password"
SSL_TRUSTSTORE_TYPE: Final = "ssl.truststore.type"
SSL_TRUSTSTORE_LOCATION: Final = "ssl.truststore.location"
SSL_TRUSTSTORE_CERTIFICATES: Final = "ssl.truststore.certificates"
SSL_CLIENT_AUTH: Final = "ssl.client.auth"
SSL_ENABLED_PROTOCOLS: Final = "ssl.enabled.protocols"
SSL_PRINCIPAL_MAPPING_RULES: Final = "ssl.principal.mapping.rules"
SSL_ENDPOINT_IDENTIFICATION_ALGORITHM: Final = "ssl.endpoint.identification.algorithm"
SECURITY_PROTOCOL: Final = "security.protocol"
UPSTREAM_PREFIX: Final = "quotaflow.upstream."
PEM: Final = "PEM"

HANDSHAKE_TIMEOUT_S: Final = 10.0  # a client that has not finished its TLS handshake by then is closed
_CLIENT_AUTH: Final = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_PROTOCOLS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_PEM_BLOCK: Final = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)

Setting = Callable[[str], str | None]


def listener_setting(props: Mapping[str, str], listener: str) -> Setting:
    """``key -> value`` for one listener: ``listener.name.<listener>.key`` first, then ``key``."""
    prefixes = (f"listener.name.{listener.lower()}.", f"listener.name.{listener}.")

    def get(key: str) -> str | None:
        for prefix in prefixes:
            if prefix + key in props:
                return props[prefix + key]
        return props.get(key)

    return get


def upstream_setting(props: Mapping[str, str]) -> Setting:
    return lambda key: props.get(UPSTREAM_PREFIX + key)


@dataclass(frozen=True, slots=True)
class ListenerTls:
    """What an SSL / SASL_SSL listener needs: its server context and how client certificates become principals."""

    context: ssl.SSLContext
    principal_mapper: SslPrincipalMapper

    def principal(self, peercert: Mapping[str, Any] | None) -> str:
        """The mapped DN of a verified client certificate, ANONYMOUS without one (raises
        ``SslPrincipalMappingError`` when no rule applies)."""
        subject = (peercert or {}).get("subject")
        if not subject:
            return ANONYMOUS
        return self.principal_mapper.name(distinguished_name(subject))


class DirectSSLObject(ssl.SSLObject):
    """An ``ssl.SSLObject`` whose ``read``, ``write`` and ``pending`` are the C methods of the TLS connection it
    wraps, as this object's own attributes. uvloop's TLS transport takes these three once per connection and calls
    them for every record it reads or writes; ``ssl.SSLObject``'s are Python methods that only forward to them (the
    same arguments, the same results), so each record cost a Python frame or two: 5 % of a TLS listener's CPU per
    one-at-a-time Produce in live ``perf``. The contexts of this module return these (``SSLContext.sslobject_class``).
    Should a Python release not keep the wrapped connection in ``_sslobj``, the object keeps the stdlib's methods."""

    @classmethod
    def _create(cls, *args: Any, **kwargs: Any) -> DirectSSLObject:
        obj: DirectSSLObject = super()._create(*args, **kwargs)  # type: ignore[misc]
        tls = getattr(obj, "_sslobj", None)
        if tls is not None:
            vars(obj).update(read=tls.read, write=tls.write, pending=tls.pending)
        return obj


def _context(protocol: int) -> ssl.SSLContext:
    """A context of ``protocol`` whose connections are :class:`DirectSSLObject`s."""
    context = ssl.SSLContext(protocol)
    context.sslobject_class = DirectSSLObject
    return context


def listener_tls(props: Mapping[str, str], listener: str) -> ListenerTls:
    """The TLS settings of an SSL / SASL_SSL listener; ``CommandError`` names the missing or bad setting."""
    get = listener_setting(props, listener)
    context = _context(ssl.PROTOCOL_TLS_SERVER)
    _protocols(context, get)
    if not _load_keystore(context, get):
        raise CommandError(f"listener {listener} is SSL but has no keystore: set {SSL_KEYSTORE_LOCATION}, or "
                           f"{SSL_KEYSTORE_KEY} and {SSL_KEYSTORE_CERTIFICATE_CHAIN} (PEM)")
    client_auth = (get(SSL_CLIENT_AUTH) or "none").strip().lower()
    if client_auth not in _CLIENT_AUTH:
        raise CommandError(f"Invalid value {client_auth} for configuration {SSL_CLIENT_AUTH}: String must be one of: "
                           f"required, requested, none")
    if client_auth != "none":
        if not _load_truststore(context, get):
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        context.verify_mode = _CLIENT_AUTH[client_auth]
    return ListenerTls(context, SslPrincipalMapper.from_rules(get(SSL_PRINCIPAL_MAPPING_RULES)))


def upstream_tls(props: Mapping[str, str]) -> ssl.SSLContext | None:
    """The client context for the upstream brokers, or None for PLAINTEXT."""
    get = upstream_setting(props)
    protocol = upstream_security_protocol(props)
    if protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
        return None
    context = _context(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(context, get)
    if not _load_truststore(context, get):
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    _load_keystore(context, get)
    algorithm = get(SSL_ENDPOINT_IDENTIFICATION_ALGORITHM)
    if algorithm is not None and algorithm.strip() == "":
        context.check_hostname = False
    elif algorithm is not None and algorithm.strip().lower() != "https":
        raise CommandError(f"Invalid value {algorithm} for configuration "
                           f"{UPSTREAM_PREFIX}{SSL_ENDPOINT_IDENTIFICATION_ALGORITHM}: https or empty")
    return context


def upstream_security_protocol(props: Mapping[str, str]) -> str:
    """``quotaflow.upstream.security.protocol``: PLAINTEXT (default), SSL, or SASL_PLAINTEXT / SASL_SSL, which mean
    the upstream authenticates and clients' SASL exchanges are passed through to it
    (``gateway.auth.sasl_passthrough``)."""
    protocol = (upstream_setting(props)(SECURITY_PROTOCOL) or "PLAINTEXT").strip().upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise CommandError(f"Invalid value {protocol} for configuration {UPSTREAM_PREFIX}{SECURITY_PROTOCOL}: "
                           f"PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    return protocol


def _protocols(context: ssl.SSLContext, get: Setting) -> None:
    raw = get(SSL_ENABLED_PROTOCOLS)
    names = [p.strip() for p in (raw or "TLSv1.2,TLSv1.3").split(",") if p.strip()]
    unknown = [n for n in names if n not in _PROTOCOLS]
    if unknown or not names:
        raise CommandError(f"Invalid value {raw} for configuration {SSL_ENABLED_PROTOCOLS}: TLSv1.2 and/or TLSv1.3")
    versions = sorted(_PROTOCOLS[n] for n in names)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]


def _require_pem(get: Setting, key: str) -> None:
    kind = (get(key) or PEM).strip().upper()
    if kind != PEM:
        raise CommandError(f"{key}={kind} is not supported by the gateway: use PEM")


def _load_keystore(context: ssl.SSLContext, get: Setting) -> bool:
    """The certificate chain and private key, from one PEM file or from PEM text; False when none is set."""
    _require_pem(get, SSL_KEYSTORE_TYPE)
    location, key, chain = get(SSL_KEYSTORE_LOCATION), get(SSL_KEYSTORE_KEY), get(SSL_KEYSTORE_CERTIFICATE_CHAIN)
    password = get(SSL_KEY_PASSWORD) or None
    if location:
        if key or chain:
            raise CommandError(f"set either {SSL_KEYSTORE_LOCATION} or {SSL_KEYSTORE_KEY} + "
                               f"{SSL_KEYSTORE_CERTIFICATE_CHAIN}, not both")
        try:
            context.load_cert_chain(location, password=password)
        except (OSError, ssl.SSLError) as e:
            raise CommandError(f"cannot load the keystore {location} (PEM private key and certificate chain): "
                               f"{e}") from e
        return True
    if not key and not chain:
        return False
    if not (key and chain):
        raise CommandError(f"{SSL_KEYSTORE_KEY} and {SSL_KEYSTORE_CERTIFICATE_CHAIN} go together")
    # ssl loads key material from files only: a private temporary file, removed at once
    with tempfile.TemporaryDirectory(prefix="quotaflow-tls-") as tmp:
        path = Path(tmp) / "keystore.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(pem_text(key) + pem_text(chain))
        try:
            context.load_cert_chain(path, password=password)
        except ssl.SSLError as e:
            raise CommandError(f"cannot load {SSL_KEYSTORE_KEY} / {SSL_KEYSTORE_CERTIFICATE_CHAIN}: {e}") from e
    return True


def _load_truststore(context: ssl.SSLContext, get: Setting) -> bool:
    _require_pem(get, SSL_TRUSTSTORE_TYPE)
    location, certificates = get(SSL_TRUSTSTORE_LOCATION), get(SSL_TRUSTSTORE_CERTIFICATES)
    try:
        if location:
            context.load_verify_locations(cafile=location)
        if certificates:
            context.load_verify_locations(cadata=pem_text(certificates))
    except (OSError, ssl.SSLError) as e:
        raise CommandError(f"cannot load the truststore ({SSL_TRUSTSTORE_LOCATION} / "
                           f"{SSL_TRUSTSTORE_CERTIFICATES}): {e}") from e
    return bool(location or certificates)


def pem_text(value: str) -> str:
    """PEM blocks in canonical form. A properties file often carries PEM on one line (continuation lines are joined
    without their line breaks); OpenSSL needs the base64 body in lines, so each block is re-wrapped."""
    blocks = _PEM_BLOCK.findall(value)
    if not blocks:
        raise CommandError("expected PEM text (-----BEGIN ...----- ... -----END ...-----)")
    out = []
    for label, body in blocks:
        data = "".join(body.split())
        lines = [data[i:i + 64] for i in range(0, len(data), 64)]
        out.append(f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n")
    return "".join(out)


# -- connections --------------------------------------------------------------------------------------------


async def accept_tls(sock: socket.socket, context: ssl.SSLContext, limit: int, handshake_timeout_s: float =
                     HANDSHAKE_TIMEOUT_S) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams over an accepted socket after the server-side TLS handshake."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    protocol = asyncio.StreamReaderProtocol(reader)
    transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock, ssl=context,
                                                      ssl_handshake_timeout=handshake_timeout_s)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def open_upstream(address: tuple[str, int], context: ssl.SSLContext | None,
                        limit: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to one upstream broker, over TLS when ``context`` is set (checked against the broker's host)."""
    host, port = address
    if context is None:
        return await asyncio.open_connection(host, port, limit=limit)
    return await asyncio.open_connection(host, port, limit=limit, ssl=context, server_hostname=host)
