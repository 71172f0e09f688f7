"""``quotaflow replay``: the backtest's computation in one process, without Spark (pyarrow + numpy + the kernel).

Same inputs, same passes (:mod:`quotaflow.pipeline.decide`), same output layout as the Spark backtest; a test
checks the two write identical decisions. Rows are grouped with one stable sort per pass on an integer group key
(input already in (ts_ms, seq) order, as generated and logged data is, keeps that order inside each group).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from quotaflow.events import (
    CONNECTIONS_DIR,
    QUARANTINE_REASON,
    REQUEST_DECISION_FIELDS,
    REQUESTS_DIR,
    EventsRead,
    clean_by_statistics,
    dataset_files,
    load_events,
    read_dataset,
    schema_for,
    split_malformed,
)
from quotaflow.pipeline import job
from quotaflow.pipeline.connections import decide_all
from quotaflow.pipeline.decide import I64, Decided, ManagerView, RequestRows, WindowSettings, codes, decide_rows
from quotaflow.pipeline.resolve import QUOTA_TYPES, QuotaConfig, components, resolve_clients
from quotaflow.pipeline.windows import entity_table, window_table

BATCH_ROWS: Final = 1 << 20
STATISTICS_COLUMNS: Final = ("ts_ms", "window_start_ms", "throttle_ms")
THREADS: Final = min(os.cpu_count() or 1, 4)  # decisions and writes (numpy, the kernel and Parquet release the GIL)
Progress = Callable[[str], None]


def resolve_pairs(table: pa.Table, config: QuotaConfig) -> tuple[I64, pa.Table]:
    """(each row's index into the resolution table, the resolution of the distinct (user, client_id) pairs)."""
    users, user_values = codes(table.column("user"))
    clients, client_values = codes(table.column("client_id"))
    width = max(len(client_values), 1)
    pair_codes = pc.dictionary_encode(pa.array(users * width + clients))
    distinct = pair_codes.dictionary.to_numpy()
    pairs = list(zip(user_values.take(pa.array(distinct // width)).to_pylist(),
                     client_values.take(pa.array(distinct % width)).to_pylist(), strict=True))  # fmt: skip
    res = resolve_clients(config, pairs)
    resolved = zip(res.column("user").to_pylist(), res.column("client_id").to_pylist(), strict=True)
    rank = {pair: i for i, pair in enumerate(resolved)}
    remap = np.array([rank[pair] for pair in pairs], dtype=np.int64)
    return remap[pair_codes.indices.to_numpy()], res


@dataclass(frozen=True, slots=True)
class Prepared:
    """Good request rows with what the passes read: numpy columns, each row's resolution row and manager views."""

    table: pa.Table
    rows: RequestRows
    pair: I64
    res: pa.Table
    views: dict[str, ManagerView]


def prepare(table: pa.Table, config: QuotaConfig) -> Prepared:
    pair, res = resolve_pairs(table, config)
    broker, _ = codes(table.column("broker"))
    views = {t: ManagerView.of_resolution(res, t) for t in QUOTA_TYPES}
    return Prepared(table, RequestRows.of_arrow(table, broker), pair, res, views)


def decide(p: Prepared, settings: WindowSettings, compiled: bool = True, windows: bool = True) -> Decided:
    """Decisions (and window rows) of the prepared rows, rows split over threads by (broker, component)."""
    component = np.array(components(p.res), dtype=np.int64)
    return decide_rows(p.rows, p.pair, p.views, settings, compiled, THREADS, component, windows)


def decision_table(p: Prepared, decided: Decided, with_inputs: bool = False) -> pa.Table:
    """The decisions as written: (broker, seq) + the four decision columns, or every input column + them."""
    base = p.table if with_inputs else p.table.select(list(job.DECISION_KEYS))
    for f, values in zip(REQUEST_DECISION_FIELDS, decided.columns, strict=True):
        base = base.append_column(f, pa.array(values, pa.int64()))
    return base


def windows_table(p: Prepared, decided: Decided) -> pa.Table:
    _, brokers = codes(p.table.column("broker"))
    return window_table(decided, p.res, brokers)


def entities_table(p: Prepared, decided: Decided, headroom: float) -> pa.Table:
    _, brokers = codes(p.table.column("broker"))
    return entity_table(decided, p.res, brokers, headroom)


def write_parts(table: pa.Table, out: Path, rows_per_file: int = BATCH_ROWS, threads: int = THREADS) -> None:
    """One Parquet dataset: files of at most ``rows_per_file`` rows, at least one per thread, written in parallel.

    String columns are dictionary-encoded in the file; the Arrow schema is not stored, so dictionary columns read
    back as plain strings (as Spark's files do). Min/max statistics are kept for the columns readers filter on
    (time, and the applied throttle); computing them for every column costs a quarter of the write."""
    out.mkdir(parents=True, exist_ok=True)
    n = table.num_rows
    per = max(1, min(rows_per_file, -(-n // threads)))
    dict_cols = [f.name for f in table.schema
                 if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)]  # fmt: skip

    stats = [c for c in STATISTICS_COLUMNS if c in table.column_names]

    def one(i: int) -> None:
        pq.write_table(table.slice(i * per, per), out / f"part-{i:05d}.parquet", use_dictionary=dict_cols,
                       write_statistics=stats, store_schema=False)  # fmt: skip

    files = max(1, -(-n // per))
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, range(files)))


def _drop_existing_decisions(table: pa.Table) -> pa.Table:
    existing = [f.name for f in REQUEST_DECISION_FIELDS if f.name in table.column_names]
    return table.drop_columns(existing) if existing else table


def decisions(table: pa.Table, config: QuotaConfig, settings: WindowSettings, compiled: bool = True,
              with_inputs: bool = False, windows: bool = True) -> tuple[pa.Table, pa.Table | None]:  # fmt: skip
    """Good request rows → (decisions as written, window rows or None)."""
    p = prepare(_drop_existing_decisions(table), config)
    decided = decide(p, settings, compiled, windows)
    return decision_table(p, decided, with_inputs), windows_table(p, decided) if windows else None


def read_requests(events: Path, with_inputs: bool) -> tuple[pa.Table, pa.Table, int] | None:
    """(good rows, quarantined rows, rows read). When the Parquet footers prove every row valid and the inputs are
    not written, only the columns the decisions read are read and no row is checked."""
    files = dataset_files(events / REQUESTS_DIR)
    if not files:
        return None
    if not with_inputs and clean_by_statistics(files, REQUESTS_DIR):
        table = read_dataset(events, REQUESTS_DIR, dictionary=True, columns=job.DECIDE_COLUMNS)
        assert table is not None
        return table, _empty_quarantine(REQUESTS_DIR), table.num_rows
    read = load_events(events, REQUESTS_DIR, dictionary=True)
    assert read is not None
    good, bad = split_malformed(read.table, REQUESTS_DIR)
    if not with_inputs:
        good = good.select(list(job.DECIDE_COLUMNS))
    bad = _with_invalid(bad, read.invalid)
    return good, bad, read.table.num_rows + read.invalid.num_rows


def _empty_quarantine(kind: str) -> pa.Table:
    return schema_for(kind).empty_table().append_column(QUARANTINE_REASON, pa.array([], pa.string()))


def _with_invalid(bad: pa.Table, invalid: pa.Table) -> pa.Table:
    """Malformed rows and lines that are not JSON, in one quarantine table."""
    if not invalid.num_rows:
        return bad
    bad = bad.cast(pa.schema([f.with_type(pa.string()) if pa.types.is_dictionary(f.type) else f for f in bad.schema]))
    return pa.concat_tables([bad, invalid], promote_options="permissive")


def run(spec: job.JobSpec, progress: Progress | None = None) -> job.Summary:
    """The whole replay job (same phases and outputs as the Spark backtest). Connections are decided on a second
    thread while the requests are (the acceptor replay is Python; the request loop, reads and writes release
    the GIL)."""
    spec.validate()
    summary = job.Summary("replay")
    settings = spec.windows()
    config = spec.quota_config()
    if spec.out.exists():
        shutil.rmtree(spec.out)
    with ThreadPoolExecutor(max_workers=1) as side:
        with summary.timed("read_connections"):
            connections = load_events(spec.events, CONNECTIONS_DIR)
        pending = None if connections is None else side.submit(_connections, spec, config, connections, summary)
        with summary.timed("read", progress):
            requests = read_requests(spec.events, spec.with_inputs)
        if requests is not None:
            _requests(spec, config, settings, requests, summary, progress)
        if pending is not None:
            with summary.timed("wait_connections", progress):
                pending.result()
    summary.write(spec.out)
    return summary


def _requests(spec: job.JobSpec, config: QuotaConfig, settings: WindowSettings,
              requests: tuple[pa.Table, pa.Table, int], summary: job.Summary,
              progress: Progress | None) -> None:  # fmt: skip
    good, bad, total = requests
    summary.counts.update(requests=total, requests_quarantined=bad.num_rows)
    write_parts(bad, spec.out / job.QUARANTINE / REQUESTS_DIR)
    with summary.timed("decisions", progress):
        p = prepare(_drop_existing_decisions(good), config)
        decided = decide(p, settings)
    with summary.timed("write_decisions", progress):
        write_parts(decision_table(p, decided, spec.with_inputs), spec.out / job.DECISIONS)
    with summary.timed("windows", progress):
        windows = windows_table(p, decided)
        write_parts(windows, spec.out / job.WINDOWS)
        write_parts(entities_table(p, decided, spec.headroom), spec.out / job.ENTITIES)
    summary.counts.update(windows=windows.num_rows)
    if spec.compare is not None:
        from quotaflow.pipeline.compare import compare_summary, compare_windows

        with summary.timed("compare", progress):
            _, other = decisions(good, spec.quota_config(spec.compare), settings)
            assert other is not None
            cmp = compare_windows(windows, other)
            write_parts(cmp, spec.out / job.COMPARE)
            write_parts(compare_summary(cmp), spec.out / job.COMPARE_SUMMARY)


def _connections(spec: job.JobSpec, config: QuotaConfig, connections: EventsRead, summary: job.Summary) -> None:
    good_c, bad_c = split_malformed(connections.table, CONNECTIONS_DIR)
    bad_c = _with_invalid(bad_c, connections.invalid)
    summary.counts.update(connections=connections.table.num_rows + connections.invalid.num_rows,
                          connections_quarantined=bad_c.num_rows)  # fmt: skip
    write_parts(bad_c, spec.out / job.QUARANTINE / CONNECTIONS_DIR)
    with summary.timed("connections"):
        decided_c = decide_all(good_c, spec.connection_config(), config.ip_rates)
        write_parts(decided_c, spec.out / job.CONNECTIONS)
