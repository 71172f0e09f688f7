"""Console fixtures: a store with one quota at several precedence levels and an admin user, the app, backtests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient

from quotaflow.admin import Admin, Alteration
from quotaflow.console import ConsoleConfig, create_app
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.store.credentials import hash_password
from quotaflow.store.sqlite import SqliteStore

ADMIN = ("admin", "s3cret")
OPERATOR = ("operator", "pa55")  # a store user who is not on the admin list
FAST_HASH = 1_000  # PBKDF2 iterations for test users: the real default is slow on purpose

QUOTAS = [
    (QuotaEntity(user="alice", client_id="ingest"), {"producer_byte_rate": 5_000_000.0}),
    (QuotaEntity(user="alice"), {"producer_byte_rate": 2_000_000.0, "consumer_byte_rate": 4_000_000.0}),
    (QuotaEntity(user=DEFAULT, client_id=DEFAULT), {"request_percentage": 50.0}),
    (QuotaEntity(user=DEFAULT), {"producer_byte_rate": 1_000_000.0}),
    (QuotaEntity(client_id="batch-loader"), {"producer_byte_rate": 10_000_000.0}),
    (QuotaEntity(ip="127.0.0.1"), {"connection_creation_rate": 100.0}),
    (QuotaEntity(ip=DEFAULT), {"connection_creation_rate": 20.0}),
]


def seed_store(path: Path) -> SqliteStore:
    store = SqliteStore(path)
    results = Admin(store).alter([Alteration.of(e, ops) for e, ops in QUOTAS])
    assert all(r.ok for r in results)
    for user, password in (ADMIN, OPERATOR):
        store.put_credential(hash_password(user, password, iterations=FAST_HASH))
    return store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = seed_store(tmp_path / "quotas.db")
    yield s
    s.close()


@pytest.fixture
def client(store: SqliteStore) -> Iterator[TestClient]:
    app = create_app(store, ConsoleConfig(admins=frozenset({"User:admin"})))
    with TestClient(app) as c:
        yield c


# -- backtest outputs, in the pipeline's own schemas ----------------------------------------------------------

T0 = 1_700_000_000_000
BT_ENTITIES = [  # broker, quota_type, tag_user, tag_client_id, limit (None = unlimited), base rate
    ("gateway", "produce", "alice", "", 1_000_000.0, 1_200_000.0),
    ("gateway", "fetch", "alice", "", 2_000_000.0, 500_000.0),
    ("gateway", "request", "bob", "cli", 50.0, 30.0),
]


def write_backtest(root: Path, *, seconds: int = 30, compare: bool = False, null_tags: bool = False) -> pa.Table:
    """A small backtest output laid out as ``quotaflow backtest --out`` writes it; returns its windows."""
    from quotaflow.pipeline.compare import compare_summary, compare_windows
    from quotaflow.pipeline.windows import ENTITY_SCHEMA, WINDOW_SCHEMA

    rng = np.random.default_rng(3)
    rows: list[dict[str, object]] = []
    for broker, qt, user, client, limit, base in BT_ENTITIES:
        for s in range(seconds):
            rate = float(base * (1.0 + 0.4 * np.sin(s / 4.0)) * rng.uniform(0.95, 1.05))
            throttled = int(limit is not None and rate > limit)
            rows.append({"broker": broker, "quota_type": qt, "tag_user": user or (None if null_tags else ""),
                         "tag_client_id": client or (None if null_tags else ""),
                         "window_start_ms": T0 + 1000 * s, "value_sum": rate, "rate": rate, "limit": limit,
                         "throttle_count": throttled, "throttle_ms_sum": 400 * throttled})
    windows = pa.Table.from_pylist(rows, schema=WINDOW_SCHEMA)
    per = windows.group_by(["broker", "quota_type", "tag_user", "tag_client_id"]).aggregate(
        [("rate", "max"), ("limit", "min"), ("throttle_count", "sum"), ("rate", "count")])
    entities = pa.table({
        "broker": per["broker"], "quota_type": per["quota_type"], "tag_user": per["tag_user"],
        "tag_client_id": per["tag_client_id"], "limit": per["limit_min"], "peak_rate": per["rate_max"],
        "p99_rate": per["rate_max"],
        "throttled_share": pa.compute.divide(pa.compute.cast(per["throttle_count_sum"], pa.float64()),
                                             pa.compute.cast(per["rate_count"], pa.float64())),
        "recommended_quota": pa.compute.multiply(per["rate_max"], 1.2), "windows": per["rate_count"],
    })
    tables = {"windows": windows, "entities": entities.select(ENTITY_SCHEMA.names).cast(ENTITY_SCHEMA),
              "decisions": pa.table({"ts_ms": pa.array([T0], pa.int64()), "throttle_ms": pa.array([0], pa.int32())})}
    if compare:
        # config b doubles alice's produce quota: her windows are no longer throttled
        other = windows.to_pylist()
        for r in other:
            if r["tag_user"] == "alice" and r["quota_type"] == "produce":
                r["limit"], r["throttle_count"], r["throttle_ms_sum"] = 2_000_000.0, 0, 0
        cmp = compare_windows(windows, pa.Table.from_pylist(other, schema=WINDOW_SCHEMA))
        tables["compare"] = cmp
        tables["compare_summary"] = compare_summary(cmp)
    for name, table in tables.items():
        (root / name).mkdir(parents=True)
        pq.write_table(table, root / name / "part-00000.parquet")
    (root / "_SUMMARY.json").write_text(json.dumps({
        "engine": "replay", "counts": {"requests": 1234, "windows": windows.num_rows}, "timings_s": {"total": 1.5},
    }))
    return windows


@pytest.fixture
def backtests_dir(tmp_path: Path) -> Path:
    """Two outputs under one directory: a plain one and one run with --compare."""
    root = tmp_path / "backtests"
    write_backtest(root / "plain" / "backtest")
    write_backtest(root / "compared", compare=True)
    (root / "not-a-backtest").mkdir(parents=True)
    return root
