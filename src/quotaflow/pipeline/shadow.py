"""``quotaflow shadow report``: what a shadow quota set would have done to the traffic it saw, enforced vs shadow,
on Spark through the backtest's own loop (docs/shadow-report.md).

The shadow's quotas are the store's enforced quotas with the shadow's changes applied
(:meth:`~.resolve.QuotaConfig.with_changes`, the code the advisor builds its proposal config with); the changes come
from the store's shadow history (``--shadow ID|NAME``, default the running or latest shadow set) or from a
``proposal.json`` (``--proposal``, offline). Rows: those the gateway logged with that ``shadow_id`` when the events
carry the column, else all of them (the summary says which).

Plan, the advisor's with the shadow in place of the proposal: one read of the request events; on the driver the
distinct clients resolved under both configs and each client's component joining the quota-ids of both configs and
its report entity (a partition by component holds whole quota-ids of both and whole entities, every broker they
used); one shuffle by component; per partition the rows in time order once, then the engine's loop
(:func:`~.decide.decide_rows`) under the enforced and under the shadow quotas. Decisions of both go out narrow
(``decisions/``, in the event log's names); window rows of both, per-entity outcomes and the row-for-row check of
the logged decisions come back with the task. ``compare/`` is :func:`~.compare.compare_windows` of the two window
tables: the very table ``quotaflow backtest --compare`` writes for a store with the shadow's changes applied.
Connections: per broker, the acceptor replay (:func:`~.connections.decide_broker`) under both IP quota sets.

**Shadow = replay.** When the events carry the gateway's ``shadow_throttle_ms_*`` (and ``throttle_ms_*``) columns,
each logged row is compared with the replayed one; the counts of rows that differ are in ``_SUMMARY.json`` and
the differing rows (a bounded sample per partition) in ``mismatches/``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quotaflow.core.errors import CommandError
from quotaflow.core.validation import render_raw_entity
from quotaflow.events import (
    CONNECTION_DECISION_FIELDS,
    CONNECTIONS_DIR,
    REQUEST_DECISION_FIELDS,
    REQUESTS_DIR,
    RESULT_IP_THROTTLED,
    SHADOW_CONNECTION_FIELDS,
    SHADOW_ID,
    SHADOW_REQUEST_FIELDS,
)
from quotaflow.pipeline import job
from quotaflow.pipeline.advisor import OUTCOME_FIELDS, OUTCOME_SCHEMA, entity_wire, metered, outcome_table
from quotaflow.pipeline.backtest import LOOP_COLUMNS, TableSink, read_input, send_tables
from quotaflow.pipeline.compare import compare_summary, compare_windows
from quotaflow.pipeline.decide import Decided, ManagerView, RequestRows, WindowSettings, decide_rows, time_order
from quotaflow.pipeline.recommend import Entities, name_outcome, partition_fn
from quotaflow.pipeline.resolve import QUOTA_TYPES, QuotaConfig, components, resolve_clients
from quotaflow.pipeline.windows import WINDOW_SCHEMA, window_table
from quotaflow.store.base import EntityChange, ShadowSet, ShadowStore

Progress = Callable[[str], None]
LEVELS: Final = ("user", "client-id", "user,client-id")
"""What a report entity is: the tenant whose experience is compared (every client of it, every broker)."""
DEFAULT_LEVEL: Final = "user"
SHADOW_WINDOWS: Final = "shadow_windows"
TENANTS: Final = "tenants"
IPS: Final = "ips"
MISMATCHES: Final = "mismatches"
SIDES: Final = ("enforced", "shadow")
MISMATCH_SAMPLE: Final = 1000
"""Differing rows kept per partition and check (the counts are exact; the rows are for reading)."""

LIVE_REQUEST: Final = tuple(f.name for f in REQUEST_DECISION_FIELDS)
SHADOW_REQUEST: Final = tuple(f.name for f in SHADOW_REQUEST_FIELDS if f.name != SHADOW_ID.name)
LIVE_CONNECTION: Final = tuple(f.name for f in CONNECTION_DECISION_FIELDS)
SHADOW_CONNECTION: Final = tuple(f.name for f in SHADOW_CONNECTION_FIELDS if f.name != SHADOW_ID.name)
LOGGED: Final = "logged_"
"""Prefix of a logged decision column while the replay's own decision takes its name."""
CHECKS: Final = ("shadow", "live")
"""Logged shadow decisions vs the shadow replay; logged live decisions vs the enforced replay."""

