"""Cluster-wide metering with Structured Streaming: per-entity usage per window, summed over every broker and gateway.

Kafka enforces quotas per broker; an operator who wants a *cluster-wide* quota needs the usage summed across the
cluster first. This job tails the gateways' event-log directory (Spark's file source over ``EVENTS/requests``; the
Kafka source jar is not available offline), groups requests by ``(user, client_id)`` and event-time window, and
writes one row per closed window:

* ``produce_bytes``: request bytes of produce requests (api_key 0): what ``producer_byte_rate`` meters;
* ``fetch_bytes``: response bytes of non-follower fetches (api_key 1): what ``consumer_byte_rate`` meters;
* ``request_thread_ns``: IO + network thread time of requests the request quota meters (KIP-124: not follower
  fetches, not acks=0 produce, not cluster actions); the ``request_percentage`` rate is ``ns × 1e-7 / window s``;
* ``throttled_requests`` / ``throttle_ms``: what the gateways applied, when their log carries ``throttle_ms``.

Sums are integers, so the streaming result equals a batch computation bit for bit. The watermark closes windows; the
append-mode file sink with its checkpoint makes the output exactly-once across crashes. Malformed rows (the
``quotaflow.events`` rules for the columns used here) go to a quarantine sink, never silently dropped.

After every micro-batch the driver publishes the latest closed window per entity to ``OUT/cluster_rates.json``
(atomically replaced), read from the sink's committed output only; gateways turn it into local shares
(docs/cluster-quotas.md).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import StructType

from quotaflow.core.errors import CommandError
from quotaflow.engine.client_quota import NANOS_TO_PERCENT
from quotaflow.events import (
    API_FETCH,
    API_PRODUCE,
    EXEMPT_THROTTLE_API_KEYS,
    QUARANTINE_REASON,
    REQUEST_DECISION_FIELDS,
    REQUEST_RULES,
    REQUEST_SCHEMA,
    REQUESTS_DIR,
    EventsInputError,
    require_events_dir,
)

USAGE_DIR: Final = "usage"
QUARANTINE_DIR: Final = "quarantine"
RATES_FILE: Final = "cluster_rates.json"
PUBLISHED_MODE: Final = 0o644

# The columns the metering reads; only their validity rules apply here (seq orders nothing in a sum).
USED_COLUMNS: Final = frozenset(
    {
        "ts_ms",
        "user",
        "client_id",
        "api_key",
        "acks",
        "is_follower",
        "request_bytes",
        "response_bytes",
        "io_thread_ns",
        "network_thread_ns",
    }
)
RULES: Final = tuple(r for r in REQUEST_RULES if r.column in USED_COLUMNS)
# quota type -> (column summed per window, how that sum becomes a per-second rate)
QUOTA_COLUMNS: Final = {"produce": "produce_bytes", "fetch": "fetch_bytes", "request": "request_thread_ns"}

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h)?\s*$")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``1s``, ``2m``, ``1h`` (a bare number is seconds) → milliseconds."""
    m = _DURATION.match(text)
    if not m or int(m.group(1)) <= 0:
        raise CommandError(f"invalid duration {text!r}: use e.g. 500ms, 1s, 10s, 2m")
    return int(m.group(1)) * _UNIT_MS[m.group(2) or "s"]


def request_schema() -> StructType:
    """The Spark schema of request events from the Arrow schema in ``quotaflow.events``, with the optional decision
    columns a gateway's event log carries (null when a file has none)."""
    return from_arrow_schema(pa.schema([*REQUEST_SCHEMA, *REQUEST_DECISION_FIELDS]))


# ---------------------------------------------------------------------------------------------- the computation


def malformed_reason() -> Column:
    """The first broken rule's reason (``quotaflow.events`` order), null for a good row."""
    reason: Column = F.lit(None).cast("string")
    for rule in reversed(RULES):
        col = F.col(rule.column)
        hit = col.isNull() if rule.kind == "null" else col < 0
        reason = F.when(hit, F.lit(rule.reason)).otherwise(reason)
    return reason


def metered(events: DataFrame) -> DataFrame:
    """Good request events reduced to what each quota type meters, with an event-time column."""
    api = F.col("api_key")
    follower = F.col("is_follower")
    exempt = follower | api.isin(*sorted(EXEMPT_THROTTLE_API_KEYS)) | ((api == API_PRODUCE) & (F.col("acks") == 0))
    applied = F.coalesce(F.col("throttle_ms"), F.lit(0)) if "throttle_ms" in events.columns else F.lit(0)
    return events.select(
        F.timestamp_millis(F.col("ts_ms")).alias("event_time"),
        F.col("user"),
        F.col("client_id"),
        F.when(api == API_PRODUCE, F.col("request_bytes")).otherwise(F.lit(0)).alias("produce_bytes"),
        F.when((api == API_FETCH) & ~follower, F.col("response_bytes")).otherwise(F.lit(0)).alias("fetch_bytes"),
        F.when(~exempt, F.col("io_thread_ns") + F.col("network_thread_ns"))
        .otherwise(F.lit(0))
        .alias("request_thread_ns"),
        applied.alias("throttle_ms"),
    )


