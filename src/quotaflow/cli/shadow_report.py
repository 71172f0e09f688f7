"""``quotaflow shadow report``: enforced vs shadow per tenant over the traffic a shadow set saw (on Spark).

Exported as the click command ``report``, a subcommand of the ``shadow`` group (cli/shadow.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from quotaflow.cli.jobopts import input_options, print_summary
from quotaflow.cli.progress import progress
from quotaflow.core.errors import QuotaflowError
from quotaflow.pipeline.job import SUMMARY
from quotaflow.pipeline.shadow import DEFAULT_LEVEL, LEVELS

DEFAULT_TOP = 20


@click.command("report")
@input_options
@click.option("--shadow", "shadow", metavar="ID|NAME", default=None,
              help="A shadow set of the store's history (`shadow history`); default: the running one, else the "
                   "latest.")
@click.option("--proposal", "proposal", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Take the changes from a proposal.json (`recommend`'s, or `client-quotas --describe --output "
                   "json`'s shape) instead: no shadow needs to have run; every row is read.")
@click.option("--entity-type", "level", type=click.Choice(LEVELS), default=DEFAULT_LEVEL, show_default=True,
              help="The tenants compared: every client of a user, of a client-id, or each (user, client-id).")
@click.option("--top", type=click.IntRange(min=0), default=DEFAULT_TOP, show_default=True,
              help="Rows of each printed table (all are written to OUT).")
@click.option("--strict", is_flag=True,
              help="Exit with status 3 when a logged decision differs from its replay (shadow = replay broken).")
@click.option("--master", default=None, help="Spark master URL (default local[*]).")
def report(events: Path, store: str, out: Path, broker_config: Path | None, shadow: str | None,
           proposal: Path | None, level: str, top: int, strict: bool, master: str | None) -> None:  # fmt: skip
    """What the shadow set would have done to the traffic it saw, beside what the enforced quotas did: per
    tenant (throttled requests, throttle time, throttled seconds, delayed bytes) and per client IP (connections
    delayed and refused), the tenants whose experience changes most first; and whether replaying the event log
    reproduces the gateway's logged shadow and live decisions row for row. Equal to `quotaflow backtest
    --compare` of a store with the shadow's changes applied, over the same events."""
    from quotaflow.pipeline import shadow as job

    spec = job.ReportSpec(events, store, out, shadow, proposal, broker_config, level)
    console = Console(stderr=True)
    try:
        spec.validate()  # a clear error before Spark starts
        from quotaflow.pipeline.session import session_scope

        with progress(console, "shadow report") as step:
            step("starting Spark")
            with session_scope("local", master) as spark:
                summary = job.run(spec, spark=spark, progress=step)
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e
    import pyarrow.parquet as pq

    described = json.loads((out / SUMMARY).read_text(encoding="utf-8"))
    stdout = Console() if Console().is_terminal else Console(width=200)  # a log or a pipe: no squeezing
    stdout.print(heading(described))
    if (out / job.TENANTS).exists():
        tenants = pq.read_table(out / job.TENANTS).to_pylist()
        changed = [r for r in tenants if any(r[f"{m}_delta"] for m in job.TENANT_METRICS)]
        if changed:
            stdout.print(tenant_table(changed[:top], described["entity_type"], described.get("totals")))
        click.echo(f"{len(changed)} of {len(tenants)} tenants ({described['entity_type']}) would be throttled "
                   f"differently{'' if len(changed) <= top else f'; the {top} most changed shown'}")  # fmt: skip
    if (out / job.IPS).exists():
        ips = [r for r in pq.read_table(out / job.IPS).to_pylist() if r["delayed_delta"] or r["refused_delta"]]
        if ips:
            stdout.print(ip_table(ips[:top]))
    lines, mismatched = check_lines(described)
    for line in lines:
        click.echo(line)
    print_summary(summary, out)
    if mismatched and strict:
        raise SystemExit(3)


def heading(summary: dict[str, Any]) -> str:
    s = summary["shadow"]
    name = f"shadow {s['name']!r} (id {s['id']}, {s['outcome']})" if s["id"] is not None else s["source"]
    rows = summary.get("requests", {}).get("rows") or summary.get("connections", {}).get("rows", "")
    return f"{name}: {len(s['changes'])} entities changed; {rows}"


def _pair(a: float | int, b: float | int, fmt: str = "{:,}") -> str:
    return fmt.format(a) if a == b else f"{fmt.format(a)} -> {fmt.format(b)}"


def tenant_table(rows: list[dict[str, Any]], level: str, totals: dict[str, dict[str, Any]] | None = None) -> Table:
    """Per tenant (``tenants/`` rows, the most changed first): enforced -> shadow where they differ; the totals
    over every tenant last."""
    table = Table(title=f"enforced -> shadow, per {level} (changed only)", title_justify="left")
    for name, justify in (("entity", "left"), ("requests", "right"), ("throttled requests", "right"),
                          ("throttled s", "right"), ("throttle time s", "right"),
                          ("delayed bytes", "right")):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        names = [f"{part}={r[col]}" for part, col in (("user", "entity_user"), ("client-id", "entity_client_id"))
                 if r[col] is not None]  # fmt: skip
        table.add_row(", ".join(names), f"{r['requests']:,}",
                      _pair(r["throttled_requests_enforced"], r["throttled_requests_shadow"]),
                      _pair(r["throttled_seconds_enforced"], r["throttled_seconds_shadow"]),
                      _pair(r["throttle_s_enforced"], r["throttle_s_shadow"], "{:,.3f}"),
                      _pair(r["delayed_bytes_enforced"], r["delayed_bytes_shadow"]))  # fmt: skip
    if totals:
        a, b = totals["enforced"], totals["shadow"]
        table.add_section()
        table.add_row("all tenants", "", _pair(a["throttled_requests"], b["throttled_requests"]),
                      _pair(a["throttled_seconds"], b["throttled_seconds"]),
                      _pair(a["throttle_s"], b["throttle_s"], "{:,.3f}"),
                      _pair(a["delayed_bytes"], b["delayed_bytes"]))  # fmt: skip
    return table


def ip_table(rows: list[dict[str, Any]]) -> Table:
    """Per client IP whose admissions change: connections delayed and refused, enforced -> shadow."""
    table = Table(title="connections, per client IP (changed only)", title_justify="left")
    for name, justify in (("client ip", "left"), ("connections", "right"), ("delayed", "right"),
                          ("refused", "right")):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(r["client_ip"], f"{r['connections']:,}", _pair(r["delayed_enforced"], r["delayed_shadow"]),
                      _pair(r["refused_enforced"], r["refused_shadow"]))  # fmt: skip
    return table


def check_lines(summary: dict[str, Any]) -> tuple[list[str], int]:
    """One line per check (shadow = replay, live = replay) and kind of event, a warning line for each that
    failed; and the number of differing rows."""
    lines: list[str] = []
    total = 0
    for kind in ("requests", "connections"):
        checks = summary.get(kind, {}).get("check")
        if not checks:
            continue
        for check, label in (("shadow", "shadow = replay"), ("live", "live = replay")):
            c = checks[check]
            if check == "shadow" and summary["shadow"]["id"] is None:
                lines.append(f"{label} ({kind}): not checked, --proposal is no shadow a gateway logged")
                continue
            if not c["checked"]:
                lines.append(f"{label} ({kind}): not checked, no logged {check} decisions")
                continue
            lines.append(f"{label} ({kind}): {c['mismatched']} of {c['checked']} logged rows differ")
            if c["mismatched"]:
                total += c["mismatched"]
                lines.append(f"warning: {c['mismatched']} logged {check} decisions ({kind}) differ from the replay"
                             + ("; see mismatches/" if kind == "requests" else ""))  # fmt: skip
    return lines, total
