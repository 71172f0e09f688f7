"""The usage-event schema shared by the gateway's event log, the backtest/replay jobs and the streaming job.

An events directory holds ``requests/`` and ``connections/`` (either may be absent), each a Parquet dataset (any
file layout below it) or JSON-lines files (``*.jsonl`` / ``*.json``). Columns beyond the schema are allowed and
carried through untouched. See docs/events.md.

Ordering rule: every consumer orders events of one broker by ``(ts_ms, seq)``. ``seq`` is the arrival order at that
broker and breaks ties between equal timestamps. When an input has no ``seq`` column it is assigned here from file
and row order: files sorted by their path relative to the dataset directory, rows in file order, numbered from 0
across all files of that dataset. Every run over the same files therefore orders events the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from quotaflow.core.errors import QuotaflowError

# Re-exported for readers of events (one definition, in the engine). Exemption from the request quota is the
# engine's ``is_request_quota_exempt``: exempt-throttle APIs, follower fetches and acks=0 produce; cluster-action
# APIs are exempt only on error responses, which events do not record.
from quotaflow.engine.exempt import CLUSTER_ACTION_API_KEYS as CLUSTER_ACTION_API_KEYS
from quotaflow.engine.exempt import EXEMPT_THROTTLE_API_KEYS as EXEMPT_THROTTLE_API_KEYS

REQUEST_SCHEMA: Final = pa.schema(
    [
        pa.field("ts_ms", pa.int64(), nullable=False),
        pa.field("broker", pa.string(), nullable=False),
        pa.field("listener", pa.string(), nullable=False),
        pa.field("user", pa.string(), nullable=False),
        pa.field("client_id", pa.string(), nullable=False),
        pa.field("client_ip", pa.string(), nullable=False),
        pa.field("api_key", pa.int16(), nullable=False),
        pa.field("api_version", pa.int16(), nullable=False),
        pa.field("request_bytes", pa.int64(), nullable=False),
        pa.field("response_bytes", pa.int64(), nullable=False),
        pa.field("io_thread_ns", pa.int64(), nullable=False),
        pa.field("network_thread_ns", pa.int64(), nullable=False),
        pa.field("acks", pa.int8(), nullable=True),  # produce only, else null
        pa.field("is_follower", pa.bool_(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
    ]
)
"""One row per request the broker (or gateway) handled."""

CONNECTION_SCHEMA: Final = pa.schema(
    [
        pa.field("ts_ms", pa.int64(), nullable=False),
        pa.field("broker", pa.string(), nullable=False),
        pa.field("listener", pa.string(), nullable=False),
        pa.field("client_ip", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
    ]
)
"""One row per connection attempt (TCP accept) at a broker listener."""

REQUEST_DECISION_FIELDS: Final = (
    pa.field("throttle_ms_produce", pa.int64()),
    pa.field("throttle_ms_fetch", pa.int64()),
    pa.field("throttle_ms_request", pa.int64()),
    pa.field("throttle_ms", pa.int64()),
)
"""Optional decision columns on request events (the gateway's own, or the backtest's). ``throttle_ms`` is applied."""

CONNECTION_DECISION_FIELDS: Final = (
    pa.field("accept_delay_ms", pa.int64()),
    pa.field("ip_throttle_ms", pa.int64()),
    pa.field("result", pa.string()),  # ACCEPTED | IP_THROTTLED
)
"""Optional decision columns on connection events."""

RESULT_ACCEPTED: Final = "ACCEPTED"
RESULT_IP_THROTTLED: Final = "IP_THROTTLED"

REQUESTS_DIR: Final = "requests"
CONNECTIONS_DIR: Final = "connections"
QUARANTINE_REASON: Final = "reason"

# Kafka API keys the pipeline cares about (ApiKeys.java ids).
API_PRODUCE: Final = 0
API_FETCH: Final = 1
class EventsInputError(QuotaflowError):
    """The events input is missing or unreadable (no requests/ nor connections/, bad files, missing columns)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One validity rule: rows where ``column`` is null (kind "null") or negative (kind "negative") are malformed."""

    column: str
    kind: str  # "null" | "negative"

    @property
    def reason(self) -> str:
        return f"{self.column} is null" if self.kind == "null" else f"{self.column} is negative"


def _rules(schema: pa.Schema, non_negative: Sequence[str]) -> tuple[Rule, ...]:
    nulls = [Rule(f.name, "null") for f in schema if not f.nullable]
    return (*nulls, *(Rule(c, "negative") for c in non_negative))


REQUEST_RULES: Final = _rules(
    REQUEST_SCHEMA,
    ("ts_ms", "request_bytes", "response_bytes", "io_thread_ns", "network_thread_ns", "seq"),
)
"""Checked in order; a row is quarantined with the first rule it breaks. Spark translates the same rules."""
CONNECTION_RULES: Final = _rules(CONNECTION_SCHEMA, ("ts_ms", "seq"))


def rules_for(kind: str) -> tuple[Rule, ...]:
    return REQUEST_RULES if kind == REQUESTS_DIR else CONNECTION_RULES


def schema_for(kind: str) -> pa.Schema:
    return REQUEST_SCHEMA if kind == REQUESTS_DIR else CONNECTION_SCHEMA


def dataset_files(root: Path) -> list[Path]:
    """The data files of one dataset directory in the documented order (sorted relative path)."""
    if not root.is_dir():
        return []
    files = [
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix in (".parquet", ".jsonl", ".json")
        and not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def check_events_dir(events: Path) -> dict[str, list[Path]]:
    """The files of each dataset present; raises :class:`EventsInputError` when there is nothing to read."""
    if not events.is_dir():
        raise EventsInputError(f"events directory {events} does not exist")
    found = {kind: dataset_files(events / kind) for kind in (REQUESTS_DIR, CONNECTIONS_DIR)}
    if not any(found.values()):
        raise EventsInputError(
            f"no event files under {events}: expected Parquet or JSON-lines files in "
            f"{events / REQUESTS_DIR} and/or {events / CONNECTIONS_DIR}"
        )
    return found


STRING_DICTIONARY: Final = pa.dictionary(pa.int32(), pa.string())


def _string_columns(kind: str) -> list[str]:
    return [f.name for f in schema_for(kind) if f.type == pa.string()]


def _read_file(path: Path, kind: str, dictionary: bool) -> pa.Table:
    try:
        if path.suffix == ".parquet":
            if not dictionary:
                return pq.read_table(path)
            names = set(pq.read_schema(path).names)
            return pq.read_table(path, read_dictionary=[c for c in _string_columns(kind) if c in names])
        return pajson.read_json(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise EventsInputError(f"cannot read {path}: {e}") from e


def conform(table: pa.Table, kind: str, path: object = "", dictionary: bool = False) -> pa.Table:
    """Cast the schema columns to their types (extra columns kept as they are, missing nullable ones added).

    ``seq`` may be missing; every other required column must be present. With ``dictionary`` the string columns
    are dictionary-encoded (low-cardinality names: integer codes for grouping, and cheap to carry and write)."""
    schema = schema_for(kind)
    columns: dict[str, pa.ChunkedArray] = {}
    for f in schema:
        if f.name in table.column_names:
            col = table.column(f.name)
            want = STRING_DICTIONARY if dictionary and f.type == pa.string() else f.type
            try:
                if col.type == want:
                    columns[f.name] = col
                elif want == STRING_DICTIONARY:
                    columns[f.name] = pc.dictionary_encode(pc.cast(col, pa.string(), safe=True))
                else:
                    columns[f.name] = pc.cast(col, want, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise EventsInputError(f"{kind} {path}: column {f.name} cannot be read as {f.type}: {e}") from e
        elif f.nullable:
            columns[f.name] = pa.chunked_array([pa.nulls(table.num_rows, f.type)])
        elif f.name != "seq":
            raise EventsInputError(f"{kind} {path}: required column {f.name!r} is missing")
    for name in table.column_names:
        if name not in columns:
            columns[name] = table.column(name)
    return pa.table(columns)


def assign_seq(tables: Sequence[pa.Table]) -> list[pa.Table]:
    """Give every table without ``seq`` the documented file-and-row-order sequence numbers."""
    out: list[pa.Table] = []
    offset = 0
    for t in tables:
        if "seq" not in t.column_names:
            t = t.append_column("seq", pa.array(range(offset, offset + t.num_rows), pa.int64()))
        offset += t.num_rows
        out.append(t)
    return out


def read_dataset(events: Path, kind: str, *, dictionary: bool = False) -> pa.Table | None:
    """Read ``events/<kind>/`` (Parquet and/or JSON lines) into one table, schema columns conformed, seq assigned.

    Returns None when the dataset is absent. ``dictionary``: string columns come dictionary-encoded."""
    files = dataset_files(events / kind)
    if not files:
        return None
    tables = [conform(_read_file(p, kind, dictionary), kind, p, dictionary) for p in files]
    tables = assign_seq(tables)
    return pa.concat_tables(tables, promote_options="permissive")


def malformed_mask(table: pa.Table, kind: str) -> tuple[pa.Array, pa.Array]:
    """(bad: bool mask, reason: string array with the first broken rule per row, null for good rows)."""
    reason: pa.Array = pa.nulls(table.num_rows, pa.string())
    for rule in reversed(rules_for(kind)):  # reversed so the first rule in order wins
        col = table.column(rule.column)
        hit = pc.is_null(col) if rule.kind == "null" else pc.fill_null(pc.less(col, 0), False)
        reason = pc.if_else(hit, pa.scalar(rule.reason), reason)
    bad = pc.is_valid(reason)
    return bad, reason


def _may_break(table: pa.Table, rule: Rule) -> bool:
    """Whether any row can break ``rule``, from null counts and a min (no per-row work)."""
    col = table.column(rule.column)
    if rule.kind == "null":
        return bool(col.null_count > 0)
    low = pc.min(col).as_py()
    return bool(low is not None and low < 0)


def split_malformed(table: pa.Table, kind: str) -> tuple[pa.Table, pa.Table]:
    """(good rows, malformed rows with a ``reason`` column). Nothing is dropped."""
    if not any(_may_break(table, rule) for rule in rules_for(kind)):
        return table, table.slice(0, 0).append_column(QUARANTINE_REASON, pa.array([], pa.string()))
    bad, reason = malformed_mask(table, kind)
    good = table.filter(pc.invert(bad))
    quarantined = table.filter(bad).append_column(QUARANTINE_REASON, pc.filter(reason, bad))
    return good, quarantined