DECISION_FIELDS: Final = (*REQUEST_DECISION_FIELDS, *(f for f in SHADOW_REQUEST_FIELDS if f.name != SHADOW_ID.name))
"""``decisions/``: the enforced replay under the live names, the shadow replay under the gateway's shadow names."""
CHECK_SCHEMA: Final = pa.schema([pa.field("check", pa.string()), pa.field("checked", pa.int64()),
                                 pa.field("mismatched", pa.int64())])  # fmt: skip
MISMATCH_SCHEMA: Final = pa.schema(
    [pa.field("check", pa.string()), pa.field("broker", pa.string()), pa.field("seq", pa.int64())]
    + [pa.field(f"{LOGGED}{n}", pa.int64()) for n in LIVE_REQUEST]
    + [pa.field(f"replayed_{n}", pa.int64()) for n in LIVE_REQUEST]
)
"""A logged request decision that differs from its replay: the logged columns (shadow ones under the live names
for ``check`` = shadow) beside the replayed ones."""
TENANT_METRICS: Final = OUTCOME_FIELDS
"""Per entity and side: throttled requests, throttle time (s), throttled seconds, delayed bytes (the advisor's
outcome)."""
TENANT_SCHEMA: Final = pa.schema(
    [pa.field("entity_user", pa.string()), pa.field("entity_client_id", pa.string()),
     pa.field("requests", pa.int64())]
    + [pa.field(f"{m}_{side}", OUTCOME_SCHEMA.field(f"{m}_before").type)
       for m in TENANT_METRICS for side in (*SIDES, "delta")]
)  # fmt: skip
IP_SCHEMA: Final = pa.schema(
    [pa.field("client_ip", pa.string()), pa.field("connections", pa.int64())]
    + [pa.field(f"{m}_{side}", pa.int64()) for m in ("delayed", "refused") for side in (*SIDES, "delta")]
)
"""Per client IP: connections the acceptor delayed (``accept_delay_ms`` > 0: a broker or listener rate) and refused
(``IP_THROTTLED``: its ``connection_creation_rate``, KIP-612), under each set."""


@dataclass(frozen=True, slots=True)
class Shadow:
    """The shadow a report evaluates: its changes over the enforced quotas, and the store's record of it (None for
    ``--proposal``: no logged rows belong to it)."""

    changes: tuple[EntityChange, ...]
    record: ShadowSet | None
    source: str
    restore: tuple[EntityChange, ...] = ()
    """A promoted shadow: the values the promotions since (its own included) replaced, newest batch first, so
    applied in order they give the enforced quotas just before it was promoted (the base it ran against)."""
    base: str = "the store's enforced quotas"

    def describe(self) -> dict[str, object]:
        r = self.record
        return {"source": self.source, "id": None if r is None else r.id, "name": None if r is None else r.name,
                "outcome": None if r is None else r.outcome, "started_by": None if r is None else r.started_by,
                "started_ms": None if r is None else r.started_ms, "changes": changes_json(self.changes),
                "base": self.base}  # fmt: skip

    def configs(self, enforced: QuotaConfig) -> tuple[QuotaConfig, QuotaConfig]:
        """(the quotas the shadow ran beside, those quotas with the shadow's changes): the enforced config, or for
        a promoted shadow the enforced config before its promotion."""
        base = enforced.with_changes(self.restore) if self.restore else enforced
        return base, base.with_changes(self.changes)


