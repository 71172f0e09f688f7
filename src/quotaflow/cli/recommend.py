"""``quotaflow recommend``: quotas proposed from recorded traffic, with the backtest of the proposal (on Spark)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from quotaflow.cli.jobopts import print_summary
from quotaflow.cli.progress import progress
from quotaflow.core.errors import QuotaflowError
from quotaflow.pipeline.advisor import (
    ADVISOR_KEYS,
    DEFAULT_HEADROOM,
    DEFAULT_MIN_ACTIVE_SECONDS,
    DEFAULT_MIN_RATE,
    DEFAULT_PERCENTILE,
    LEVELS,
    AdvisorSettings,
)


@click.command("recommend")
@click.option("--events", required=True, type=click.Path(path_type=Path),
              help="Events directory (requests/, Parquet or JSON lines): the gateway's event log.")
@click.option("--store", required=True, metavar="PATH|URL",
              help="Quota store whose current quotas the proposal is compared with (read once, never written).")
@click.option("--out", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Output directory (replaced): proposal.json, usage/, outcome/ and the backtest's layout.")
@click.option("--entity-type", "level", type=click.Choice(LEVELS), default="user", show_default=True,
              help="The entities to propose quotas for.")
@click.option("--prefixes", default="", metavar="P1,P2",
              help="client-id-prefix: prefixes to propose for, beside the store's client-id-prefix entities.")
@click.option("--keys", default=",".join(ADVISOR_KEYS), show_default=True, help="Quota keys to propose.")
@click.option("--percentile", type=float, default=DEFAULT_PERCENTILE, show_default=True,
              help="Percentile (linear interpolation) of the per-(broker, second) usage cells.")
@click.option("--headroom", type=float, default=DEFAULT_HEADROOM, show_default=True,
              help="Multiplier on the percentile.")
@click.option("--min-rate", "min_rate", type=float, default=DEFAULT_MIN_RATE, show_default=True,
              help="Floor of every recommended value (bytes/s, or % of one thread).")
@click.option("--min-active-seconds", "min_active", type=int, default=DEFAULT_MIN_ACTIVE_SECONDS, show_default=True,
              help="No value for a key an entity used in fewer epoch seconds than this (thin evidence).")
@click.option("--broker-config", "broker_config", type=click.Path(path_type=Path, dir_okay=False),
              help="server.properties-style file: quota.window.num / quota.window.size.seconds (the window the "
                   "usage rates are measured over, as Kafka enforces quotas).")
@click.option("--master", default=None, help="Spark master URL (default local[*]).")
def recommend(events: Path, store: str, out: Path, level: str, prefixes: str, keys: str, percentile: float,
              headroom: float, min_rate: float, min_active: int, broker_config: Path | None,
              master: str | None) -> None:  # fmt: skip
    """Propose quotas per entity from observed usage (P-th percentile of its rate over the quota window ×
    headroom) and backtest the proposal against the store's quotas on the same events. Prints the proposal
    with its evidence; apply it with `client-quotas --alter --from-file`."""
    from quotaflow.pipeline import recommend as job

    settings = AdvisorSettings(percentile, headroom, min_rate, tuple(k for k in keys.split(",") if k), min_active)
    spec = job.RecommendSpec(events, store, out, level, settings, broker_config,
                             tuple(p for p in prefixes.split(",") if p))  # fmt: skip
    console = Console(stderr=True)
    try:
        spec.validate()  # a clear error before Spark starts
        from quotaflow.pipeline.session import session_scope

        with progress(console, "recommend") as report:
            report("starting Spark")
            with session_scope("local", master) as spark:
                summary = job.run(spec, spark=spark, progress=report)
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e
    import pyarrow.parquet as pq

    print_proposal(pq.read_table(out / job.USAGE).to_pylist())
    proposal = json.loads((out / job.PROPOSAL).read_text(encoding="utf-8"))
    console.print(f"proposal: {len(proposal)} entities ({level}) -> {out / job.PROPOSAL}")
    print_summary(summary, out)


def print_proposal(usage: list[dict[str, Any]]) -> None:
    """The proposal as a table on stdout (:func:`proposal_table`)."""
    out = Console()
    if not out.is_terminal:
        out = Console(width=200)  # a log or a pipe: no squeezing into 80 columns
    out.print(proposal_table(usage))


def proposal_table(usage: list[dict[str, Any]], title: str = "proposal") -> Table:
    """Per entity and key (``usage/`` rows): the quota in force and the entity it comes from, the proposed value
    ("-": withheld), the evidence (active seconds, share of them throttled now) and any warning."""
    from quotaflow.pipeline.recommend import format_value

    table = Table(title=title, title_justify="left")
    for name, justify in (("entity", "left"), ("key", "left"), ("in force (source)", "left"),
                          ("proposed", "right"), ("active s", "right"), ("throttled", "right"),
                          ("note", "left")):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in usage:
        names = [f"{part}={r[col]}" for part, col in (("user", "entity_user"), ("client-id", "entity_client_id"),
                                                      ("client-id-prefix", "entity_client_id_prefix")) if r[col]]
        limit = r["current_limit"]
        current = "unlimited" if limit is None else f"{format_value(limit)} ({r['current_source']})"
        proposed = format_value(r["recommended"]) if r["proposed"] else "-"
        table.add_row(", ".join(names), r["key"], current, proposed, str(r["active_seconds"]),
                      f"{r['throttled_share']:.0%}", r["warning"] or "")  # fmt: skip
    return table
