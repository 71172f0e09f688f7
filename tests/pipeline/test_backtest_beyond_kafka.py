"""Backtest == replay with the quota model beyond Kafka's: client-id prefixes, CIDR ranges, excluded principals
(issue 20). The store mixes them with Kafka's own levels; the broker config excludes one tenant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.precedence import PREFIX_TAG_USER
from quotaflow.pipeline import backtest, job, replay
from quotaflow.pipeline.connections import ip_quotas
from quotaflow.store import open_store

KEYS = {
    "decisions": ["broker", "seq"],
    "connections": ["broker", "seq"],
    "windows": ["broker", "quota_type", "tag_user", "tag_client_id", "window_start_ms"],
    "entities": ["broker", "quota_type", "tag_user", "tag_client_id"],
}
EXCLUDED = "tenant-0000"  # the busiest tenant of the generated traffic


def _read(out: Path, name: str) -> pd.DataFrame:
    return pq.read_table(out / name).to_pandas().sort_values(KEYS[name]).reset_index(drop=True)


@pytest.fixture(scope="module")
def model_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "quotas.db"
    st = open_store(path)
    rates = {"producer_byte_rate": 20_000.0, "consumer_byte_rate": 40_000.0, "request_percentage": 0.5}
    st.alter([
        (QuotaEntity(client_id_prefix="tenant-000"), rates),  # shorter prefix
        (QuotaEntity(client_id_prefix="tenant-0001-"), {k: v / 4 for k, v in rates.items()}),  # longest wins
        (QuotaEntity(client_id="tenant-0004-app-1"), {k: v * 10 for k, v in rates.items()}),  # exact beats prefix
        (QuotaEntity(user=EXCLUDED), {k: v / 100 for k, v in rates.items()}),  # would throttle; excluded
        (QuotaEntity(client_id=DEFAULT), {"producer_byte_rate": 5_000.0}),
        (QuotaEntity(ip="10.0.0.0/8"), {"connection_creation_rate": 3.0}),
        (QuotaEntity(ip="10.0.76.0/24"), {"connection_creation_rate": 40.0}),  # longest range wins
        (QuotaEntity(ip="10.0.7.1"), {"connection_creation_rate": 1.0}),  # exact ip beats both ranges
        (QuotaEntity(ip=DEFAULT), {"connection_creation_rate": 1000.0}),
    ])
    st.close()
    return path


@pytest.fixture(scope="module")
def broker_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "server.properties"
    path.write_text(f"quotaflow.quota.excluded.principals=User:{EXCLUDED};User:ops\n")
    return path


def test_ip_quotas_exact_then_longest_range_then_default() -> None:
    rates: dict[str | None, int] = {"10.0.0.0/8": 3, "10.0.76.0/24": 40, "10.0.7.1": 1, None: 1000,
                                    "2001:db8::/32": 7}
    ips = ["10.0.76.1", "10.0.7.1", "10.9.9.9", "192.168.0.3", "2001:db8::1", "2001:db9::1", None]
    assert ip_quotas(rates, ips) == [40, 1, 3, 1000, 7, 1000, 1000]


def test_replay_applies_prefixes_ranges_and_exclusions(traffic: Path, model_store: Path, broker_config: Path,
                                                       tmp_path: Path) -> None:  # fmt: skip
    spec = job.JobSpec(traffic, model_store, tmp_path / "rp", broker_config, with_inputs=True)
    replay.run(spec)
    d = _read(spec.out, "decisions")
    excluded = d[d["user"] == EXCLUDED]
    assert len(excluded) > 100 and (excluded["throttle_ms"] == 0).all()
    others = d[d["user"] != EXCLUDED]
    assert (others["throttle_ms"] > 0).any()
    w = _read(spec.out, "windows")
    prefix_buckets = set(w.loc[w["tag_user"] == PREFIX_TAG_USER, "tag_client_id"])
    assert prefix_buckets == {"tenant-000", "tenant-0001-"}
    # the exact client-id has its own bucket; no excluded principal's bytes are in any bucket
    assert "tenant-0004-app-1" in set(w["tag_client_id"])
    assert EXCLUDED not in set(w["tag_user"])
    c = _read(spec.out, "connections")
    storm = c["client_ip"].value_counts().index[0]
    assert storm.startswith("10.")  # inside the /8: held to a range's rate as if it had its own entity
    throttled = set(c.loc[c["result"] == "IP_THROTTLED", "client_ip"])
    assert storm in throttled
    assert not any(ip.startswith("192.168.") for ip in throttled)  # outside every range: the default 1000/s


@pytest.mark.spark
def test_backtest_equals_replay_beyond_kafka(spark: Any, traffic: Path, model_store: Path, broker_config: Path,
                                             tmp_path: Path) -> None:  # fmt: skip
    spec_b = job.JobSpec(traffic, model_store, tmp_path / "bt", broker_config)
    spec_r = job.JobSpec(traffic, model_store, tmp_path / "rp", broker_config)
    sb = backtest.run(spec_b, spark=spark)
    sr = replay.run(spec_r)
    assert sb.counts == sr.counts
    for name in ("decisions", "connections", "windows", "entities"):
        a = _read(spec_r.out, name)
        b = _read(spec_b.out, name)[a.columns]
        pd.testing.assert_frame_equal(a, b, check_dtype=False, rtol=1e-9, obj=name)
    d = _read(spec_r.out, "decisions")
    assert (d["throttle_ms"] > 0).any()
