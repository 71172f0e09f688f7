"""Progress of long work on stderr: a rich spinner on a terminal, a line per stage without one (a log, a pipe,
CI), so a command that takes tens of seconds is never silent (Spark's start alone can take that long)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

Report = Callable[[str], None]


@contextmanager
def progress(console: Console, command: str) -> Iterator[Report]:
    """Yields ``report(stage)``: the stage under way. On a terminal a status line that each stage replaces;
    elsewhere ``command: stage (+N.Ns)``, one line per stage, flushed as it happens."""
    t0 = time.perf_counter()
    if console.is_terminal:
        with console.status(command) as status:
            yield lambda stage: status.update(f"{command}: {stage}")
        return

    def line(stage: str) -> None:
        console.print(f"{command}: {stage} (+{time.perf_counter() - t0:.1f}s)", highlight=False, soft_wrap=True)
        console.file.flush()

    line("starting")
    yield line
