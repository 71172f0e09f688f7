"""``quotaflow backtest``: Kafka-exact quota decisions over an events directory on Spark.

Plan (docs/backtest.md): read → quarantine malformed rows → resolve the distinct (broker, user, client_id) on
the driver with the core's precedence code and broadcast-join two integers per row (resolution row, component of
pairs sharing quota-ids) → one shuffle by (broker, component) → a scalar-iterator Arrow UDF that receives only the
columns the decisions read and runs :func:`~quotaflow.pipeline.decide.decide_rows` (the engine kernel's helpers,
all three managers per row in (ts_ms, seq) order) → decisions written. ``strategy="passes"`` keeps the two-shuffle
plan (request pass, then byte pass, ``mapInArrow`` per sorted batch with state carried across batches). Windows and
entities are computed afterwards from the written decisions; the connection acceptors run per broker
(``applyInArrow``). Row-for-row identical to ``quotaflow replay``."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from quotaflow.events import (
    CONNECTION_DECISION_FIELDS,
    CONNECTIONS_DIR,
    QUARANTINE_REASON,
    REQUEST_DECISION_FIELDS,
    REQUESTS_DIR,
    Rule,
    dataset_files,
    read_dataset,
    rules_for,
    schema_for,
)
from quotaflow.pipeline import job
from quotaflow.pipeline.decide import BytePass, ManagerView, RequestPass, RequestRows, WindowSettings, decide_rows
from quotaflow.pipeline.resolve import NO_TYPE, QUOTA_TYPES, TYPE_CODE, QuotaConfig, components, resolve_clients
from quotaflow.pipeline.windows import (
    ENTITY_SCHEMA,
    PARTIAL_SCHEMA,
    WINDOW_INPUTS,
    WINDOW_KEYS,
    ByteWindows,
    RequestWindows,
)

Progress = Callable[[str], None]


def _spark_type(t: pa.DataType) -> Any:
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(t)


def read_events(spark: Any, events: Path, kind: str) -> Any | None:
    """The dataset as a DataFrame with the schema columns cast to their types, or None when absent.

    Parquet files that all carry ``seq`` are read by Spark; JSON lines, or files without ``seq`` (numbered from
    file and row order, docs/events.md), are read on the driver with the same code replay uses."""
    from pyspark.sql import functions as F

    files = dataset_files(events / kind)
    if not files:
        return None
    native = all(p.suffix == ".parquet" and "seq" in pq.read_schema(p).names for p in files)
    if native:
        df = spark.read.option("recursiveFileLookup", "true").parquet(*[str(p) for p in files])
    else:
        table = read_dataset(events, kind)
        assert table is not None
        df = spark.createDataFrame(table)
    for f in schema_for(kind):
        if f.name in df.columns:
            df = df.withColumn(f.name, F.col(f.name).cast(_spark_type(f.type)))
        else:
            df = df.withColumn(f.name, F.lit(None).cast(_spark_type(f.type)))
    return df


def _reason(rules: tuple[Rule, ...]) -> Any:
    """The events module's quarantine rules as one Spark expression (first broken rule wins)."""
    from pyspark.sql import functions as F

    expr = F.lit(None).cast("string")
    for rule in reversed(rules):
        col = F.col(rule.column)
        hit = col.isNull() if rule.kind == "null" else F.coalesce(col < 0, F.lit(False))
        expr = F.when(hit, F.lit(rule.reason)).otherwise(expr)
    return expr


def split_malformed(df: Any, kind: str) -> tuple[Any, Any]:
    from pyspark.sql import functions as F

    marked = df.withColumn(QUARANTINE_REASON, _reason(rules_for(kind)))
    good = marked.filter(F.col(QUARANTINE_REASON).isNull()).drop(QUARANTINE_REASON)
    return good, marked.filter(F.col(QUARANTINE_REASON).isNotNull())


