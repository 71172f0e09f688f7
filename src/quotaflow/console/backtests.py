"""The Backtests page's data: ``quotaflow backtest`` / ``replay`` outputs found under a directory, read with pyarrow.

A backtest output is a directory with ``decisions/``, ``windows/`` and ``entities/`` (docs/backtest.md); ``compare/``
and ``compare_summary/`` are there when it ran with ``--compare OTHER_STORE``. The report ``quotaflow report``
rendered for it (``report.html`` and its PNG charts, docs/report.md) is shown when it sits next to the output
(``OUT/report`` or ``OUT-report``, else ``OUT/../report``). Only the columns a view needs are read, never
``decisions/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from quotaflow.core.errors import CommandError

REQUIRED: Final = ("decisions", "windows", "entities")
SUMMARY_FILE: Final = "_SUMMARY.json"
MAX_DEPTH: Final = 4
TABLE_ROWS: Final = 25
ENTITY_KEY: Final = ("broker", "quota_type", "tag_user", "tag_client_id")


@dataclass(frozen=True, slots=True)
class Backtest:
    id: str  # path relative to the root, "/"-separated
    path: Path

    def has(self, name: str) -> bool:
        return (self.path / name).is_dir()


def is_backtest(path: Path) -> bool:
    return all((path / name).is_dir() for name in REQUIRED)


def discover(root: Path) -> list[Backtest]:
    """Every backtest output under ``root`` (``root`` itself included), up to four levels down, sorted by id."""
    found: list[Backtest] = []
    if not root.is_dir():
        return found

    def walk(path: Path, depth: int) -> None:
        if is_backtest(path):
            rel = path.relative_to(root).as_posix()
            found.append(Backtest("." if rel == "." else rel, path))
            return
        if depth >= MAX_DEPTH:
            return
        for child in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
            walk(child, depth + 1)

    walk(root, 0)
    return found


def find(root: Path, backtest_id: str) -> Backtest:
    """The backtest with this id, only among those discovered (no path can escape ``root``)."""
    for bt in discover(root):
        if bt.id == backtest_id:
            return bt
    raise CommandError(f"no backtest output {backtest_id!r} under {root}")


def _dataset(bt: Backtest, name: str) -> ds.Dataset:
    return ds.dataset(bt.path / name, format="parquet", partitioning="hive")


def _read(bt: Backtest, name: str, columns: list[str], flt: pc.Expression | None = None) -> pa.Table:
    data = _dataset(bt, name)
    return data.to_table(columns=[c for c in columns if c in data.schema.names], filter=flt)


def run_summary(bt: Backtest) -> dict[str, Any]:
    """What the job wrote in ``_SUMMARY.json`` (engine, counts, timings), or {} when it wrote none."""
    path = bt.path / SUMMARY_FILE
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def by_quota_type(bt: Backtest) -> list[dict[str, Any]]:
    """Per quota type over ``windows/``: quota-ids, entity-windows, throttled windows, throttle ms, max rate."""
    t = _read(bt, "windows", ["quota_type", "tag_user", "tag_client_id", "rate", "throttle_count", "throttle_ms_sum"])
    if t.num_rows == 0:
        return []
    g = t.group_by(["quota_type"]).aggregate(
        [("rate", "count"), ("rate", "max"), ("throttle_count", "sum"), ("throttle_ms_sum", "sum")]
    )
    return [
        {
            "quota type": r["quota_type"],
            "entity-windows": r["rate_count"],
            "max rate": r["rate_max"],
            "throttled requests": r["throttle_count_sum"],
            "throttle ms": r["throttle_ms_sum_sum"],
        }
        for r in g.sort_by("quota_type").to_pylist()
    ]


def time_span(bt: Backtest) -> tuple[int, int] | None:
    t = _read(bt, "windows", ["window_start_ms"])
    if t.num_rows == 0:
        return None
    mm = pc.min_max(t["window_start_ms"]).as_py()
    return int(mm["min"]), int(mm["max"])


def entities(bt: Backtest, n: int = TABLE_ROWS) -> list[dict[str, Any]]:
    """The quota-ids most throttled (share of windows), then highest peak: limit, peak, p99, recommended quota."""
    cols = [*ENTITY_KEY, "limit", "peak_rate", "p99_rate", "throttled_share", "recommended_quota", "windows"]
    rows: list[dict[str, Any]] = _read(bt, "entities", cols).to_pylist()
    rows.sort(key=lambda r: (-(r.get("throttled_share") or 0.0), -(r.get("peak_rate") or 0.0)))
    return rows[:n]


def _tag_is(column: str, value: str) -> pc.Expression:
    """A tag equal to ``value``; the empty tag is stored as "" or null (both mean "not part of the quota-id")."""
    equal = pc.field(column) == value
    return (equal | pc.field(column).is_null()) if value == "" else equal


def entity_windows(bt: Backtest, broker: str, quota_type: str, user: str, client_id: str) -> dict[str, list[Any]]:
    """One quota-id's windows as chart columns: start (s), rate, limit (null = unlimited), throttled requests."""
    flt = (
        (pc.field("quota_type") == quota_type)
        & (pc.field("broker") == broker)
        & _tag_is("tag_user", user)
        & _tag_is("tag_client_id", client_id)
    )
    t = _read(bt, "windows", ["window_start_ms", "rate", "limit", "throttle_count"], flt).sort_by("window_start_ms")
    return {
        "t": [ms / 1000.0 for ms in t["window_start_ms"].to_pylist()],
        "rate": t["rate"].to_pylist(),
        "limit": t["limit"].to_pylist(),
        "throttled": t["throttle_count"].to_pylist(),
    }