def changes_json(changes: Sequence[EntityChange]) -> list[dict[str, object]]:
    """``proposal.json``'s shape (null: the key removed)."""
    return [{"entity": e.to_wire(), "values": dict(sorted(v.items()))} for e, v in changes]


@dataclass(frozen=True, slots=True)
class ReportSpec:
    events: Path
    store: str | Path
    out: Path
    shadow: str | None = None
    """``--shadow ID|NAME``: a shadow set of the store's history (default: the running one, else the latest)."""
    proposal: Path | None = None
    """``--proposal FILE``: the changes from a ``proposal.json`` instead (offline: no shadow needs to have run)."""
    broker_config: Path | None = None
    level: str = DEFAULT_LEVEL

    def job(self) -> job.JobSpec:
        return job.JobSpec(self.events, self.store, self.out, self.broker_config)

    def validate(self) -> Shadow:
        """The backtest's input checks, then the shadow: a clear one-line error before Spark starts."""
        if self.level not in LEVELS:
            raise CommandError(f"--entity-type takes {', '.join(LEVELS)}; got {self.level!r}")
        if self.shadow is not None and self.proposal is not None:
            raise CommandError("--shadow and --proposal name the changes two ways: give one")
        self.job().validate()
        if self.proposal is not None:
            return proposal_shadow(self.proposal, self.store)
        return store_shadow(self.store, self.shadow)


def proposal_shadow(path: Path, store: str | Path) -> Shadow:
    """A ``proposal.json`` (``client-quotas --describe --output json``'s shape) read and validated by the code
    ``client-quotas --alter --from-file`` and ``shadow start --from-file`` run (the admin's plan over the store,
    nothing written); one invalid entity refuses it, as ``shadow start`` would."""
    from quotaflow.admin import Admin
    from quotaflow.admin.batch import read_proposal
    from quotaflow.store.factory import open_reader

    alterations = read_proposal(path)
    admin = Admin(open_reader(store))
    try:
        results, changes = admin.plan(alterations)
    finally:
        admin.close()
    failed = [r for r in results if not r.ok]
    if failed:
        raise CommandError(f"{path}: {len(failed)} of {len(results)} entities are invalid: " + "; ".join(
            f"{render_raw_entity(r.entity)}: {r.error.message}" for r in failed))  # fmt: skip
    return Shadow(tuple(changes), None, f"proposal {path}")


def store_shadow(store: str | Path, which: str | None) -> Shadow:
    """The store's shadow set ``which`` (its id, else its name: the latest of that name), or with None the running
    one, else the latest."""
    from quotaflow.store.factory import open_reader

    st = open_reader(store)
    try:
        if not isinstance(st, ShadowStore):
            raise CommandError(f"store {store} keeps no shadow sets; give the changes with --proposal FILE")
        running = st.shadow()
        sets = st.shadow_sets()
        promotions = st.promotions()
    finally:
        st.close()
    if which is None:
        chosen = running or (sets[-1] if sets else None)
        if chosen is None:
            raise CommandError(f"no shadow set in store {store}: start one with `quotaflow shadow start`, "
                               "or give the changes with --proposal FILE")  # fmt: skip
    else:
        by_id = [s for s in sets if which.isdigit() and s.id == int(which)]
        by_name = [s for s in sets if s.name == which]
        found = by_id or by_name
        if not found:
            known = ", ".join(f"{s.name} (id {s.id})" for s in sets[-5:]) or "none"
            raise CommandError(f"no shadow set {which!r} in store {store} (latest: {known})")
        chosen = found[-1]
    own = [i for i, p in enumerate(promotions) if p.kind == "promote" and p.shadow_id == chosen.id]
    if not own:
        return Shadow(tuple(chosen.changes), chosen, "store")
    since = promotions[own[-1]:]
    restore = tuple(c for p in reversed(since) for c in p.previous)
    return Shadow(tuple(chosen.changes), chosen, "store", restore,
                  f"the store's enforced quotas before promotion {since[0].id} (the values it and the "
                  f"{len(since) - 1} promote/rollback batches since replaced, restored)")  # fmt: skip


