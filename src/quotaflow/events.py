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

import io
import json
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from quotaflow.core.errors import QuotaflowError, map_errors

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

SHADOW_ID: Final = pa.field("shadow_id", pa.int64())
"""The shadow quota set a row was also decided under (``quotaflow shadow start``: its id in the store), null when
none was running."""

SHADOW_REQUEST_FIELDS: Final = (
    SHADOW_ID,
    pa.field("shadow_throttle_ms_produce", pa.int64()),
    pa.field("shadow_throttle_ms_fetch", pa.int64()),
    pa.field("shadow_throttle_ms_request", pa.int64()),
    pa.field("shadow_throttle_ms", pa.int64()),
)
"""Optional columns on request events: the same request decided under the shadow set (the enforced quotas with the
shadow's changes applied) by separate managers at the same clock reading, never enforced. Named as
:data:`REQUEST_DECISION_FIELDS` with ``shadow_`` in front; null when ``shadow_id`` is."""

SHADOW_CONNECTION_FIELDS: Final = (
    SHADOW_ID,
    pa.field("shadow_accept_delay_ms", pa.int64()),
    pa.field("shadow_ip_throttle_ms", pa.int64()),
    pa.field("shadow_result", pa.string()),  # ACCEPTED | IP_THROTTLED under the shadow set
)
"""Optional columns on connection events: the admission the shadow set would have made (never applied)."""

AUTHORIZATION_SCHEMA: Final = pa.schema(
    [
        pa.field("ts_ms", pa.int64(), nullable=False),
        pa.field("broker", pa.string(), nullable=False),
        pa.field("principal", pa.string(), nullable=False),
        pa.field("client_ip", pa.string(), nullable=False),
        pa.field("api_key", pa.int16(), nullable=False),
        pa.field("resource_type", pa.string(), nullable=False),  # Kafka's names: TOPIC, GROUP, CLUSTER, ...
        pa.field("resource_name", pa.string(), nullable=False),
        pa.field("operation", pa.string(), nullable=False),  # READ, WRITE, DESCRIBE, ...
        pa.field("allowed", pa.bool_(), nullable=False),
        pa.field("hidden_topic", pa.bool_(), nullable=False),  # one of quotaflow's own topics: refused always
        pa.field("seq", pa.int64(), nullable=False),
    ]
)
"""One row per authorization decision the gateway logs (every refusal; allowed ones when asked for)."""
AUTHORIZATIONS_DIR: Final = "authorizations"

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


def require_events_dir(events: Path) -> None:
    """``--events`` must name a directory: :class:`EventsInputError` saying which of the two it is not."""
    if not events.exists():
        raise EventsInputError(f"events directory {events} does not exist")
    if not events.is_dir():
        raise EventsInputError(f"events directory {events} is not a directory")


