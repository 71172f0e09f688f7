"""``quotaflow recommend``: quotas proposed from recorded traffic on Spark, and the backtest of the proposal.

Plan (docs/advisor.md), the backtest's own plan with a second config in the same loop:

1. One read of the request events (:func:`~.backtest.read_input`); the backtest's distinct-clients query also
   returns the trace's first/last timestamp and which (broker, user, client_id) any quota manager records.
2. On the driver: the entities at the chosen level and the **proposal config** (the store's quotas with every
   entity's proposed keys set). The proposed *values* are not known yet, but where each client's quota comes from
   is: quota-ids and masks depend on which entities hold which keys, not on the values. So both configs are
   resolved now (a proposed value is a placeholder naming its entity), and each client's component joins the
   quota-ids of both configs and its entity: a partition by component holds whole quota-ids of both configs and
   whole entities (every broker they used).
3. One shuffle by component; ``mapInArrow`` per partition: the rows in time order once, the usage cells and
   percentiles of its entities (:mod:`.advisor`), the proposed values put in place of the placeholders, then the
   engine's loop (:func:`~.decide.decide_rows`, the backtest's) under the store's quotas and under the proposal.
   Decisions of both go out narrow; window, entity, usage and outcome rows come back with the task.

Output under OUT: the backtest's layout for the store's quotas (``decisions/`` with the proposal's decisions
beside them as ``proposed_*`` columns, ``windows/``, ``entities/``, ``compare/`` a = store, b = proposal,
``compare_summary/``), plus ``proposal.json``, ``usage/``, ``outcome/``, ``proposed_windows/`` and
``_SUMMARY.json``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quotaflow.admin.codec import describe_to_json
from quotaflow.admin.local import DescribedEntity
from quotaflow.core.entities import QuotaEntity, entity_text
from quotaflow.core.errors import CommandError
from quotaflow.core.keys import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from quotaflow.core.precedence import PREFIX_TAG_USER
from quotaflow.core.prefixes import PrefixIndex
from quotaflow.engine.exempt import EXEMPT_THROTTLE_API_KEYS
from quotaflow.events import API_FETCH, API_PRODUCE, REQUEST_DECISION_FIELDS, REQUESTS_DIR
from quotaflow.pipeline import job
from quotaflow.pipeline.advisor import (
    KEY_TYPE,
    LEVELS,
    OUTCOME_SCHEMA,
    PREFIX_LEVEL,
    USAGE_SCHEMA,
    AdvisorSettings,
    UsageInputs,
    entity_wire,
    metered,
    outcome_table,
    settable,
    usage_table,
)
from quotaflow.pipeline.backtest import LOOP_COLUMNS, OUT_BATCH_ROWS, TableSink, read_input, send_tables
from quotaflow.pipeline.compare import compare_summary, compare_windows
from quotaflow.pipeline.decide import ManagerView, RequestRows, WindowSettings, decide_rows, time_order
from quotaflow.pipeline.resolve import (
    QUOTA_TYPES,
    QuotaConfig,
    components,
    resolve_clients,
)
from quotaflow.pipeline.windows import ENTITY_SCHEMA, WINDOW_SCHEMA, entity_table, window_table
from quotaflow.store.base import Snapshot
from quotaflow.store.factory import store_identity

Progress = Callable[[str], None]
PROPOSAL: Final = "proposal.json"
USAGE: Final = "usage"
OUTCOME: Final = "outcome"
PROPOSED_WINDOWS: Final = "proposed_windows"
PROPOSED_PREFIX: Final = "proposed_"
PROPOSED_FIELDS: Final = tuple(f.with_name(PROPOSED_PREFIX + f.name) for f in REQUEST_DECISION_FIELDS)
ENTITY_COLUMNS: Final = (pa.field("entity_user", pa.string()), pa.field("entity_client_id", pa.string()),
                         pa.field("entity_client_id_prefix", pa.string()))  # fmt: skip
ENTITY_PARTS: Final = ("user", "client-id", "client-id-prefix")
"""The wire types of :data:`ENTITY_COLUMNS`, in order."""
USAGE_OUT_SCHEMA: Final = pa.schema(
    [*ENTITY_COLUMNS, *(f for f in USAGE_SCHEMA if f.name != "entity"),
     pa.field("current_value", pa.float64()), pa.field("current_limit", pa.float64()),
     pa.field("current_source", pa.string()), pa.field("active_seconds", pa.int64()),
     pa.field("throttled_share", pa.float64()), pa.field("proposed", pa.bool_()), pa.field("lifts", pa.bool_()),
     pa.field("warning", pa.string())]
)
"""``current_value``: what the store holds for this entity and key (null: nothing); ``current_limit``: the quota
the entity's traffic is held to now (the smallest over its clients; null: unlimited), ``current_source`` the
entity that supplies it; ``active_seconds``: epoch seconds with a recorded request; ``throttled_share``: the
share of those in which today's quota throttled it; ``proposed``: false when the evidence is thin (the value is
not in ``proposal.json``); ``lifts``: the value is above the quota in force; ``warning``: why to look twice."""
OUTCOME_OUT_SCHEMA: Final = pa.schema(
    [*ENTITY_COLUMNS, *(f for f in OUTCOME_SCHEMA if f.name != "entity"), pa.field("throttle_s_delta", pa.float64())]
)


@dataclass(frozen=True, slots=True)
class RecommendSpec:
    events: Path
    store: str | Path
    out: Path
    level: str = "user"
    advisor: AdvisorSettings = field(default_factory=AdvisorSettings)
    broker_config: Path | None = None
    prefixes: tuple[str, ...] = ()
    """``--prefixes``: client-id prefixes to propose for (``client-id-prefix`` level), beside the store's."""

    def job(self) -> job.JobSpec:
        return job.JobSpec(self.events, self.store, self.out, self.broker_config)

    def validate(self) -> None:
        if self.level not in LEVELS:
            raise CommandError(f"--entity-type takes {', '.join(LEVELS)}; got {self.level!r}")
        if self.prefixes and self.level != PREFIX_LEVEL:
            raise CommandError(f"--prefixes is for --entity-type {PREFIX_LEVEL}, not {self.level}")
        if any(not p for p in self.prefixes):
            raise CommandError("--prefixes: a client-id prefix cannot be empty")
        self.advisor.validate()
        self.job().validate()