def _entities(res: pa.Table, level: str) -> Entities:
    """Each resolution row's report entity (every client has one), as the advisor names entities."""
    wires = [entity_wire(level, u, c) for u, c in zip(res.column("user").to_pylist(),
                                                       res.column("client_id").to_pylist(), strict=True)]  # fmt: skip
    distinct = sorted({tuple(w.items()) for w in wires}, key=lambda e: tuple(v or "" for _, v in e))
    ids = {e: i for i, e in enumerate(distinct)}
    of_pair = np.array([ids[tuple(w.items())] for w in wires], dtype=np.int64)
    return Entities(of_pair, [dict(e) for e in distinct], [frozenset()] * len(distinct))


def _check(table: pa.Table, order: np.ndarray | None, logged: tuple[str, ...], replayed: Decided, check: str,
           brokers: pa.Array) -> tuple[pa.Table, pa.Table]:  # fmt: skip
    """Rows whose logged applied decision (``logged[-1]``) is set, and of those the ones where any logged column
    differs from the replay (a column missing from the events counts as differing: nothing to reproduce)."""
    present = [n for n in logged if f"{LOGGED}{n}" in table.column_names]
    if logged[-1] not in present:
        none = pa.table({"check": [check], "checked": [0], "mismatched": [0]}, schema=CHECK_SCHEMA)
        return none, MISMATCH_SCHEMA.empty_table()
    cols = {}
    for n in logged:
        if n in present:
            col = table.column(f"{LOGGED}{n}").combine_chunks()
            col = col if order is None else col.take(pa.array(order))
            cols[n] = col
        else:
            cols[n] = pa.nulls(table.num_rows, pa.int64())
    checked = pc.is_valid(cols[logged[-1]]).to_numpy(zero_copy_only=False)
    differ = np.zeros(table.num_rows, dtype=bool)
    for n, mine in zip(logged, replayed.columns, strict=True):
        theirs = cols[n]
        same = pc.fill_null(pc.equal(theirs, pa.array(mine, pa.int64())), False).to_numpy(zero_copy_only=False)
        differ |= ~same
    bad = np.flatnonzero(checked & differ)
    counts = pa.table({"check": [check], "checked": [int(checked.sum())], "mismatched": [len(bad)]},
                      schema=CHECK_SCHEMA)  # fmt: skip
    keep = pa.array(bad[:MISMATCH_SAMPLE])
    broker = table.column("_broker").combine_chunks()
    seq = table.column("seq").combine_chunks()
    if order is not None:
        broker, seq = broker.take(pa.array(order)), seq.take(pa.array(order))
    rows = [pa.array([check] * len(keep), pa.string()), brokers.take(pc.cast(broker.take(keep), pa.int64())),
            seq.take(keep), *(cols[n].take(keep) for n in logged),
            *(pa.array(c, pa.int64()).take(keep) for c in replayed.columns)]  # fmt: skip
    return counts, pa.table(rows, schema=MISMATCH_SCHEMA)


SINK_SCHEMAS: Final = (WINDOW_SCHEMA, WINDOW_SCHEMA, OUTCOME_SCHEMA, CHECK_SCHEMA, MISMATCH_SCHEMA)


