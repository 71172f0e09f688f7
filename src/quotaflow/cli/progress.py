"""Progress of long work on stderr: a rich spinner on a terminal, a line per stage without one (a log, a pipe,
CI), so a command that takes tens of seconds is never silent (Spark's start alone can take that long)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from rich.console import Console

Report = Callable[[str], None]
QUIET_S: Final = 1.0
"""Without a terminal a stage is reported once it has run this long: long work says what it is doing, while a
command that fails at once still prints its one error line and nothing else."""


@contextmanager
def progress(console: Console, command: str, quiet_s: float | None = None) -> Iterator[Report]:
    """Yields ``report(stage)``: the stage under way. On a terminal a status line that each stage replaces;
    elsewhere ``command: stage (+N.Ns)``, one line per stage still running after ``quiet_s`` (default
    :data:`QUIET_S`, read at the call; 0 or less: every stage at once), flushed."""
    quiet = QUIET_S if quiet_s is None else quiet_s
    if console.is_terminal:
        with console.status(command) as status:
            yield lambda stage: status.update(f"{command}: {stage}")
        return
    t0 = time.perf_counter()
    lock = threading.Lock()
    pending: list[threading.Timer] = []

    def line(stage: str) -> None:
        with lock:
            console.print(f"{command}: {stage} (+{time.perf_counter() - t0:.1f}s)", highlight=False, soft_wrap=True)
            console.file.flush()

    def report(stage: str) -> None:
        if quiet <= 0:
            line(stage)
            return
        for timer in pending:
            timer.cancel()
        pending.clear()
        timer = threading.Timer(quiet, line, (stage,))
        timer.daemon = True
        pending.append(timer)
        timer.start()

    try:
        yield report
    finally:
        for timer in pending:
            timer.cancel()
