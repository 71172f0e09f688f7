"""SASL passthrough: the client authenticates with its broker, through the gateway; the gateway meters its principal.

When the upstream authenticates (``quotaflow.upstream.security.protocol=SASL_PLAINTEXT|SASL_SSL``), a client's
SaslHandshake and SaslAuthenticate requests are forwarded to its broker unchanged, so the cluster's own credentials
and ACLs apply. The gateway only watches the exchange: the mechanism from SaslHandshake, the client's first token
from SaslAuthenticate. Once the broker has accepted the whole exchange (error NONE on its last round: one round for
PLAIN and OAUTHBEARER, two for SCRAM), the principal taken from the client's token becomes the connection's quota
``user``:

* PLAIN (RFC 4616, ``authzid NUL authcid NUL passwd``): the authzid when given, else the username;
* SCRAM-SHA-256/512 (RFC 5802 client-first message ``n,[a=authzid],n=user,r=nonce``): the authzid when given, else
  the user name (``=2C`` / ``=3D`` decoded);
* OAUTHBEARER (RFC 7628, KIP-255): the token's ``sub`` claim (Kafka's default ``sasl.oauthbearer.sub.claim.name``),
  read without verification: the broker verified the token, the gateway only names its holder.

Other mechanisms (GSSAPI) are passed through too, but their principal cannot be read from the exchange: such clients
are metered as ``ANONYMOUS``. A failed exchange is the broker's to answer (it closes the connection, as Kafka does).
Legacy SaslHandshake v0 (raw tokens without Kafka framing) is not offered in passthrough: ApiVersions offers v1+.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from typing import Final

from kafka.protocol.api_key import ApiKey

from quotaflow.gateway.auth.sasl import ANONYMOUS, PLAIN
from quotaflow.gateway.wire import protocol

log = logging.getLogger(__name__)

SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_512: Final = "SCRAM-SHA-512"
OAUTHBEARER: Final = "OAUTHBEARER"
_ROUNDS: Final = {PLAIN: 1, OAUTHBEARER: 1, SCRAM_SHA_256: 2, SCRAM_SHA_512: 2}


def plain_principal(token: bytes) -> str | None:
    parts = token.decode("utf-8", "replace").split("\x00")
    if len(parts) != 3:
        return None
    authzid, username, _password = parts
    return authzid or username or None


def _gs2_authzid(header: str) -> str | None:
    """The ``a=`` attribute of a GS2 header (``n,a=alice,``), decoded (RFC 5801)."""
    for attribute in header.split(",")[1:2]:
        if attribute.startswith("a="):
            return _saslname(attribute[2:])
    return None


def _saslname(value: str) -> str:
    return value.replace("=2C", ",").replace("=3D", "=")


def scram_principal(token: bytes) -> str | None:
    text = token.decode("utf-8", "replace")
    parts = text.split(",")
    if len(parts) < 4:
        return None
    authzid = _gs2_authzid(text)
    if authzid:
        return authzid
    for attribute in parts[2:]:
        if attribute.startswith("n="):
            return _saslname(attribute[2:]) or None
    return None


def oauthbearer_principal(token: bytes, claim: str = "sub") -> str | None:
    text = token.decode("utf-8", "replace")
    for field in text.split("\x01"):
        if field.startswith("auth=") and field[5:].lower().startswith("bearer "):
            parts = field[5:].split(" ", 1)[1].strip().split(".")
            if len(parts) != 3:
                return None
            try:
                payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
            except (binascii.Error, ValueError):
                return None
            value = payload.get(claim) if isinstance(payload, dict) else None
            return str(value) if value else None
    return None


_PRINCIPALS: Final = {PLAIN: plain_principal, SCRAM_SHA_256: scram_principal, SCRAM_SHA_512: scram_principal,
                      OAUTHBEARER: oauthbearer_principal}


class SaslPassthrough:
    """Watches one connection's forwarded SASL exchange; :meth:`response` returns the principal once it is accepted."""

    def __init__(self) -> None:
        self.mechanism: str | None = None
        self.candidate: str | None = None
        self.rounds = 0

    def request(self, header: protocol.RequestHeader, frame: bytes) -> None:
        """A client SASL request on its way to the broker (decoded here only to read it; forwarded as it came)."""
        try:
            message = protocol.decode_request(frame, header)
        except Exception:  # the broker answers malformed requests; the gateway learns nothing from them
            return
        if header.api_key == ApiKey.SaslHandshake:
            self.mechanism, self.candidate, self.rounds = str(message.mechanism), None, 0
        elif header.api_key == ApiKey.SaslAuthenticate and self.candidate is None and self.mechanism is not None:
            principal = _PRINCIPALS.get(self.mechanism)
            self.candidate = principal(bytes(message.auth_bytes)) if principal is not None else None

    def response(self, api_key: int, version: int, frame: bytes) -> str | None:
        """The principal to meter when this broker response completes a successful exchange, else None."""
        if api_key != ApiKey.SaslAuthenticate:
            return None
        try:
            message = protocol.decode_response(frame, api_key, version)
        except Exception:
            return None
        if int(message.error_code) != 0:
            return None
        self.rounds += 1
        if self.rounds < _ROUNDS.get(self.mechanism or "", 1):
            return None
        if self.candidate is None:
            log.info("SASL %s accepted by the broker; its principal cannot be read from the exchange: ANONYMOUS",
                     self.mechanism)
        return self.candidate or ANONYMOUS
