"""The backtest report: one self-contained HTML page (charts inlined as base64 PNG) plus the PNG files.

Reads the backtest's Parquet output with pyarrow only: no Spark, so a report over millions of decisions takes seconds.
Only the columns a section needs are read, and the big ``decisions`` dataset is filtered to throttled rows before it
leaves Arrow.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from quotaflow.core.errors import CommandError
from quotaflow.core.precedence import is_prefix_tags
from quotaflow.pipeline import charts

QUOTA_TYPES = ("produce", "fetch", "request")
ENTITY_KEY = ("broker", "quota_type", "tag_user", "tag_client_id")
REQUIRED = ("decisions", "windows", "entities")
OPTIONAL = ("connections", "compare", "compare_summary")
RUN_SUMMARY = "_SUMMARY.json"  # counts and timings the backtest / replay job wrote
TOP_ENTITIES = 6
TABLE_ROWS = 25

Progress = Callable[[str], None]


@dataclass(slots=True)
class Report:
    """What was written: the page, the charts, and the numbers the summary tables were built from."""

    html_path: Path
    png_paths: list[Path]
    summary: dict[str, Any] = field(default_factory=dict)


def open_backtest(in_dir: Path) -> dict[str, ds.Dataset]:
    """The backtest's datasets by name; a clear error when the directory or a required dataset is missing."""
    if not in_dir.is_dir():
        raise CommandError(f"backtest output directory not found: {in_dir}")
    missing = [name for name in REQUIRED if not (in_dir / name).is_dir()]
    if missing:
        raise CommandError(
            f"{in_dir} is not a backtest output: missing {', '.join(n + '/' for n in missing)} "
            "(run `quotaflow backtest --out` first)"
        )
    return {
        name: ds.dataset(in_dir / name, format="parquet", partitioning="hive")
        for name in (*REQUIRED, *OPTIONAL)
        if (in_dir / name).is_dir()
    }


def _columns(table: pa.Table, names: Sequence[str]) -> pa.Table:
    """Null tag values read as "" so group-bys and joins treat them as the values they stand for."""
    for name in names:
        if name in table.column_names and pa.types.is_string(table.schema.field(name).type):
            table = table.set_column(table.schema.get_field_index(name), name, pc.fill_null(table[name], ""))
    return table


def run_summary(in_dir: Path) -> dict[str, Any]:
    """The job's own counts (requests, quarantined rows, windows, ...) and engine, when it wrote them."""
    path = in_dir / RUN_SUMMARY
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {"engine": doc.get("engine"), **{k.replace("_", " "): v for k, v in sorted(doc.get("counts", {}).items())}}


def _read(dataset: ds.Dataset, columns: Sequence[str], filter: pc.Expression | None = None) -> pa.Table:
    present = [c for c in columns if c in dataset.schema.names]
    return _columns(dataset.to_table(columns=present, filter=filter), ENTITY_KEY)


def _np(column: pa.ChunkedArray | pa.Array, fill: float = np.nan) -> charts.FloatArray:
    return np.asarray(pc.fill_null(pc.cast(column, pa.float64()), fill).to_numpy(zero_copy_only=False))


