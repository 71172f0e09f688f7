"""A ``quotaflow recommend`` output in the console: the proposal beside the store's quotas with its backtest, and
applying it whole or in part (admins only, each entity all-or-nothing, values only from the output's own file)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient

from quotaflow.console import ConsoleConfig, create_app
from quotaflow.core.entities import QuotaEntity
from quotaflow.pipeline.recommend import OUTCOME_OUT_SCHEMA
from quotaflow.store.sqlite import SqliteStore

from .conftest import ADMIN, OPERATOR, write_backtest

PROPOSAL = [
    {"entity": {"user": "alice"}, "values": {"producer_byte_rate": 2500000.0, "request_percentage": 12.5}},
    {"entity": {"user": "bob"}, "values": {"producer_byte_rate": 800000.0}},
    {"entity": {"user": "carol"}, "values": {"producer_byte_rate": 0.5}},  # Kafka: not a whole number of bytes
]


OUTCOMES = [({"entity_user": "alice"}, 40.0, 0.0), ({"entity_user": "bob"}, 0.0, 12.5),
            ({"entity_user": "carol"}, 1.0, 1.0)]  # fmt: skip
NAMES = {"entity_user": None, "entity_client_id": None, "entity_client_id_prefix": None}


def write_recommend(root: Path, proposal: list[dict[str, object]] = PROPOSAL,
                    outcomes: list[tuple[dict[str, str], float, float]] = OUTCOMES) -> Path:  # fmt: skip
    write_backtest(root)
    (root / "proposal.json").write_text(json.dumps(proposal))
    cols = {f.name: [] for f in OUTCOME_OUT_SCHEMA}
    for names, before, after in outcomes:
        for f in OUTCOME_OUT_SCHEMA:
            cols[f.name].append({**NAMES, **names, "throttle_s_before": before, "throttle_s_after": after,
                                 "throttle_s_delta": after - before}.get(
                f.name, 0 if pa.types.is_integer(f.type) else 0.0))  # fmt: skip
    (root / "outcome").mkdir()
    pq.write_table(pa.table(cols, schema=OUTCOME_OUT_SCHEMA), root / "outcome" / "part-0.parquet")
    return root


@pytest.fixture
def app(store: SqliteStore, tmp_path: Path) -> Iterator[TestClient]:
    write_recommend(tmp_path / "bt" / "rec")
    config = ConsoleConfig(backtests=tmp_path / "bt", admins=frozenset({"User:admin"}))
    with TestClient(create_app(store, config)) as c:
        yield c


def test_the_proposal_is_shown_beside_the_current_quotas(app: TestClient, store: SqliteStore) -> None:
    doc = app.get("/api/backtests/rec").json()["proposal"]
    assert doc["count"] == 3
    first, second = doc["entries"][0], doc["entries"][1]  # biggest change in throttle time first: alice, then bob
    assert first["entity"] == {"user": "alice"} and first["outcome"]["throttle_s_before"] == 40.0
    assert second["entity"] == {"user": "bob"}
    current = store.get(QuotaEntity(user="alice")).get("producer_byte_rate")
    assert first["values"][0] == {"key": "producer_byte_rate", "current": current, "proposed": 2500000.0}
    page = app.get("/backtests/rec").text
    assert 'id="proposal-rows"' in page and "proposal.js" in page and "Apply selected" in page


def test_each_prefix_entity_has_its_own_outcome(store: SqliteStore, tmp_path: Path) -> None:
    """A client-id-prefix proposal: entities with neither user nor client-id, told apart by their prefix."""
    proposal = [{"entity": {"client-id-prefix": p}, "values": {"producer_byte_rate": v}}
                for p, v in (("etl-", 1000.0), ("batch-", 2000.0))]  # fmt: skip
    outcomes = [({"entity_client_id_prefix": "etl-"}, 3.0, 0.0), ({"entity_client_id_prefix": "batch-"}, 0.0, 1.5)]
    write_recommend(tmp_path / "bt" / "rec", proposal, outcomes)
    with TestClient(create_app(store, ConsoleConfig(backtests=tmp_path / "bt"))) as c:
        doc = c.get("/api/backtests/rec").json()["proposal"]
    got = {e["entity"]["client-id-prefix"]: e["outcome"]["throttle_s_after"] for e in doc["entries"]}
    assert got == {"etl-": 0.0, "batch-": 1.5}


def test_apply_part_of_the_proposal(app: TestClient, store: SqliteStore) -> None:
    post = {"headers": {"content-type": "application/json"}}
    r = app.post("/api/proposals/rec", content=json.dumps({"entries": [1], "validate_only": True}), auth=ADMIN, **post)
    assert r.status_code == 200 and r.json()["failed"] == 0
    assert store.get(QuotaEntity(user="bob")) == {}  # validated, nothing written
    r = app.post("/api/proposals/rec", content=json.dumps({"entries": [1, 2]}), auth=ADMIN, **post)
    assert r.status_code == 200
    doc = r.json()
    assert doc["failed"] == 1 and doc["results"][1]["error"]["message"] == (
        "producer_byte_rate cannot be a fractional value.")
    assert store.get(QuotaEntity(user="bob")) == {"producer_byte_rate": 800000.0}
    assert store.get(QuotaEntity(user="carol")) == {}
    assert store.get(QuotaEntity(user="alice")).get("request_percentage") != 12.5  # not picked, not written
    # not an admin, a bad index, a forged origin: refused, nothing written
    r = app.post("/api/proposals/rec", content=json.dumps({"entries": [0]}), auth=OPERATOR, **post)
    assert r.status_code == 403
    r = app.post("/api/proposals/rec", content=json.dumps({"entries": [7]}), auth=ADMIN, **post)
    assert r.status_code == 400 and "indexes 0..2" in r.json()["error"]["message"]
    r = app.post("/api/proposals/rec", content=json.dumps({"entries": [0]}), auth=ADMIN,
                 headers={"content-type": "application/json", "origin": "http://evil.example"})
    assert r.status_code == 403
    assert store.get(QuotaEntity(user="alice")).get("request_percentage") != 12.5


def test_read_only_console_offers_the_command_instead(store: SqliteStore, tmp_path: Path) -> None:
    write_recommend(tmp_path / "bt" / "rec")
    with TestClient(create_app(store, ConsoleConfig(backtests=tmp_path / "bt", read_only=True))) as c:
        assert "client-quotas --alter --from-file" in c.get("/backtests/rec").text
        r = c.post("/api/proposals/rec", json={"entries": None}, auth=ADMIN)
        assert r.status_code == 403


def test_apply_in_a_browser(store: SqliteStore, tmp_path: Path) -> None:
    """The page's own script: untick one entity, apply, see the result and the store changed."""
    from quotaflow.testing.asgi import serve

    from .browser import browser, screenshot

    write_recommend(tmp_path / "bt" / "rec")
    app = create_app(store, ConsoleConfig(backtests=tmp_path / "bt", admins=frozenset({"admin"})))
    with serve(app) as url, browser(ADMIN) as context:
        page = context.new_page()
        page.goto(f"{url}/login?next=/backtests/rec")
        page.wait_for_selector("#proposal-rows")
        page.locator("input.proposal-pick[value='2']").uncheck()  # carol's value is refused by Kafka: leave it out
        page.click("#proposal-apply")
        page.wait_for_selector("#proposal-result.ok")
        assert "Applied: 2 entities" in page.inner_text("#proposal-result")
        screenshot(page, tmp_path, "proposal")
    assert store.get(QuotaEntity(user="bob")) == {"producer_byte_rate": 800000.0}
    assert store.get(QuotaEntity(user="alice"))["request_percentage"] == 12.5
    assert store.get(QuotaEntity(user="carol")) == {}