def prepare(spark: Any, good: Any, config: QuotaConfig, *, tags: bool = False) -> Any:
    """Broadcast-join each row's quota-ids, limits and enabled flags (resolved once per distinct pair).

    ``tags`` also joins the quota-id tag strings (windows need them; decisions do not, and every column costs a
    JVM↔Python round trip in both passes)."""
    from pyspark.sql import functions as F

    pairs = [(r["user"], r["client_id"]) for r in good.select("user", "client_id").distinct().collect()]
    res = resolve_clients(config, pairs)
    res = res.append_column("component", pa.array(components(res), pa.int64()))
    if not tags:
        res = res.drop_columns([c for c in res.column_names if "_tag_" in c])
    res = spark.createDataFrame(res)
    df = good.join(F.broadcast(res), ["user", "client_id"], "left")
    bt = (
        F.when(F.col("api_key") == 0, F.lit(TYPE_CODE["produce"]))
        .when((F.col("api_key") == 1) & ~F.col("is_follower"), F.lit(TYPE_CODE["fetch"]))
        .otherwise(F.lit(NO_TYPE))
        .cast("byte")
    )
    df = df.withColumn("byte_type", bt)
    is_fetch = F.col("byte_type") == TYPE_CODE["fetch"]
    parts = ("qid", "limit", "enabled", *(("tag_user", "tag_client_id") if tags else ()))
    for part in parts:
        df = df.withColumn(f"byte_{part}", F.when(is_fetch, F.col(f"fetch_{part}")).otherwise(F.col(f"produce_{part}")))
    drop = [f"{t}_{p}" for t in ("produce", "fetch") for p in parts]
    return df.drop(*drop)


def _with_fields(schema: Any, fields: tuple[pa.Field, ...]) -> Any:
    from pyspark.sql.types import StructField, StructType

    names = {f.name for f in fields}
    kept = [f for f in schema.fields if f.name not in names]
    return StructType(kept + [StructField(f.name, _spark_type(f.type), True) for f in fields])


def _request_fn(settings: WindowSettings) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rp = RequestPass(settings)
        for b in batches:
            yield b.append_column(REQUEST_DECISION_FIELDS[2], pa.array(rp(b), pa.int64()))

    return fn


def _byte_fn(settings: WindowSettings) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    from quotaflow.pipeline.decide import applied

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        bp = BytePass(settings)
        for b in batches:
            p, f = bp(b)
            req = b.column("throttle_ms_request").to_numpy()
            b = b.append_column(REQUEST_DECISION_FIELDS[0], pa.array(p, pa.int64()))
            b = b.append_column(REQUEST_DECISION_FIELDS[1], pa.array(f, pa.int64()))
            yield b.append_column(REQUEST_DECISION_FIELDS[3], pa.array(applied(req, p, f), pa.int64()))

    return fn