def _snapshot(store: str | Path) -> Snapshot:
    from quotaflow.store.factory import open_reader

    st = open_reader(store)
    try:
        return st.snapshot()
    finally:
        st.close()


@dataclass(frozen=True, slots=True)
class Entities:
    """The entities at the chosen level: each resolution row's entity (-1: none), each entity's wire form and the
    keys it used (some request of its clients that key's manager records). ``by_type``: where a row's entity
    depends on the quota type (``client-id-prefix``), its entity per type; ``of_pair`` is then the first of them
    (the entity its outcome is counted under)."""

    of_pair: np.ndarray
    wire: list[dict[str, str | None]]
    keys: list[frozenset[str]]
    by_type: dict[str, np.ndarray] | None = None

    def of_type(self, t: str) -> np.ndarray:
        return self.of_pair if self.by_type is None else self.by_type[t]


def entities_of(res: pa.Table, level: str, used: Mapping[tuple[str, str], frozenset[str]]) -> Entities:
    """Entities of the clients that used any of the keys (``used``: per (user, client_id)) whose names Kafka
    accepts; an entity used the keys its clients used."""
    pairs = list(zip(res.column("user").to_pylist(), res.column("client_id").to_pylist(), strict=True))
    wires = [entity_wire(level, u, c) if used.get((u, c)) else None for u, c in pairs]
    keys: dict[tuple[tuple[str, str | None], ...], set[str]] = {}
    for pair, w in zip(pairs, wires, strict=True):
        if w is not None and settable(w):
            keys.setdefault(tuple(w.items()), set()).update(used[pair])
    distinct = sorted(keys)
    ids = {e: i for i, e in enumerate(distinct)}
    of_pair = np.array([-1 if w is None else ids.get(tuple(w.items()), -1) for w in wires], dtype=np.int64)
    return Entities(of_pair, [dict(e) for e in distinct], [frozenset(keys[e]) for e in distinct])


def store_prefixes(snapshot: Snapshot) -> set[str]:
    """The client-id prefixes of the store's ``client-id-prefix`` entities (whatever keys they hold)."""
    return {e.client_id_prefix for e in snapshot.entities if isinstance(e.client_id_prefix, str)}


