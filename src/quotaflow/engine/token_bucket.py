"""Kafka's ``TokenBucket`` (KIP-599) for ``controller_mutation_rate``.

``burst = samples × windowSeconds × quota``; refilled at ``quota`` tokens per second, capped at the burst. Kafka's
state starts at ``tokens = 0, lastUpdateMs = 0`` so that with epoch timestamps the first refill fills the bucket;
here the bucket starts full at the first use, which is the same number for any real timestamp.
"""

from __future__ import annotations


class TokenBucket:
    """One quota-id's tokens; ``quota`` is the configured rate (replacing it keeps the tokens)."""

    __slots__ = ("_last_ms", "_tokens", "quota", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: int, quota: float) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.quota = quota
        self._tokens: float | None = None  # None: full, not used yet
        self._last_ms = 0

    @property
    def burst(self) -> float:
        return self.samples * (self.window_ms / 1000.0) * self.quota

    def _refill(self, now_ms: int) -> float:
        burst = self.burst
        if self._tokens is None:
            tokens = burst
        else:
            tokens = min(burst, self._tokens + self.quota * ((now_ms - self._last_ms) / 1000.0))
        self._tokens = tokens
        self._last_ms = now_ms
        return tokens

    def measure(self, now_ms: int) -> float:
        """Refill, then the tokens left (negative after an over-sized record)."""
        return self._refill(now_ms)

    def record(self, value: float, now_ms: int) -> None:
        """Refill, then take ``value`` tokens (a negative value gives tokens back, up to the burst)."""
        self._tokens = min(self.burst, self._refill(now_ms) - value)
