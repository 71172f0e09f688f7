"""SASL/PLAIN credentials as the store keeps them: a per-user random salt plus PBKDF2-HMAC-SHA512.

Passwords are never stored; hashing is slow on purpose, so a leaked store does not give passwords away cheaply.
Verification compares in constant time. The gateway (SASL/PLAIN) and the console (HTTP Basic) both check
passwords here, so both accept exactly the users ``quotaflow users add`` created.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Final

from quotaflow.store.base import Credential, QuotaStore

PBKDF2_ALGORITHM: Final = "sha512"
DEFAULT_ITERATIONS: Final = 210_000  # OWASP's 2023 recommendation for PBKDF2-HMAC-SHA512
SALT_BYTES: Final = 16


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


def check_password(store: QuotaStore, user: str, password: str) -> bool:
    """True when ``user`` exists in the store and ``password`` is theirs. An unknown user still pays for one hash,
    so response time does not reveal which users exist."""
    credential = store.get_credential(user)
    return verify_password(credential or _DUMMY, password) and credential is not None
