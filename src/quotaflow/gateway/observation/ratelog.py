"""Warnings that can repeat thousands of times a second (every client of a dead upstream, an acceptor out of file
descriptors) logged as one line per interval with a count, so an outage cannot flood the log."""

from __future__ import annotations

import logging
import time
from typing import Final

WARNING_INTERVAL_S: Final = 10.0


class RateLimitedLog:
    """A warning that may repeat thousands of times a second (every client of a dead upstream): the first is
    logged at once, later ones at most once per ``interval_s`` with how many there were since the last line."""

    def __init__(self, logger: logging.Logger, interval_s: float = WARNING_INTERVAL_S) -> None:
        self._log = logger
        self.interval_s = interval_s
        self._last = -float("inf")
        self._count = 0
        self.lines = 0  # lines actually written (for tests)

    def warning(self, message: str, *args: object) -> None:
        self._count += 1
        now = time.monotonic()
        if now - self._last < self.interval_s:
            return
        since = "" if self._last == -float("inf") else f" in the last {now - self._last:.0f} s"
        self._log.warning(message + " (%d time(s)%s)", *args, self._count, since)
        self._last, self._count = now, 0
        self.lines += 1
