"""``quotaflow backtest``: Kafka-exact quota decisions over an events directory on Spark.

Plan (docs/backtest.md): one read of the events → the distinct (broker, user, client_id) resolved on the driver
with the core's precedence code, each pair with its component (pairs sharing any quota-id) → a broadcast join adds
two integers per row → **one shuffle**, by (broker, component), carrying only the columns the loop reads →
``mapInArrow`` runs :func:`~quotaflow.pipeline.decide.decide_rows` over each partition (whole quota-ids of all three
managers, the engine's fused loop) and returns (broker, seq) + the four decisions, written narrow; the same loop
closes every (quota-id, 1 s window), whose rows come back to the driver with the task (an accumulator keyed by
partition, so a retried task counts once) and are written with the entities. ``with_inputs`` zips the decisions
onto every input column instead (a scalar-iterator Arrow UDF; Spark keeps the other columns in the JVM). The
quarantine scan is skipped when the Parquet footers prove every row valid. Row-for-row identical to replay."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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
    cast_column,
    clean_by_statistics,
    dataset_files,
    load_events,
    parquet_metadata,
    parquet_schema,
    reading,
    rules_for,
    schema_for,
    split_malformed,
)
from quotaflow.pipeline import job
from quotaflow.pipeline.decide import ManagerView, RequestRows, WindowSettings, decide_rows
from quotaflow.pipeline.resolve import QUOTA_TYPES, QuotaConfig, components, resolve_clients
from quotaflow.pipeline.windows import ENTITY_SCHEMA, WINDOW_SCHEMA, entity_table, window_table

Progress = Callable[[str], None]
LOOP_COLUMNS: Final = ("_broker", "_pair", "ts_ms", "seq", "api_key", "acks", "is_follower", "request_bytes",
                       "response_bytes", "io_thread_ns", "network_thread_ns")  # fmt: skip
"""What crosses to Python: broker code, resolution row, and the event columns the loop reads."""
OUT_BATCH_ROWS: Final = 1 << 16
"""Rows per Arrow batch handed back to the JVM (a partition's decisions are computed whole, returned in pieces)."""


def _spark_type(t: pa.DataType) -> Any:
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(t)


def _check_types(files: list[Path], kind: str) -> None:
    """Columns whose stored type differs from the schema's are cast on the driver first, so a value that cannot be
    cast is the same one-line error replay gives (Spark would fail inside a task with a JVM stack trace)."""
    for path in files:
        stored = parquet_schema(path)
        for f in schema_for(kind):
            if f.name in stored.names and stored.field(f.name).type != f.type:
                with reading(path):
                    column = pq.read_table(path, columns=[f.name]).column(f.name)
                cast_column(column, f, kind, path)


@dataclass(frozen=True, slots=True)
class Input:
    """One dataset of the events as Spark rows: good rows, rows read, rows quarantined (already written)."""

    good: Any
    total: int
    quarantined: int


def read_input(spark: Any, events: Path, kind: str, out: Path, columns: tuple[str, ...] | None) -> Input | None:
    """Read ``events/<kind>`` once: Parquet files that all carry ``seq`` by Spark (only ``columns`` when the footers
    prove every row valid: no per-row check, no quarantine scan), anything else (JSON lines, ``seq``-less files,
    numbered the documented way) on the driver with replay's code. Malformed rows are written to quarantine."""
    from pyspark.sql import functions as F

    files = dataset_files(events / kind)
    if not files:
        return None
    quarantine = out / job.QUARANTINE / kind
    native = all(p.suffix == ".parquet" and "seq" in parquet_schema(p).names for p in files)
    if not native:
        read = load_events(events, kind)
        assert read is not None
        good_t, bad_t = split_malformed(read.table, kind)
        if read.invalid.num_rows:
            bad_t = pa.concat_tables([bad_t, read.invalid], promote_options="permissive")
        _write_arrow(bad_t, quarantine)
        if columns is not None:
            good_t = good_t.select(list(columns))
        return Input(spark.createDataFrame(good_t), read.table.num_rows + read.invalid.num_rows, bad_t.num_rows)
    _check_types(files, kind)
    total = sum(parquet_metadata(p).num_rows for p in files)
    clean = clean_by_statistics(files, kind)
    # files whose columns differ (the gateway logs shadow columns into files of their own while a shadow runs):
    # every file's columns, else Spark takes one file's schema and drops the others' extra columns
    merge = len({tuple(parquet_schema(p).names) for p in files}) > 1
    df = spark.read.option("recursiveFileLookup", "true").option("mergeSchema", str(merge).lower()).parquet(
        *[str(p) for p in files])  # fmt: skip
    for f in schema_for(kind):
        col = F.col(f.name) if f.name in df.columns else F.lit(None)
        df = df.withColumn(f.name, col.cast(_spark_type(f.type)))
    if clean:
        if columns is not None:
            df = df.select(*columns)
        _write_arrow(schema_for(kind).empty_table().append_column(QUARANTINE_REASON, pa.array([], pa.string())),
                     quarantine)  # fmt: skip
        return Input(df, total, 0)
    good, bad = split_malformed_df(df, kind)
    _write(bad, quarantine)
    quarantined = spark.read.parquet(str(quarantine)).count()
    if columns is not None:
        good = good.select(*columns)
    return Input(good, total, quarantined)


def _reason(rules: tuple[Rule, ...]) -> Any:
    """The events module's quarantine rules as one Spark expression (first broken rule wins)."""
    from pyspark.sql import functions as F

    expr = F.lit(None).cast("string")
    for rule in reversed(rules):
        col = F.col(rule.column)
        hit = col.isNull() if rule.kind == "null" else F.coalesce(col < 0, F.lit(False))
        expr = F.when(hit, F.lit(rule.reason)).otherwise(expr)
    return expr


def split_malformed_df(df: Any, kind: str) -> tuple[Any, Any]:
    from pyspark.sql import functions as F

    marked = df.withColumn(QUARANTINE_REASON, _reason(rules_for(kind)))
    good = marked.filter(F.col(QUARANTINE_REASON).isNull()).drop(QUARANTINE_REASON)
    return good, marked.filter(F.col(QUARANTINE_REASON).isNotNull())


class TableSink:
    """Tables sent back by the tasks: an accumulator of {partition: (one Arrow IPC stream per table)} (a retried
    task replaces its own entry, so nothing counts twice). ``schemas`` gives each table's schema when empty."""

    def __init__(self, spark: Any, schemas: tuple[pa.Schema, ...]) -> None:
        from pyspark.accumulators import AccumulatorParam

        class _Param(AccumulatorParam):  # type: ignore[type-arg]
            def zero(self, value: dict[int, tuple[bytes, ...]]) -> dict[int, tuple[bytes, ...]]:
                return {}

            def addInPlace(self, a: dict[int, tuple[bytes, ...]],
                           b: dict[int, tuple[bytes, ...]]) -> dict[int, tuple[bytes, ...]]:  # fmt: skip
                a.update(b)
                return a

        self.schemas = schemas
        self.acc = spark.sparkContext.accumulator({}, _Param())

    def all_tables(self) -> list[pa.Table]:
        """Each table of every partition, concatenated."""
        parts = [v for _, v in sorted(self.acc.value.items())]
        out = []
        for i, schema in enumerate(self.schemas):
            tables = [pa.ipc.open_stream(p[i]).read_all() for p in parts]
            out.append(pa.concat_tables(tables) if tables else schema.empty_table())
        return out


class WindowSink(TableSink):
    """The window and entity rows of the backtest's loop."""

    def __init__(self, spark: Any) -> None:
        super().__init__(spark, (WINDOW_SCHEMA, ENTITY_SCHEMA))

    def tables(self) -> tuple[pa.Table, pa.Table]:
        """(windows, entities) of every partition."""
        windows, entities = self.all_tables()
        return windows, entities


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def send_tables(acc: Any, *tables: pa.Table) -> None:
    """This task's tables to a :class:`TableSink`'s accumulator."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    acc.add({ctx.partitionId() if ctx is not None else 0: tuple(_ipc(t) for t in tables)})


class Plan:
    """What every task needs: each manager's view per resolution row, the resolution table (window tags and
    limits), the broker names by code, the window settings and the window sink."""

    def __init__(self, res: pa.Table, brokers: list[str], settings: WindowSettings, sink: WindowSink | None,
                 headroom: float = job.DEFAULT_HEADROOM) -> None:  # fmt: skip
        self.views = {t: ManagerView.of_resolution(res, t) for t in QUOTA_TYPES}
        self.res = res
        self.brokers = pa.array(brokers, pa.string())
        self.settings = settings
        self.headroom = headroom
        self.acc = None if sink is None else sink.acc

    def decide(self, table: pa.Table) -> tuple[np.ndarray, ...]:
        """The four decision columns of one partition (rows of whole quota-ids); its windows go to the sink."""
        rows = RequestRows.of_arrow(table, table.column("_broker").to_numpy().astype(np.int64))
        pair = table.column("_pair").to_numpy()
        decided = decide_rows(rows, pair, self.views, self.settings, windows=self.acc is not None)
        if self.acc is not None:
            send_tables(self.acc, window_table(decided, self.res, self.brokers),
                        entity_table(decided, self.res, self.brokers, self.headroom))  # fmt: skip
        return decided.columns


def _narrow_fn(plan: Plan) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = list(batches)
        if not received or not sum(b.num_rows for b in received):
            return
        table = pa.Table.from_batches(received)
        results = plan.decide(table)
        cols = [table.column("_broker"), table.column("seq"), *(pa.array(r, pa.int64()) for r in results)]
        names = ["_broker", "seq", *(f.name for f in REQUEST_DECISION_FIELDS)]
        yield from pa.table(cols, names=names).to_batches(max_chunksize=OUT_BATCH_ROWS)

    return fn


def _wide_udf(plan: Plan) -> Any:
    """A scalar-iterator Arrow UDF over one partition: the loop's columns in, the four decisions out (Spark keeps
    the other columns in the JVM and zips the result back onto each row)."""
    from pyspark.sql.pandas.functions import arrow_udf

    out_type = ", ".join(f"{f.name} {_spark_type(f.type).simpleString()}" for f in REQUEST_DECISION_FIELDS)

    def fn(batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        received = [list(b) for b in batches]
        if not received:
            return
        table = pa.table([pa.chunked_array([b[i] for b in received]) for i in range(len(LOOP_COLUMNS))],
                         names=list(LOOP_COLUMNS))  # fmt: skip
        results = plan.decide(table)
        struct = pa.StructArray.from_arrays([pa.array(r, pa.int64()) for r in results],
                                            fields=list(REQUEST_DECISION_FIELDS))  # fmt: skip
        start = 0
        for b in received:  # one output batch per input batch, same lengths
            yield struct.slice(start, len(b[0]))
            start += len(b[0])

    make: Any = arrow_udf  # pyspark's stubs know no struct (DDL) return type for it
    return make(out_type)(fn).asNondeterministic()  # evaluated once per row, not once per extracted field


def decisions(spark: Any, good: Any, config: QuotaConfig, settings: WindowSettings, *, with_inputs: bool = False,
              sink: WindowSink | None = None, headroom: float = job.DEFAULT_HEADROOM) -> Any:  # fmt: skip
    """Good request rows → decisions: (broker, seq) + the four columns, or every input column + them
    (``with_inputs``). With ``sink`` the window rows of the same loop are sent to it as the tasks finish.

    The distinct (broker, user, client_id) are resolved on the driver; a broadcast join adds each row's resolution
    row and component (pairs sharing any quota-id); one shuffle by (broker, component) puts whole quota-ids in one
    partition, where one Python call decides it."""
    from pyspark.sql import functions as F

    existing = [f.name for f in REQUEST_DECISION_FIELDS if f.name in good.columns]
    good = good.drop(*existing)
    found = good.select("broker", "user", "client_id").distinct().collect()
    brokers = sorted({r["broker"] for r in found})
    res = resolve_clients(config, [(r["user"], r["client_id"]) for r in found])
    keys = pa.table({"user": res.column("user"), "client_id": res.column("client_id"),
                     "_pair": pa.array(np.arange(res.num_rows), pa.int32()),
                     "_component": pa.array(components(res), pa.int64())})  # fmt: skip
    code = F.create_map(*[x for i, b in enumerate(brokers) for x in (F.lit(b), F.lit(i))])[F.col("broker")]
    df = good.join(F.broadcast(spark.createDataFrame(keys)), ["user", "client_id"], "inner").withColumn("_broker", code)
    plan = Plan(res, brokers, settings, sink, headroom)
    loop = [F.coalesce(F.col("acks"), F.lit(1).cast("byte")).alias("acks") if c == "acks" else F.col(c)
            for c in LOOP_COLUMNS]  # fmt: skip
    names = F.array(*[F.lit(b) for b in brokers])
    if with_inputs:
        df = df.repartition("_broker", "_component").withColumn("_decisions", _wide_udf(plan)(*loop))
        return df.select(*good.columns, *[F.col("_decisions")[f.name].alias(f.name) for f in REQUEST_DECISION_FIELDS])
    narrow = df.select(*loop, "_component").repartition("_broker", "_component").drop("_component")
    schema = f"_broker int, seq long, {', '.join(f'{f.name} long' for f in REQUEST_DECISION_FIELDS)}"
    decided = narrow.mapInArrow(_narrow_fn(plan), schema)
    return decided.select(F.element_at(names, F.col("_broker") + 1).alias("broker"), "seq",
                          *[f.name for f in REQUEST_DECISION_FIELDS])  # fmt: skip


def _connections_fn(spec: job.JobSpec, ip_rates: dict[str | None, int]) -> Callable[[pa.Table], pa.Table]:
    config = spec.connection_config()

    def fn(table: pa.Table) -> pa.Table:
        from quotaflow.pipeline.connections import decide_broker

        return decide_broker(table, config, ip_rates)

    return fn


def _write(df: Any, path: Path) -> None:
    df.write.mode("overwrite").parquet(str(path))


def _write_arrow(table: pa.Table, path: Path) -> None:
    """A table the driver holds (windows, entities, quarantine read on the driver), written by the driver as
    replay writes it: OUT is on the driver's filesystem (it is cleared and ``_SUMMARY.json`` written there)."""
    from quotaflow.pipeline.replay import write_parts

    write_parts(table, path)