def _utc(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# ---------------------------------------------------------------------------------------------- sections (numbers)


def throttle_summary(decisions: ds.Dataset) -> tuple[list[dict[str, Any]], dict[str, charts.IntArray]]:
    """Per quota type: throttled requests, their share and throttle-time percentiles; plus the raw throttle times."""
    total = decisions.count_rows()
    rows: list[dict[str, Any]] = []
    values: dict[str, charts.IntArray] = {}
    for quota_type in (*QUOTA_TYPES, "applied"):
        col = "throttle_ms" if quota_type == "applied" else f"throttle_ms_{quota_type}"
        if col not in decisions.schema.names:
            continue
        t = decisions.to_table(columns=[col], filter=pc.field(col) > 0)
        v = np.asarray(t[col].to_numpy(zero_copy_only=False), dtype=np.int64)
        if quota_type != "applied":
            values[quota_type] = v
        rows.append(
            {
                "quota type": quota_type,
                "requests": total,
                "throttled": int(v.size),
                "throttled %": 100.0 * v.size / total if total else 0.0,
                "throttle ms total": int(v.sum()),
                "p50 ms": float(np.percentile(v, 50)) if v.size else 0.0,
                "p99 ms": float(np.percentile(v, 99)) if v.size else 0.0,
                "max ms": int(v.max()) if v.size else 0,
            }
        )
    return rows, values


def broker_summary(windows: pa.Table) -> list[dict[str, Any]]:
    """Per (broker, quota type): traffic, how many quota-ids were active and how much throttling they got."""
    if windows.num_rows == 0:
        return []
    g = (
        windows.group_by(["broker", "quota_type"])
        .aggregate(
            [
                ("value_sum", "sum"),
                ("throttle_count", "sum"),
                ("throttle_ms_sum", "sum"),
                ("tag_user", "count"),
                ("rate", "max"),
            ]
        )
        .sort_by([("broker", "ascending"), ("quota_type", "ascending")])
    )
    return [
        {
            "broker": r["broker"],
            "quota type": r["quota_type"],
            "total": r["value_sum_sum"],
            "entity-windows": r["tag_user_count"],
            "max rate": r["rate_max"],
            "throttled": r["throttle_count_sum"],
            "throttle ms": r["throttle_ms_sum_sum"],
        }
        for r in g.to_pylist()
    ]


def top_entities(windows: pa.Table, n: int = TOP_ENTITIES, per_type: int = 2) -> list[dict[str, Any]]:
    """The quota-ids worth a chart: most throttle time first, then highest rate relative to their quota.

    Quota-ids seen in a single window (a probe, an admin call) make a chart with no line: they are left out
    when any other quota-id has a line. Up to
    ``per_type`` of each quota type come first so produce, fetch and request all get a panel; the rest of the
    ``n`` slots go to the next ranked regardless of type."""
    if windows.num_rows == 0:
        return []
    g = windows.group_by(list(ENTITY_KEY)).aggregate([
        ("throttle_ms_sum", "sum"), ("throttle_count", "sum"), ("rate", "max"), ("limit", "min"),
        ("window_start_ms", "count"),
    ])
    ranked = sorted(
        g.to_pylist(),
        key=lambda r: (
            r["window_start_ms_count"] < 2,
            -(r["throttle_ms_sum_sum"] or 0),
            -((r["rate_max"] or 0.0) / r["limit_min"] if r["limit_min"] else 0.0),
            -(r["rate_max"] or 0.0),
            tuple(r[k] for k in ENTITY_KEY),
        ),
    )
    if any(r["window_start_ms_count"] >= 2 for r in ranked):
        ranked = [r for r in ranked if r["window_start_ms_count"] >= 2]
    taken: dict[str, int] = {}
    first: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for r in ranked:
        qt = r["quota_type"]
        if taken.get(qt, 0) < per_type:
            taken[qt] = taken.get(qt, 0) + 1
            first.append(r)
        else:
            rest.append(r)
    rank = {id(r): i for i, r in enumerate(ranked)}
    return sorted((first + rest)[:n], key=lambda r: rank[id(r)])


def entity_label(key: dict[str, Any]) -> str:
    if is_prefix_tags(key["tag_user"]):  # a client-id-prefix bucket (docs/quota-model.md)
        return f"{key['quota_type']}  client-id-prefix={key['tag_client_id']}  @{key['broker']}"
    user = key["tag_user"] or "—"
    client = key["tag_client_id"] or "—"
    return f"{key['quota_type']}  user={user} client-id={client}  @{key['broker']}"


def entity_series(windows: pa.Table, keys: Sequence[dict[str, Any]], t0_ms: int) -> list[charts.EntitySeries]:
    out = []
    for key in keys:
        mask = None
        for k in ENTITY_KEY:
            m = pc.equal(windows[k], key[k])
            mask = m if mask is None else pc.and_(mask, m)
        w = windows.filter(mask).sort_by("window_start_ms")
        start = np.asarray(w["window_start_ms"].to_numpy(zero_copy_only=False), dtype=np.int64)
        out.append(
            charts.EntitySeries(
                title=entity_label(key),
                quota_type=str(key["quota_type"]),
                seconds=(start - t0_ms) / 1000.0,
                rate=_np(w["rate"], 0.0),
                limit=_np(w["limit"]),
                throttled=np.asarray(_np(w["throttle_count"], 0.0) > 0),
            )
        )
    return out


def connection_timeline(connections: pa.Table) -> tuple[charts.ConnectionTimeline, int, dict[str, Any]]:
    """Bucket connection outcomes into 1 s bins from the first connection; plus totals for the summary."""
    if connections.num_rows == 0:
        empty_f = np.zeros(0, dtype=np.float64)
        empty_i = np.zeros(0, dtype=np.int64)
        return charts.ConnectionTimeline(empty_f, empty_i, empty_i, empty_f, empty_f, empty_f), 0, {}
    ts = np.asarray(connections["ts_ms"].to_numpy(zero_copy_only=False), dtype=np.int64)
    t0 = int(ts.min())
    bucket = (ts - t0) // 1000
    size = int(bucket.max()) + 1
    throttled = np.asarray(pc.equal(connections["result"], "IP_THROTTLED").to_numpy(zero_copy_only=False), dtype=bool)
    delay = _np(connections["accept_delay_ms"], 0.0)
    ip_ms = _np(connections["ip_throttle_ms"], 0.0)
    count = np.bincount(bucket, minlength=size)
    n_throttled = np.bincount(bucket, weights=throttled, minlength=size).astype(np.int64)
    delay_sum = np.bincount(bucket, weights=delay, minlength=size)
    max_delay = np.zeros(size)
    np.maximum.at(max_delay, bucket, delay)
    max_ip = np.zeros(size)
    np.maximum.at(max_ip, bucket, ip_ms)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_delay = np.where(count > 0, delay_sum / np.maximum(count, 1), 0.0)
    tl = charts.ConnectionTimeline(
        seconds=np.arange(size, dtype=np.float64),
        accepted=(count - n_throttled).astype(np.int64),
        ip_throttled=n_throttled,
        mean_delay_ms=mean_delay,
        max_delay_ms=max_delay,
        max_ip_throttle_ms=max_ip,
    )
    totals = {
        "connections": int(ts.size),
        "accepted": int(ts.size - throttled.sum()),
        "IP throttled": int(throttled.sum()),
        "delayed (accept delay > 0)": int((delay > 0).sum()),
        "max accept delay ms": float(delay.max()),
        "max IP throttle ms": float(ip_ms.max()),
    }
    return tl, t0, totals


def entities_table(entities: ds.Dataset, n: int = TABLE_ROWS) -> list[dict[str, Any]]:
    t = _read(entities, [*ENTITY_KEY, "limit", "peak_rate", "p99_rate", "throttled_share", "recommended_quota"])
    rows: list[dict[str, Any]] = t.to_pylist()
    rows.sort(key=lambda r: (-(r.get("throttled_share") or 0.0), -(r.get("peak_rate") or 0.0)))
    return rows[:n]


def compare_table(compare: ds.Dataset, n: int = TABLE_ROWS) -> list[dict[str, Any]]:
    """The rows whose throttling changed most between the two configs (by |Δ throttle ms|, else |Δ count|)."""
    t = _columns(compare.to_table(), ENTITY_KEY)
    names = t.column_names
    deltas = [c for c in names if "delta" in c]
    order = next((c for c in deltas if "ms" in c), deltas[0] if deltas else None)
    rows: list[dict[str, Any]] = t.to_pylist()
    if order is not None:
        rows.sort(key=lambda r: -abs(r[order] or 0))
    return rows[:n]


# ---------------------------------------------------------------------------------------------- proposal
PROPOSAL_FILE = "proposal.json"  # a `quotaflow recommend --out` directory (pipeline.recommend's layout)
KEY_TYPES = {"producer_byte_rate": "produce", "consumer_byte_rate": "fetch", "request_percentage": "request"}
CHART_ENTITIES = 4
CHART_PANELS = 12


def _entity_name(r: dict[str, Any]) -> str:
    parts = [f"user={r['entity_user']}" if r.get("entity_user") is not None else "",
             f"client-id={r['entity_client_id']}" if r.get("entity_client_id") is not None else "",
             f"client-id-prefix={r['entity_client_id_prefix']}" if r.get("entity_client_id_prefix") is not None
             else ""]  # fmt: skip
    return ", ".join(p for p in parts if p)


def proposal_rows(in_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(usage rows per entity and key, outcome rows per entity with the biggest change first) of a recommend run."""
    usage = ds.dataset(in_dir / "usage", format="parquet").to_table().to_pylist()
    outcome = ds.dataset(in_dir / "outcome", format="parquet").to_table().to_pylist()
    outcome.sort(key=lambda r: (-abs(r["throttle_s_delta"] or 0.0), _entity_name(r)))
    return usage, outcome


def usage_charts(usage: Sequence[dict[str, Any]], outcome: Sequence[dict[str, Any]]) -> list[charts.UsageDistribution]:
    """The entities whose outcome changes most (then the busiest), every key they use, up to CHART_PANELS."""
    busiest = sorted(usage, key=lambda r: -(r["total"] or 0.0))
    order = [_entity_name(r) for r in outcome if r["throttle_s_delta"]] + [_entity_name(r) for r in busiest]
    chosen = list(dict.fromkeys(order))[:CHART_ENTITIES]
    out = []
    for name in chosen:
        for r in sorted((r for r in usage if _entity_name(r) == name and r["active_cells"]), key=lambda r: r["key"]):
            current = r["current_limit"]
            out.append(charts.UsageDistribution(
                title=f"{name}  {r['key']}", quota_type=KEY_TYPES.get(r["key"], r["key"]),
                quantiles=np.asarray(r["quantiles"], dtype=np.float64),
                current=float("nan") if current is None else float(current), proposed=float(r["recommended"]),
            ))  # fmt: skip
    return out[:CHART_PANELS]


def proposal_sections(in_dir: Path, chart: Callable[[str, bytes, str], str]) -> list[tuple[str, str]]:
    """The advisor's sections: outcome before/after per entity, usage distributions, the proposed values."""
    doc = json.loads((in_dir / PROPOSAL_FILE).read_text(encoding="utf-8"))
    usage, outcome = proposal_rows(in_dir)
    before = sum(r["throttle_s_before"] or 0.0 for r in outcome)
    after = sum(r["throttle_s_after"] or 0.0 for r in outcome)
    changes = [
        {"entity": _entity_name(r), "requests": r["requests"],
         "throttled s before": r["throttled_seconds_before"], "throttled s after": r["throttled_seconds_after"],
         "throttle time s before": r["throttle_s_before"], "throttle time s after": r["throttle_s_after"],
         "delayed bytes before": r["delayed_bytes_before"], "delayed bytes after": r["delayed_bytes_after"]}
        for r in outcome[:TABLE_ROWS]
    ]  # fmt: skip
    values = [
        {"entity": _entity_name(r), "key": r["key"], "current": r["current_limit"], "proposed": r["recommended"],
         "p50": r["p50"], "p99": r["p99"], "peak": r["peak"], "active cells": r["active_cells"], "cells": r["cells"]}
        for r in sorted(usage, key=lambda r: (_entity_name(r), r["key"]))[: TABLE_ROWS * 3]
    ]  # fmt: skip
    png = charts.usage_distributions(usage_charts(usage, outcome))
    return [
        (f"Proposal: {len(doc)} entities; throttle time {before:,.1f} s under the store's quotas, {after:,.1f} s "
         f"under the proposal (top {TABLE_ROWS} changes)", html_table(changes, "no entity")),
        ("Proposal: usage distribution vs current and proposed quota",
         chart("usage_distribution", png, "usage distribution per entity")),
        ("Proposal: values (current = the quota the entity's clients have now)", html_table(values, "no values")),
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------- HTML


UNLIMITED_COLUMNS = frozenset({"limit", "quota", "limit_a", "limit_b"})


def _cell(value: Any, column: str = "") -> str:
    if value is None:
        return '<td class="null">unlimited</td>' if column in UNLIMITED_COLUMNS else '<td class="null">—</td>'
    if isinstance(value, bool):
        return f"<td>{value}</td>"
    if isinstance(value, int):
        return f'<td class="num">{value:,}</td>'
    if isinstance(value, float):
        text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
        return f'<td class="num">{text}</td>'
    return f"<td>{html.escape(str(value)) or '&quot;&quot;'}</td>"


def html_table(rows: Sequence[dict[str, Any]], empty: str = "none") -> str:
    if not rows:
        return f'<p class="muted">{html.escape(empty)}</p>'
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(_cell(v, k) for k, v in r.items()) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1250px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left}th{background:#f4f4f4}
td.num{text-align:right;font-variant-numeric:tabular-nums}td.null,.muted{color:#888}
img{max-width:100%;border:1px solid #eee}
"""


def render_html(title: str, sections: Sequence[tuple[str, str]], meta: dict[str, Any]) -> str:
    meta_rows = "".join(f"<tr><th>{html.escape(k)}</th>{_cell(v)}</tr>" for k, v in meta.items())
    body = "".join(f"<h2>{html.escape(h)}</h2>\n{content}\n" for h, content in sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{CSS}</style></head><body>\n<h1>{html.escape(title)}</h1>\n<table>{meta_rows}</table>\n"
        f"{body}</body></html>\n"
    )


# ---------------------------------------------------------------------------------------------- driver


def build_report(in_dir: Path, out_dir: Path, progress: Progress | None = None) -> Report:
    """Read a backtest's output and write ``out_dir/report.html`` plus one PNG per chart."""
    step = progress or (lambda _msg: None)
    data = open_backtest(in_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs: list[Path] = []
    sections: list[tuple[str, str]] = []

    def chart(name: str, png: bytes, alt: str) -> str:
        path = out_dir / f"{name}.png"
        path.write_bytes(png)
        pngs.append(path)
        return _img(png, alt)

    step("reading windows")
    windows = _read(
        data["windows"],
        [*ENTITY_KEY, "window_start_ms", "value_sum", "rate", "limit", "throttle_count", "throttle_ms_sum"],
    )
    t0 = int(pc.min(windows["window_start_ms"]).as_py() or 0) if windows.num_rows else 0
    t1 = int(pc.max(windows["window_start_ms"]).as_py() or 0) if windows.num_rows else 0

    step("summarising throttle decisions")
    throttle_rows, throttle_values = throttle_summary(data["decisions"])
    brokers = broker_summary(windows)
    sections.append(("Summary by quota type", html_table(throttle_rows, "no decisions")))
    sections.append(("Traffic and throttling per broker", html_table(brokers, "no windows")))

    step("charting top entities")
    top = top_entities(windows)
    series = entity_series(windows, top, t0)
    sections.append(
        (
            "Top entities: rate vs quota",
            chart("rate_vs_quota", charts.rate_vs_quota(series, _utc(t0)), "rate vs quota per window")
            + html_table(
                [
                    {
                        **{k: r[k] for k in ENTITY_KEY},
                        "max rate": r["rate_max"],
                        "quota": r["limit_min"],
                        "throttled windows": r["throttle_count_sum"],
                        "throttle ms": r["throttle_ms_sum_sum"],
                    }
                    for r in top
                ]
            ),
        )
    )

    step("charting throttle times")
    sections.append(
        (
            "Throttle-time distribution",
            chart("throttle_distribution", charts.throttle_distribution(throttle_values), "throttle time histogram"),
        )
    )

    step("charting connections")
    conn_totals: dict[str, Any] = {}
    if "connections" in data:
        conns = _read(data["connections"], ["ts_ms", "broker", "result", "accept_delay_ms", "ip_throttle_ms"])
        tl, c0, conn_totals = connection_timeline(conns)
        sections.append(
            (
                "Connections: accept, delay, throttle",
                chart("connections", charts.connection_timeline(tl, _utc(c0)), "connection timeline")
                + html_table([conn_totals] if conn_totals else [], "no connection events"),
            )
        )
    else:
        sections.append(("Connections: accept, delay, throttle", '<p class="muted">no connections/ dataset</p>'))

    step("entity table")
    sections.append(
        (
            f"Entities (top {TABLE_ROWS} by share of time throttled; recommended quota = p99 × headroom)",
            html_table(entities_table(data["entities"]), "no entities"),
        )
    )
    compare_rows: list[dict[str, Any]] = []
    if "compare" in data:
        compare_rows = compare_table(data["compare"])
        totals = data["compare_summary"].to_table().to_pylist() if "compare_summary" in data else []
        sections.append(
            (
                f"Comparison of the two configs (a = --store, b = --compare; top {TABLE_ROWS} changes)",
                (html_table(totals) if totals else "") + html_table(compare_rows, "no differences"),
            )
        )

    if (in_dir / PROPOSAL_FILE).is_file():
        step("proposal")
        sections[:0] = proposal_sections(in_dir, chart)

    meta = {
        "backtest output": str(in_dir),
        "generated": _utc(int(dt.datetime.now(tz=dt.UTC).timestamp() * 1000)),
        "first window": _utc(t0) if windows.num_rows else None,
        "last window": _utc(t1) if windows.num_rows else None,
        "requests decided": throttle_rows[0]["requests"] if throttle_rows else 0,
        **run_summary(in_dir),
    }
    step("writing HTML")
    html_path = out_dir / "report.html"
    title = "quotaflow recommend report" if (in_dir / PROPOSAL_FILE).is_file() else "quotaflow backtest report"
    html_path.write_text(render_html(title, sections, meta), encoding="utf-8")
    summary = {
        "throttle": throttle_rows,
        "brokers": brokers,
        "top_entities": top,
        "connections": conn_totals,
        "compare_rows": len(compare_rows),
    }
    return Report(html_path=html_path, png_paths=pngs, summary=summary)