class Plan:
    """What every task needs: both configs per resolution row, each row's report entity, which logged decisions
    to check, the broker names by code, the window settings and the sink."""

    def __init__(self, res_a: pa.Table, res_b: pa.Table, entity: np.ndarray, brokers: list[str],
                 windows: WindowSettings, checks: dict[str, tuple[str, ...]], sink: TableSink) -> None:  # fmt: skip
        self.res_a, self.res_b = res_a, res_b
        self.views_a = {t: ManagerView.of_resolution(res_a, t) for t in QUOTA_TYPES}
        self.views_b = {t: ManagerView.of_resolution(res_b, t) for t in QUOTA_TYPES}
        self.entity = entity
        self.brokers = pa.array(brokers, pa.string())
        self.windows = windows
        self.checks = checks
        self.acc = sink.acc

    def run(self, table: pa.Table) -> pa.Table:
        """One partition: decisions under both sets, their windows, the entities' outcomes, the checks."""
        rows = RequestRows.of_arrow(table, table.column("_broker").to_numpy().astype(np.int64))
        pair = table.column("_pair").to_numpy().astype(np.int64)
        order = time_order(rows.ts_ms, rows.seq)
        if order is not None:
            rows, pair = rows.take(order), pair[order]
        enforced = decide_rows(rows, pair, self.views_a, self.windows, windows=True)
        shadow = decide_rows(rows, pair, self.views_b, self.windows, windows=True)
        counts, mismatches = [], []
        for check, replayed in (("shadow", shadow), ("live", enforced)):
            c, m = _check(table, order, self.checks[check], replayed, check, self.brokers)
            counts.append(c)
            mismatches.append(m)
        send_tables(
            self.acc, window_table(enforced, self.res_a, self.brokers), window_table(shadow, self.res_b, self.brokers),
            outcome_table(rows, metered(rows), self.entity[pair], [enforced.throttle_ms, shadow.throttle_ms]),
            pa.concat_tables(counts), pa.concat_tables(mismatches),
        )  # fmt: skip
        cols = [pa.array(rows.broker, pa.int32()), pa.array(rows.seq, pa.int64()),
                *(pa.array(c, pa.int64()) for c in (*enforced.columns, *shadow.columns))]  # fmt: skip
        return pa.table(cols, names=["_broker", "seq", *(f.name for f in DECISION_FIELDS)])


def _select_rows(df: Any, shadow: Shadow) -> tuple[Any, str]:
    """The rows the shadow decided: those logged with its ``shadow_id`` when the events carry the column."""
    from pyspark.sql import functions as F

    if shadow.record is None:
        return df, "all rows (--proposal: no shadow_id names its rows)"
    if SHADOW_ID.name not in df.columns:
        return df, "all rows (the events carry no shadow_id column)"
    return df.filter(F.col(SHADOW_ID.name) == F.lit(shadow.record.id)), f"rows logged with shadow_id {shadow.record.id}"


def _logged(df: Any, live: tuple[str, ...], shadow_names: tuple[str, ...],
            shadow: Shadow) -> tuple[Any, dict[str, tuple[str, ...]]]:  # fmt: skip
    """The logged decision columns renamed ``logged_*`` (the replay writes its own under the live names); the
    shadow ones only for a shadow of the store (a ``--proposal`` is not what the gateway logged)."""
    checks = {"live": live, "shadow": shadow_names}
    for check, names in checks.items():
        if check == "shadow" and shadow.record is None:
            continue
        for n in names:
            if n in df.columns:
                df = df.withColumnRenamed(n, f"{LOGGED}{n}")
    return df, checks


def tenants_table(outcome: pa.Table, ents: Entities) -> pa.Table:
    """Per report entity, enforced vs shadow and the difference, the entities whose experience changes most first
    (throttle time, then throttled seconds, requests and delayed bytes; then by name)."""
    named = name_outcome(outcome, ents)
    cols: dict[str, Any] = {"entity_user": named["entity_user"], "entity_client_id": named["entity_client_id"],
                            "requests": named["requests"]}  # fmt: skip
    keys: list[np.ndarray] = []
    for m in TENANT_METRICS:
        a, b = named[f"{m}_before"], named[f"{m}_after"]
        delta = pc.subtract(b, a)
        cols.update({f"{m}_enforced": a, f"{m}_shadow": b, f"{m}_delta": delta})
        keys.append(-np.abs(delta.to_numpy(zero_copy_only=False)))
    table = pa.table(cols).cast(TENANT_SCHEMA)
    names = [pc.fill_null(table[c], "").to_pylist() for c in ("entity_user", "entity_client_id")]
    rank = {k: i for i, k in enumerate(sorted(set(zip(*names, strict=True))))}
    by_name = np.array([rank[k] for k in zip(*names, strict=True)], dtype=np.int64)
    throttle_s, seconds, requests, delayed = keys[1], keys[2], keys[0], keys[3]
    order = np.lexsort((by_name, delayed, requests, seconds, throttle_s)) if table.num_rows else np.zeros(0, int)
    return table.take(pa.array(order, pa.int64()))


