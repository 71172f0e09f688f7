"""SCRAM credentials (RFC 5802 / RFC 7677) as Kafka derives and keeps them: never the password.

``SaltedPassword = PBKDF2(HMAC-H, password, salt, iterations)``, ``ClientKey = HMAC(SaltedPassword, "Client Key")``,
``StoredKey = H(ClientKey)``, ``ServerKey = HMAC(SaltedPassword, "Server Key")``. The store keeps salt, iterations,
StoredKey and ServerKey per user and mechanism, as Kafka's ``ScramCredential`` (``kafka-configs --alter
--add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'``); iterations outside Kafka's 4096..16384 are refused.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Final

from quotaflow.core.errors import CommandError
from quotaflow.store.base import ScramCredential

SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_512: Final = "SCRAM-SHA-512"
HASHES: Final = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MIN_ITERATIONS: Final = 4096  # Kafka's ScramMechanism minIterations
MAX_ITERATIONS: Final = 16384  # Kafka's ScramMechanism maxIterations
DEFAULT_ITERATIONS: Final = 8192
SALT_BYTES: Final = 32  # a new credential's random salt


def hmac_digest(mechanism: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, HASHES[mechanism]).digest()


def digest(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(HASHES[mechanism], data).digest()


def scram_credential(user: str, mechanism: str, password: str, *, iterations: int = DEFAULT_ITERATIONS,
                     salt: bytes | None = None) -> ScramCredential:
    """A new SCRAM credential (a fresh random salt unless one is given)."""
    if mechanism not in HASHES:
        raise CommandError(f"unknown SCRAM mechanism {mechanism} ({', '.join(HASHES)})")
    if iterations < MIN_ITERATIONS:
        raise CommandError(f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required for "
                           f"{mechanism}")
    if iterations > MAX_ITERATIONS:  # a Kafka controller refuses it ("Too many iterations"), so the store does too
        raise CommandError(f"Iterations {iterations} is more than the maximum {MAX_ITERATIONS} allowed for "
                           f"{mechanism}")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode("utf-8"), salt, iterations)
    client_key = hmac_digest(mechanism, salted, b"Client Key")
    return ScramCredential(user=user, mechanism=mechanism, salt=salt, stored_key=digest(mechanism, client_key),
                           server_key=hmac_digest(mechanism, salted, b"Server Key"), iterations=iterations)
