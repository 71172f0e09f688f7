"""``quotaflow backtest``: Kafka-exact quota decisions over an events directory, on Spark."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from quotaflow.cli.jobopts import job_options, print_summary, spec_from
from quotaflow.cli.progress import progress
from quotaflow.core.errors import QuotaflowError


@click.command("backtest")
@job_options
@click.option("--master", default=None, help="Spark master URL (default local[*]).")
def backtest(events: Path, store: str, out: Path, broker_config: Path | None, compare: str | None,
             headroom: float, with_inputs: bool, master: str | None) -> None:  # fmt: skip
    """What the store's quotas would have done to this traffic: decisions, windows, entities, connections."""
    from quotaflow.pipeline import backtest as job

    spec = spec_from(events, store, out, broker_config, compare, headroom, with_inputs)
    console = Console(stderr=True)
    try:
        spec.validate()  # a clear error before Spark starts
        from quotaflow.pipeline.session import session_scope

        with progress(console, "backtest") as report:
            report("starting Spark")
            with session_scope("local", master) as spark:
                summary = job.run(spec, spark=spark, progress=report)
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e
    print_summary(summary, out)