def _connections(spark: Any, spec: ReportSpec, shadow: Shadow, base: QuotaConfig, shadow_cfg: QuotaConfig,
                 summary: job.Summary) -> None:  # fmt: skip
    """The connection replay under both IP quota sets, per broker; ``connections/`` per row, ``ips/`` per client
    IP, and the checks of the logged admissions."""
    from pyspark.sql import functions as F

    from quotaflow.pipeline.backtest import _with_fields, _write, _write_arrow

    conns = read_input(spark, spec.events, CONNECTIONS_DIR, spec.out, None)
    if conns is None:
        return
    summary.counts.update(connections=conns.total, connections_quarantined=conns.quarantined)
    df, rows = _select_rows(conns.good, shadow)
    df, checks = _logged(df, LIVE_CONNECTION, SHADOW_CONNECTION, shadow)
    keep = ["ts_ms", "broker", "listener", "client_ip", "seq", *(c for c in df.columns if c.startswith(LOGGED))]
    df = df.select(*keep)
    config = spec.job().connection_config()
    shadow_fields = tuple(f for f in SHADOW_CONNECTION_FIELDS if f.name != SHADOW_ID.name)

    def fn(table: pa.Table) -> pa.Table:
        from quotaflow.pipeline.connections import decide_broker

        enforced = decide_broker(table, config, base.ip_rates)
        other = decide_broker(table, config, shadow_cfg.ip_rates)
        for f, name in zip(shadow_fields, LIVE_CONNECTION, strict=True):
            enforced = enforced.append_column(f, other.column(name))
        return enforced

    out_schema = _with_fields(_with_fields(df.schema, CONNECTION_DECISION_FIELDS), shadow_fields)
    decided = df.groupBy("broker").applyInArrow(fn, out_schema)
    _write(decided, spec.out / job.CONNECTIONS)
    written = spark.read.parquet(str(spec.out / job.CONNECTIONS))

    def delayed(prefix: str) -> Any:
        return F.sum((F.col(f"{prefix}accept_delay_ms") > 0).cast("long"))

    def refused(prefix: str) -> Any:
        return F.sum((F.col(f"{prefix}result") == F.lit(RESULT_IP_THROTTLED)).cast("long"))

    per_ip = written.groupBy("client_ip").agg(
        F.count(F.lit(1)).alias("connections"), delayed("").alias("delayed_enforced"),
        delayed("shadow_").alias("delayed_shadow"), refused("").alias("refused_enforced"),
        refused("shadow_").alias("refused_shadow")).toArrow()  # fmt: skip
    ips = ips_table(per_ip)
    _write_arrow(ips, spec.out / IPS)
    summary.counts["selected_connections"] = int(pc.sum(ips["connections"]).as_py() or 0)
    found: dict[str, dict[str, int]] = {}
    for check, names in checks.items():
        logged = [n for n in names if f"{LOGGED}{n}" in written.columns]
        if (check == "shadow" and shadow.record is None) or names[-1] not in logged:
            found[check] = {"checked": 0, "mismatched": 0}
            continue
        mine = LIVE_CONNECTION if check == "live" else SHADOW_CONNECTION
        differ = F.lit(False)
        for n, m in zip(names, mine, strict=True):
            differ = differ | ~F.col(m).eqNullSafe(F.col(f"{LOGGED}{n}") if n in logged else F.lit(None))
        got = written.agg(F.sum(F.col(f"{LOGGED}{names[-1]}").isNotNull().cast("long")).alias("checked"),
                          F.sum((F.col(f"{LOGGED}{names[-1]}").isNotNull() & differ).cast("long"))
                          .alias("mismatched")).collect()[0]  # fmt: skip
        found[check] = {"checked": int(got["checked"] or 0), "mismatched": int(got["mismatched"] or 0)}
    summary.extra["connections"] = {"rows": rows, "check": found,
                                    "totals": {side: {m: _total(ips[f"{m}_{side}"]) for m in ("delayed", "refused")}
                                               for side in SIDES}}  # fmt: skip


