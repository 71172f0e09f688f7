"""SASL/PLAIN at the gateway: credential hashing and the PLAIN message (RFC 4616).

Passwords are never stored: a credential is a per-user random salt plus PBKDF2-HMAC-SHA512 over many iterations
(slow on purpose, so a leaked store does not give passwords away cheaply). Verification compares in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Final

from quotaflow.core.errors import SaslAuthenticationFailedError
from quotaflow.store.base import Credential, QuotaStore

PBKDF2_ALGORITHM: Final = "sha512"
DEFAULT_ITERATIONS: Final = 210_000  # OWASP's 2023 recommendation for PBKDF2-HMAC-SHA512
SALT_BYTES: Final = 16
PLAIN: Final = "PLAIN"
ANONYMOUS: Final = "ANONYMOUS"


def _derive(password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(PBKDF2_ALGORITHM, password.encode("utf-8"), salt, iterations)


def hash_password(user: str, password: str, *, iterations: int = DEFAULT_ITERATIONS) -> Credential:
    """A new credential for ``user`` with a fresh random salt."""
    salt = os.urandom(SALT_BYTES)
    return Credential(user=user, salt=salt, iterations=iterations, hash=_derive(password, salt, iterations))


def verify_password(credential: Credential, password: str) -> bool:
    """True when ``password`` matches; the comparison takes the same time wherever the first difference is."""
    return hmac.compare_digest(_derive(password, credential.salt, credential.iterations), credential.hash)


_DUMMY: Final = Credential(user="", salt=b"\x00" * SALT_BYTES, iterations=DEFAULT_ITERATIONS, hash=b"")


class SaslAuthenticationError(SaslAuthenticationFailedError):
    """The client's PLAIN message was malformed or its credentials did not verify (SASL_AUTHENTICATION_FAILED)."""


@dataclass(frozen=True, slots=True)
class PlainMessage:
    """RFC 4616: ``[authzid] NUL authcid NUL passwd``."""

    authzid: str
    username: str
    password: str

    @classmethod
    def parse(cls, data: bytes) -> PlainMessage:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SaslAuthenticationError("Invalid SASL/PLAIN message: not UTF-8") from e
        parts = text.split("\x00")
        if len(parts) != 3:
            raise SaslAuthenticationError("Invalid SASL/PLAIN message: expected 3 tokens")
        authzid, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        if authzid and authzid != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        return cls(authzid, username, password)


def authenticate_plain(store: QuotaStore, data: bytes) -> str:
    """The authenticated principal name for a PLAIN message, or ``SaslAuthenticationError``.

    The message for an unknown user and for a wrong password is the same (Kafka's wording), so a client cannot
    probe which users exist."""
    message = PlainMessage.parse(data)
    credential = store.get_credential(message.username)
    # an unknown user still pays for one hash, so response time does not reveal which users exist
    ok = verify_password(credential or _DUMMY, message.password) and credential is not None
    if not ok:
        raise SaslAuthenticationError("Authentication failed: Invalid username or password")
    return message.username
