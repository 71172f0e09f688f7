"""SASL/PLAIN at the gateway: the PLAIN message (RFC 4616) checked against the store's credentials.

Credential hashing lives in :mod:`quotaflow.store.credentials` (shared with the console's HTTP Basic sign-in) and is
re-exported here for existing callers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from quotaflow.core.errors import SaslAuthenticationFailedError
from quotaflow.store.base import QuotaStore
from quotaflow.store.credentials import (
    DEFAULT_ITERATIONS,
    PBKDF2_ALGORITHM,
    SALT_BYTES,
    check_password,
    hash_password,
    verify_password,
)

PLAIN: Final = "PLAIN"
ANONYMOUS: Final = "ANONYMOUS"
__all__ = [
    "ANONYMOUS",
    "DEFAULT_ITERATIONS",
    "PBKDF2_ALGORITHM",
    "PLAIN",
    "SALT_BYTES",
    "PlainMessage",
    "SaslAuthenticationError",
    "authenticate_plain",
    "hash_password",
    "verify_password",
]


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
    if not check_password(store, message.username, message.password):
        raise SaslAuthenticationError("Authentication failed: Invalid username or password")
    return message.username