def check_events_dir(events: Path) -> dict[str, list[Path]]:
    """The files of each dataset present; raises :class:`EventsInputError` when there is nothing to read, or a
    ``.parquet`` file's footer cannot be read (before any job starts: one line, not a task's stack trace)."""
    require_events_dir(events)
    found = {kind: dataset_files(events / kind) for kind in (REQUESTS_DIR, CONNECTIONS_DIR)}
    if not any(found.values()):
        raise EventsInputError(
            f"no event files under {events}: expected Parquet or JSON-lines files in "
            f"{events / REQUESTS_DIR} and/or {events / CONNECTIONS_DIR}"
        )
    for path in (p for files in found.values() for p in files if p.suffix == ".parquet"):
        parquet_schema(path)
    return found


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Arrow's and the OS's errors while reading an events file, as the one line every events reader gives:
    :class:`EventsInputError` ``cannot read PATH: <cause>``."""
    with map_errors({pa.ArrowInvalid: EventsInputError, OSError: EventsInputError}, f"cannot read {path}: "):
        yield


def parquet_schema(path: Path) -> pa.Schema:
    """A Parquet file's schema, from its footer; a file that is not Parquet (or cannot be read) is an
    :class:`EventsInputError` ``cannot read PATH: ...``, the line every events reader gives."""
    with reading(path):
        return pq.read_schema(path)


def parquet_metadata(path: Path) -> pq.FileMetaData:
    """A Parquet file's footer metadata (row counts, statistics), with :func:`parquet_schema`'s error."""
    with reading(path):
        return pq.ParquetFile(path).metadata


READ_THREADS: Final = 4
"""Files of one dataset read at once (pyarrow also decodes each file's columns in parallel)."""
STRING_DICTIONARY: Final = pa.dictionary(pa.int32(), pa.string())


def _string_columns(kind: str) -> list[str]:
    return [f.name for f in schema_for(kind) if f.type == pa.string()]


INVALID_LINE: Final = "line"
"""Quarantine column holding the text of a JSON-lines line that is not a JSON object (its ``reason`` says why)."""


@dataclass(frozen=True, slots=True)
class EventsRead:
    """A dataset as read: the rows (schema columns conformed, ``seq`` assigned) and the JSON-lines lines that are
    not JSON objects (``line``, ``reason``), which have no columns to check and go to quarantine as they are."""

    table: pa.Table
    invalid: pa.Table


INVALID_SCHEMA: Final = pa.schema([pa.field(INVALID_LINE, pa.string()), pa.field(QUARANTINE_REASON, pa.string())])


def _read_json_lines(path: Path) -> tuple[pa.Table, list[tuple[str, str]]]:
    """A JSON-lines file. When pyarrow rejects it, lines that are not JSON objects are set aside (with their line
    number and parse error); a column whose values mix JSON types (``"ts_ms": "soon"`` among numbers) is read as
    text, so the schema cast names the column and value instead of failing on the whole file."""
    try:
        return pajson.read_json(path), []
    except pa.ArrowInvalid:
        pass
    good: list[bytes] = []
    rows: list[dict[str, object]] = []
    invalid: list[tuple[str, str]] = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
                if not isinstance(row, dict):
                    raise ValueError("not a JSON object")
            except ValueError as e:
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                invalid.append((text, f"invalid JSON at {path.name} line {number}: {e}"))
                continue
            rows.append(row)
            good.append(raw if raw.endswith(b"\n") else raw + b"\n")
    if not good:
        return pa.table({}), invalid
    try:
        return pajson.read_json(io.BytesIO(b"".join(good))), invalid
    except pa.ArrowInvalid:
        return _mixed_table(rows), invalid


def _mixed_table(rows: list[dict[str, object]]) -> pa.Table:
    """Rows whose columns may mix JSON types: such a column becomes text (JSON for non-strings)."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    columns = {}
    for name in names:
        values = [r.get(name) for r in rows]
        kinds = {type(v) for v in values if v is not None}
        try:
            if not (kinds <= {int, float} or len(kinds) == 1) or kinds & {dict, list}:
                raise pa.ArrowInvalid("mixed types")
            columns[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            columns[name] = pa.array([v if v is None or isinstance(v, str) else json.dumps(v) for v in values],
                                     pa.string())  # fmt: skip
    return pa.table(columns)


def _read_file(path: Path, kind: str, dictionary: bool,
               columns: Sequence[str] | None = None) -> tuple[pa.Table, list[tuple[str, str]]]:  # fmt: skip
    with reading(path):
        if path.suffix == ".parquet":
            names = set(parquet_schema(path).names)
            cols = None if columns is None else [c for c in columns if c in names]
            strings = [c for c in _string_columns(kind) if c in names] if dictionary else None
            return pq.read_table(path, columns=cols, read_dictionary=strings), []
        table, invalid = _read_json_lines(path)
        if columns is not None:
            table = table.select([c for c in columns if c in table.column_names])
        return table, invalid


def conform(table: pa.Table, kind: str, path: object = "", dictionary: bool = False,
            columns: Sequence[str] | None = None) -> pa.Table:  # fmt: skip
    """Cast the schema columns to their types (extra columns kept as they are, missing nullable ones added).

    ``seq`` may be missing; every other required column must be present. With ``dictionary`` the string columns
    are dictionary-encoded (low-cardinality names: integer codes for grouping, and cheap to carry and write).
    ``columns``: only these schema columns were read (and extra columns are not carried)."""
    schema = schema_for(kind)
    wanted = None if columns is None else set(columns)
    out: dict[str, pa.ChunkedArray] = {}
    for f in schema:
        if wanted is not None and f.name not in wanted:
            continue
        if f.name in table.column_names:
            out[f.name] = cast_column(table.column(f.name), f, kind, path, dictionary)
        elif f.nullable:
            out[f.name] = pa.chunked_array([pa.nulls(table.num_rows, f.type)])
        elif f.name != "seq":
            raise EventsInputError(f"{kind} {path}: required column {f.name!r} is missing")
    if wanted is None:
        for name in table.column_names:
            if name not in out:
                out[name] = table.column(name)
    return pa.table(out) if out else pa.table({"_": pa.nulls(table.num_rows)}).drop_columns(["_"])


def cast_column(col: pa.ChunkedArray, f: pa.Field, kind: str, path: object = "",
                dictionary: bool = False) -> pa.ChunkedArray:  # fmt: skip
    """``col`` as the schema type of ``f``; values that do not fit (``ts_ms`` = "soon") are a clear error."""
    want = STRING_DICTIONARY if dictionary and f.type == pa.string() else f.type
    try:
        if col.type == want:
            return col
        if want == STRING_DICTIONARY:
            return pc.dictionary_encode(pc.cast(col, pa.string(), safe=True))
        return pc.cast(col, want, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise EventsInputError(f"{kind} {path}: column {f.name} cannot be read as {f.type}: {e}") from e


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


def load_events(events: Path, kind: str, *, dictionary: bool = False,
                columns: Sequence[str] | None = None) -> EventsRead | None:  # fmt: skip
    """Read ``events/<kind>/`` (Parquet and/or JSON lines): schema columns conformed, seq assigned, lines that are
    not JSON set aside. None when the dataset is absent. ``dictionary``: string columns dictionary-encoded;
    ``columns``: read only these schema columns (``seq`` is always read or assigned)."""
    files = dataset_files(events / kind)
    if not files:
        return None
    want = None if columns is None else list(dict.fromkeys([*columns, "seq"]))
    tables, invalid = [], []
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:  # overlaps the files' I/O and decoding
        read = list(pool.map(lambda p: _read_file(p, kind, dictionary, want), files))
    for p, (table, bad) in zip(files, read, strict=True):
        invalid += bad
        if table.num_columns or not bad:  # a file of invalid lines only has no rows
            tables.append(conform(table, kind, p, dictionary, want))
    table = (pa.concat_tables(assign_seq(tables), promote_options="permissive") if tables
             else conform(pa.table({f.name: pa.array([], f.type) for f in schema_for(kind)}), kind, "", dictionary,
                          want))  # fmt: skip
    lines, reasons = [t for t, _ in invalid], [r for _, r in invalid]
    rejected = pa.table([pa.array(lines, pa.string()), pa.array(reasons, pa.string())], schema=INVALID_SCHEMA)
    return EventsRead(table, rejected)


def read_dataset(events: Path, kind: str, *, dictionary: bool = False,
                 columns: Sequence[str] | None = None) -> pa.Table | None:  # fmt: skip
    """:func:`load_events`, strict: a line that is not JSON is an :class:`EventsInputError`."""
    read = load_events(events, kind, dictionary=dictionary, columns=columns)
    if read is None:
        return None
    if read.invalid.num_rows:
        raise EventsInputError(f"{kind}: {read.invalid[QUARANTINE_REASON][0].as_py()}")
    return read.table


def clean_by_statistics(files: Sequence[Path], kind: str) -> bool:
    """Whether the Parquet footers prove no row breaks a quarantine rule (null counts 0, minimums ≥ 0), so the
    rows need no per-row check and the rule columns need not be read. False for JSON lines or missing statistics."""
    if not files or any(p.suffix != ".parquet" for p in files):
        return False
    for p in files:
        meta = parquet_metadata(p)
        index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
        if "seq" not in index:
            return False
        for rule in rules_for(kind):
            if rule.column not in index:
                return False
            for rg in range(meta.num_row_groups):
                st = meta.row_group(rg).column(index[rule.column]).statistics
                if st is None:
                    return False
                if rule.kind == "null" and not (st.has_null_count and st.null_count == 0):
                    return False
                if rule.kind == "negative" and meta.row_group(rg).num_rows and not (
                    st.has_min_max and isinstance(st.min, int) and st.min >= 0
                ):
                    return False
    return True


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
