"""``quotaflow report``: render a backtest's output as one HTML page with charts."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from quotaflow.cli.progress import progress
from quotaflow.core.errors import QuotaflowError


@click.command("report")
@click.option("--in", "in_dir", required=True, type=click.Path(path_type=Path),
              help="A `quotaflow backtest --out` directory.")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Where report.html and the PNG charts go.")
def report(in_dir: Path, out_dir: Path) -> None:
    """Backtest report: rate vs quota of the top entities, throttle times, connections, the config comparison."""
    from quotaflow.pipeline.report import build_report

    console = Console(stderr=True)
    try:
        with progress(console, "report") as stage:
            result = build_report(in_dir, out_dir, progress=stage)
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e
    console.print(f"wrote {len(result.png_paths)} charts to {out_dir}")
    click.echo(str(result.html_path))
