"""Options shared by the jobs over an events directory: ``backtest`` and ``replay`` (same arguments, same output
layout), ``shadow report`` (the inputs)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from quotaflow.pipeline.job import DEFAULT_HEADROOM, JobSpec, Summary

F = TypeVar("F", bound=Callable[..., Any])


def _apply(fn: F, options: list[Callable[[F], F]]) -> F:
    for option in reversed(options):
        fn = option(fn)
    return fn


def input_options(fn: F) -> F:
    """``--events``, ``--store``, ``--out`` and ``--broker-config``: what every job over an events directory reads
    and writes (``backtest``, ``replay``, ``shadow report``)."""
    return _apply(fn, INPUT_OPTIONS)


def job_options(fn: F) -> F:
    """:func:`input_options` and the backtest's own: ``--compare``, ``--headroom``, ``--with-inputs``."""
    return _apply(fn, [*INPUT_OPTIONS, *JOB_OPTIONS])


INPUT_OPTIONS: list[Callable[[Any], Any]] = [
    click.option(
        "--events",
        "events",
        required=True,
        type=click.Path(path_type=Path),
        help="Events directory (requests/ and/or connections/, Parquet or JSON lines).",
    ),
    click.option(
        "--store",
        "store",
        required=True,
        metavar="PATH|URL",
        help="Quota store whose quotas are applied (a SQLite file, or kafka://HOST:PORT[/TOPIC]: a snapshot).",
    ),
    click.option(
        "--out",
        "out",
        required=True,
        type=click.Path(path_type=Path, file_okay=False),
        help="Output directory (replaced).",
    ),
    click.option(
        "--broker-config",
        "broker_config",
        type=click.Path(path_type=Path, dir_okay=False),
        help="server.properties-style file: quota.window.*, connection-rate limits, "
        "quotaflow.quota.excluded.principals (as the gateway's --config).",
    ),
]
JOB_OPTIONS: list[Callable[[Any], Any]] = [
    click.option(
        "--compare",
        "compare",
        metavar="PATH|URL",
        help="A second store: run both configs and write the difference to OUT/compare/.",
    ),
    click.option(
        "--headroom",
        default=DEFAULT_HEADROOM,
        show_default=True,
        type=click.FloatRange(min=0),
        help="recommended_quota = p99 rate × headroom.",
    ),
    click.option(
        "--with-inputs",
        "with_inputs",
        is_flag=True,
        help="Write every input column next to the decisions (default: broker, seq and the four decisions, "
        "joinable to the events on (broker, seq)).",
    ),
]


def spec_from(events: Path, store: str, out: Path, broker_config: Path | None, compare: str | None,
              headroom: float, with_inputs: bool = False) -> JobSpec:  # fmt: skip
    return JobSpec(events, store, out, broker_config, compare, headroom, with_inputs)


def print_summary(summary: Summary, out: Path) -> None:
    from rich.console import Console

    console = Console(stderr=True)
    c = summary.counts
    console.print(
        f"{summary.engine}: {c.get('requests', 0)} requests ({c.get('requests_quarantined', 0)} quarantined), "
        f"{c.get('connections', 0)} connections ({c.get('connections_quarantined', 0)} quarantined), "
        f"{c.get('windows', 0)} windows"
    )
    console.print("timings (s): " + ", ".join(f"{k} {v}" for k, v in summary.timings_s.items()))
    click.echo(str(out))
