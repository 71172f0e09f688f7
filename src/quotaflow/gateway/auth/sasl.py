"""SASL/PLAIN at the gateway: the PLAIN message (RFC 4616) checked against the store's credentials.

Credential hashing lives in :mod:`quotaflow.store.credentials` (shared with the console's HTTP Basic sign-in) and is
re-exported here for existing callers.

The hash is slow on purpose (~130 ms of CPU per check), which makes wrong passwords an attack surface, so the
gateway checks through :class:`SaslVerifier`: PBKDF2 in a small bounded thread pool off the event loop, no hash for
an IP that keeps failing (a token bucket of hashes per IP, :mod:`quotaflow.engine.failed_logins`, shared with the
console), and successful logins remembered as a cheap keyed
digest, so a good client reconnecting is verified without PBKDF2 even while its IP is being throttled.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

from quotaflow.core.errors import SaslAuthenticationFailedError
from quotaflow.engine.failed_logins import FailureBuckets
from quotaflow.engine.metrics import MetricSample
from quotaflow.store.base import Credential, QuotaStore
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
    "SaslVerifier",
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
        raise SaslAuthenticationError(INVALID_CREDENTIALS)
    return message.username


INVALID_CREDENTIALS: Final = "Authentication failed: Invalid username or password"
_UNKNOWN_USER: Final = Credential(user="", salt=b"\x00" * SALT_BYTES, iterations=DEFAULT_ITERATIONS, hash=b"")
LOGIN_CACHE_SIZE: Final = 10_000
SASL_METRICS_GROUP: Final = "SaslAuthentication"  # /metrics: kafka_server_sasl_authentication_*


class LoginCache:
    """Successful logins as ``HMAC-SHA256(process key, salt + client IP + password)`` per user and client IP, tied to
    the credential they were verified against (a changed or removed credential no longer matches). The key lives
    only in this process, so the cache gives nothing away; LRU-bounded. Thread-safe (checks run in the verifier's
    pool). Per IP, because a hit needs no failed-login token: were it shared, a guesser on another address whose
    tokens are spent would still learn the right password of any recently logged-in user from the cache."""

    def __init__(self, size: int = LOGIN_CACHE_SIZE) -> None:
        self._key = os.urandom(32)
        self._size = size
        self._entries: OrderedDict[tuple[str, str], tuple[bytes, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def _digest(self, credential: Credential, password: str, client_ip: str) -> bytes:
        return hmac.new(self._key, b"\0".join([credential.salt, client_ip.encode(), password.encode("utf-8")]),
                        hashlib.sha256).digest()

    def hit(self, credential: Credential, password: str, client_ip: str = "") -> bool:
        entry_key = (credential.user, client_ip)
        with self._lock:
            entry = self._entries.get(entry_key)
            if entry is not None:
                self._entries.move_to_end(entry_key)
        if entry is None or not hmac.compare_digest(entry[0], credential.hash):
            return False
        return hmac.compare_digest(entry[1], self._digest(credential, password, client_ip))

    def remember(self, credential: Credential, password: str, client_ip: str = "") -> None:
        digest = self._digest(credential, password, client_ip)
        entry_key = (credential.user, client_ip)
        with self._lock:
            self._entries[entry_key] = (credential.hash, digest)
            self._entries.move_to_end(entry_key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Verdict:
    principal: str | None  # None: failed
    error: str | None
    cpu_ns: int  # thread time spent on the check (charged to the connection as network time)


class SaslVerifier:
    """SASL/PLAIN checks for the gateway, off the event loop. The cheap part (parse, credential lookup, login cache)
    runs in the loop's default executor, so a good client never queues behind password hashes; PBKDF2 runs in a
    pool of ``threads`` with at most ``4 × threads`` checks waiting, only while the client's IP has failed-login
    tokens left. A refused check costs no hash and fails like a wrong password. ``close()`` stops the pool."""

    def __init__(self, store: QuotaStore, *, threads: int, failed_rate_per_ip: float) -> None:
        self._store = store
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="quotaflow-sasl")
        self._max_waiting = 4 * threads
        self._hashing = 0
        self.cache = LoginCache()
        self.failures = FailureBuckets(failed_rate_per_ip)
        self.hashed = 0  # PBKDF2 runs (for tests and metrics)
        self.hashed_failed = 0  # of which the password did not match
        self.refused = 0  # checks refused without a hash (IP over its failed-login rate, or the pool full)

    async def verify(self, token: bytes, client_ip: str) -> Verdict:
        loop = asyncio.get_running_loop()
        message, credential, hit, ns = await loop.run_in_executor(None, self._lookup, token, client_ip)
        if isinstance(message, SaslAuthenticationError):
            return Verdict(None, message.message, ns)
        if hit:
            return Verdict(message.username, None, ns)
        if self._hashing >= self._max_waiting or not self.failures.take(client_ip):
            self.refused += 1
            return Verdict(None, INVALID_CREDENTIALS, ns)
        self._hashing += 1
        try:
            ok, hash_ns = await loop.run_in_executor(self._pool, self._hash, credential, message.password)
        finally:
            self._hashing -= 1
        self.hashed += 1
        if not ok or credential is None:
            self.hashed_failed += 1
            return Verdict(None, INVALID_CREDENTIALS, ns + hash_ns)
        self.failures.give_back(client_ip)
        self.cache.remember(credential, message.password, client_ip)
        return Verdict(message.username, None, ns + hash_ns)

    def _lookup(self, token: bytes, client_ip: str
                ) -> tuple[PlainMessage | SaslAuthenticationError, Credential | None, bool, int]:
        start = time.thread_time_ns()
        try:
            message = PlainMessage.parse(token)
        except SaslAuthenticationError as e:
            return e, None, False, time.thread_time_ns() - start
        credential = self._store.get_credential(message.username)
        hit = credential is not None and self.cache.hit(credential, message.password, client_ip)
        return message, credential, hit, time.thread_time_ns() - start

    @staticmethod
    def _hash(credential: Credential | None, password: str) -> tuple[bool, int]:
        start = time.thread_time_ns()
        # an unknown user still pays for one hash, so response time does not reveal which users exist
        ok = verify_password(credential or _UNKNOWN_USER, password) and credential is not None
        return ok, time.thread_time_ns() - start

    def metric_samples(self, now_ms: int) -> Iterator[MetricSample]:
        """The work password guessing cost this gateway, for ``/metrics``: PBKDF2 runs (all, and those that failed)
        and checks refused without a hash; with the per-IP bucket on, failed hashes grow by at most the burst plus
        ``quotaflow.sasl.failed.authentication.rate.per.ip`` per second per IP, however many guesses arrive."""
        yield MetricSample("password-hash-total", SASL_METRICS_GROUP, (), float(self.hashed),
                           "SASL/PLAIN password checks hashed (PBKDF2 runs)")
        yield MetricSample("password-hash-failed-total", SASL_METRICS_GROUP, (), float(self.hashed_failed),
                           "SASL/PLAIN password checks hashed that did not match")
        yield MetricSample("password-check-refused-total", SASL_METRICS_GROUP, (), float(self.refused),
                           "SASL/PLAIN logins failed without a hash (IP over its failed-login rate, or pool full)")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
