"""The console in a real browser (Debian's chromium via Playwright): load the pages, alter through the form,
see the change, follow resolve links both ways, browse backtests. Screenshots of each page are kept."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from quotaflow.console import ConsoleConfig, create_app
from quotaflow.core.entities import QuotaEntity
from quotaflow.store.sqlite import SqliteStore
from quotaflow.testing.asgi import serve

from .browser import browser, screenshot
from .conftest import ADMIN


@pytest.fixture
def console_url(store: SqliteStore, backtests_dir: Path) -> Iterator[str]:
    app = create_app(store, ConsoleConfig(backtests=backtests_dir, admins=frozenset({"admin"})))
    with serve(app) as url:
        yield url


@pytest.fixture
def page(console_url: str) -> Iterator[Any]:
    with browser(ADMIN) as context:
        page = context.new_page()
        page.goto(f"{console_url}/login?next=/quotas")  # the sign-in link: the browser then sends the credentials
        page.wait_for_selector("#quota-table")
        assert page.inner_text("#who") == "signed in as User:admin"
        yield page


def rows(page: Any) -> list[str]:
    return [t.strip() for t in page.locator("#quota-table tbody td.entity").all_inner_texts()]


def fill_change(page: Any, key: str, value: str, user: str | None = None) -> None:
    """The editor's last op row set to ``key`` = ``value``, and the entity's user named ``user`` when given."""
    if user is not None:
        page.select_option("#alter-user-kind", "name")
        page.fill("#alter-user", user)
    page.locator("#ops .op-key").last.fill(key)
    page.locator("#ops .op-value").last.fill(value)


def test_quotas_filter_alter_and_see_the_change(page: Any, console_url: str, store: SqliteStore,
                                                 tmp_path: Path) -> None:
    page.goto(f"{console_url}/quotas")
    assert len(rows(page)) == 7
    screenshot(page, tmp_path, "quotas")
    # describe user=alice, strict: only the user entity, not (alice, ingest)
    page.select_option("#filter-user-match", "exact")
    page.fill("#filter-user", "alice")
    page.check("#filter-strict")
    page.click("#filter-form button[type=submit]")
    page.wait_for_url(re.compile(r"strict=1"))
    assert rows(page) == ["user=alice"]
    # the editor starts on the filtered entity; add a key through the form
    assert page.input_value("#alter-user") == "alice"
    fill_change(page, "request_percentage", "75")
    page.click("#apply")
    page.wait_for_selector("#alter-result.ok")
    page.wait_for_load_state("load")
    expect(page.locator("#quota-table")).to_contain_text("request_percentage", timeout=20_000)  # no eval: CSP
    assert "request_percentage=75.0" in page.locator("#quota-table").inner_text().replace(" ", "")
    assert store.get(QuotaEntity(user="alice"))["request_percentage"] == 75.0


def test_kafkas_message_at_the_field_and_nothing_written(page: Any, console_url: str, store: SqliteStore,
                                                         tmp_path: Path) -> None:
    before = store.last_seq()
    page.goto(f"{console_url}/quotas")
    fill_change(page, "producer_byte_rate", "1.5", user="web")
    page.click("#apply")
    page.wait_for_selector("#ops .op-value.invalid")
    assert "INVALID_REQUEST: producer_byte_rate cannot be a fractional value." in page.locator(
        "#ops .op-error").first.inner_text()
    assert "Nothing was written" in page.inner_text("#alter-result")
    screenshot(page, tmp_path, "quotas-invalid")
    # an ip entity combined with a user: the message goes to the entity
    page.select_option("#alter-ip-kind", "name")
    page.fill("#alter-ip", "10.0.0.1")
    page.locator("#ops .op-value").last.fill("1000")
    page.click("#validate")
    page.wait_for_selector("#entity-fieldset.invalid")
    assert "IP entity shouldnot be combined" in page.inner_text("#entity-error")
    # validate-only of a valid change: said so, nothing written
    page.select_option("#alter-ip-kind", "")
    page.fill("#alter-ip", "")
    page.click("#validate")
    page.wait_for_selector("#alter-result.ok")
    assert "nothing written" in page.inner_text("#alter-result")
    assert store.last_seq() == before and store.get(QuotaEntity(user="web")) == {}


def test_edit_fills_the_form_and_removes_a_key(page: Any, console_url: str, store: SqliteStore) -> None:
    page.goto(f"{console_url}/quotas")
    page.locator("#quota-table tr", has_text="user=alice").filter(has_not_text="ingest").locator("button.edit").click()
    assert page.input_value("#alter-user-kind") == "name" and page.input_value("#alter-user") == "alice"
    keys = page.locator("#ops .op-key")
    assert [keys.nth(i).input_value() for i in range(keys.count())] == ["consumer_byte_rate", "producer_byte_rate", ""]
    page.locator("#ops .op-value").first.fill("")  # empty = remove consumer_byte_rate
    page.click("#apply")
    page.wait_for_selector("#alter-result.ok")
    assert store.get(QuotaEntity(user="alice")) == {"producer_byte_rate": 2_000_000.0}


def test_resolve_links_both_ways(page: Any, console_url: str, tmp_path: Path) -> None:
    page.goto(f"{console_url}/quotas")
    page.locator("#quota-table tr", has_text="client-id=ingest").locator("a.resolve-link").click()
    page.wait_for_selector("#resolve-table")
    produce = page.locator("#resolve-table tr[data-key=producer_byte_rate]")
    assert produce.locator(".value").inner_text() == "5000000.0"
    assert produce.locator(".level").inner_text() == "1"
    assert "user=alice = 2000000.0" in produce.inner_text()  # what it overrides, level 3
    assert "only user alice with client-id ingest" in produce.inner_text()
    request = page.locator("#resolve-table tr[data-key=request_percentage]")
    assert request.locator(".level").inner_text() == "5"
    screenshot(page, tmp_path, "resolve")
    # back to the quota that supplies it
    request.locator("a.supplier").click()
    page.wait_for_selector("#quota-table")
    assert rows(page) == ["user=<default>, client-id=<default>"]
    # an ip
    page.goto(f"{console_url}/resolve")
    page.fill("#resolve-ip", "192.0.2.1")
    page.click("#resolve-ip-form button")
    page.wait_for_selector("#resolve-table")
    row = page.locator("#resolve-table tr[data-key=connection_creation_rate]")
    assert row.locator(".value").inner_text() == "20.0" and row.locator(".level").inner_text() == "2"


def test_writes_ask_for_sign_in(console_url: str, store: SqliteStore) -> None:
    before = store.last_seq()
    with browser() as context:
        page = context.new_page()
        page.goto(f"{console_url}/quotas")
        assert page.inner_text("#sign-in") == "Sign in to change quotas"
        fill_change(page, "producer_byte_rate", "1000", user="mallory")
        page.click("#apply")
        page.wait_for_selector("#alter-result.bad")
        assert "Sign in first" in page.inner_text("#alter-result")
    assert store.last_seq() == before


def test_backtests_pages(page: Any, console_url: str, tmp_path: Path) -> None:
    page.goto(f"{console_url}/backtests")
    links = page.locator("#backtest-table a").all_inner_texts()
    assert links == ["compared", "plain/backtest"]
    screenshot(page, tmp_path, "backtests")
    page.get_by_role("link", name="compared", exact=True).click()
    page.wait_for_selector("#window-chart .uplot")
    assert "produce user=alice" in page.inner_text("#window-chart")
    totals = page.locator("#compare-totals").inner_text()
    assert re.search(r"throttle ms\s+[\d,]+\s+0\s+-[\d,]+", totals), totals
    first = page.locator("#compare-rows tbody tr").first.inner_text()
    assert first.split("\t")[:3] == ["gateway", "produce", "alice"]
    # another entity's windows
    page.locator("#bt-entities tr", has_text="request").click()
    expect(page.locator("#window-chart")).to_contain_text("request user=bob", timeout=20_000)
    screenshot(page, tmp_path, "backtest")


def test_delete_an_entity(page: Any, console_url: str, store: SqliteStore) -> None:
    page.goto(f"{console_url}/quotas")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#quota-table tr", has_text="client-id=batch-loader").locator("button.delete").click()
    expect(page.locator("#quota-table")).not_to_contain_text("batch-loader", timeout=20_000)
    assert len(rows(page)) == 6
    assert store.get(QuotaEntity(client_id="batch-loader")) == {}


def test_a_client_id_prefix_through_the_form(page: Any, console_url: str, store: SqliteStore) -> None:
    """Beyond Kafka (issue 20): a prefix entity is added in the editor, filtered, and its default is refused."""
    page.goto(f"{console_url}/quotas")
    page.select_option("#alter-client-id-prefix-kind", "name")
    page.fill("#alter-client-id-prefix", "etl-")
    fill_change(page, "producer_byte_rate", "100000")
    page.click("#apply")
    page.wait_for_selector("#alter-result.ok")
    assert store.get(QuotaEntity(client_id_prefix="etl-")) == {"producer_byte_rate": 100_000.0}
    page.goto(f"{console_url}/quotas?client-id-prefix_match=any")
    page.wait_for_selector("#quota-table")
    assert rows(page) == ["client-id-prefix=etl-"]
    page.select_option("#alter-client-id-prefix-kind", "default")
    fill_change(page, "producer_byte_rate", "5")
    page.click("#validate")
    page.wait_for_selector("#entity-fieldset.invalid")
    assert "client-id-prefix has no default entity" in page.inner_text("#entity-error")


def test_acls_page_add_decide_and_remove(page: Any, console_url: str, store: SqliteStore, tmp_path: Path) -> None:
    page.goto(f"{console_url}/acls")
    page.wait_for_selector("#no-acls")
    page.select_option("#add-resource-type", "TOPIC")
    page.fill("#add-name", "pay-")
    page.select_option("#add-pattern-type", "PREFIXED")
    page.fill("#add-principal", "User:bob")
    page.select_option("#add-operation", "WRITE")
    page.click("#acl-add-button")
    page.wait_for_selector("#acl-table")
    assert "User:bob" in page.locator("#acl-table").inner_text()
    assert {(b.pattern.name, b.entry.principal) for b in store.acls().bindings} == {("pay-", "User:bob")}
    # may bob write pay-eu? WRITE implies DESCRIBE: the page names the deciding ACL
    page.fill("#check-principal", "User:bob")
    page.select_option("#check-operation", "DESCRIBE")
    page.fill("#check-name", "pay-eu")
    page.click("#acl-check-form button[type=submit]")
    page.wait_for_selector("#acl-verdict")
    assert "ALLOWED by ResourcePattern(resourceType=TOPIC, name=pay-" in page.inner_text("#acl-verdict")
    screenshot(page, tmp_path, "acls")
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("#acl-table button.remove")
    page.wait_for_selector("#no-acls")
    assert store.acls().bindings == frozenset()


def test_the_policy_refuses_an_injected_inline_script(console_url: str) -> None:
    """The CSP is live in a real browser: an inline script added to a console page does not run (and the pages'
    own scripts, loaded from /static, do: every other test here runs them under the same policy and fails on any
    refusal)."""
    with browser(ADMIN, refusals_expected=True) as context:
        page = context.new_page()
        refused: list[str] = []
        page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
        page.goto(f"{console_url}/quotas")
        page.wait_for_selector("#quota-table")
        page.evaluate("""() => { const s = document.createElement('script'); s.textContent = 'window.__pwned = 1';
                                 document.body.appendChild(s); }""")
        deadline = time.monotonic() + 10
        while not refused and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        assert page.evaluate("() => window.__pwned") is None
        assert refused, "chromium did not report the refused inline script"
