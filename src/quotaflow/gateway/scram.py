"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 terminated at the gateway (RFC 5802, RFC 7677), against the store's keys.

The exchange is two SaslAuthenticate rounds (or two raw tokens after SaslHandshake v0): the client-first message
(``n,,n=user,r=cnonce``) is answered with ``r=cnonce+snonce,s=salt,i=iterations``; the client-final message
(``c=biws,r=...,p=proof``) is checked against the stored StoredKey (``H(proof XOR HMAC(StoredKey, AuthMessage))``)
and answered with the server signature ``v=HMAC(ServerKey, AuthMessage)``. Only the derived keys are stored
(``quotaflow.store.scram``). An unknown user costs the same as a wrong proof and gets the same message, so a
client cannot probe which users exist; an authorization id other than the user is refused, as Kafka does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Callable
from typing import Final

from quotaflow.gateway.sasl import SaslAuthenticationError
from quotaflow.store.base import ScramCredential
from quotaflow.store.scram import HASHES, MIN_ITERATIONS, digest, hmac_digest, scram_credential

FAILED: Final = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"

Lookup = Callable[[str, str], ScramCredential | None]


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslAuthenticationError(f"Invalid SCRAM message: {message!r}")
        out.setdefault(part[0], part[2:])
    return out


def _username(value: str) -> str:
    if "=" in value.replace("=2C", "").replace("=3D", ""):
        raise SaslAuthenticationError("Invalid SCRAM user name")
    return value.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One client's SCRAM exchange: :meth:`first` then :meth:`final`; ``SaslAuthenticationError`` on failure."""

    def __init__(self, mechanism: str, lookup: Lookup, nonce: Callable[[], str] | None = None) -> None:
        if mechanism not in HASHES:
            raise ValueError(mechanism)
        self.mechanism = mechanism
        self._lookup = lookup
        self._nonce = nonce or (lambda: base64.b64encode(os.urandom(24)).decode("ascii"))
        self.user: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2 = ""
        self._nonce_value = ""
        self.done = False

    def first(self, data: bytes) -> bytes:
        text = data.decode("utf-8", "replace")
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise SaslAuthenticationError("Invalid SCRAM client-first message (channel binding is not supported)")
        self._gs2 = f"{parts[0]},{parts[1]},"
        self._client_first_bare = parts[2]
        attrs = _attributes(parts[2])
        if "n" not in attrs or "r" not in attrs:
            raise SaslAuthenticationError("Invalid SCRAM client-first message")
        user = _username(attrs["n"])
        authzid = parts[1][2:] if parts[1].startswith("a=") else ""
        if authzid and _username(authzid) != user:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        self.user = user
        credential = self._lookup(user, self.mechanism)
        # an unknown user gets a made-up (stable) salt and keys, and fails at the proof like a wrong password
        fake = digest(self.mechanism, b"quotaflow-unknown-user:" + user.encode())
        self._credential = credential or ScramCredential(user, self.mechanism, fake[:16], os.urandom(len(fake)),
                                                         os.urandom(len(fake)), MIN_ITERATIONS)
        self._known = credential is not None
        self._nonce_value = attrs["r"] + self._nonce()
        salt = base64.b64encode(self._credential.salt).decode("ascii")
        self._server_first = f"r={self._nonce_value},s={salt},i={self._credential.iterations}"
        return self._server_first.encode("ascii")

    def final(self, data: bytes) -> bytes:
        assert self._credential is not None
        text = data.decode("utf-8", "replace")
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationError("Invalid SCRAM client-final message")
        attrs = _attributes(without_proof)
        channel = base64.b64encode(self._gs2.encode("utf-8")).decode("ascii")
        if attrs.get("c") != channel or attrs.get("r") != self._nonce_value:
            raise SaslAuthenticationError("Invalid SCRAM client-final message: nonce or channel binding mismatch")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except (binascii.Error, ValueError) as e:
            raise SaslAuthenticationError("Invalid SCRAM client proof") from e
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac_digest(self.mechanism, self._credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=False)) if len(proof) == len(signature) \
            else b""
        if not (hmac.compare_digest(digest(self.mechanism, client_key), self._credential.stored_key) and self._known):
            raise SaslAuthenticationError(FAILED.format(self.mechanism))
        self.done = True
        server_signature = hmac_digest(self.mechanism, self._credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


MECHANISMS: Final = ("PLAIN", *HASHES)  # what SaslHandshake offers when the gateway terminates SASL

class ScramClient:
    """The client side of SCRAM, for the gateway's own identity at an authenticating upstream: :meth:`first`,
    :meth:`final` (from the server-first message), :meth:`verify` (the server's signature)."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: Callable[[], str] | None = None) -> None:
        if mechanism not in HASHES:
            raise ValueError(mechanism)
        self.mechanism, self._password = mechanism, password
        name = user.replace("=", "=3D").replace(",", "=2C")
        self._nonce = (nonce or (lambda: base64.b64encode(os.urandom(24)).decode("ascii")))()
        self._bare = f"n={name},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        attrs = _attributes(text)
        if not attrs.get("r", "").startswith(self._nonce) or "s" not in attrs or "i" not in attrs:
            raise SaslAuthenticationError("Invalid SCRAM server-first message")
        try:
            salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
        except (binascii.Error, ValueError) as e:
            raise SaslAuthenticationError("Invalid SCRAM server-first message") from e
        credential = scram_credential("", self.mechanism, self._password, iterations=iterations, salt=salt)
        without_proof = f"c=biws,r={attrs['r']}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        salted = hashlib.pbkdf2_hmac(HASHES[self.mechanism], self._password.encode("utf-8"), salt, iterations)
        client_key = hmac_digest(self.mechanism, salted, b"Client Key")
        signature = hmac_digest(self.mechanism, credential.stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = hmac_digest(self.mechanism, credential.server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8", "replace")
        if not text.startswith("v=") or not hmac.compare_digest(base64.b64decode(text[2:]), self._server_signature):
            raise SaslAuthenticationError("the upstream's SCRAM server signature does not verify")
