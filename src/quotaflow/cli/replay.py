"""``quotaflow replay``: the backtest's computation in one process, without Spark."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from quotaflow.cli.jobopts import job_options, print_summary, spec_from
from quotaflow.cli.progress import progress
from quotaflow.core.errors import QuotaflowError


@click.command("replay")
@job_options
def replay(events: Path, store: str, out: Path, broker_config: Path | None, compare: str | None,
           headroom: float, with_inputs: bool) -> None:  # fmt: skip
    """Same arguments and output as `quotaflow backtest`, single process (pyarrow + numpy + the engine kernel)."""
    from quotaflow.pipeline import replay as job

    spec = spec_from(events, store, out, broker_config, compare, headroom, with_inputs)
    console = Console(stderr=True)
    try:
        with progress(console, "replay") as report:
            summary = job.run(spec, progress=report)
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e
    print_summary(summary, out)