def _zeros_fn(fields: tuple[pa.Field, ...]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The identity kernel (benchmark floor): same batches in and out, decision columns all zero."""

    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            zeros = pa.array(np.zeros(b.num_rows, dtype=np.int64))
            for f in fields:
                b = b.append_column(f, zeros)
            yield b

    return fn


SLIM_COLUMNS: Final = ("_broker", "_pair", "ts_ms", "seq", "api_key", "acks", "is_follower", "request_bytes",
                       "response_bytes", "io_thread_ns", "network_thread_ns")  # fmt: skip


def _decision_udf(views: dict[str, ManagerView], settings: WindowSettings, identity: bool) -> Any:
    """A scalar-iterator Arrow UDF over one partition of whole (broker, component)s: only the columns the passes
    read cross to Python and only the four decisions come back (Spark keeps the other columns in the JVM and
    zips the result back onto each row). ``views`` is each manager's view per resolution row (``_pair``)."""
    from pyspark.sql.pandas.functions import arrow_udf

    out_type = ", ".join(f"{f.name} {_spark_type(f.type).simpleString()}" for f in REQUEST_DECISION_FIELDS)

    def fn(batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        received = [list(b) for b in batches]
        if not received:
            return
        table = pa.table([pa.chunked_array([b[i] for b in received]) for i in range(len(SLIM_COLUMNS))],
                         names=list(SLIM_COLUMNS))  # fmt: skip
        if identity:
            zeros = np.zeros(table.num_rows, dtype=np.int64)
            results: tuple[np.ndarray, ...] = (zeros,) * len(REQUEST_DECISION_FIELDS)
        else:
            pair = table.column("_pair").to_numpy()
            rows = RequestRows.of_arrow(table, table.column("_broker").to_numpy().astype(np.int64))
            results = decide_rows(rows, pair, views, settings)  # one thread: Spark runs a task per core
        struct = pa.StructArray.from_arrays([pa.array(r, pa.int64()) for r in results],
                                            fields=list(REQUEST_DECISION_FIELDS))  # fmt: skip
        start = 0
        for b in received:  # one output batch per input batch, same lengths
            yield struct.slice(start, len(b[0]))
            start += len(b[0])

    make: Any = arrow_udf  # pyspark's stubs know no struct (DDL) return type for it
    udf = make(out_type)(fn)  # fn's type hints make it a scalar-iterator UDF
    return udf.asNondeterministic()  # evaluated once per row, not once per extracted field


def decisions(spark: Any, good: Any, config: QuotaConfig, settings: WindowSettings, *, identity: bool = False,
              strategy: str = "component") -> Any:  # fmt: skip
    """Good request rows with the four decision columns (no helper columns); ``identity`` decides zeros.

    ``component`` (default): the distinct (broker, user, client_id) are resolved on the driver; a broadcast join
    adds each row's resolution row and component (pairs sharing any quota-id); one shuffle by (broker,
    component) puts whole quota-ids in one partition, where :func:`_decision_udf` runs both passes at once.
    ``passes``: two shuffles (request quota-id, then byte quota-id), Spark sorts, one kernel call per Arrow batch
    with state carried across batches (bounded worker memory; every column crosses to Python twice)."""
    existing = [f.name for f in REQUEST_DECISION_FIELDS if f.name in good.columns]
    good = good.drop(*existing)
    if strategy == "passes":
        decided = _decide_passes(prepare(spark, good, config), settings, identity)
        return decided.drop(*[c for c in job.HELPER_COLUMNS if c in decided.columns])
    return _decide_components(spark, good, config, settings, identity)


def _decide_components(spark: Any, good: Any, config: QuotaConfig, settings: WindowSettings, identity: bool) -> Any:
    from pyspark.sql import functions as F

    found = good.select("broker", "user", "client_id").distinct().collect()
    brokers = sorted({r["broker"] for r in found})
    res = resolve_clients(config, [(r["user"], r["client_id"]) for r in found])
    keys = pa.table({"user": res.column("user"), "client_id": res.column("client_id"),
                     "_pair": pa.array(np.arange(res.num_rows), pa.int32()),
                     "_component": pa.array(components(res), pa.int64())})  # fmt: skip
    code = F.create_map(*[x for i, b in enumerate(brokers) for x in (F.lit(b), F.lit(i))])[F.col("broker")]
    df = good.join(F.broadcast(spark.createDataFrame(keys)), ["user", "client_id"], "inner")
    df = df.withColumn("_broker", code).repartition("_broker", "_component")
    views = {t: ManagerView.of_resolution(res, t) for t in QUOTA_TYPES}
    udf = _decision_udf(views, settings, identity)
    slim = [F.coalesce(F.col("acks"), F.lit(1).cast("byte")).alias("acks") if c == "acks" else F.col(c)
            for c in SLIM_COLUMNS]  # fmt: skip
    df = df.withColumn("_decisions", udf(*slim))
    return df.select(*good.columns, *[F.col("_decisions")[f.name].alias(f.name) for f in REQUEST_DECISION_FIELDS])


def _decide_passes(df: Any, settings: WindowSettings, identity: bool) -> Any:
    from pyspark.sql import functions as F

    rkeys = list(RequestPass.KEYS)
    r = df.repartition(*[F.col(k) for k in rkeys]).sortWithinPartitions(*rkeys, "ts_ms", "seq")
    rfn = _zeros_fn(REQUEST_DECISION_FIELDS[2:3]) if identity else _request_fn(settings)
    r = r.mapInArrow(rfn, _with_fields(df.schema, REQUEST_DECISION_FIELDS[2:3]))
    bkeys = list(BytePass.KEYS)
    b = r.repartition(*[F.col(k) for k in bkeys]).sortWithinPartitions(*bkeys, "ts_ms", "seq")
    out_fields = (REQUEST_DECISION_FIELDS[0], REQUEST_DECISION_FIELDS[1], REQUEST_DECISION_FIELDS[3])
    bfn = _zeros_fn(out_fields) if identity else _byte_fn(settings)
    return b.mapInArrow(bfn, _with_fields(r.schema, out_fields))


def _partial_schema() -> Any:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, _spark_type(f.type), True) for f in PARTIAL_SCHEMA])


