"""``quotaflow replay``: the backtest's computation in one process, without Spark (pyarrow + numpy + the kernel).

Same inputs, same passes (:mod:`quotaflow.pipeline.decide`), same output layout as the Spark backtest; a test
checks the two write identical decisions. Rows are grouped with one stable sort per pass on an integer group key
(input already in (ts_ms, seq) order, as generated and logged data is, keeps that order inside each group).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from quotaflow.events import CONNECTIONS_DIR, REQUEST_DECISION_FIELDS, REQUESTS_DIR, read_dataset, split_malformed
from quotaflow.pipeline import job
from quotaflow.pipeline.connections import decide_all
from quotaflow.pipeline.decide import BytePass, RequestPass, WindowSettings, applied, byte_type
from quotaflow.pipeline.resolve import TYPE_CODE, QuotaConfig, resolve_clients
from quotaflow.pipeline.windows import entities_from_windows, window_rows

BATCH_ROWS: Final = 1 << 20
Progress = Callable[[str], None]


def _key_index(table: pa.Table, res: pa.Table) -> pa.Array:
    """Row -> index of its (user, client_id) in the resolution table (vectorised string match)."""
    sep = "\x00"
    keys = pc.binary_join_element_wise(table.column("user"), table.column("client_id"), sep)
    res_keys = pc.binary_join_element_wise(res.column("user"), res.column("client_id"), sep)
    return pc.index_in(keys, value_set=res_keys)


def prepare(table: pa.Table, config: QuotaConfig) -> pa.Table:
    """Attach every helper column the passes need (quota-ids, limits, enabled flags, byte type) to request rows."""
    pairs = table.select(["user", "client_id"]).group_by(["user", "client_id"]).aggregate([])
    res = resolve_clients(config, zip(pairs.column("user").to_pylist(), pairs.column("client_id").to_pylist(),
                                      strict=True))  # fmt: skip
    idx = _key_index(table, res)
    bt = byte_type(table)
    is_fetch = pa.array(bt == TYPE_CODE["fetch"])
    cols = {
        "request_qid": res.column("request_qid").take(idx),
        "request_limit": res.column("request_limit").take(idx),
        "request_enabled": res.column("request_enabled").take(idx),
        "byte_type": pa.array(bt, pa.int8()),
        "byte_qid": pc.if_else(is_fetch, res.column("fetch_qid").take(idx), res.column("produce_qid").take(idx)),
        "byte_limit": pc.if_else(is_fetch, res.column("fetch_limit").take(idx), res.column("produce_limit").take(idx)),
        "byte_enabled": pc.if_else(
            is_fetch, res.column("fetch_enabled").take(idx), res.column("produce_enabled").take(idx)
        ),
    }
    for name, col in cols.items():
        table = table.append_column(name, col)
    for part in ("tag_user", "tag_client_id"):  # the quota-ids, for windows and entities
        table = table.append_column(f"request_{part}", res.column(f"request_{part}").take(idx))
        table = table.append_column(f"byte_{part}", pc.if_else(
            is_fetch, res.column(f"fetch_{part}").take(idx), res.column(f"produce_{part}").take(idx)))  # fmt: skip
    return table


def group_order(table: pa.Table, keys: list[str]) -> npt.NDArray[np.int64]:
    """Row order grouping by ``keys`` then (ts_ms, seq): one stable sort on a combined integer key when the rows
    already come in (ts_ms, seq) order (generated and logged data do), else a full lexicographic sort."""
    ts = table.column("ts_ms").to_numpy()
    seq = table.column("seq").to_numpy()
    combined = np.zeros(table.num_rows, dtype=np.int64)
    for k in keys:
        col = table.column(k)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            code = pc.dictionary_encode(col).combine_chunks().indices.to_numpy().astype(np.int64)
        else:
            code = col.to_numpy().astype(np.int64)
        combined = combined * (int(code.max()) + 1 if len(code) else 1) + code
    in_order = len(ts) < 2 or bool(np.all((ts[1:] > ts[:-1]) | ((ts[1:] == ts[:-1]) & (seq[1:] > seq[:-1]))))
    if in_order:
        return np.argsort(combined, kind="stable").astype(np.int64)
    return np.lexsort((seq, ts, combined)).astype(np.int64)


def _slim(table: pa.Table, cols: list[str], broker_codes: pa.Array) -> pa.Table:
    """The columns a pass needs, with the broker as an integer code (grouping only needs equality)."""
    return table.select(cols).set_column(0, "broker", broker_codes)


def passes(table: pa.Table, settings: WindowSettings, compiled: bool = True) -> pa.Table:
    """Run the request pass then the byte pass; return the table with the four decision columns appended."""
    n = table.num_rows
    broker_codes = pc.dictionary_encode(table.column("broker")).combine_chunks().indices
    req = np.zeros(n, dtype=np.int64)
    cols = ["broker", "request_qid", "request_limit", "request_enabled", "ts_ms", "seq", "io_thread_ns",
            "network_thread_ns", "api_key", "acks", "is_follower"]  # fmt: skip
    slim = _slim(table, cols, broker_codes)
    order = group_order(slim, list(RequestPass.KEYS))
    sorted_req = slim.take(pa.array(order))
    rp = RequestPass(settings, compiled)
    for start in range(0, n, BATCH_ROWS):
        req[order[start : start + BATCH_ROWS]] = rp(sorted_req.slice(start, BATCH_ROWS))
    table = table.append_column(REQUEST_DECISION_FIELDS[2], pa.array(req, pa.int64()))

    produce = np.zeros(n, dtype=np.int64)
    fetch = np.zeros(n, dtype=np.int64)
    cols = ["broker", "byte_type", "byte_qid", "byte_limit", "byte_enabled", "ts_ms", "seq", "request_bytes",
            "response_bytes", "throttle_ms_request"]  # fmt: skip
    recorded = np.flatnonzero(table.column("byte_type").to_numpy() != 3)
    slim = _slim(table, cols, broker_codes).take(pa.array(recorded))
    sub_order = group_order(slim, list(BytePass.KEYS))
    order = recorded[sub_order]
    sorted_b = slim.take(pa.array(sub_order))
    bp = BytePass(settings, compiled)
    for start in range(0, len(order), BATCH_ROWS):
        p, f = bp(sorted_b.slice(start, BATCH_ROWS))
        rows = order[start : start + BATCH_ROWS]
        produce[rows] = p
        fetch[rows] = f
    table = table.append_column(REQUEST_DECISION_FIELDS[0], pa.array(produce, pa.int64()))
    table = table.append_column(REQUEST_DECISION_FIELDS[1], pa.array(fetch, pa.int64()))
    return table.append_column(REQUEST_DECISION_FIELDS[3], pa.array(applied(req, produce, fetch), pa.int64()))


def write_parts(table: pa.Table, out: Path, rows_per_file: int = BATCH_ROWS) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for i, start in enumerate(range(0, max(table.num_rows, 1), rows_per_file)):
        pq.write_table(table.slice(start, rows_per_file), out / f"part-{i:05d}.parquet")


def _drop_existing_decisions(table: pa.Table) -> pa.Table:
    existing = [f.name for f in REQUEST_DECISION_FIELDS if f.name in table.column_names]
    return table.drop_columns(existing) if existing else table


def decide_requests(table: pa.Table, config: QuotaConfig, settings: WindowSettings,
                    compiled: bool = True) -> pa.Table:  # fmt: skip
    """Decisions for good request rows, helper columns still attached (windows need them)."""
    return passes(prepare(_drop_existing_decisions(table), config), settings, compiled)


def run(spec: job.JobSpec, progress: Progress | None = None) -> job.Summary:
    """The whole replay job (same phases and outputs as the Spark backtest)."""
    spec.validate()
    summary = job.Summary("replay")
    settings = spec.windows()
    config = spec.quota_config()
    if spec.out.exists():
        shutil.rmtree(spec.out)
    with summary.timed("read", progress):
        requests = read_dataset(spec.events, REQUESTS_DIR)
        connections = read_dataset(spec.events, CONNECTIONS_DIR)
    if requests is not None:
        good, bad = split_malformed(requests, REQUESTS_DIR)
        summary.counts.update(requests=requests.num_rows, requests_quarantined=bad.num_rows)
        write_parts(bad, spec.out / job.QUARANTINE / REQUESTS_DIR)
        with summary.timed("decisions", progress):
            decided = decide_requests(good, config, settings)
        with summary.timed("write_decisions", progress):
            write_parts(decided.drop_columns([c for c in decided.column_names if c in job.HELPER_COLUMNS]),
                        spec.out / job.DECISIONS)  # fmt: skip
        with summary.timed("windows", progress):
            windows = window_rows(decided, settings)
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
