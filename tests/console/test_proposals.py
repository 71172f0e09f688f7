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
    value = first["values"][0]  # no usage/ in this output: the console's store is all there is to show
    assert (value["key"], value["current"], value["store_now"], value["proposed"]) == (
        "producer_byte_rate", current, current, 2500000.0)
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


def _recommend_of(root: Path, store: Path | str) -> Path:
    """A recommend output computed from ``store``, with usage/ evidence for alice's producer_byte_rate as
    ``recommend`` writes it (the quota in force then, from which entity; active and throttled seconds)."""
    from quotaflow.pipeline.recommend import USAGE_OUT_SCHEMA
    from quotaflow.store.factory import store_identity

    write_recommend(root)
    (root / "_SUMMARY.json").write_text(json.dumps({"engine": "spark", "counts": {},
                                                   "advisor": {"store": store_identity(store)}}))  # fmt: skip
    row = {f.name: None for f in USAGE_OUT_SCHEMA}
    row.update(entity_user="alice", key="producer_byte_rate", recommended=2500000.0, current_limit=1_000_000.0,
               current_source="{user=<default>}", active_seconds=40, throttled_share=0.75, proposed=True,
               lifts=True, warning="lifts the quota in force, 1,000,000 from {user=<default>}, 2.5x")
    (root / "usage").mkdir()
    pq.write_table(pa.Table.from_pylist([row], schema=USAGE_OUT_SCHEMA), root / "usage" / "part-0.parquet")
    return root


def test_current_is_the_proposal_store_with_its_evidence_and_one_recommended_value(store: SqliteStore,
                                                                                   tmp_path: Path) -> None:
    """Issue 35: "current" was the console's store, not the one the proposal was computed from; the page showed
    the backtest's own "recommended quota" beside the proposal's (two values for one client)."""
    other = tmp_path / "elsewhere.db"
    _recommend_of(tmp_path / "bt" / "rec", other)
    config = ConsoleConfig(backtests=tmp_path / "bt", admins=frozenset({"User:admin"}))
    with TestClient(create_app(store, config)) as c:
        doc = c.get("/api/backtests/rec").json()["proposal"]
        page = c.get("/backtests/rec").text
    assert doc["store"]["same"] is False and doc["store"]["source"] == str(other.resolve())
    alice = next(e for e in doc["entries"] if e["entity"] == {"user": "alice"})
    value = alice["values"][0]
    assert value["current"] == 1_000_000.0 and value["source"] == "{user=<default>}"  # in force when proposed
    assert value["store_now"] == 2_000_000.0  # the console's store holds another value for alice
    assert value["active_seconds"] == 40 and value["throttled_share"] == 0.75 and value["lifts"]
    assert "lifts the quota in force" in page and "{user=&lt;default&gt;}" in page
    assert "not this console's store" in page and str(other.resolve()) in page
    assert "recommended quota" not in page  # one source of truth: the proposal's


def test_a_proposal_from_another_store_is_applied_only_when_confirmed(store: SqliteStore, tmp_path: Path) -> None:
    """Issue 35: "Apply" wrote a proposal computed from another store without a word."""
    _recommend_of(tmp_path / "bt" / "rec", tmp_path / "elsewhere.db")
    config = ConsoleConfig(backtests=tmp_path / "bt", admins=frozenset({"User:admin"}))
    post = {"headers": {"content-type": "application/json"}, "auth": ADMIN}
    with TestClient(create_app(store, config)) as c:
        r = c.post("/api/proposals/rec", content=json.dumps({"entries": [1]}), **post)
        assert r.status_code == 400 and "was computed from store" in r.json()["error"]["message"]
        assert store.get(QuotaEntity(user="bob")) == {}
        assert c.post("/api/proposals/rec", content=json.dumps({"entries": [1], "validate_only": True}),
                      **post).status_code == 200  # validating writes nothing: no confirmation needed
        wrong = c.post("/api/proposals/rec", content=json.dumps({"entries": [1], "confirm_store": "other.db"}), **post)
        assert wrong.status_code == 400 and store.get(QuotaEntity(user="bob")) == {}
        here = c.get("/api/backtests/rec").json()["proposal"]["store"]["console"]
        ok = c.post("/api/proposals/rec", content=json.dumps({"entries": [1], "confirm_store": here}), **post)
        assert ok.status_code == 200 and store.get(QuotaEntity(user="bob")) == {"producer_byte_rate": 800000.0}


def test_a_proposal_from_the_console_store_applies_without_confirmation(store: SqliteStore, tmp_path: Path) -> None:
    _recommend_of(tmp_path / "bt" / "rec", store.path)
    config = ConsoleConfig(backtests=tmp_path / "bt", admins=frozenset({"User:admin"}))
    with TestClient(create_app(store, config)) as c:
        assert c.get("/api/backtests/rec").json()["proposal"]["store"]["same"] is True
        assert "Computed from this console's store" in c.get("/backtests/rec").text
        r = c.post("/api/proposals/rec", json={"entries": [1]}, auth=ADMIN)
        assert r.status_code == 200 and store.get(QuotaEntity(user="bob")) == {"producer_byte_rate": 800000.0}


def test_apply_from_another_store_in_a_browser_asks_first(store: SqliteStore, tmp_path: Path) -> None:
    """The page's own script: a proposal from another store is written only after the admin confirms it."""
    from quotaflow.testing.asgi import serve

    from .browser import browser

    _recommend_of(tmp_path / "bt" / "rec", tmp_path / "elsewhere.db")
    app = create_app(store, ConsoleConfig(backtests=tmp_path / "bt", admins=frozenset({"admin"})))
    with serve(app) as url, browser(ADMIN) as context:
        page = context.new_page()
        page.goto(f"{url}/login?next=/backtests/rec")
        page.wait_for_selector("#proposal-rows")
        assert "not this console's store" in page.inner_text("#proposal-store")
        page.locator("input.proposal-pick[value='2']").uncheck()
        page.once("dialog", lambda dialog: dialog.dismiss())
        page.click("#proposal-apply")
        page.wait_for_selector("#proposal-result.bad")
        assert "Not applied" in page.inner_text("#proposal-result")
        assert store.get(QuotaEntity(user="bob")) == {}
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#proposal-apply")
        page.wait_for_selector("#proposal-result.ok")
        assert "Applied: 2 entities" in page.inner_text("#proposal-result")
    assert store.get(QuotaEntity(user="bob")) == {"producer_byte_rate": 800000.0}