def windows(decided: Any, settings: WindowSettings) -> Any:
    """Window rows from decided, prepared rows (the same passes re-run in rounds, reading the rate per window)."""
    from pyspark.sql import functions as F

    def req_fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        w = RequestWindows(settings)
        for b in batches:
            yield from w(b).to_batches()

    def byte_fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        w = ByteWindows(settings)
        for b in batches:
            yield from w(b).to_batches()

    rkeys, bkeys = list(RequestPass.KEYS), list(BytePass.KEYS)
    decided = decided.select(*[c for c in WINDOW_INPUTS if c in decided.columns])
    r = decided.repartition(*rkeys).sortWithinPartitions(*rkeys, "ts_ms", "seq").mapInArrow(req_fn, _partial_schema())
    b = decided.filter(F.col("byte_type") != NO_TYPE)
    b = b.repartition(*bkeys).sortWithinPartitions(*bkeys, "ts_ms", "seq").mapInArrow(byte_fn, _partial_schema())
    parts = r.unionByName(b)
    return (
        parts.groupBy(*WINDOW_KEYS)
        .agg(
            F.sum("value_sum").alias("value_sum"),
            F.max_by("rate", "last_ts_ms").alias("rate"),
            F.first("limit").alias("limit"),
            F.sum("throttle_count").cast("long").alias("throttle_count"),
            F.sum("throttle_ms_sum").cast("long").alias("throttle_ms_sum"),
        )
        .select(*WINDOW_KEYS, "value_sum", "rate", "limit", "throttle_count", "throttle_ms_sum")
    )


def entities(win: Any, headroom: float) -> Any:
    from pyspark.sql import functions as F

    keys = ["broker", "quota_type", "tag_user", "tag_client_id"]
    return (
        win.groupBy(*keys)
        .agg(
            F.first("limit").alias("limit"),
            F.max("rate").alias("peak_rate"),
            F.percentile("rate", F.lit(0.99)).alias("p99_rate"),
            F.avg(F.when(F.col("throttle_count") > 0, 1.0).otherwise(0.0)).alias("throttled_share"),
            F.count(F.lit(1)).alias("windows"),
        )
        .withColumn("recommended_quota", F.col("p99_rate") * F.lit(headroom))
        .select(*ENTITY_SCHEMA.names)
    )


def _connections_fn(spec: job.JobSpec, ip_rates: dict[str | None, int]) -> Callable[[pa.Table], pa.Table]:
    config = spec.connection_config()

    def fn(table: pa.Table) -> pa.Table:
        from quotaflow.pipeline.connections import decide_broker

        return decide_broker(table, config, ip_rates)

    return fn


def _write(df: Any, path: Path) -> None:
    df.write.mode("overwrite").parquet(str(path))


