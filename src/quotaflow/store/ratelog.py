"""Skipped records logged without letting a writer flood the log: whoever can write a topic can write a million
records that a reader must refuse, and each refusal is worth knowing about but not worth a line of its own."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

INTERVAL_S: Final = 10.0


class RejectionLog:
    """The first skipped record is logged at once (WARNING, with its offset and reason); later ones at most once
    per ``interval_s``, with how many were skipped since the last line."""

    def __init__(self, logger: logging.Logger, name: str, interval_s: float = INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self.name = name
        self.interval_s = interval_s
        self._clock = clock
        self._last = -float("inf")
        self._since = 0
        self.lines = 0

    def skipped(self, offset: int, reason: str) -> None:
        self._since += 1
        now = self._clock()
        if now - self._last < self.interval_s:
            return
        more = f" (and {self._since - 1} more skipped in the last {self.interval_s:g} s)" if self.lines else ""
        self._log.warning("%s: skipped the record at offset %d: %s%s", self.name, offset, reason, more)
        self._last, self._since = now, 0
        self.lines += 1
