"""``quotaflow generate-traffic``: deterministic synthetic multi-tenant traffic as a Parquet events directory."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


@click.command("generate-traffic")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Events directory to write (requests/ and connections/).",
)
@click.option("--events", "events", required=True, type=click.IntRange(min=0), help="Number of request events.")
@click.option("--seed", default=0, show_default=True, type=int, help="Same seed, same bytes.")
@click.option("--brokers", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--tenants", default=200, show_default=True, type=click.IntRange(min=2))
@click.option(
    "--rate",
    default=20_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Request events per second, cluster-wide (sets the time span).",
)
def generate_traffic(out: Path, events: int, seed: int, brokers: int, tenants: int, rate: int) -> None:
    """Heavy-tailed tenants, bursts, a connection storm, connection-per-request clients, several brokers and
    listeners. Connection events come on top of --events."""
    from quotaflow.pipeline.generate import TrafficSpec, generate

    spec = TrafficSpec(events=events, seed=seed, brokers=brokers, tenants=tenants, rate=rate)
    console = Console(stderr=True)
    columns = (TextColumn("generating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("events", total=events)
        counts = generate(spec, out, progress=lambda n: bar.advance(task, n))
    console.print(f"wrote {counts['requests']} request and {counts['connections']} connection events to {out}")
