"""Mode ``client`` (args ``kind samples windowSec monotonic|refcount``): one ClientQuotaManager driven row by row.

After every record-type row the quota metric is read (as the reference driver does), so metric reads happen
exactly where the vectors put them.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Final

from quotaflow.conformance.compare import format_number
from quotaflow.core.entities import DEFAULT, Part
from quotaflow.engine.client_quota import ClientQuotaManager, QuotaTypesTracking, nanos_to_percent
from quotaflow.engine.quota_type import QuotaType

KINDS: Final = {
    "produce": QuotaType.PRODUCE,
    "fetch": QuotaType.FETCH,
    "request": QuotaType.REQUEST,
    "controller_mutation": QuotaType.CONTROLLER_MUTATION,
}
OUTPUT_COLUMNS: Final = (
    "quota_limit",
    "tag_user",
    "tag_client_id",
    "metric_value",
    "window_ms",
    "throttle_ms",
    "quota_types_enabled",
)


def entity_part(text: str) -> Part:
    """``""`` = absent, ``<default>`` = the default entity, anything else a raw name."""
    if text == "":
        return None
    return DEFAULT if text == "<default>" else text


def tracking(arg: str) -> QuotaTypesTracking:
    if arg == "monotonic":
        return "monotonic"
    if arg == "refcount":
        return "refcount"
    raise ValueError(f"unknown quota-types tracking {arg!r}")


def apply_op(m: ClientQuotaManager, op: str, user: str, client: str, value: str, ts: int) -> int:
    """One record-type op; returns the throttle."""
    if op == "record":
        return m.record_and_get_throttle_ms(user, client, float(value), ts)
    if op == "record_nanos":
        return m.record_and_get_throttle_ms(user, client, nanos_to_percent(int(value)), ts)
    if op == "record_nothrottle":
        m.record_no_throttle(user, client, float(value), ts)
        return 0
    if op == "record_nothrottle_nanos":
        m.record_no_throttle(user, client, nanos_to_percent(int(value)), ts)
        return 0
    if op == "record_fetch":
        throttle = m.record_and_get_throttle_ms(user, client, float(value), ts)
        if throttle > 0:
            m.unrecord(user, client, float(value), ts)
        return throttle
    if op == "unrecord":
        m.unrecord(user, client, float(value), ts)
        return 0
    if op == "measure":
        return 0
    raise ValueError(f"unknown client op {op!r}")


def run(name: str, args: list[str], input_path: Path) -> tuple[list[dict[str, str]], dict[str, str] | None]:
    kind, samples, window_sec, mode = args
    m = ClientQuotaManager(KINDS[kind], samples=int(samples), window_seconds=int(window_sec),
                           quota_types_tracking=tracking(mode))
    out: list[dict[str, str]] = []
    with input_path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            ts, op, user, client, value = (int(row["timestamp_ms"]), row["op"], row["user"], row["client_id"],
                                           row["value"])
            rendered = dict(row)
            for col in OUTPUT_COLUMNS:
                rendered[col] = ""
            if op == "set_quota":
                m.update_quota(entity_part(user), entity_part(client), None if value == "" else float(value))
            else:
                throttle = apply_op(m, op, user, client, value, ts)
                qid = m.quota_id(user, client)
                limit = m.configured_limit(qid)
                metric = m.metric_value(user, client, ts)
                window = m.metric_window_ms(user, client, ts)
                rendered.update(
                    quota_limit="unlimited" if limit is None else format_number(limit),
                    tag_user=qid.user,
                    tag_client_id=qid.client_id,
                    metric_value="" if metric is None else format_number(metric),
                    window_ms="" if window is None else str(window),
                    throttle_ms=str(throttle),
                )
            rendered["quota_types_enabled"] = str(m.quota_types_enabled)
            out.append(rendered)
    return out, None
