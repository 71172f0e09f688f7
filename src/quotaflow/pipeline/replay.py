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

from quotaflow.events import CONNECTIONS_DIR, REQUEST_DECISION_FIELDS, REQUESTS_DIR, read_dataset, split_malformed
from quotaflow.pipeline import job
from quotaflow.pipeline.connections import decide_all
from quotaflow.pipeline.decide import (
    I64,
    ManagerView,
    RequestRows,
    WindowSettings,
    byte_types,
    codes,
    decide_rows,
)
from quotaflow.pipeline.resolve import QUOTA_TYPES, TYPE_CODE, QuotaConfig, components, resolve_clients
from quotaflow.pipeline.windows import entities_from_windows, window_rows

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


def helper_columns(p: Prepared) -> dict[str, pa.Array]:
    """The per-row helper columns the window pass reads (quota-ids, limits, flags, byte type and quota-id tags),
    taken from the resolution table; tags are dictionary arrays over it, so attaching them copies no strings."""
    bt = byte_types(p.rows.api_key, p.rows.is_follower)
    fetch = bt == TYPE_CODE["fetch"]
    request_idx = pa.array(p.pair.astype(np.int32))
    byte_idx = pa.array(p.pair.astype(np.int32) + fetch.astype(np.int32) * p.res.num_rows)  # fetch rows: 2nd half

    def request(part: str) -> pa.Array:
        return p.res.column(f"request_{part}").combine_chunks()

    def byte(part: str) -> pa.Array:
        return pa.concat_arrays([p.res.column(f"{t}_{part}").combine_chunks() for t in ("produce", "fetch")])

    cols: dict[str, pa.Array] = {}
    for part in ("qid", "limit", "enabled"):
        cols[f"request_{part}"] = request(part).take(request_idx)
        if part == "qid":
            cols["byte_type"] = pa.array(bt, pa.int8())
        cols[f"byte_{part}"] = byte(part).take(byte_idx)
    for part in ("tag_user", "tag_client_id"):
        cols[f"request_{part}"] = pa.DictionaryArray.from_arrays(request_idx, request(part))
        cols[f"byte_{part}"] = pa.DictionaryArray.from_arrays(byte_idx, byte(part))
    return cols


def decide(p: Prepared, settings: WindowSettings, compiled: bool = True) -> pa.Table:
    """The good rows with the four decision columns appended (schema order of REQUEST_DECISION_FIELDS)."""
    component = np.array(components(p.res), dtype=np.int64)  # threads split rows by (broker, component)
    produce, fetch, request, throttle = decide_rows(p.rows, p.pair, p.views, settings, compiled, THREADS, component)
    table = p.table
    for f, values in zip(REQUEST_DECISION_FIELDS, (produce, fetch, request, throttle), strict=True):
        table = table.append_column(f, pa.array(values, pa.int64()))
    return table


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


def decisions(table: pa.Table, config: QuotaConfig, settings: WindowSettings,
              compiled: bool = True) -> tuple[pa.Table, Prepared]:  # fmt: skip
    """Good request rows with their decisions (as written), and what :func:`with_helpers` needs for windows."""
    p = prepare(_drop_existing_decisions(table), config)
    return decide(p, settings, compiled), p


def with_helpers(decided: pa.Table, p: Prepared) -> pa.Table:
    """The decided rows with the helper columns the window pass reads."""
    for name, col in helper_columns(p).items():
        decided = decided.append_column(name, col)
    return decided


def decide_requests(table: pa.Table, config: QuotaConfig, settings: WindowSettings,
                    compiled: bool = True) -> pa.Table:  # fmt: skip
    """Decisions for good request rows, helper columns attached (windows need them)."""
    return with_helpers(*decisions(table, config, settings, compiled))


def run(spec: job.JobSpec, progress: Progress | None = None) -> job.Summary:
    """The whole replay job (same phases and outputs as the Spark backtest)."""
    spec.validate()
    summary = job.Summary("replay")
    settings = spec.windows()
    config = spec.quota_config()
    if spec.out.exists():
        shutil.rmtree(spec.out)
    with summary.timed("read", progress):
        requests = read_dataset(spec.events, REQUESTS_DIR, dictionary=True)
        connections = read_dataset(spec.events, CONNECTIONS_DIR)
    if requests is not None:
        good, bad = split_malformed(requests, REQUESTS_DIR)
        summary.counts.update(requests=requests.num_rows, requests_quarantined=bad.num_rows)
        write_parts(bad, spec.out / job.QUARANTINE / REQUESTS_DIR)
        with summary.timed("decisions", progress):
            decided, prepared = decisions(good, config, settings)
        with summary.timed("write_decisions", progress):
            write_parts(decided, spec.out / job.DECISIONS)
        with summary.timed("windows", progress):
            windows = window_rows(with_helpers(decided, prepared), settings)
            write_parts(windows, spec.out / job.WINDOWS)
            write_parts(entities_from_windows(windows, spec.headroom), spec.out / job.ENTITIES)
        summary.counts.update(windows=windows.num_rows)
        if spec.compare is not None:
            from quotaflow.pipeline.compare import compare_summary, compare_windows

            with summary.timed("compare", progress):
                other = decide_requests(good, spec.quota_config(spec.compare), settings)
                cmp = compare_windows(windows, window_rows(other, settings))
                write_parts(cmp, spec.out / job.COMPARE)
                write_parts(compare_summary(cmp), spec.out / job.COMPARE_SUMMARY)
    if connections is not None:
        good_c, bad_c = split_malformed(connections, CONNECTIONS_DIR)
        summary.counts.update(connections=connections.num_rows, connections_quarantined=bad_c.num_rows)
        write_parts(bad_c, spec.out / job.QUARANTINE / CONNECTIONS_DIR)
        with summary.timed("connections", progress):
            decided_c = decide_all(good_c, spec.connection_config(), config.ip_rates)
            write_parts(decided_c, spec.out / job.CONNECTIONS)
    summary.write(spec.out)
    return summary