def ips_table(per_ip: pa.Table) -> pa.Table:
    """Per client IP with deltas, the IPs whose admissions change most first (refused, then delayed)."""
    cols: dict[str, Any] = {"client_ip": per_ip["client_ip"], "connections": per_ip["connections"]}
    for m in ("delayed", "refused"):
        a, b = pc.fill_null(per_ip[f"{m}_enforced"], 0), pc.fill_null(per_ip[f"{m}_shadow"], 0)
        cols.update({f"{m}_enforced": a, f"{m}_shadow": b, f"{m}_delta": pc.subtract(b, a)})
    table = pa.table(cols).cast(IP_SCHEMA)
    if not table.num_rows:
        return table
    ip = pc.fill_null(table["client_ip"], "").to_pylist()
    rank = {k: i for i, k in enumerate(sorted(set(ip)))}
    order = np.lexsort((np.array([rank[k] for k in ip]), -np.abs(table["delayed_delta"].to_numpy()),
                        -np.abs(table["refused_delta"].to_numpy())))  # fmt: skip
    return table.take(pa.array(order, pa.int64()))


def run(spec: ReportSpec, *, master: str | None = None, spark: Any = None,
        progress: Progress | None = None) -> job.Summary:  # fmt: skip
    """The whole report: one read and one shuffle of the request events for both sets' decisions, windows and
    outcomes; one read of the connection events for both sets' admissions (a second Spark job beside it)."""
    shadow = spec.validate()
    summary = job.Summary("spark")
    with summary.timed("spark_start", progress):
        if spark is None:
            from quotaflow.pipeline.session import get_session

            spark = get_session("local", master)
    base, shadow_cfg = shadow.configs(spec.job().quota_config())
    windows = spec.job().windows()
    if spec.out.exists():
        shutil.rmtree(spec.out)
    summary.extra.update(shadow=shadow.describe(), entity_type=spec.level)
    with ThreadPoolExecutor(max_workers=1) as side:
        pending = side.submit(_connections, spark, spec, shadow, base, shadow_cfg, summary)
        with summary.timed("read", progress):
            req = read_input(spark, spec.events, REQUESTS_DIR, spec.out, None)
        if req is not None:
            summary.counts.update(requests=req.total, requests_quarantined=req.quarantined)
            df, rows = _select_rows(req.good, shadow)
            df, checks = _logged(df, LIVE_REQUEST, SHADOW_REQUEST, shadow)
            logged = [c for c in df.columns if c.startswith(LOGGED)]
            with summary.timed("clients", progress):
                found = sorted((r["broker"], r["user"], r["client_id"])
                               for r in df.select("broker", "user", "client_id").distinct().collect())  # fmt: skip
            summary.extra["requests"] = {"rows": rows}
            if found:
                _requests(spark, spec, df, found, logged, checks, base, shadow_cfg, windows, summary, progress)
        with summary.timed("wait_connections", progress):
            pending.result()
    if not summary.counts.get("selected_requests") and not summary.counts.get("selected_connections"):
        which = "valid events" if shadow.record is None else (
            f"events logged with shadow_id {shadow.record.id} (shadow {shadow.record.name!r})")  # fmt: skip
        raise CommandError(f"no {which} under {spec.events}: nothing to report")
    summary.write(spec.out)
    return summary


