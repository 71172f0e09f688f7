"""``quotaflow stream``: cluster-wide metering of the gateways' event log with Spark Structured Streaming."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from quotaflow.core.errors import QuotaflowError


@click.command("stream")
@click.option("--events", "events", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="The event-log directory (the stream tails EVENTS/requests).")
@click.option("--checkpoint", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Checkpoint directory: restart with the same one to resume exactly once.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="OUT/usage (Parquet windows), OUT/quarantine, OUT/cluster_rates.json.")
@click.option("--master", default=None, help="Spark master URL (default local[2]).")
@click.option("--window", default="1s", show_default=True, help="Window length (500ms, 1s, 10s, 1m).")
@click.option("--watermark", default="10s", show_default=True, help="How late an event may arrive.")
@click.option("--trigger-seconds", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="Micro-batch interval.")
@click.option("--available-now", is_flag=True, help="Process what is there now, then stop.")
@click.option("--max-files-per-trigger", type=click.IntRange(min=1), default=None,
              help="Cap the files one micro-batch reads.")
@click.option("--format", "input_format", type=click.Choice(["parquet", "json"]), default="parquet",
              show_default=True, help="Event file format (json = JSON lines).")
def stream(events: Path, checkpoint: Path, out: Path, master: str | None, window: str, watermark: str,
           trigger_seconds: float, available_now: bool, max_files_per_trigger: int | None, input_format: str) -> None:
    """Per-(user, client-id) usage per window summed over all brokers, published for gateways as it closes."""
    from quotaflow.pipeline import stream as st

    console = Console(stderr=True)
    try:
        cfg = st.StreamConfig(
            events=events, checkpoint=checkpoint, out=out,
            window_ms=st.parse_duration_ms(window), watermark_ms=st.parse_duration_ms(watermark),
            trigger_seconds=trigger_seconds, available_now=available_now,
            max_files_per_trigger=max_files_per_trigger, input_format=input_format,
        )
        st.check_inputs(cfg)
        from quotaflow.pipeline.session import session_scope

        with console.status("starting Spark") as status, session_scope("streaming", master) as spark:

            def show(p: st.StreamProgress) -> None:
                status.update(
                    f"stream: {p.batches} batches, {p.input_rows:,} events, "
                    f"{p.windows_published:,} windows published, watermark {p.watermark or '-'}"
                )

            try:
                result = st.run(spark, cfg, on_progress=show)
            except KeyboardInterrupt:
                console.print("interrupted: stopped; restart with the same --checkpoint to resume")
                return
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e
    console.print(f"{result.batches} batches, {result.input_rows:,} events, "
                  f"{result.windows_published:,} windows published to {cfg.rates_path}")
    click.echo(str(cfg.usage_dir))