def usage(events: DataFrame, window_ms: int, watermark_ms: int | None = None) -> DataFrame:
    """Per ``(user, client_id, window)``: requests, metered sums and per-second rates, cluster-wide.

    The same function serves the stream (with a watermark) and a batch check over the same files."""
    m = metered(events)
    if watermark_ms is not None:
        m = m.withWatermark("event_time", f"{watermark_ms} milliseconds")
    seconds = window_ms / 1000.0
    g = m.groupBy(F.window("event_time", f"{window_ms} milliseconds").alias("w"), "user", "client_id").agg(
        F.count(F.lit(1)).alias("requests"),
        F.sum("produce_bytes").alias("produce_bytes"),
        F.sum("fetch_bytes").alias("fetch_bytes"),
        F.sum("request_thread_ns").alias("request_thread_ns"),
        F.sum((F.col("throttle_ms") > 0).cast("long")).alias("throttled_requests"),
        F.sum("throttle_ms").alias("throttle_ms"),
    )
    return g.select(
        F.unix_millis(F.col("w.start")).alias("window_start_ms"),
        F.unix_millis(F.col("w.end")).alias("window_end_ms"),
        "user",
        "client_id",
        "requests",
        "produce_bytes",
        "fetch_bytes",
        "request_thread_ns",
        "throttled_requests",
        "throttle_ms",
        (F.col("produce_bytes") / F.lit(seconds)).alias("produce_rate"),
        (F.col("fetch_bytes") / F.lit(seconds)).alias("fetch_rate"),
        (F.col("request_thread_ns") * F.lit(NANOS_TO_PERCENT) / F.lit(seconds)).alias("request_rate"),
    )


# ---------------------------------------------------------------------------------------------- the queries


@dataclass(frozen=True, slots=True)
class StreamConfig:
    events: Path
    checkpoint: Path
    out: Path
    window_ms: int = 1000
    watermark_ms: int = 10_000
    trigger_seconds: float = 5.0
    available_now: bool = False
    max_files_per_trigger: int | None = None
    input_format: str = "parquet"  # or "json" (JSON lines)

    @property
    def usage_dir(self) -> Path:
        return self.out / USAGE_DIR

    @property
    def rates_path(self) -> Path:
        return self.out / RATES_FILE


def check_inputs(cfg: StreamConfig) -> None:
    require_events_dir(cfg.events)
    if not (cfg.events / REQUESTS_DIR).is_dir():
        raise EventsInputError(
            f"no {REQUESTS_DIR}/ directory under {cfg.events}: the stream tails EVENTS/{REQUESTS_DIR} "
            "(create it, or point --events at the gateway's event-log directory)"
        )


@dataclass(frozen=True, slots=True)
class Queries:
    usage: StreamingQuery  # stateful windowed aggregation, append mode, Parquet file sink
    quarantine: StreamingQuery  # malformed rows with their reason, Parquet file sink
    usage_schema: StructType  # what the usage sink holds, known before it holds anything


def start_queries(spark: SparkSession, cfg: StreamConfig) -> Queries:
    """Start the usage and quarantine queries over one file source; each has its own checkpoint under CHECKPOINT."""
    check_inputs(cfg)
    glob = "*.parquet" if cfg.input_format == "parquet" else "*.{json,jsonl}"  # as events.dataset_files
    reader = (
        spark.readStream.schema(request_schema())
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", glob)
    )
    if cfg.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", str(cfg.max_files_per_trigger))
    events = reader.format(cfg.input_format).load(str(cfg.events / REQUESTS_DIR))
    tagged = events.withColumn(QUARANTINE_REASON, malformed_reason())
    good = tagged.where(F.col(QUARANTINE_REASON).isNull()).drop(QUARANTINE_REASON)
    bad = tagged.where(F.col(QUARANTINE_REASON).isNotNull())

    def sink(df: DataFrame, name: str, path: Path) -> StreamingQuery:
        writer = (
            df.writeStream.format("parquet")
            .outputMode("append")
            .queryName(f"quotaflow-{name}")
            .option("path", str(path))
            .option("checkpointLocation", str(cfg.checkpoint / name))
        )
        writer = (
            writer.trigger(availableNow=True)
            if cfg.available_now
            else writer.trigger(processingTime=f"{cfg.trigger_seconds} seconds")
        )
        return writer.start()

    windows = usage(good, cfg.window_ms, cfg.watermark_ms)
    usage_q = sink(windows, USAGE_DIR, cfg.usage_dir)
    quarantine_q = sink(bad, QUARANTINE_DIR, cfg.out / QUARANTINE_DIR)
    return Queries(usage_q, quarantine_q, windows.schema)


