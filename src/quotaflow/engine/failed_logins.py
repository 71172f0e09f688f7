"""Failed logins per client IP, as token buckets: how the gateway (SASL/PLAIN, SCRAM) and the console (HTTP Basic)
stop password guessing.

A password check is slow on purpose (PBKDF2), so each one an attacker triggers costs the server CPU and gives the
attacker one guess. Each client IP gets ``rate`` failed checks per second (burst ``3 × rate``), so only failed
logins use the tokens up, and a user who mistypes twice can still log in at once. An IP without a token gets no
check at all, only the failure. Two ways to spend them: the console takes a token before it hashes and gives it
back after a success (:meth:`FailureBuckets.take`, :meth:`FailureBuckets.give_back`); the gateway, which must not
refuse a burst of correct logins, reads the tokens (:meth:`FailureBuckets.tokens`), keeps no more hashes of an IP in
flight than it has tokens, and charges one when a check fails (:meth:`FailureBuckets.charge`). Kafka has no such
limit (it only delays the answer, ``connection.failed.authentication.delay.ms``); both callers add that delay too.
Memory is bounded: the least recently used IPs are forgotten first. Thread-safe (the console checks in a pool).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

IP_BUCKETS_MAX: Final = 100_000
BURST_FACTOR: Final = 3


class FailureBuckets:
    """Password checks per client IP: :meth:`take` before hashing, :meth:`give_back` after a success."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic, *,
                 max_ips: int = IP_BUCKETS_MAX) -> None:
        self.rate = rate
        self.burst = BURST_FACTOR * rate
        self._clock = clock
        self._max_ips = max_ips
        self._lock = threading.Lock()
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # ip -> (tokens, at)

    def _put(self, ip: str, delta: float) -> float:
        now = self._clock()
        tokens, at = self._buckets.get(ip, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate) + delta
        self._buckets[ip] = (tokens, now)
        self._buckets.move_to_end(ip)
        while len(self._buckets) > self._max_ips:
            self._buckets.popitem(last=False)
        return tokens

    def take(self, ip: str) -> bool:
        """Take a token for one check; False (nothing taken) when the IP has none left."""
        with self._lock:
            if self._put(ip, 0.0) < 1.0:
                return False
            self._put(ip, -1.0)
            return True

    def give_back(self, ip: str) -> None:
        with self._lock:
            self._put(ip, 1.0)

    def tokens(self, ip: str) -> float:
        """The IP's tokens now (refilled to this moment): how many failed checks it may still cost."""
        with self._lock:
            return self._put(ip, 0.0)

    def charge(self, ip: str) -> None:
        """A check of this IP failed: one token spent (never below none: a failure joined to another's check costs
        no hash, so it must not lock the IP out for longer than the failures it could have hashed)."""
        with self._lock:
            if self._put(ip, 0.0) >= 1.0:
                self._put(ip, -1.0)
            else:
                self._buckets[ip] = (0.0, self._clock())