def comparison(bt: Backtest, n: int = TABLE_ROWS) -> dict[str, Any] | None:
    """``--compare``: totals of both configs and the quota-ids whose throttling changed most (a = store, b = other)."""
    if not bt.has("compare"):
        return None
    totals = _dataset(bt, "compare_summary").to_table().to_pylist() if bt.has("compare_summary") else []
    rows: list[dict[str, Any]] = _dataset(bt, "compare").to_table().to_pylist()
    rows.sort(key=lambda r: (-abs(r.get("throttle_ms_delta") or 0), -abs(r.get("throttle_count_delta") or 0)))
    return {"totals": totals[0] if totals else None, "rows": rows[:n], "changed_shown": len(rows[:n])}


def report_dir(bt: Backtest) -> Path | None:
    """The rendered report for this output, when one sits next to it: its own (``OUT/report``, ``OUT-report``)
    before a ``report`` beside it (``OUT/../report``), which may be a sibling output's (the demo writes
    ``pipeline/report`` for its backtest beside ``pipeline/advisor`` and ``pipeline/advisor-report``)."""
    for candidate in (bt.path / "report", bt.path.with_name(bt.path.name + "-report"), bt.path.parent / "report"):
        if (candidate / "report.html").is_file():
            return candidate
    return None


def report_charts(bt: Backtest) -> list[str]:
    """The report's PNG chart names (served by the console from the report directory)."""
    rdir = report_dir(bt)
    return [] if rdir is None else sorted(p.name for p in rdir.glob("*.png"))


def listings(root: Path | None) -> list[dict[str, Any]]:
    """The Backtests page's lines (``/api/backtests``): every output under ``root``, none without one."""
    return [] if root is None else [listing(bt) for bt in discover(root)]


def listing(bt: Backtest) -> dict[str, Any]:
    """One line of the Backtests page (``/api/backtests``)."""
    return {
        "id": bt.id,
        "path": str(bt.path),
        "summary": run_summary(bt),
        "compared": bt.has("compare"),
        "report": report_dir(bt) is not None,
    }


def describe(bt: Backtest) -> dict[str, Any]:
    """Everything the backtest page shows, as one JSON document (``/api/backtests/{id}``)."""
    span = time_span(bt)
    rdir = report_dir(bt)
    return {
        "id": bt.id,
        "path": str(bt.path),
        "summary": run_summary(bt),
        "span_ms": None if span is None else {"first": span[0], "last": span[1]},
        "by_quota_type": by_quota_type(bt),
        "entities": entities(bt),
        "comparison": comparison(bt),
        "report": None if rdir is None else {"dir": str(rdir), "charts": report_charts(bt)},
    }
