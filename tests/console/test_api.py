"""``/api``: describe in the CLI's JSON shape, alter with Kafka's validation and access rules, resolve."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from quotaflow.admin import Admin, Alteration
from quotaflow.cli.main import cli
from quotaflow.console import ConsoleConfig, create_app
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.validation import SHOULDNOT_COMBINE
from quotaflow.store.sqlite import SqliteStore

from .conftest import ADMIN, OPERATOR


def cli_json(store: SqliteStore, *args: str) -> object:
    result = CliRunner().invoke(cli, ["client-quotas", "--store", str(store.path), *args, "--output", "json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def post(client: TestClient, body: object, auth: tuple[str, str] | None = ADMIN, **kwargs: object) -> object:
    return client.post("/api/quotas", json=body, auth=auth, **kwargs)  # type: ignore[arg-type]


# -- describe -----------------------------------------------------------------------------------------------------


def test_get_quotas_is_the_cli_describe_json(client: TestClient, store: SqliteStore) -> None:
    r = client.get("/api/quotas")
    assert r.status_code == 200
    assert r.json() == cli_json(store, "--describe")
    assert len(r.json()) == 7


@pytest.mark.parametrize(
    ("params", "cli_args"),
    [
        ({"user": "alice"}, ["--names", "user=alice"]),
        ({"user": "alice", "strict": "1"}, ["--names", "user=alice", "--strict"]),
        ({"user_match": "default"}, ["--defaults", "user"]),
        ({"user_match": "any", "strict": "true"}, ["--any", "user", "--strict"]),
        ({"client-id_match": "any"}, ["--any", "client-id"]),
        ({"ip_match": "any"}, ["--any", "ip"]),
        ({"ip": "127.0.0.1"}, ["--names", "ip=127.0.0.1"]),
    ],
)
def test_filters_match_describe(
    client: TestClient, store: SqliteStore, params: dict[str, str], cli_args: list[str]
) -> None:
    r = client.get("/api/quotas", params=params)
    assert r.status_code == 200
    assert r.json() == cli_json(store, "--describe", *cli_args)
    assert r.json(), "every filter here matches something"


def test_filter_errors_are_kafkas(client: TestClient) -> None:
    r = client.get("/api/quotas", params={"user_match": "prefix"})
    assert r.status_code == 400
    assert r.json()["error"]["name"] == "INVALID_REQUEST"
    # a filter Kafka rejects as a whole: an entity type named twice cannot happen here; exact with no name can
    r = client.get("/api/quotas", params={"user_match": "exact"})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "Request specified MATCH_TYPE_EXACT, but set match string to null."


# -- alter --------------------------------------------------------------------------------------------------------


def test_alter_writes_and_describe_shows_it(client: TestClient, store: SqliteStore) -> None:
    before = store.last_seq()
    body = {"entity": {"user": "u1", "client-id": None}, "ops": [{"key": "producer_byte_rate", "value": 12.0}]}
    r = post(client, body)
    assert r.status_code == 200, r.text
    assert r.json()["results"] == [{"entity": {"user": "u1", "client-id": None}, "error": None}]
    assert r.json()["seq"] == store.last_seq() == before + 1
    assert store.get(QuotaEntity.from_wire({"user": "u1", "client-id": None})) == {
        "producer_byte_rate": 12.0
    }
    shown = client.get("/api/quotas", params={"user": "u1", "client-id_match": "default"}).json()
    assert shown == [{"entity": {"user": "u1", "client-id": None}, "values": {"producer_byte_rate": 12.0}}]


def test_remove_a_key_with_null(client: TestClient, store: SqliteStore) -> None:
    r = post(client, {"entity": {"user": "alice"}, "ops": [{"key": "consumer_byte_rate", "value": None}]})
    assert r.status_code == 200, r.text
    assert store.get(QuotaEntity(user="alice")) == {"producer_byte_rate": 2_000_000.0}


def test_validate_only_writes_nothing(client: TestClient, store: SqliteStore) -> None:
    before = store.last_seq()
    r = post(client, {"entity": {"user": "u2"}, "ops": [{"key": "producer_byte_rate", "value": 5}],
                      "validate_only": True})
    assert r.status_code == 200
    assert r.json()["validate_only"] is True and r.json()["results"][0]["error"] is None
    assert store.last_seq() == before and store.get(QuotaEntity(user="u2")) == {}


@pytest.mark.parametrize(
    ("entity", "ops", "message", "field"),
    [
        ({"user": "u"}, [{"key": "producer_byte_rate", "value": 1.5}],
         "producer_byte_rate cannot be a fractional value.", {"op": 0, "part": "value"}),
        ({"user": "u"}, [{"key": "request_percentage", "value": 10}, {"key": "consumer_byte_rate", "value": 0}],
         "Quota consumer_byte_rate must be greater than 0", {"op": 1, "part": "value"}),
        ({"client-id": "c"}, [{"key": "connection_creation_rate", "value": 10}],  # a user alone may hold it
         "Invalid configuration key connection_creation_rate", {"op": 0, "part": "key"}),
        ({"user": "u", "ip": "10.0.0.1"}, [{"key": "producer_byte_rate", "value": 10}], SHOULDNOT_COMBINE,
         {"entity": True}),
        ({"user": "u"}, [{"key": "producer_byte_rate", "value": 10}, {"key": "producer_byte_rate", "value": 20}],
         "Ignoring duplicate entity ClientQuotaEntity(entries={user=u})",  # Kafka's answer to a repeated key
         {"op": 1, "part": "key"}),
        ({"user": "u"}, [{"key": "producer_byte_rate", "value": "lots"}],
         "Cannot parse quota configuration value for producer_byte_rate: lots", {"op": 0, "part": "value"}),
        ({"user": "u"}, [{"key": "request_percentage", "value": 10}, {"key": "producer_byte_rate", "value": "1_000"}],
         "Cannot parse quota configuration value for producer_byte_rate: 1_000",  # Python's float takes it, Java not
         {"op": 1, "part": "value"}),
    ],
)
def test_invalid_alter_is_400_with_kafkas_message_and_writes_nothing(
    client: TestClient, store: SqliteStore, entity: dict[str, str], ops: list[dict[str, object]], message: str,
    field: dict[str, object],
) -> None:
    before = store.last_seq()
    r = post(client, {"entity": entity, "ops": ops})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == 42 and r.json()["error"]["name"] == "INVALID_REQUEST"
    assert r.json()["error"]["message"] == message
    assert r.json()["field"] == field
    if "results" in r.json():  # validated by the admin (not a malformed body): the message is the admin's own
        from quotaflow.admin import QuotaOp

        expected = Admin(store).alter([Alteration(entity, tuple(QuotaOp(o["key"], o["value"]) for o in ops))], True)
        assert r.json()["results"][0]["error"]["message"] == expected[0].error.message
    assert store.last_seq() == before


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[" * 20_000 + "]" * 20_000,  # nested deeper than the JSON decoder recurses: still a 400, not a 500
        [1, 2],
        {"entity": {"user": "u"}},
        {"entity": {"user": 5}, "ops": [{"key": "producer_byte_rate", "value": 1}]},
        {"entity": {"user": "u"}, "ops": [{"key": "producer_byte_rate", "value": 1}], "validate_only": "yes"},
        {"entity": {"user": "u"}, "ops": [{"value": 1}]},
    ],
)
def test_malformed_bodies(client: TestClient, store: SqliteStore, body: object) -> None:
    before = store.last_seq()
    if isinstance(body, str):
        r = client.post("/api/quotas", content=body, headers={"content-type": "application/json"}, auth=ADMIN)
    else:
        r = post(client, body)
    assert r.status_code == 400
    assert r.json()["error"]["name"] == "INVALID_REQUEST"
    assert store.last_seq() == before


def test_writes_need_a_signed_in_admin(client: TestClient, store: SqliteStore) -> None:
    before = store.last_seq()
    body = {"entity": {"user": "u3"}, "ops": [{"key": "producer_byte_rate", "value": 100}]}
    r = post(client, body, auth=None)
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic ")
    r = post(client, body, auth=(ADMIN[0], "wrong"))
    assert r.status_code == 401
    assert r.json()["error"]["message"] == "Authentication failed: Invalid username or password"
    r = post(client, body, auth=("nobody", "x"))
    assert r.status_code == 401
    r = post(client, body, auth=OPERATOR)  # a store user, not on the admin list
    assert r.status_code == 403 and r.json()["error"]["name"] == "CLUSTER_AUTHORIZATION_FAILED"
    assert store.last_seq() == before
    assert post(client, body).status_code == 200


def test_cross_site_and_non_json_posts_are_refused(client: TestClient, store: SqliteStore) -> None:
    before = store.last_seq()
    body = {"entity": {"user": "u4"}, "ops": [{"key": "producer_byte_rate", "value": 100}]}
    r = post(client, body, headers={"origin": "http://evil.example"})
    assert r.status_code == 403
    r = client.post("/api/quotas", content=json.dumps(body), auth=ADMIN, headers={"content-type": "text/plain"})
    assert r.status_code == 400
    assert store.last_seq() == before


def test_read_only_console_never_writes(store: SqliteStore) -> None:
    with TestClient(create_app(store, ConsoleConfig(read_only=True))) as c:
        before = store.last_seq()
        r = post(c, {"entity": {"user": "u5"}, "ops": [{"key": "producer_byte_rate", "value": 100}]})
        assert r.status_code == 403 and "read-only" in r.json()["error"]["message"]
        assert store.last_seq() == before
        assert c.get("/api/whoami").json() == {"principal": None, "admin": False, "read_only": True}


def test_no_admin_list_lets_every_store_user_write(store: SqliteStore) -> None:
    with TestClient(create_app(store, ConsoleConfig())) as c:
        r = post(c, {"entity": {"user": "u6"}, "ops": [{"key": "producer_byte_rate", "value": 100}]}, auth=OPERATOR)
        assert r.status_code == 200
        assert c.get("/api/whoami", auth=OPERATOR).json() == {"principal": "operator", "admin": True,
                                                               "read_only": False}


# -- resolve ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({"user": "alice", "client-id": "ingest"}, "user=alice,client-id=ingest"),
        ({"user": "alice", "client-id": "other"}, "user=alice,client-id=other"),
        ({"user": "bob", "client-id": "batch-loader"}, "user=bob,client-id=batch-loader"),
        ({"ip": "127.0.0.1"}, "ip=127.0.0.1"),
        ({"ip": "192.0.2.1"}, "ip=192.0.2.1"),
    ],
)
def test_resolve_is_the_cli_resolve_json(
    client: TestClient, store: SqliteStore, params: dict[str, str], names: str
) -> None:
    r = client.get("/api/resolve", params=params)
    assert r.status_code == 200
    assert r.json() == cli_json(store, "--resolve", "--names", names)


def test_resolve_answers_levels_and_overrides(client: TestClient) -> None:
    doc = client.get("/api/resolve", params={"user": "alice", "client-id": "ingest"}).json()
    produce = doc["quotas"]["producer_byte_rate"]
    assert (produce["value"], produce["level"], produce["entity"]) == (5e6, 1, {"user": "alice", "client-id": "ingest"})
    assert [c["level"] for c in produce["overridden"]] == [3, 6]


def test_resolve_needs_a_whole_client_or_an_ip(client: TestClient) -> None:
    assert client.get("/api/resolve", params={"user": "alice"}).status_code == 400
    assert client.get("/api/resolve", params={"ip": "1.2.3.4", "user": "x"}).status_code == 400


def test_pages_render(client: TestClient, tmp_path: Path) -> None:
    for path in ("/quotas", "/resolve", "/resolve?user=alice&client-id=ingest", "/live", "/backtests"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert "quotaflow console" in r.text
    assert client.get("/").url.path == "/quotas"
    page = client.get("/quotas", params={"user_match": "bogus"})
    assert page.status_code == 400 and "Unknown match type" in page.text


def test_resolve_links_from_quotas(client: TestClient) -> None:
    page = client.get("/quotas").text
    assert 'href="/resolve?user=alice&amp;client-id=ingest"' in page  # runs the resolve
    # issue 35: a user alone, or a prefix, opened an empty form; the link now names a client the entity applies
    # to (the part it leaves open is an empty name, Kafka's empty client-id), so it shows a resolution
    assert 'href="/resolve?user=alice&amp;client-id="' in page
    one = client.get("/resolve", params={"user": "alice", "client-id": ""})
    assert one.status_code == 200 and "resolve-table" in one.text and "every client-id of user alice" in one.text
    partial = client.get("/resolve", params={"user": "alice"})
    assert partial.status_code == 200 and 'value="alice"' in partial.text and "resolve-table" not in partial.text
    full = client.get("/resolve", params={"user": "alice", "client-id": "ingest"}).text
    back = "/quotas?strict=1&amp;user_match=exact&amp;user=alice&amp;client-id_match=exact&amp;client-id=ingest"
    assert f'href="{back}"' in full


def test_the_page_lists_a_bounded_number_of_rows(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    import quotaflow.console.pages as app_mod

    monkeypatch.setattr(app_mod, "PAGE_ROWS", 3)
    page = client.get("/quotas").text
    assert page.count('class="entity"') == 3 and "the first 3 of 7 matching" in page
    assert len(client.get("/api/quotas").json()) == 7  # the API returns every match


def test_values_beyond_json_numbers_are_validated_by_kafka(client: TestClient, store: SqliteStore) -> None:
    r = post(client, {"entity": {"user": "u7"}, "ops": [{"key": "producer_byte_rate", "value": "1e999"}]})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "Proposed value for producer_byte_rate is too large for a LONG."
    assert store.get(QuotaEntity(user="u7")) == {}
    # a string value is read as kafka-configs.sh reads --add-config values (Double.parseDouble)
    r = post(client, {"entity": {"user": "u7"}, "ops": [{"key": "producer_byte_rate", "value": " 2048d "}]})
    assert r.status_code == 200 and store.get(QuotaEntity(user="u7")) == {"producer_byte_rate": 2048.0}


def test_resolve_sees_changes_another_process_made(client: TestClient, store: SqliteStore) -> None:
    before = client.get("/api/resolve", params={"user": "carol", "client-id": "x"}).json()
    assert before["quotas"]["producer_byte_rate"]["value"] == 1e6  # <default> user
    with SqliteStore(store.path) as other:  # e.g. the CLI or a gateway writing the same file
        Admin(other).alter([Alteration.of(QuotaEntity(user="carol"), {"producer_byte_rate": 7e6})])
    after = client.get("/api/resolve", params={"user": "carol", "client-id": "x"}).json()
    assert after["quotas"]["producer_byte_rate"]["value"] == 7e6 and after["seq"] == before["seq"] + 1


def test_a_body_over_the_limit_is_refused_unread(client: TestClient, store: SqliteStore) -> None:
    before = store.last_seq()
    big = b'{"entity": {"user": "u"}, "ops": [' + b'{"key": "producer_byte_rate", "value": 1},' * 5000 + b"]}"
    r = client.post("/api/quotas", content=big, headers={"content-type": "application/json"}, auth=ADMIN)
    assert r.status_code == 400 and "larger than 65536 bytes" in r.json()["error"]["message"]
    assert store.last_seq() == before


def test_unknown_routes_and_methods_answer_in_the_apis_error_shape(client: TestClient) -> None:
    r = client.delete("/api/quotas")
    assert r.status_code == 405 and "GET" in r.headers["allow"]
    assert r.json()["error"]["name"] == "METHOD_NOT_ALLOWED" and "DELETE /api/quotas" in r.json()["error"]["message"]
    r = client.get("/api/nope")
    assert r.status_code == 404 and r.json()["error"]["name"] == "NOT_FOUND"
    page = client.get("/nope")  # outside the API: Starlette's plain answer
    assert page.status_code == 404 and page.text == "Not Found"


def test_edit_buttons_only_for_a_signed_in_principal(client: TestClient, store: SqliteStore) -> None:
    """Issue 35: a signed-out visitor saw Edit and Delete on every row (every write is refused to them)."""
    signed_out = client.get("/quotas").text
    assert 'class="edit"' not in signed_out and 'class="delete"' not in signed_out
    assert 'id="sign-in-to-edit"' in signed_out
    signed_in = client.get("/quotas", auth=ADMIN).text
    assert signed_in.count('class="edit"') == len(store.snapshot().entities)
    assert 'class="delete"' in signed_in and 'id="sign-in-to-edit"' not in signed_in
