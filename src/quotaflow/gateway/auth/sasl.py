"""SASL/PLAIN at the gateway: the PLAIN message (RFC 4616) checked against the store's credentials.

Credential hashing lives in :mod:`quotaflow.store.credentials` (shared with the console's HTTP Basic sign-in) and is
re-exported here for existing callers.

The hash is slow on purpose (~130 ms of CPU per check), which makes wrong passwords an attack surface, so the
gateway checks through :class:`SaslVerifier`: PBKDF2 in a small bounded thread pool off the event loop, one hash for
concurrent logins with the same credentials, a bounded wait for a free thread (never a refusal), no hash for an IP
that keeps failing (a token bucket of failed logins per IP, :mod:`quotaflow.engine.failed_logins`, shared with the
console), and successful logins remembered as a cheap keyed digest, so a good client reconnecting is verified
without PBKDF2 even while its IP is being throttled.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

from quotaflow.core.errors import ConnectionClosed, SaslAuthenticationFailedError
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

    def flight_key(self, credential: Credential, user: str, password: str) -> bytes:
        """What concurrent checks of the same password against the same credential share (no client IP: the
        single flight serves every address, each with its own failed-login bucket checked first)."""
        return hmac.new(self._key, b"\0".join([user.encode("utf-8"), credential.salt, credential.hash,
                                                password.encode("utf-8")]), hashlib.sha256).digest()

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
    busy: bool = False  # not checked: the hash queue was full or the wait too long; close, do not answer "wrong"


class LoginQueueFullError(ConnectionClosed):
    """A login found no hash slot within the queue's bounds: its connection is closed unanswered, never told that its
    password is wrong (the verifier turns it into a ``busy`` verdict)."""


class SaslVerifier:
    """SASL/PLAIN checks for the gateway, off the event loop. The cheap part (parse, credential lookup, login cache)
    runs in the loop's default executor, so a good client never queues behind password hashes; PBKDF2 runs in a
    pool of ``threads``. ``close()`` stops the pool.

    Load never makes a correct password fail; only a failed check costs the IP anything:

    * single flight: concurrent logins with the same user and password (a reconnect storm of one service) wait for
      the one hash in flight, keyed by an HMAC under the process key (the password is never kept);
    * the failed-login bucket is read before hashing and charged only when a check fails. An IP with no token left
      is refused without a hash, as before, and an IP never has more hashes in flight than it has tokens, so a
      flood of wrong passwords from it costs at most the burst plus ``rate`` hashes per second, however many
      connections it opens at once;
    * while every thread hashes (or the IP's tokens are all in flight), a login waits in a FIFO queue of at most
      ``queue_size`` for at most ``queue_timeout_ms``; past either the verdict is ``busy`` and the connection is
      closed without an answer, so the client reconnects (Java clients treat SASL_AUTHENTICATION_FAILED as fatal)."""

    def __init__(self, store: QuotaStore, *, threads: int, failed_rate_per_ip: float, queue_size: int = 1_000,
                 queue_timeout_ms: int = 10_000) -> None:
        self._store = store
        self._threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="quotaflow-sasl")
        self._queue_size = queue_size
        self._queue_timeout_s = queue_timeout_ms / 1000
        self._hashing = 0  # hashes running, at most ``threads``
        self._ip_hashing: dict[str, int] = {}  # of which per client IP (only IPs with one running)
        self._waiting: deque[tuple[str, asyncio.Future[bool]]] = deque()  # for a slot: True granted, False refused
        self._flights: dict[bytes, asyncio.Future[bool | None]] = {}  # single flight: None, no answer (retry)
        self.cache = LoginCache()
        self.failures = FailureBuckets(failed_rate_per_ip)
        self.hashed = 0  # PBKDF2 runs (for tests and metrics)
        self.hashed_failed = 0  # of which the password did not match
        self.refused = 0  # checks refused without a hash (the IP has no failed-login token left)
        self.joined = 0  # logins answered by another's hash in flight (single flight)
        self.queued = 0  # logins that waited for a hash slot
        self.busy = 0  # logins closed unchecked: the queue was full or the wait too long

    async def verify(self, token: bytes, client_ip: str) -> Verdict:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._queue_timeout_s
        message, credential, hit, ns = await loop.run_in_executor(None, self._lookup, token, client_ip)
        if isinstance(message, SaslAuthenticationError):
            return Verdict(None, message.message, ns)
        if hit:
            return Verdict(message.username, None, ns)
        key = self.cache.flight_key(credential or _UNKNOWN_USER, message.username, message.password)
        hash_ns = 0
        while True:
            if self.failures.tokens(client_ip) < 1.0:
                self.refused += 1
                return Verdict(None, INVALID_CREDENTIALS, ns)
            flight = self._flights.get(key)
            if flight is not None:
                outcome = await asyncio.shield(flight)
                if outcome is None:
                    continue  # its login found no slot: try again (for what is left of this one's own time)
                self.joined += 1
                ok = outcome
                break
            flight = self._flights[key] = loop.create_future()
            result: tuple[bool, int] | None = None
            try:
                result = await self._hash_in_slot(client_ip, credential, message.password, deadline)
            except LoginQueueFullError:
                self.busy += 1
                return Verdict(None, None, ns, busy=True)
            finally:
                del self._flights[key]
                flight.set_result(None if result is None else result[0])
            if result is None:  # the IP's tokens ran out while it waited
                self.refused += 1
                return Verdict(None, INVALID_CREDENTIALS, ns)
            ok, hash_ns = result
            break
        if not ok or credential is None:
            self.failures.charge(client_ip)
            self._dispatch()  # the IP's waiters may now have no token left
            return Verdict(None, INVALID_CREDENTIALS, ns + hash_ns)
        self.cache.remember(credential, message.password, client_ip)
        return Verdict(message.username, None, ns + hash_ns)

    async def _hash_in_slot(self, ip: str, credential: Credential | None, password: str, deadline: float
                            ) -> tuple[bool, int] | None:
        """The hash, once a thread is free and the IP has a token not already in flight; None when the IP's
        tokens are spent meanwhile; ``LoginQueueFullError`` past the queue's bounds."""
        if not self._grant(ip):
            if len(self._waiting) >= self._queue_size:
                raise LoginQueueFullError
            waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self._waiting.append((ip, waiter))
            self.queued += 1
            try:
                async with asyncio.timeout_at(deadline):
                    granted = await waiter
            except (TimeoutError, asyncio.CancelledError) as e:
                if waiter.done() and not waiter.cancelled() and waiter.result():
                    self._release(ip)  # granted as the wait ended: hand the slot on
                else:
                    waiter.cancel()  # _dispatch skips it
                if isinstance(e, TimeoutError):
                    raise LoginQueueFullError from e
                raise
            if not granted:
                return None
        # the slot is the thread's: freed when the hash ends, even if this login is cancelled meanwhile
        running = asyncio.get_running_loop().run_in_executor(self._pool, self._hash, credential, password)
        running.add_done_callback(lambda _: self._release(ip))
        result = await asyncio.shield(running)
        self.hashed += 1
        if not result[0] or credential is None:
            self.hashed_failed += 1
        return result

    def _grant(self, ip: str) -> bool:
        """Take a hash slot for ``ip`` now, if a thread is free and the IP has a token not in flight already."""
        running = self._ip_hashing.get(ip, 0)
        if self._hashing >= self._threads or running >= int(self.failures.tokens(ip)):
            return False
        self._hashing += 1
        self._ip_hashing[ip] = running + 1
        return True

    def _release(self, ip: str) -> None:
        self._hashing -= 1
        running = self._ip_hashing.pop(ip) - 1
        if running:
            self._ip_hashing[ip] = running
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free slots to waiters in arrival order (skipping those whose IP has its tokens in flight); refuse
        those whose IP has no token left and nothing in flight that could give one back."""
        kept: deque[tuple[str, asyncio.Future[bool]]] = deque()
        while self._waiting:
            ip, waiter = self._waiting.popleft()
            if waiter.done():
                continue
            if self._grant(ip):
                waiter.set_result(True)
            elif not self._ip_hashing.get(ip) and self.failures.tokens(ip) < 1.0:
                waiter.set_result(False)
            else:
                kept.append((ip, waiter))
        self._waiting = kept

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
        ``quotaflow.sasl.failed.authentication.rate.per.ip`` per second per IP, however many guesses arrive. And
        what load did: logins answered by another's hash, logins that queued, logins closed unchecked."""
        yield MetricSample("password-hash-total", SASL_METRICS_GROUP, (), float(self.hashed),
                           "SASL/PLAIN password checks hashed (PBKDF2 runs)")
        yield MetricSample("password-hash-failed-total", SASL_METRICS_GROUP, (), float(self.hashed_failed),
                           "SASL/PLAIN password checks hashed that did not match")
        yield MetricSample("password-check-refused-total", SASL_METRICS_GROUP, (), float(self.refused),
                           "SASL/PLAIN logins failed without a hash (IP over its failed-login rate)")
        yield MetricSample("password-check-joined-total", SASL_METRICS_GROUP, (), float(self.joined),
                           "SASL/PLAIN logins answered by the same credential's hash in flight")
        yield MetricSample("password-check-queued-total", SASL_METRICS_GROUP, (), float(self.queued),
                           "SASL/PLAIN logins that waited for a password hash slot")
        yield MetricSample("password-check-busy-total", SASL_METRICS_GROUP, (), float(self.busy),
                           "SASL/PLAIN logins closed unchecked: hash queue full or its wait too long")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
