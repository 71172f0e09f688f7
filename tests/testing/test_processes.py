"""stop_process: SIGTERM, then SIGKILL after the timeout; harmless on a process that already exited."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from quotaflow.testing.processes import stop_process


def _python(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)


def test_a_process_that_honours_sigterm_stops_with_it() -> None:
    proc = _python("import time; time.sleep(60)")
    stop_process(proc, timeout=10)
    assert proc.returncode == -signal.SIGTERM


def test_a_process_that_ignores_sigterm_is_killed_after_the_timeout() -> None:
    proc = _python("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
                   "time.sleep(60)")  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"  # the handler is in place
    start = time.monotonic()
    stop_process(proc, timeout=0.5)
    assert proc.returncode == -signal.SIGKILL
    assert 0.5 <= time.monotonic() - start < 10


def test_nothing_to_stop() -> None:
    proc = _python("pass")
    proc.wait(10)
    stop_process(proc, timeout=1)  # already exited: no signal, no error
    stop_process(None, timeout=1)
    assert proc.returncode == 0

