"""Who may change quotas from the console: HTTP Basic against the store's SASL/PLAIN credentials.

Reads are open to anyone who can reach the console. Writes need a principal whose password verifies against the
store (the users ``quotaflow users add`` created, the same the gateway authenticates) and, when an admin list is
given, that is on it (``--admin-principal``, matched as ``NAME`` or ``User:NAME`` like the gateway's). With
``--read-only`` nothing is ever written. A verified (user, password) is remembered for a while so each write does not
pay PBKDF2 again; a changed credential in the store invalidates it.

Password guessing is limited as the gateway limits it: each client IP gets ``failed_rate_per_ip`` password checks
per second (burst 3x) for failing logins (:mod:`quotaflow.engine.failed_logins`, the gateway's own buckets); beyond
that a login fails without a check, even with the right password (remembered or not), until the IP's bucket
refills; successful sign-ins use no tokens, so a user on another address is never locked out. The answer to a
failed login is delayed by ``connection.failed.authentication.delay.ms``
(:meth:`quotaflow.console.state.Console.authenticate`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from quotaflow.core.acl import principal_allowed  # the gateway's rule for the admin list
from quotaflow.core.errors import ClusterAuthorizationFailedError, SaslAuthenticationFailedError
from quotaflow.engine.failed_logins import FailureBuckets
from quotaflow.store.base import QuotaStore
from quotaflow.store.credentials import check_password

REALM: Final = "quotaflow console"
CACHE_SECONDS: Final = 300.0
CACHE_ENTRIES: Final = 256
INVALID_CREDENTIALS: Final = "Authentication failed: Invalid username or password"
DEFAULT_FAILED_RATE_PER_IP: Final = 1.0  # the gateway's quotaflow.sasl.failed.authentication.rate.per.ip default


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    admin: bool


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """``Authorization: Basic base64(user:password)`` -> (user, password); None when absent or not Basic."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(token.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError) as e:
        raise SaslAuthenticationFailedError("Malformed HTTP Basic credentials") from e
    if not sep or not user:
        raise SaslAuthenticationFailedError("Malformed HTTP Basic credentials")
    return user, password


class Access:
    """The console's write policy over one store."""

    def __init__(
        self,
        store: QuotaStore,
        *,
        read_only: bool = False,
        admins: frozenset[str] | None = None,
        failed_rate_per_ip: float = DEFAULT_FAILED_RATE_PER_IP,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.read_only = read_only
        self.admins = admins
        self._clock = clock
        self._lock = threading.Lock()
        self._verified: OrderedDict[bytes, float] = OrderedDict()
        self.failures = FailureBuckets(failed_rate_per_ip, clock)
        self.hashed = 0  # password checks run (PBKDF2)
        self.refused = 0  # logins failed without a check: the client's IP was over its failed-login rate

    def principal(self, authorization: str | None, client_ip: str = "") -> Principal | None:
        """The signed-in principal for a request's Authorization header (None when it carries none).
        Wrong credentials, or a client IP over its failed-login rate, raise :class:`SaslAuthenticationFailedError`.
        Blocking (PBKDF2): call off the event loop."""
        creds = parse_basic(authorization)
        if creds is None:
            return None
        user, password = creds
        # every attempt takes a token, a remembered sign-in too (else guesses at a signed-in user's password would
        # be checked against the memory for free); a successful one gives it back
        if not self.failures.take(client_ip):
            with self._lock:
                self.refused += 1
            raise SaslAuthenticationFailedError(INVALID_CREDENTIALS)
        credential = self.store.get_credential(user)
        token = hashlib.sha256(
            b"\0".join([user.encode(), password.encode(), credential.hash if credential else b""])
        ).digest()
        now = self._clock()
        with self._lock:
            seen = self._verified.get(token)
        if seen is None or now - seen >= CACHE_SECONDS:
            with self._lock:
                self.hashed += 1
            if not check_password(self.store, user, password):
                raise SaslAuthenticationFailedError(INVALID_CREDENTIALS)
            with self._lock:
                self._verified[token] = now
                self._verified.move_to_end(token)
                while len(self._verified) > CACHE_ENTRIES:
                    self._verified.popitem(last=False)
        self.failures.give_back(client_ip)
        return Principal(user, principal_allowed(self.admins, user))

    def require_admin(self, authorization: str | None, client_ip: str = "") -> Principal:
        """The principal allowed to write, else :class:`SaslAuthenticationFailedError` (sign in: HTTP 401) or
        :class:`ClusterAuthorizationFailedError` (read-only console, or not an admin)."""
        if self.read_only:
            raise ClusterAuthorizationFailedError("This console is read-only (--read-only): quotas cannot be changed")
        principal = self.principal(authorization, client_ip)
        if principal is None:
            raise SaslAuthenticationFailedError("Sign in with an admin principal to change quotas")
        if not principal.admin:
            raise ClusterAuthorizationFailedError(f"Principal User:{principal.name} is not an admin of this console")
        return principal