def prefix_entities(config: QuotaConfig, res_a: pa.Table, used: Mapping[tuple[str, str], frozenset[str]],
                    prefixes: set[str], keys: tuple[str, ...], active: Active | None = None,
                    min_active: int = 1) -> tuple[Entities, pa.Table]:  # fmt: skip
    """``client-id-prefix`` entities and the proposal config's resolution (``res_b``).

    A prefix's bucket for a quota type is every client the model resolves to it (``quota_tags``, the engine's and
    the backtest's code) in the proposal config: an exact client-id entity, a longer prefix or a user level takes
    the client out, per type. Which clients that is depends on which prefixes hold which keys, and a prefix gets
    a key only if some client of its bucket used it; so keys whose bucket is empty (every client taken by a more
    specific entity) are dropped and the config resolved again, until none is (keys only go, so this ends). Keys
    whose bucket was seen in fewer than ``min_active`` seconds (``active``) are dropped the same way."""
    pairs = list(zip(res_a.column("user").to_pylist(), res_a.column("client_id").to_pylist(), strict=True))
    names = sorted(prefixes)
    starting: dict[str, set[str]] = {p: set() for p in names}  # keys used by clients whose id starts with p
    lookup = PrefixIndex(names)
    for pair in pairs:
        for p in lookup.matches(pair[1]):
            starting[p].update(k for k in used.get(pair, ()) if k in keys)
    held = [starting[p] for p in names]
    while True:
        names, held = [p for p, h in zip(names, held, strict=True) if h], [h for h in held if h]
        index = {p: i for i, p in enumerate(names)}
        wire: list[dict[str, str | None]] = [{PREFIX_LEVEL: p} for p in names]
        ents = Entities(np.full(len(pairs), -1, dtype=np.int64), wire, [frozenset(h) for h in held])
        res_b = resolve_clients(proposal_config(config, ents), pairs)
        by_type: dict[str, np.ndarray] = {}
        for t in QUOTA_TYPES:
            tags = zip(res_b.column(f"{t}_tag_user").to_pylist(), res_b.column(f"{t}_tag_client_id").to_pylist(),
                       strict=True)  # fmt: skip
            by_type[t] = np.array([index.get(c, -1) if u == PREFIX_TAG_USER and pair in used else -1
                                   for (u, c), pair in zip(tags, pairs, strict=True)], dtype=np.int64)  # fmt: skip
        found: list[set[str]] = [set() for _ in names]  # the keys some client of the prefix's bucket used
        for t, of_pair in by_type.items():
            for i in np.flatnonzero(of_pair >= 0).tolist():
                found[of_pair[i]].update(k for k in used[pairs[i]] if KEY_TYPE[k] == t and k in held[of_pair[i]])
        if active is not None:
            seen = Entities(ents.of_pair, wire, [frozenset(f) for f in found], by_type)
            found = [set(k) for k in with_evidence(seen, pairs, active, min_active).keys]
        if found == held:
            break
        held = found
    first = np.full(len(pairs), -1, dtype=np.int64)
    for t in QUOTA_TYPES:
        first = np.where(first >= 0, first, by_type[t])
    return Entities(first, wire, ents.keys, by_type), res_b


def placeholder(entity: int) -> float:
    """The proposal config's value for an entity's key until the value is known: negative, naming the entity."""
    return -float(entity + 1)


def proposal_config(config: QuotaConfig, ents: Entities) -> QuotaConfig:
    """The store's config with every entity's keys set (to placeholders), as ``alter`` would set them."""
    return config.with_changes([(QuotaEntity.from_wire(wire), {key: placeholder(e) for key in sorted(ents.keys[e])})
                                for e, wire in enumerate(ents.wire) if ents.keys[e]])  # fmt: skip


