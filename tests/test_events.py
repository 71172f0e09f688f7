from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quotaflow.events import (
    REQUEST_SCHEMA,
    EventsInputError,
    check_events_dir,
    read_dataset,
    split_malformed,
)


def _row(**over: object) -> dict[str, object]:
    row: dict[str, object] = dict(ts_ms=1000, broker="b0", listener="PLAINTEXT", user="u", client_id="c",
               client_ip="10.0.0.1", api_key=0, api_version=9, request_bytes=10, response_bytes=5,
               io_thread_ns=100, network_thread_ns=50, acks=1, is_follower=False)  # fmt: skip
    row.update(over)
    return row


def test_seq_assigned_from_file_and_row_order(tmp_path: Path) -> None:
    d = tmp_path / "requests" / "x"
    d.mkdir(parents=True)
    (d / "b.jsonl").write_text("\n".join(json.dumps(_row(ts_ms=t)) for t in (5, 6)))
    (d / "a.jsonl").write_text("\n".join(json.dumps(_row(ts_ms=t, extra="keep")) for t in (7, 8, 9)))
    t = read_dataset(tmp_path, "requests")
    assert t is not None
    assert t["ts_ms"].to_pylist() == [7, 8, 9, 5, 6]  # a.jsonl sorts first
    assert t["seq"].to_pylist() == [0, 1, 2, 3, 4]
    assert t.schema.field("api_key").type == pa.int16()
    assert "extra" in t.column_names  # extra columns are carried


def test_malformed_rows_get_first_reason(tmp_path: Path) -> None:
    rows = [_row(), _row(user=None), _row(request_bytes=-1), _row(user=None, ts_ms=-5), _row(acks=None)]
    t = pa.Table.from_pylist([{**r, "seq": i} for i, r in enumerate(rows)], schema=REQUEST_SCHEMA)
    good, bad = split_malformed(t, "requests")
    assert good.num_rows == 2
    assert bad["reason"].to_pylist() == ["user is null", "request_bytes is negative", "user is null"]  # nulls first


def test_missing_inputs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(EventsInputError, match="does not exist"):
        check_events_dir(tmp_path / "nope")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(EventsInputError, match="a-file is not a directory"):
        check_events_dir(tmp_path / "a-file")
    with pytest.raises(EventsInputError, match="no event files"):
        check_events_dir(tmp_path)
    (tmp_path / "requests").mkdir()
    pq.write_table(pa.table({"ts_ms": [1]}), tmp_path / "requests" / "p.parquet")
    with pytest.raises(EventsInputError, match="required column 'broker' is missing"):
        read_dataset(tmp_path, "requests")