def run(
    spec: job.JobSpec,
    *,
    master: str | None = None,
    spark: Any = None,
    progress: Progress | None = None,
    identity: bool = False,
) -> job.Summary:
    """The whole backtest. ``identity`` runs the same read, shuffles, sorts and write with no decisions."""
    spec.validate()
    summary = job.Summary("spark")
    with summary.timed("spark_start", progress):
        if spark is None:
            from quotaflow.pipeline.session import get_session

            spark = get_session("local", master)
    settings = spec.windows()
    config = spec.quota_config()
    if spec.out.exists():
        shutil.rmtree(spec.out)
    req = read_events(spark, spec.events, REQUESTS_DIR)
    if req is not None:
        good, bad = split_malformed(req, REQUESTS_DIR)
        with summary.timed("quarantine", progress):
            _write(bad, spec.out / job.QUARANTINE / REQUESTS_DIR)
            summary.counts["requests_quarantined"] = spark.read.parquet(
                str(spec.out / job.QUARANTINE / REQUESTS_DIR)).count()  # fmt: skip
        with summary.timed("decisions", progress):
            _write(decisions(spark, good, config, settings, identity=identity), spec.out / job.DECISIONS)
        decided_df = spark.read.parquet(str(spec.out / job.DECISIONS))
        summary.counts["requests"] = decided_df.count() + summary.counts["requests_quarantined"]
        if not identity:
            with summary.timed("windows", progress):
                prepared = prepare(spark, decided_df, config, tags=True)
                win = windows(prepared, settings)
                _write(win, spec.out / job.WINDOWS)
                win = spark.read.parquet(str(spec.out / job.WINDOWS))
                _write(entities(win, spec.headroom), spec.out / job.ENTITIES)
                summary.counts["windows"] = win.count()
            if spec.compare is not None:
                with summary.timed("compare", progress):
                    _compare(spark, spec, good, win, settings)
    conns = read_events(spark, spec.events, CONNECTIONS_DIR)
    if conns is not None:
        good_c, bad_c = split_malformed(conns, CONNECTIONS_DIR)
        _write(bad_c, spec.out / job.QUARANTINE / CONNECTIONS_DIR)
        summary.counts["connections_quarantined"] = spark.read.parquet(
            str(spec.out / job.QUARANTINE / CONNECTIONS_DIR)).count()  # fmt: skip
        if not identity:
            with summary.timed("connections", progress):
                existing = [f.name for f in CONNECTION_DECISION_FIELDS if f.name in good_c.columns]
                good_c = good_c.drop(*existing)
                out_schema = _with_fields(good_c.schema, CONNECTION_DECISION_FIELDS)
                decided_c = good_c.groupBy("broker").applyInArrow(_connections_fn(spec, config.ip_rates), out_schema)
                _write(decided_c, spec.out / job.CONNECTIONS)
        summary.counts["connections"] = good_c.count() + summary.counts["connections_quarantined"]
    summary.write(spec.out)
    return summary


def _compare(spark: Any, spec: job.JobSpec, good: Any, win_a: Any, settings: WindowSettings) -> None:
    from quotaflow.pipeline.compare import compare_summary, compare_windows

    assert spec.compare is not None
    other = spec.quota_config(spec.compare)
    tmp = spec.out / "_compare_tmp"
    _write(decisions(spark, good, other, settings), tmp)
    win_b = windows(prepare(spark, spark.read.parquet(str(tmp)), other, tags=True), settings)
    a = win_a.toArrow()
    b = win_b.toArrow()
    cmp = compare_windows(a, b)
    (spec.out / job.COMPARE).mkdir(parents=True, exist_ok=True)
    pq.write_table(cmp, spec.out / job.COMPARE / "part-00000.parquet")
    (spec.out / job.COMPARE_SUMMARY).mkdir(parents=True, exist_ok=True)
    pq.write_table(compare_summary(cmp), spec.out / job.COMPARE_SUMMARY / "part-00000.parquet")
    shutil.rmtree(tmp, ignore_errors=True)