class Plan:
    """What every task needs: both configs per resolution row, each row's entity, the trace's seconds, the
    broker names by code, the settings and the sink."""

    def __init__(self, res_a: pa.Table, res_b: pa.Table, ents: Entities, brokers: list[str], first_second: int,
                 last_second: int, windows: WindowSettings, advisor: AdvisorSettings, sink: TableSink,
                 headroom: float = job.DEFAULT_HEADROOM) -> None:  # fmt: skip
        self.res_a, self.res_b = res_a, res_b
        self.views_a = {t: ManagerView.of_resolution(res_a, t) for t in QUOTA_TYPES}
        self.entity = ents.of_pair
        self.by_type = ents.by_type
        self.entities = len(ents.wire)
        self.brokers = pa.array(brokers, pa.string())
        self.first_second, self.last_second = first_second, last_second
        self.windows, self.advisor, self.headroom = windows, advisor, headroom
        self.acc = sink.acc

    def proposed(self, usage: pa.Table) -> pa.Table:
        """The proposal config's resolution with this partition's values in place of the placeholders."""
        res = self.res_b
        for key in self.advisor.keys:
            t = KEY_TYPE[key]
            rows = usage.filter(pc.equal(usage["key"], key))
            value = np.full(self.entities, np.nan)
            value[rows["entity"].to_numpy()] = rows["recommended"].to_numpy()
            col = f"{t}_limit"
            limit = res.column(col).to_numpy(zero_copy_only=False).astype(np.float64)  # null -> nan
            holder = np.where(limit < 0, -limit - 1, -1).astype(np.int64)
            filled = np.where(holder >= 0, value[np.maximum(holder, 0)], limit)
            res = res.set_column(res.schema.get_field_index(col), col, pa.array(filled, pa.float64(),
                                                                                 from_pandas=True))  # fmt: skip
        return res

    def run(self, table: pa.Table) -> pa.Table:
        """One partition: usage and proposed values of its entities, decisions under both configs."""
        rows = RequestRows.of_arrow(table, table.column("_broker").to_numpy().astype(np.int64))
        pair = table.column("_pair").to_numpy().astype(np.int64)
        order = time_order(rows.ts_ms, rows.seq)
        if order is not None:
            rows, pair = rows.take(order), pair[order]
        m = metered(rows)
        entity = self.entity[pair]
        by_type = None if self.by_type is None else {t: e[pair] for t, e in self.by_type.items()}
        before = decide_rows(rows, pair, self.views_a, self.windows, windows=True)
        throttled = dict(zip(QUOTA_TYPES, (before.throttle_ms_produce, before.throttle_ms_fetch,
                                           before.throttle_ms_request), strict=True))  # fmt: skip
        window_s = self.windows.samples * self.windows.window_seconds
        usage = usage_table(rows, m, UsageInputs(entity, self.first_second, self.last_second, by_type, window_s,
                                                 throttled), self.advisor)  # fmt: skip
        res_b = self.proposed(usage)
        views_b = {t: ManagerView.of_resolution(res_b, t) for t in QUOTA_TYPES}
        after = decide_rows(rows, pair, views_b, self.windows, windows=True)
        send_tables(
            self.acc, window_table(before, self.res_a, self.brokers),
            entity_table(before, self.res_a, self.brokers, self.headroom), window_table(after, res_b, self.brokers),
            usage, outcome_table(rows, m, entity, [before.throttle_ms, after.throttle_ms]),
        )  # fmt: skip
        cols = [pa.array(rows.broker, pa.int32()), pa.array(rows.seq, pa.int64()),
                *(pa.array(c, pa.int64()) for c in (*before.columns, *after.columns))]  # fmt: skip
        names = ["_broker", "seq", *(f.name for f in REQUEST_DECISION_FIELDS), *(f.name for f in PROPOSED_FIELDS)]
        return pa.table(cols, names=names)


SINK_SCHEMAS: Final = (WINDOW_SCHEMA, ENTITY_SCHEMA, WINDOW_SCHEMA, USAGE_SCHEMA, OUTCOME_SCHEMA)