def run(spec: job.JobSpec, *, master: str | None = None, spark: Any = None,
        progress: Progress | None = None) -> job.Summary:  # fmt: skip
    """The whole backtest: one read and one shuffle of the request events for decisions, windows and entities;
    one read of the connection events."""
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
    conns: Input | None = None

    def connections() -> None:  # a second Spark job, submitted while the request job runs
        nonlocal conns
        conns = read_input(spark, spec.events, CONNECTIONS_DIR, spec.out, None)
        if conns is not None:
            with summary.timed("connections"):
                good_c = conns.good.drop(*[f.name for f in CONNECTION_DECISION_FIELDS if f.name in conns.good.columns])
                out_schema = _with_fields(good_c.schema, CONNECTION_DECISION_FIELDS)
                decided_c = good_c.groupBy("broker").applyInArrow(_connections_fn(spec, config.ip_rates), out_schema)
                _write(decided_c, spec.out / job.CONNECTIONS)

    with ThreadPoolExecutor(max_workers=1) as side:
        pending = side.submit(connections)
        with summary.timed("read", progress):
            req = read_input(spark, spec.events, REQUESTS_DIR, spec.out,
                             None if spec.with_inputs else job.DECIDE_COLUMNS)  # fmt: skip
        if req is not None:
            summary.counts.update(requests=req.total, requests_quarantined=req.quarantined)
            sink = WindowSink(spark)
            with summary.timed("decisions", progress):
                _write(decisions(spark, req.good, config, settings, with_inputs=spec.with_inputs, sink=sink,
                                 headroom=spec.headroom), spec.out / job.DECISIONS)  # fmt: skip
            with summary.timed("windows", progress):
                win, ent = sink.tables()
                _write_arrow(win, spec.out / job.WINDOWS)
                _write_arrow(ent, spec.out / job.ENTITIES)
            summary.counts["windows"] = win.num_rows
            if spec.compare is not None:
                with summary.timed("compare", progress):
                    _compare(spark, spec, req.good, win, settings)
        with summary.timed("wait_connections", progress):
            pending.result()
    if conns is not None:
        summary.counts.update(connections=conns.total, connections_quarantined=conns.quarantined)
    summary.write(spec.out)
    return summary


def _with_fields(schema: Any, fields: tuple[pa.Field, ...]) -> Any:
    from pyspark.sql.types import StructField, StructType

    names = {f.name for f in fields}
    kept = [f for f in schema.fields if f.name not in names]
    return StructType(kept + [StructField(f.name, _spark_type(f.type), True) for f in fields])


def _compare(spark: Any, spec: job.JobSpec, good: Any, win_a: pa.Table, settings: WindowSettings) -> None:
    """The second config's windows from the same loop (its decisions are not kept: a no-op sink runs the job)."""
    from quotaflow.pipeline.compare import compare_summary, compare_windows

    assert spec.compare is not None
    sink = WindowSink(spark)
    decisions(spark, good, spec.quota_config(spec.compare), settings, sink=sink).write.format("noop").mode(
        "overwrite").save()  # fmt: skip
    cmp = compare_windows(win_a, sink.tables()[0])
    _write_arrow(cmp, spec.out / job.COMPARE)
    _write_arrow(compare_summary(cmp), spec.out / job.COMPARE_SUMMARY)
