"""Long work reports its stages on stderr without a terminal (issue 35: ``recommend`` was silent for ~40 s in a
log); a command that fails at once prints only its error."""

from __future__ import annotations

import io
import time

from rich.console import Console

from quotaflow.cli.progress import progress


def test_a_stage_still_running_after_the_quiet_time_gets_a_line() -> None:
    out = io.StringIO()
    with progress(Console(file=out, force_terminal=False), "recommend", quiet_s=1.0) as report:
        report("starting Spark")
        deadline = time.monotonic() + 10
        while "starting Spark" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        report("read")  # replaced at once (well within the quiet second): never printed
        report("decisions")
        while "decisions" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = out.getvalue().splitlines()
    assert [line.split(" (+")[0] for line in lines] == ["recommend: starting Spark", "recommend: decisions"]
    assert all(line.endswith("s)") for line in lines)


def test_nothing_is_printed_for_work_that_ends_at_once() -> None:
    out = io.StringIO()
    with progress(Console(file=out, force_terminal=False), "replay", quiet_s=0.5) as report:
        report("read")
    time.sleep(0.7)
    assert out.getvalue() == ""