# ---------------------------------------------------------------------------------------------- publication


def atomic_write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write-then-rename in the same directory: readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), PUBLISHED_MODE)  # mkstemp makes 0600; gateways run as other users
            json.dump(doc, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_rates(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def latest_windows(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The row of the newest window per (user, client_id)."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["user"], r["client_id"])
        if key not in latest or r["window_start_ms"] > latest[key]["window_start_ms"]:
            latest[key] = r
    return latest


def rates_document(previous: dict[str, Any], new_rows: list[dict[str, Any]], window_ms: int) -> dict[str, Any]:
    """Merge newly closed windows into the published document: per entity and quota type, the latest window."""
    entries: dict[tuple[str, str, str], dict[str, Any]] = {
        (e["user"], e["client_id"], e["quota_type"]): e for e in previous.get("rates", [])
    }
    for (user, client_id), r in latest_windows(new_rows).items():
        for quota_type, column in QUOTA_COLUMNS.items():
            key = (user, client_id, quota_type)
            if key in entries and entries[key]["window_start_ms"] >= r["window_start_ms"]:
                continue
            entries[key] = {
                "user": user,
                "client_id": client_id,
                "quota_type": quota_type,
                "window_start_ms": r["window_start_ms"],
                "window_end_ms": r["window_end_ms"],
                "value": r[column],
                "rate": r[f"{quota_type}_rate"],
            }
    ordered = [entries[k] for k in sorted(entries)]
    return {
        "version": 1,
        "window_ms": window_ms,
        "units": {"produce": "bytes/s", "fetch": "bytes/s", "request": "percent (thread time)"},
        "updated_ms": int(time.time() * 1000),
        "latest_window_start_ms": max((e["window_start_ms"] for e in ordered), default=None),
        "rates": ordered,
    }


def publish(spark: SparkSession, cfg: StreamConfig, schema: StructType) -> int:
    """Fold the sink's newly committed windows into ``cluster_rates.json``; returns how many windows were new.

    Windows close in watermark order, so every window committed after the last publication starts after the
    newest one already published: one filter finds them. Reading the sink directory through Spark honours the
    file sink's ``_spark_metadata`` log, so files of a batch that was killed mid-write are never read."""
    if not (cfg.usage_dir / "_spark_metadata").is_dir():
        return 0
    previous = read_rates(cfg.rates_path)
    since = previous.get("latest_window_start_ms")
    df = spark.read.schema(schema).parquet(str(cfg.usage_dir))
    if since is not None:
        df = df.where(F.col("window_start_ms") > F.lit(since))
    rows = [r.asDict() for r in df.collect()]
    if not rows and previous:
        return 0
    atomic_write_json(cfg.rates_path, rates_document(previous, rows, cfg.window_ms))
    return len(rows)


# ---------------------------------------------------------------------------------------------- driver


@dataclass(slots=True)
class StreamProgress:
    batches: int = 0
    input_rows: int = 0
    windows_published: int = 0
    watermark: str = ""
    last: dict[str, Any] = field(default_factory=dict)


def run(
    spark: SparkSession,
    cfg: StreamConfig,
    on_progress: Callable[[StreamProgress], None] | None = None,
    poll_seconds: int = 1,
) -> StreamProgress:
    """Run both queries until they stop (available-now) or are interrupted, publishing after every new batch."""
    queries = start_queries(spark, cfg)
    usage_q, quarantine_q = queries.usage, queries.quarantine
    state = StreamProgress()
    seen_batch = -1
    try:
        while True:
            finished = usage_q.awaitTermination(poll_seconds)
            fresh = [p for p in usage_q.recentProgress if p["batchId"] > seen_batch]
            for p in fresh:
                seen_batch = p["batchId"]
                state.batches += 1
                state.input_rows += int(p.get("numInputRows", 0))
                state.watermark = str(p.get("eventTime", {}).get("watermark", state.watermark))
                state.last = p
            if fresh or (finished and not cfg.rates_path.exists()):
                state.windows_published += publish(spark, cfg, queries.usage_schema)
            if on_progress:
                on_progress(state)
            if finished:
                break
        quarantine_q.awaitTermination()
    finally:
        for q in (usage_q, quarantine_q):
            if q.isActive:
                q.stop()
    return state
