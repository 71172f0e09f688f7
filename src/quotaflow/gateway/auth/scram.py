"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 terminated at the gateway (RFC 5802, RFC 7677), against the store's keys.

The exchange is two SaslAuthenticate rounds (or two raw tokens after SaslHandshake v0): the client-first message
(``n,,n=user,r=cnonce``) is answered with ``r=cnonce+snonce,s=salt,i=iterations``; the client-final message
(``c=biws,r=...,p=proof``) is checked against the stored StoredKey (``H(proof XOR HMAC(StoredKey, AuthMessage))``)
and answered with the server signature ``v=HMAC(ServerKey, AuthMessage)``. Only the derived keys are stored
(``quotaflow.store.scram``). An authorization id other than the user is refused, as Kafka does.

An unknown user is indistinguishable from a known one with a wrong password (Kafka itself refuses an unknown user
at the client-first message; the gateway does not tell): its server-first message carries the iteration count and
salt length most of the store's credentials of that mechanism have (:class:`UnknownUsers`; a new credential's when
there are none), so a store of users made with ``kafka-configs``' 4096 iterations answers 4096 for everyone; the
salt is an HMAC of the user name under a secret (stable per name, so asking twice tells nothing; derived from the
store's signing key when there is one, so a fleet agrees, else drawn at process start: :func:`unknown_user_secret`),
and the exchange fails at the proof with the same error, message and delay. The work is the same too: one store
lookup and the same HMACs whoever asks (the server runs no PBKDF2 for SCRAM: the store keeps the derived keys).

The client-final nonce must equal the server-first one (RFC 5802; Kafka 4.x's check since CVE-2024-56128).
librdkafka before 2.6.1 repeats its own nonce in front of it (PR #4895); Kafka 3.8.1-3.9 accepted that (the
nonce only had to end with the server's), and so does the gateway under
``quotaflow.sasl.scram.legacy.client.nonce=true``; otherwise the refusal names the cause in the log.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Final, Protocol

from quotaflow.gateway.auth.sasl import SaslAuthenticationError
from quotaflow.gateway.config import SCRAM_LEGACY_CLIENT_NONCE
from quotaflow.store.base import ScramCredential
from quotaflow.store.scram import DEFAULT_ITERATIONS, HASHES, SALT_BYTES, digest, hmac_digest, scram_credential

log = logging.getLogger(__name__)

FAILED: Final = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
_UNKNOWN_USER_SECRET: Final = os.urandom(32)  # per process: made-up salts are stable here, unrelated elsewhere

Lookup = Callable[[str, str], ScramCredential | None]


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslAuthenticationError(f"Invalid SCRAM message: {message!r}")
        out.setdefault(part[0], part[2:])
    return out


def unknown_user_credential(mechanism: str, user: str, *, salt_bytes: int = SALT_BYTES,
                            iterations: int = DEFAULT_ITERATIONS, secret: bytes = _UNKNOWN_USER_SECRET
                            ) -> ScramCredential:
    """What an unknown user is answered with: a salt of ``salt_bytes``, an HMAC of the name under ``secret`` (the
    process's by default); ``iterations``; keys no proof can match (and never checked: see ``final``)."""
    key = hmac.new(secret, f"{mechanism}\0{user}".encode(), "sha512").digest()
    blocks = [key] + [hmac.new(secret, f"{i}\0{mechanism}\0{user}".encode(), "sha512").digest()
                      for i in range(1, -(-salt_bytes // len(key)))]
    salt = b"".join(blocks)[:salt_bytes]
    return ScramCredential(user, mechanism, salt, digest(mechanism, key), hmac_digest(mechanism, key, b"Server Key"),
                           iterations)


def unknown_user_secret(store: object) -> bytes:
    """The secret unknown users' salts are made under: derived from the store's signing key
    (``quotaflow.store.signing.key.file``, its first key) when it has one, so that every gateway of a fleet answers
    one unknown name with the same salt, as each answers a stored user with the stored salt; else the secret drawn
    at process start (each gateway its own)."""
    keys = getattr(getattr(store, "signer", None), "keys", None)
    if keys:
        return hmac.new(keys[0], b"quotaflow-scram-unknown-user-v1", "sha256").digest()
    return _UNKNOWN_USER_SECRET


class CredentialLister(Protocol):
    def list_credentials(self) -> list[str]: ...
    def get_scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...


SHAPE_REFRESH_S: Final = 30.0  # how long the store's credential shape is reused before it is read again
SHAPE_SAMPLE: Final = 1024  # users read to find it (the most common shape shows in any sample of this size)


class UnknownUsers:
    """The answer to an unknown user's client-first message, shaped like the store's users: per mechanism, the
    (salt length, iteration count) most of the store's credentials of that mechanism have, so that neither tells
    a stored user from an unknown one (``kafka-configs`` creates credentials with 4096 iterations, quotaflow's CLI
    with 8192: a fixed answer would give one of them away). Read from the store at most every
    :data:`SHAPE_REFRESH_S` seconds, over at most :data:`SHAPE_SAMPLE` users; a new credential's shape while the
    store has none of that mechanism."""

    def __init__(self, store: CredentialLister | None, *, secret: bytes = _UNKNOWN_USER_SECRET,
                 refresh_s: float = SHAPE_REFRESH_S, sample: int = SHAPE_SAMPLE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._secret = secret
        self._refresh_s = refresh_s
        self._sample = sample
        self._clock = clock
        self._shapes: dict[str, tuple[int, int]] = {}
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def shape(self, mechanism: str) -> tuple[int, int]:
        """(salt length, iterations) of ``mechanism``'s most common stored credential."""
        now = self._clock()
        with self._lock:
            if self._read_at is None or now - self._read_at >= self._refresh_s:
                self._shapes = self._read()
                self._read_at = now
            return self._shapes.get(mechanism, (SALT_BYTES, DEFAULT_ITERATIONS))

    def _read(self) -> dict[str, tuple[int, int]]:
        if self._store is None:
            return {}
        counts: dict[str, Counter[tuple[int, int]]] = {m: Counter() for m in HASHES}
        for user in self._store.list_credentials()[:self._sample]:
            for mechanism, seen in counts.items():
                credential = self._store.get_scram_credential(user, mechanism)
                if credential is not None:
                    seen[(len(credential.salt), credential.iterations)] += 1
        # ties: the larger count, then the longer salt (a stable choice whatever the listing order)
        return {m: max(seen.items(), key=lambda item: (item[1], item[0]))[0] for m, seen in counts.items() if seen}

    def credential(self, mechanism: str, user: str) -> ScramCredential:
        salt_bytes, iterations = self.shape(mechanism)
        return unknown_user_credential(mechanism, user, salt_bytes=salt_bytes, iterations=iterations,
                                       secret=self._secret)


def _username(value: str) -> str:
    if "=" in value.replace("=2C", "").replace("=3D", ""):
        raise SaslAuthenticationError("Invalid SCRAM user name")
    return value.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One client's SCRAM exchange: :meth:`first` then :meth:`final`; ``SaslAuthenticationError`` on failure."""

    def __init__(self, mechanism: str, lookup: Lookup, nonce: Callable[[], str] | None = None, *,
                 legacy_client_nonce: bool = False, unknown: Callable[[str, str], ScramCredential] | None = None
                 ) -> None:
        if mechanism not in HASHES:
            raise ValueError(mechanism)
        self.mechanism = mechanism
        self._unknown = unknown or unknown_user_credential  # (mechanism, user): an unknown user's answer
        self.legacy_client_nonce = legacy_client_nonce  # quotaflow.sasl.scram.legacy.client.nonce
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
        # an unknown user gets a made-up (stable) salt and keys, and fails at the proof like a wrong password; made
        # for everyone, so both paths do the same work
        fake = self._unknown(self.mechanism, user)
        self._credential = credential or fake
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
        if attrs.get("c") != channel or not self._nonce_accepted(attrs.get("r", "")):
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

    def _nonce_accepted(self, nonce: str) -> bool:
        """RFC 5802: the client-final nonce is the server-first one. One that only ends with it (old librdkafka
        repeats its own nonce in front) passes under the legacy setting (Kafka 3.8.1-3.9's rule), else it is
        refused with the cause logged (once: the refusal ends the connection's exchange)."""
        if nonce == self._nonce_value:
            return True
        if not nonce.endswith(self._nonce_value):
            return False
        if self.legacy_client_nonce:
            return True
        log.warning("SCRAM login of %r refused: client repeated its nonce: librdkafka < 2.6.1; set %s=true to "
                    "accept", self.user, SCRAM_LEGACY_CLIENT_NONCE)
        return False


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
