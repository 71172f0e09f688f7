from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from quotaflow.events import CONNECTION_SCHEMA, REQUEST_SCHEMA
from quotaflow.pipeline.generate import TrafficSpec, generate


def test_deterministic_and_schema(tmp_path: Path) -> None:
    spec = TrafficSpec(events=20_000, seed=7, chunk_events=8_000)
    a = generate(spec, tmp_path / "a")
    b = generate(spec, tmp_path / "b")
    assert a == b and a["requests"] == 20_000
    for kind, schema in (("requests", REQUEST_SCHEMA), ("connections", CONNECTION_SCHEMA)):
        ta = pq.read_table(tmp_path / "a" / kind)
        assert ta.equals(pq.read_table(tmp_path / "b" / kind))
        assert ta.schema.equals(schema, check_metadata=False)
    other = generate(TrafficSpec(events=20_000, seed=8, chunk_events=8_000), tmp_path / "c")
    assert not pq.read_table(tmp_path / "c" / "requests").equals(pq.read_table(tmp_path / "a" / "requests"))
    assert other["requests"] == 20_000


def test_traffic_shape(tmp_path: Path) -> None:
    generate(TrafficSpec(events=50_000, seed=1), tmp_path)
    t = pq.read_table(tmp_path / "requests")
    assert len(pc.unique(t["broker"])) == 3
    assert set(pc.unique(t["listener"]).to_pylist()) == {"PLAINTEXT", "SASL_SSL", "REPLICATION"}
    assert pc.any(t["is_follower"]).as_py()
    # acks only on produce
    produce = pc.equal(t["api_key"], 0)
    assert pc.all(pc.is_valid(t.filter(produce)["acks"])).as_py()
    assert not pc.any(pc.is_valid(t.filter(pc.invert(produce))["acks"])).as_py()
    # heavy-tailed: the largest tenant sends far more than the median one
    per_user = t.group_by("user").aggregate([("request_bytes", "count")]).column("request_bytes_count").to_pylist()
    per_user.sort()
    assert per_user[-1] > 10 * per_user[len(per_user) // 2]
    # seq is the arrival order: (ts_ms, seq) strictly increasing
    ts, seq = t["ts_ms"].to_numpy(), t["seq"].to_numpy()
    assert ((ts[1:] > ts[:-1]) | ((ts[1:] == ts[:-1]) & (seq[1:] > seq[:-1]))).all()
    # a connection storm: one (broker, ip) opens hundreds of connections within 5 s
    c = pq.read_table(tmp_path / "connections")
    top = c.group_by(["broker", "client_ip"]).aggregate([("ts_ms", "count")]).sort_by([("ts_ms_count", "descending")])
    assert top["ts_ms_count"][0].as_py() >= 1_000