def partition_fn(run: Callable[[pa.Table], pa.Table]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``mapInArrow``'s function for a plan's ``run``: one partition's batches as one table (an empty partition
    yields nothing), the plan's result cut to the backtest's output batches. The advisor's and the shadow report's."""
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = list(batches)
        if not received or not sum(b.num_rows for b in received):
            return
        yield from run(pa.Table.from_batches(received)).to_batches(max_chunksize=OUT_BATCH_ROWS)

    return fn


def _recorded_exprs() -> dict[str, Any]:
    """:func:`.advisor.metered`'s ``records`` as Spark expressions: the key's manager records the row."""
    from pyspark.sql import functions as F

    api, follower = F.col("api_key"), F.col("is_follower")
    exempt = api.isin(*sorted(EXEMPT_THROTTLE_API_KEYS)) | follower | (
        (api == API_PRODUCE) & (F.coalesce(F.col("acks"), F.lit(1)) == 0))  # fmt: skip
    return {PRODUCER_BYTE_RATE: api == API_PRODUCE, CONSUMER_BYTE_RATE: (api == API_FETCH) & ~follower,
            REQUEST_PERCENTAGE: ~exempt}  # fmt: skip


Pair = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Active:
    """The epoch seconds in which each (user, client_id) was recorded: one row per (user, client_id, second) with,
    per key asked for, whether the key's manager recorded one of its requests then (any broker)."""

    table: pa.Table

    def seconds(self, pairs: Sequence[Pair], of_pair: np.ndarray, key: str) -> dict[int, int]:
        """Per entity (``of_pair``: each of ``pairs``' entity for the key's type, -1: none): the epoch seconds in
        which the key's manager recorded a request of one of its clients, counted once however many clients or
        brokers."""
        t = self.table
        if key not in t.column_names or not t.num_rows or not len(pairs):
            return {}
        t = t.filter(t[key])
        names = pa.array([f"{u}\x00{c}" for u, c in pairs], pa.string())
        idx = pc.index_in(pc.binary_join_element_wise(t["user"], t["client_id"], "\x00"), value_set=names)
        idx_np = np.asarray(pc.fill_null(idx, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
        entity = np.where(idx_np >= 0, of_pair[np.maximum(idx_np, 0)], -1)
        keep = entity >= 0
        second = t["second"].to_numpy()[keep].astype(np.int64)
        if not len(second):
            return {}
        distinct = np.unique(entity[keep] * (1 << 40) + (second - int(second.min())))
        counts = np.bincount(distinct >> 40)
        return {int(e): int(counts[e]) for e in np.flatnonzero(counts)}


@dataclass(frozen=True, slots=True)
class Clients:
    """The distinct-clients query: (broker, user, client_id) seen, the keys each (user, client_id) used (of those
    asked for) and in which epoch seconds (the evidence behind a value), the trace's span."""

    found: list[tuple[str, str, str]]
    used: dict[Pair, frozenset[str]]
    first_ms: int
    last_ms: int
    active: Active = field(default_factory=lambda: Active(pa.table({"user": [], "client_id": [], "second": []})))


def clients(good: Any, keys: tuple[str, ...]) -> Clients:
    """One aggregation by (broker, user, client_id, epoch second), brought to the driver as Arrow (a row per
    second a client was seen on a broker: the evidence behind a value), the rest with pyarrow."""
    from pyspark.sql import functions as F

    recorded = _recorded_exprs()
    t = good.groupBy("broker", "user", "client_id", F.floor(F.col("ts_ms") / 1000).alias("second")).agg(
        F.min("ts_ms").alias("first"), F.max("ts_ms").alias("last"),
        *(F.max(recorded[k]).alias(k) for k in keys),
    ).toArrow()  # fmt: skip
    if not t.num_rows:
        return Clients([], {}, 0, 0)
    for k in keys:  # a null flag (no row of the group) is not a use
        t = t.set_column(t.schema.get_field_index(k), k, pc.fill_null(t[k], False))
    found = t.group_by(["broker", "user", "client_id"]).aggregate([]).to_pylist()
    per_pair = t.group_by(["user", "client_id"]).aggregate([(k, "max") for k in keys]).to_pylist()
    used = {(r["user"], r["client_id"]): frozenset(k for k in keys if r[f"{k}_max"]) for r in per_pair}
    seconds = t.group_by(["user", "client_id", "second"]).aggregate([(k, "max") for k in keys])
    seconds = seconds.rename_columns([c.removesuffix("_max") for c in seconds.column_names])
    span = pc.min_max(t["first"]).as_py()["min"], pc.min_max(t["last"]).as_py()["max"]
    return Clients(sorted((r["broker"], r["user"], r["client_id"]) for r in found),
                   used, int(span[0]), int(span[1]), Active(seconds))  # fmt: skip


def with_evidence(ents: Entities, pairs: Sequence[Pair], active: Active, min_active: int) -> Entities:
    """``ents`` with the keys seen in fewer than ``min_active`` seconds taken off: no value is proposed from
    thin evidence (the store keeps what it holds), and the proposal config is built without them, so the
    backtest and the applied proposal agree."""
    counts = {k: active.seconds(pairs, ents.of_type(KEY_TYPE[k]), k) for k in KEY_TYPE}
    keys = [frozenset(k for k in ks if counts[k].get(e, 0) >= min_active) for e, ks in enumerate(ents.keys)]
    return Entities(ents.of_pair, ents.wire, keys, ents.by_type)


def run(spec: RecommendSpec, *, master: str | None = None, spark: Any = None,
        progress: Progress | None = None) -> job.Summary:  # fmt: skip
    """The whole job: one read of the request events, one shuffle, both configs in one loop per partition."""
    from pyspark.sql import functions as F

    from quotaflow.pipeline.backtest import _write, _write_arrow

    spec.validate()
    summary = job.Summary("spark")
    with summary.timed("spark_start", progress):
        if spark is None:
            from quotaflow.pipeline.session import get_session

            spark = get_session("local", master)
    snapshot = _snapshot(spec.store)
    config = QuotaConfig.from_snapshot(snapshot, spec.job().excluded_principals())
    windows = spec.job().windows()
    if spec.out.exists():
        shutil.rmtree(spec.out)
    with summary.timed("read", progress):
        req = read_input(spark, spec.events, REQUESTS_DIR, spec.out, job.DECIDE_COLUMNS)
    if req is None:
        raise CommandError(f"no request events under {spec.events / REQUESTS_DIR}")
    summary.counts.update(requests=req.total, requests_quarantined=req.quarantined)
    with summary.timed("clients", progress):
        found = clients(req.good, spec.advisor.keys)
    if not found.found:
        raise CommandError(f"no valid request events under {spec.events / REQUESTS_DIR} to recommend from")
    brokers = sorted({b for b, _, _ in found.found})
    res_a = resolve_clients(config, [(u, c) for _, u, c in found.found])
    # principals excluded from client quotas (quotaflow.quota.excluded.principals) are recorded by no manager
    used = {p: k for p, k in found.used.items() if p[0] not in config.excluded}
    pairs = list(zip(res_a.column("user").to_pylist(), res_a.column("client_id").to_pylist(), strict=True))
    if spec.level == PREFIX_LEVEL:
        ents, res_b = prefix_entities(config, res_a, used, store_prefixes(snapshot) | set(spec.prefixes),
                                      spec.advisor.keys, found.active, spec.advisor.min_active_seconds)  # fmt: skip
    else:
        ents = with_evidence(entities_of(res_a, spec.level, used), pairs, found.active,
                             spec.advisor.min_active_seconds)  # fmt: skip
        res_b = resolve_clients(proposal_config(config, ents), [(u, c) for _, u, c in found.found])
    entity_group = np.where(ents.of_pair >= 0, ents.of_pair, len(ents.wire) + np.arange(res_a.num_rows))
    component = components(res_a, *(res_b.column(f"{t}_qid").to_pylist() for t in QUOTA_TYPES),
                           entity_group.tolist())  # fmt: skip
    keys = pa.table({"user": res_a.column("user"), "client_id": res_a.column("client_id"),
                     "_pair": pa.array(np.arange(res_a.num_rows), pa.int32()),
                     "_component": pa.array(component, pa.int64())})  # fmt: skip
    sink = TableSink(spark, SINK_SCHEMAS)
    plan = Plan(res_a, res_b, ents, brokers, found.first_ms // 1000, found.last_ms // 1000, windows, spec.advisor,
                sink, spec.advisor.headroom)  # fmt: skip
    window_s = windows.samples * windows.window_seconds
    code = F.create_map(*[x for i, b in enumerate(brokers) for x in (F.lit(b), F.lit(i))])[F.col("broker")]
    df = req.good.join(F.broadcast(spark.createDataFrame(keys)), ["user", "client_id"], "inner")
    df = df.withColumn("_broker", code)
    loop = [F.coalesce(F.col("acks"), F.lit(1).cast("byte")).alias("acks") if c == "acks" else F.col(c)
            for c in LOOP_COLUMNS]  # fmt: skip
    narrow = df.select(*loop, "_component").repartition("_component").drop("_component")
    fields = [*REQUEST_DECISION_FIELDS, *PROPOSED_FIELDS]
    schema = f"_broker int, seq long, {', '.join(f'{f.name} long' for f in fields)}"
    names = F.array(*[F.lit(b) for b in brokers])
    decided = narrow.mapInArrow(partition_fn(plan.run), schema).select(
        F.element_at(names, F.col("_broker") + 1).alias("broker"), "seq", *[f.name for f in fields])  # fmt: skip
    with summary.timed("decisions", progress):
        _write(decided, spec.out / job.DECISIONS)
    with summary.timed("proposal", progress):
        win_a, ent_a, win_b, usage, outcome = sink.all_tables()
        _write_arrow(win_a, spec.out / job.WINDOWS)
        _write_arrow(ent_a, spec.out / job.ENTITIES)
        _write_arrow(win_b, spec.out / PROPOSED_WINDOWS)
        cmp = compare_windows(win_a, win_b)
        _write_arrow(cmp, spec.out / job.COMPARE)
        _write_arrow(compare_summary(cmp), spec.out / job.COMPARE_SUMMARY)
        named_usage = name_usage(usage, ents, pairs, snapshot, found.active, spec.advisor)
        _write_arrow(named_usage, spec.out / USAGE)
        _write_arrow(name_outcome(outcome, ents), spec.out / OUTCOME)
        proposal = proposal_json(named_usage)
        (spec.out / PROPOSAL).write_text(json.dumps(proposal, indent=2) + "\n", encoding="utf-8")
    summary.counts.update(windows=win_a.num_rows, entities=len(ents.wire), proposed=len(proposal))
    summary.extra.update(advisor={"entity_type": spec.level, "keys": list(spec.advisor.keys),
                                  "prefixes": [w[PREFIX_LEVEL] for w in ents.wire if PREFIX_LEVEL in w],
                                  "percentile": spec.advisor.percentile, "headroom": spec.advisor.headroom,
                                  "min_rate": spec.advisor.min_rate,
                                  "min_active_seconds": spec.advisor.min_active_seconds, "window_seconds": window_s,
                                  "first_second": found.first_ms // 1000, "last_second": found.last_ms // 1000,
                                  "store": store_identity(spec.store)})  # fmt: skip
    summary.write(spec.out)
    return summary


def _entity_columns(entity: pa.Array | pa.ChunkedArray, ents: Entities) -> list[pa.Array]:
    idx = np.asarray(pc.fill_null(entity, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return [pa.array([w.get(part) for w in ents.wire], pa.string()).take(pa.array(idx)) for part in ENTITY_PARTS]


def name_usage(usage: pa.Table, ents: Entities, pairs: Sequence[Pair], snapshot: Snapshot, active: Active,
               settings: AdvisorSettings) -> pa.Table:  # fmt: skip
    """Usage rows with their entity's names and the evidence behind each value: what the store holds for the
    entity, the quota its clients are held to now and which entity supplies it (the admin's resolve, the
    smallest over its clients), the seconds it was active and throttled, whether the value is proposed, and
    why a person should look twice (:func:`warning`)."""
    from quotaflow.admin.local import QuotaIndex

    usage = usage.sort_by([("entity", "ascending"), ("key", "ascending")])
    entity = usage["entity"].to_numpy().tolist()
    keys = usage["key"].to_pylist()
    current_value = [snapshot.entities.get(QuotaEntity.from_wire(ents.wire[e]), {}).get(k)
                     for e, k in zip(entity, keys, strict=True)]  # fmt: skip
    index = QuotaIndex(snapshot)
    resolved = {p: index.resolve(*p) for p in set(pairs)}
    in_force: dict[tuple[int, str], tuple[float, str]] = {}
    counts = {k: active.seconds(pairs, ents.of_type(KEY_TYPE[k]), k) for k in set(keys)}
    for k in set(keys):
        for pair, e in zip(pairs, ents.of_type(KEY_TYPE[k]).tolist(), strict=True):
            q = resolved[pair].quotas[k]
            if e >= 0 and q.value is not None and q.entity is not None:
                prev = in_force.get((e, k))
                if prev is None or q.value < prev[0]:
                    in_force[(e, k)] = (q.value, "{" + entity_text(q.entity.to_wire()) + "}")
    current_limit = [in_force.get((e, k), (None, None))[0] for e, k in zip(entity, keys, strict=True)]
    current_source = [in_force.get((e, k), (None, None))[1] for e, k in zip(entity, keys, strict=True)]
    seen = [counts[k].get(e, 0) for e, k in zip(entity, keys, strict=True)]
    throttled = usage["throttled_seconds"].to_pylist()
    share = [t / a if a else 0.0 for t, a in zip(throttled, seen, strict=True)]
    proposed = [k in ents.keys[e] for e, k in zip(entity, keys, strict=True)]
    recommended = usage["recommended"].to_pylist()
    lifts = [p and lim is not None and r > lim for p, lim, r in zip(proposed, current_limit, recommended, strict=True)]
    warnings = [warning(proposed[i], lifts[i], seen[i], share[i], recommended[i], current_limit[i], current_source[i],
                        settings.min_active_seconds) for i in range(usage.num_rows)]  # fmt: skip
    cols = [*_entity_columns(usage["entity"], ents), *(usage[f.name] for f in USAGE_SCHEMA if f.name != "entity"),
            pa.array(current_value, pa.float64()), pa.array(current_limit, pa.float64()),
            pa.array(current_source, pa.string()), pa.array(seen, pa.int64()), pa.array(share, pa.float64()),
            pa.array(proposed, pa.bool_()), pa.array(lifts, pa.bool_()), pa.array(warnings, pa.string())]  # fmt: skip
    return pa.table(cols, schema=USAGE_OUT_SCHEMA)


def warning(proposed: bool, lifts: bool, active: int, share: float, recommended: float, limit: float | None,
            source: str | None, min_active: int) -> str | None:  # fmt: skip
    """Why a person should look twice at a row: a value withheld for thin evidence, or one that lifts the quota
    in force (a throttled client's traffic is what its quota let through: demand above it is not evidence that
    the tenant should get it)."""
    if not proposed:
        kept = "no quota" if limit is None else f"{format_value(limit)} from {source}"
        return (f"thin evidence: active {active} s (fewer than --min-active-seconds {min_active}); "
                f"not proposed, {kept} stays in force")
    if lifts and limit is not None:
        return (f"lifts the quota in force, {format_value(limit)} from {source}, {recommended / limit:.1f}x; "
                f"throttled {share:.0%} of its active seconds under it: raise it only if that demand is wanted")
    return None


def format_value(value: float) -> str:
    """A quota as a person reads it: whole numbers with thousands separators, others to 3 significant figures."""
    return f"{value:,.0f}" if value == int(value) else f"{value:.3g}"


def name_outcome(outcome: pa.Table, ents: Entities) -> pa.Table:
    """Outcome rows with their entity's names, the entities whose throttle time changes most first."""
    delta = pc.subtract(outcome["throttle_s_after"], outcome["throttle_s_before"])
    cols = [*_entity_columns(outcome["entity"], ents), *(outcome[f.name] for f in OUTCOME_SCHEMA if f.name != "entity"),
            delta]  # fmt: skip
    table = pa.table(cols, schema=OUTCOME_OUT_SCHEMA)
    order = np.lexsort((np.arange(table.num_rows), -np.abs(np.asarray(delta.to_numpy(zero_copy_only=False)))))
    return table.take(pa.array(order))


def proposal_json(usage: pa.Table) -> list[dict[str, object]]:
    """``client-quotas --describe --output json``'s shape: one entry per entity, its proposed values (not those
    withheld for thin evidence)."""
    values: dict[tuple[str | None, ...], dict[str, float]] = {}
    columns = [f.name for f in ENTITY_COLUMNS]
    for r in usage.filter(usage["proposed"]).select([*columns, "key", "recommended"]).to_pylist():
        values.setdefault(tuple(r[c] for c in columns), {})[r["key"]] = r["recommended"]
    found = []
    for names, vals in sorted(values.items(), key=lambda kv: tuple(n or "" for n in kv[0])):
        wire = {k: v for k, v in zip(ENTITY_PARTS, names, strict=True) if v is not None}
        found.append(DescribedEntity(QuotaEntity.from_wire(wire), vals))
    return describe_to_json(found)

