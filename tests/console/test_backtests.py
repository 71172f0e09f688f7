"""The Backtests page's data over outputs laid out as ``quotaflow backtest`` writes them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from quotaflow.console import ConsoleConfig, create_app
from quotaflow.console import backtests as bt
from quotaflow.core.errors import CommandError
from quotaflow.store.sqlite import SqliteStore

from .conftest import T0, write_backtest


@pytest.fixture
def api(store: SqliteStore, backtests_dir: Path) -> Iterator[TestClient]:
    with TestClient(create_app(store, ConsoleConfig(backtests=backtests_dir, read_only=True))) as c:
        yield c


def test_discover_finds_outputs_at_any_depth(backtests_dir: Path, tmp_path: Path) -> None:
    assert [b.id for b in bt.discover(backtests_dir)] == ["compared", "plain/backtest"]
    assert [b.id for b in bt.discover(backtests_dir / "compared")] == ["."]
    assert bt.discover(tmp_path / "missing") == []
    with pytest.raises(CommandError):
        bt.find(backtests_dir, "../backtests/compared")  # only discovered ids, so no path leaves the root


def test_summary_numbers_come_from_the_windows(backtests_dir: Path) -> None:
    windows = write_backtest(backtests_dir / "again")
    doc = bt.describe(bt.find(backtests_dir, "again"))
    rows = windows.to_pylist()
    produce = [r for r in rows if r["quota_type"] == "produce"]
    by_type = {r["quota type"]: r for r in doc["by_quota_type"]}
    assert by_type["produce"]["entity-windows"] == len(produce)
    assert by_type["produce"]["throttled requests"] == sum(r["throttle_count"] for r in produce) > 0
    assert by_type["produce"]["throttle ms"] == sum(r["throttle_ms_sum"] for r in produce)
    assert by_type["fetch"]["throttled requests"] == 0
    assert doc["span_ms"] == {"first": T0, "last": T0 + 29_000}
    assert doc["summary"]["counts"]["requests"] == 1234
    assert doc["entities"][0]["quota_type"] == "produce" and doc["entities"][0]["throttled_share"] > 0
    assert doc["comparison"] is None and doc["report"] is None


def test_comparison_of_two_stores(backtests_dir: Path) -> None:
    doc = bt.describe(bt.find(backtests_dir, "compared"))
    cmp = doc["comparison"]
    assert cmp is not None
    first = cmp["rows"][0]  # the quota-id whose throttling changed most: alice's produce, quota doubled in b
    assert (first["quota_type"], first["tag_user"], first["limit_a"], first["limit_b"]) == ("produce", "alice",
                                                                                            1e6, 2e6)
    assert first["throttle_ms_b"] == 0 and first["throttle_ms_delta"] == -first["throttle_ms_a"] < 0
    totals = cmp["totals"]
    assert totals["entities_changed"] == 1 and totals["throttle_ms_b"] == 0
    assert totals["throttle_ms_a"] == first["throttle_ms_a"]


def test_entity_windows(backtests_dir: Path) -> None:
    windows = write_backtest(backtests_dir / "w").to_pylist()
    got = bt.entity_windows(bt.find(backtests_dir, "w"), "gateway", "request", "bob", "cli")
    want = [r for r in windows if r["quota_type"] == "request"]
    assert got["t"] == [r["window_start_ms"] / 1000 for r in want]
    assert got["rate"] == [r["rate"] for r in want] and got["limit"] == [50.0] * len(want)
    assert bt.entity_windows(bt.find(backtests_dir, "w"), "gateway", "request", "nobody", "")["t"] == []


def test_an_empty_tag_may_be_stored_as_null(backtests_dir: Path) -> None:
    write_backtest(backtests_dir / "nulls", null_tags=True)
    got = bt.entity_windows(bt.find(backtests_dir, "nulls"), "gateway", "produce", "alice", "")
    assert len(got["t"]) == 30 and sum(1 for n in got["throttled"] if n) > 0


def test_the_rendered_report_is_found_and_served(api: TestClient, backtests_dir: Path) -> None:
    report = backtests_dir / "plain" / "report"
    report.mkdir()
    (report / "report.html").write_text("<html>the report</html>")
    (report / "rate_vs_quota.png").write_bytes(b"\x89PNG fake")
    doc = api.get("/api/backtests/plain/backtest").json()
    assert doc["report"] == {"dir": str(report), "charts": ["rate_vs_quota.png"]}
    assert api.get("/report", params={"id": "plain/backtest"}).text == "<html>the report</html>"
    png = api.get("/report", params={"id": "plain/backtest", "file": "rate_vs_quota.png"})
    assert png.status_code == 200 and png.content == b"\x89PNG fake"
    assert api.get("/report", params={"id": "plain/backtest", "file": "../backtest/_SUMMARY.json"}).status_code == 404
    listing = {b["id"]: b for b in api.get("/api/backtests").json()}
    assert listing["plain/backtest"]["report"] and not listing["compared"]["report"]
    assert listing["compared"]["compared"] and not listing["plain/backtest"]["compared"]


def test_an_output_shows_its_own_report_before_a_sibling_s(tmp_path: Path) -> None:
    """Issue 35: the demo's layout, pipeline/{backtest,report,advisor,advisor-report}: the advisor page showed the
    backtest's report (``parent/report`` was tried before ``<name>-report``)."""
    root = tmp_path / "pipeline"
    for name in ("backtest", "advisor"):
        write_backtest(root / name)
    for report, text in (("report", "the backtest's"), ("advisor-report", "the advisor's")):
        (root / report).mkdir()
        (root / report / "report.html").write_text(text)
    found = {b.id: bt.report_dir(b) for b in bt.discover(root)}
    assert found == {"advisor": root / "advisor-report", "backtest": root / "report"}


def test_api(api: TestClient) -> None:
    assert api.get("/api/backtests/compared").json()["comparison"]["totals"]["entities"] == 3
    assert api.get("/api/backtests/nope").status_code == 404
    w = api.get("/api/backtest-windows", params={"id": "compared", "broker": "gateway", "quota_type": "fetch",
                                                  "user": "alice", "client_id": ""}).json()
    assert len(w["t"]) == 30
    assert api.get("/backtests/compared").status_code == 200
    missing = api.get("/backtests/nope")
    assert missing.status_code == 404 and "no backtest output &#39;nope&#39;" in missing.text
    # the outputs that do exist are listed under the message, not the hint to start with --backtests
    assert "/backtests/compared" in missing.text and "--backtests DIR" not in missing.text


def test_without_a_backtests_directory(client: TestClient) -> None:
    assert client.get("/api/backtests").json() == []
    assert "--backtests DIR" in client.get("/backtests").text
    assert client.get("/api/backtests/x").status_code == 404