def _requests(spark: Any, spec: ReportSpec, df: Any, found: list[tuple[str, str, str]], logged: list[str],
              checks: dict[str, tuple[str, ...]], base: QuotaConfig, shadow_cfg: QuotaConfig,
              windows: WindowSettings, summary: job.Summary, progress: Progress | None) -> None:  # fmt: skip
    from pyspark.sql import functions as F

    from quotaflow.pipeline.backtest import _write, _write_arrow

    brokers = sorted({b for b, _, _ in found})
    pairs = sorted({(u, c) for _, u, c in found})
    res_a = resolve_clients(base, pairs)
    res_b = resolve_clients(shadow_cfg, pairs)
    ents = _entities(res_a, spec.level)
    component = components(res_a, *(res_b.column(f"{t}_qid").to_pylist() for t in QUOTA_TYPES),
                           ents.of_pair.tolist())  # fmt: skip
    keys = pa.table({"user": res_a.column("user"), "client_id": res_a.column("client_id"),
                     "_pair": pa.array(np.arange(res_a.num_rows), pa.int32()),
                     "_component": pa.array(component, pa.int64())})  # fmt: skip
    sink = TableSink(spark, SINK_SCHEMAS)
    plan = Plan(res_a, res_b, ents.of_pair, brokers, windows, checks, sink)
    code = F.create_map(*[x for i, b in enumerate(brokers) for x in (F.lit(b), F.lit(i))])[F.col("broker")]
    joined = df.join(F.broadcast(spark.createDataFrame(keys)), ["user", "client_id"], "inner")
    joined = joined.withColumn("_broker", code)
    loop = [F.coalesce(F.col("acks"), F.lit(1).cast("byte")).alias("acks") if c == "acks" else F.col(c)
            for c in LOOP_COLUMNS]  # fmt: skip
    narrow = joined.select(*loop, *logged, "_component").repartition("_component").drop("_component")
    schema = f"_broker int, seq long, {', '.join(f'{f.name} long' for f in DECISION_FIELDS)}"
    names = F.array(*[F.lit(b) for b in brokers])
    decided = narrow.mapInArrow(partition_fn(plan.run), schema).select(
        F.element_at(names, F.col("_broker") + 1).alias("broker"), "seq",
        *[f.name for f in DECISION_FIELDS])  # fmt: skip
    with summary.timed("decisions", progress):
        _write(decided, spec.out / job.DECISIONS)
    with summary.timed("compare", progress):
        win_a, win_b, outcome, counts, mismatches = sink.all_tables()
        _write_arrow(win_a, spec.out / job.WINDOWS)
        _write_arrow(win_b, spec.out / SHADOW_WINDOWS)
        cmp = compare_windows(win_a, win_b)
        _write_arrow(cmp, spec.out / job.COMPARE)
        _write_arrow(compare_summary(cmp), spec.out / job.COMPARE_SUMMARY)
        tenants = tenants_table(outcome, ents)
        _write_arrow(tenants, spec.out / TENANTS)
        _write_arrow(mismatches, spec.out / MISMATCHES)
    summary.counts.update(windows=win_a.num_rows, shadow_windows=win_b.num_rows, entities=tenants.num_rows,
                          selected_requests=int(pc.sum(tenants["requests"]).as_py() or 0))  # fmt: skip
    by_check = counts.group_by("check").aggregate([("checked", "sum"), ("mismatched", "sum")]).to_pylist()
    found_checks = {r["check"]: {"checked": int(r["checked_sum"]), "mismatched": int(r["mismatched_sum"])}
                    for r in by_check}  # fmt: skip
    summary.extra["requests"]["check"] = {c: found_checks.get(c, {"checked": 0, "mismatched": 0}) for c in CHECKS}
    summary.extra["totals"] = {side: {m: _total(tenants[f"{m}_{side}"]) for m in TENANT_METRICS} for side in SIDES}


def _total(col: pa.ChunkedArray) -> float | int:
    value = pc.sum(col).as_py()
    return 0 if value is None else round(value, 3) if isinstance(value, float) else int(value)
