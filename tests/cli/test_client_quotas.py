"""``quotaflow client-quotas`` (KIP-546): golden text output, JSON, errors that write nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from quotaflow.cli.main import cli
from quotaflow.store.sqlite import SqliteStore


@pytest.fixture
def store(tmp_path: Path) -> str:
    path = str(tmp_path / "q.db")
    for args in (
        ["--names", "user=user-one", "--add", "producer_byte_rate=1048576,consumer_byte_rate=2097152"],
        ["--names", "user=user-one,client-id=my-client", "--add", "producer_byte_rate=2000000"],
        ["--defaults", "user", "--add", "request_percentage=12.3"],
        ["--names", "client-id=my-client", "--defaults", "user", "--add", "consumer_byte_rate=5000"],
        ["--names", "ip=1.2.3.4", "--add", "connection_creation_rate=100"],
    ):
        result = run(path, "--alter", *args)
        assert result.exit_code == 0, result.stderr
    return path


def run(store: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["client-quotas", "--store", store, *args])


def ok(store: str, *args: str) -> str:
    result = run(store, *args)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_describe_all_text(store: str) -> None:
    # ordered by entity path: ips/1.2.3.4, users/<default>, users/<default>/clients/my-client, users/user-one, ...
    assert ok(store, "--describe") == (
        "{ip=1.2.3.4}\n"
        "  connection_creation_rate=100.0\n"
        "{user=<default>}\n"
        "  request_percentage=12.3\n"
        "{user=<default>, client-id=my-client}\n"
        "  consumer_byte_rate=5000.0\n"
        "{user=user-one}\n"
        "  consumer_byte_rate=2097152.0\n"
        "  producer_byte_rate=1048576.0\n"
        "{user=user-one, client-id=my-client}\n"
        "  producer_byte_rate=2000000.0\n"
    )


def test_describe_filters(store: str) -> None:
    assert ok(store, "--describe", "--names", "user=user-one", "--strict") == (
        "{user=user-one}\n  consumer_byte_rate=2097152.0\n  producer_byte_rate=1048576.0\n"
    )
    assert ok(store, "--describe", "--defaults", "user") == (
        "{user=<default>}\n  request_percentage=12.3\n"
        "{user=<default>, client-id=my-client}\n  consumer_byte_rate=5000.0\n"
    )
    # "any" includes the default; a type not given is a wildcard unless --strict
    assert ok(store, "--describe", "--any", "user", "--strict").count("{") == 2
    assert ok(store, "--describe", "--any", "user").count("{") == 4
    assert ok(store, "--describe", "--names", "user=nobody") == ""


def test_describe_json(store: str) -> None:
    doc = json.loads(ok(store, "--describe", "--names", "client-id=my-client", "--output", "json"))
    assert doc == [
        {"entity": {"user": None, "client-id": "my-client"}, "values": {"consumer_byte_rate": 5000.0}},
        {"entity": {"user": "user-one", "client-id": "my-client"}, "values": {"producer_byte_rate": 2000000.0}},
    ]


def test_resolve_text_and_json(store: str) -> None:
    assert ok(store, "--resolve", "--names", "user=user-one,client-id=my-client") == (
        "{user=user-one, client-id=my-client}\n"
        "  consumer_byte_rate=2097152.0 {user=user-one}\n"
        "  controller_mutation_rate=unlimited\n"
        "  producer_byte_rate=2000000.0 {user=user-one, client-id=my-client}\n"
        "  request_percentage=12.3 {user=<default>}\n"
    )
    doc = json.loads(ok(store, "--resolve", "--names", "user=someone,client-id=my-client", "--output", "json"))
    assert doc["entity"] == {"user": "someone", "client-id": "my-client"}
    consumer = doc["quotas"]["consumer_byte_rate"]
    assert consumer == {
        "value": 5000.0, "unlimited": False, "entity": {"user": None, "client-id": "my-client"}, "level": 4,
        "overridden": [], "quota_id": {"user": "someone", "client-id": "my-client"},
    }
    assert doc["quotas"]["producer_byte_rate"]["unlimited"] is True
    assert ok(store, "--resolve", "--names", "ip=1.2.3.4") == (
        "{ip=1.2.3.4}\n  connection_creation_rate=100.0 {ip=1.2.3.4}\n"
    )
    assert ok(store, "--resolve", "--names", "ip=5.6.7.8") == "{ip=5.6.7.8}\n  connection_creation_rate=unlimited\n"


def test_alter_delete_and_validate_only(store: str) -> None:
    with SqliteStore(store) as s:
        before = s.last_seq()
    assert ok(store, "--alter", "--names", "user=user-one", "--add", "producer_byte_rate=1", "--validate-only") == (
        "Validated (nothing written) {user=user-one}\n"
    )
    with SqliteStore(store) as s:
        assert s.last_seq() == before
    assert ok(store, "--alter", "--names", "user=user-one", "--delete", "producer_byte_rate,consumer_byte_rate") == (
        "Altered {user=user-one}\n"
    )
    assert ok(store, "--describe", "--names", "user=user-one", "--strict") == ""
    doc = json.loads(ok(store, "--alter", "--defaults", "client-id", "--add", "producer_byte_rate=10",
                        "--output", "json"))
    assert doc == [{"entity": {"client-id": None}, "error": None}]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--alter", "--names", "user=u", "--add", "producer_byte_rate=0.5"],
         "org.apache.kafka.common.errors.InvalidRequestException: producer_byte_rate cannot be a fractional value."),
        (["--alter", "--names", "user=u,ip=1.2.3.4", "--add", "producer_byte_rate=5"],
         "org.apache.kafka.common.errors.InvalidRequestException: Invalid quota entity combination, IP entity "
         "shouldnot be combined with User or ClientId"),
        (["--alter", "--names", "group=g", "--add", "producer_byte_rate=5"],
         "org.apache.kafka.common.errors.InvalidRequestException: Unhandled client quota entity type: group"),
        (["--alter", "--names", "user=", "--add", "producer_byte_rate=5"],
         "org.apache.kafka.common.errors.InvalidRequestException: Empty user not supported"),
        (["--alter", "--names", "user=u", "--add", "bogus=5"],
         "org.apache.kafka.common.errors.InvalidRequestException: Invalid configuration key bogus"),
        (["--describe", "--any", "group"],
         "org.apache.kafka.common.errors.UnsupportedVersionException: Unsupported entity type group"),
        (["--describe", "--any", "ip", "--names", "user=u"],
         "org.apache.kafka.common.errors.InvalidRequestException: Invalid entity filter component combination. IP "
         "filter component should not be used with user or clientId filter component."),
        (["--describe", "--names", "user=u", "--defaults", "user"],
         "org.apache.kafka.common.errors.InvalidRequestException: Entity type user cannot appear more than once in "
         "the filter."),
        (["--describe", "--alter"],
         "java.lang.IllegalArgumentException: Command must include exactly one action: --describe, --resolve, --alter"),
        (["--alter", "--names", "user=u"], "java.lang.IllegalArgumentException: --alter needs --add and/or --delete"),
        (["--alter", "--names", "user=u", "--add", "producer_byte_rate=x"],
         "java.lang.IllegalArgumentException: Cannot parse quota configuration value for producer_byte_rate: x"),
        (["--resolve", "--names", "user=u"],
         "java.lang.IllegalArgumentException: --resolve needs --names user=<user>,client-id=<client-id> or "
         "--names ip=<ip>"),
        (["--describe", "--names", "user"], "java.lang.IllegalArgumentException: Invalid --names entry 'user': "
         "expected type=name"),
        # a name and a default of one type: said, where the default silently replaced the name
        (["--alter", "--defaults", "user", "--names", "user=a", "--add", "producer_byte_rate=1"],
         "java.lang.IllegalArgumentException: Entity type user given more than once"),
        # one key twice: named, where Kafka's controller answers "Ignoring duplicate entity ..."
        (["--alter", "--names", "user=u", "--add", "producer_byte_rate=1", "--delete", "producer_byte_rate"],
         "java.lang.IllegalArgumentException: Duplicate quota key producer_byte_rate: give each key once, in --add "
         "or --delete"),
        (["--alter", "--names", "user=u", "--add", "producer_byte_rate=1,producer_byte_rate=2"],
         "java.lang.IllegalArgumentException: Duplicate quota key producer_byte_rate: give each key once, in --add "
         "or --delete"),
    ],
)
def test_invalid_input_writes_nothing(store: str, args: list[str], line: str) -> None:
    with SqliteStore(store) as s:
        before = s.snapshot()
    result = run(store, *args)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"Error while executing client-quotas command with args '--store {store} {' '.join(args)}'", line
    ]
    with SqliteStore(store) as s:
        assert s.snapshot() == before


def test_bootstrap_server_and_store_are_exclusive(store: str) -> None:
    result = run(store, "--describe", "--bootstrap-server", "127.0.0.1:1")
    assert result.exit_code == 1
    assert "--store and --bootstrap-server cannot be used together" in result.stderr


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's schema loader, imported by admin.wire
def test_bootstrap_server_uses_the_wire_backend(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """--bootstrap-server slots a wire client in behind the same commands; --command-config reaches it."""
    import click

    from quotaflow.admin import Admin
    from quotaflow.cli import common

    seen: list[tuple[str, object]] = []

    def fake_open_backend(bootstrap: str) -> Admin:
        seen.append((bootstrap, click.get_current_context().meta.get(common.COMMAND_CONFIG_META)))
        return Admin(SqliteStore(store))

    monkeypatch.setattr(common, "open_wire_backend", fake_open_backend)
    result = CliRunner().invoke(cli, ["client-quotas", "--bootstrap-server", "127.0.0.1:9092", "--command-config",
                                      "client.properties", "--describe", "--names", "ip=1.2.3.4"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "{ip=1.2.3.4}\n  connection_creation_rate=100.0\n"
    result = CliRunner().invoke(cli, ["configs", "--bootstrap-server", "127.0.0.1:9092", "--describe", "--ip",
                                      "1.2.3.4"])
    assert result.stdout == "Quota configs for ip '1.2.3.4' are connection_creation_rate=100.0\n"
    assert seen == [("127.0.0.1:9092", "client.properties"), ("127.0.0.1:9092", None)]


def test_alter_from_file_applies_each_entity_all_or_nothing_and_says_what_changes(store: str, tmp_path: Path) -> None:
    proposal = tmp_path / "proposal.json"
    proposal.write_text(json.dumps([
        {"entity": {"user": "user-one"}, "values": {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 4e6}},
        {"entity": {"user": "new-user"}, "values": {"producer_byte_rate": 5000.0, "request_percentage": 12.5}},
        {"entity": {"client-id": "bad"}, "values": {"producer_byte_rate": 1.5, "consumer_byte_rate": 10.0}},
    ]))
    before = ok(store, "--describe")
    checked = run(store, "--alter", "--from-file", str(proposal), "--validate-only")
    assert checked.exit_code == 1  # one entity fails Kafka's validation
    assert "{user=user-one}\n  producer_byte_rate: 1048576.0 -> 1048576.0 (unchanged)\n" \
           "  consumer_byte_rate: 2097152.0 -> 4000000.0\n" in checked.stdout
    assert "{user=new-user}\n  producer_byte_rate: - -> 5000.0\n" in checked.stdout
    assert "{client-id=bad}  FAILED: producer_byte_rate cannot be a fractional value." in checked.stdout
    assert checked.stdout.endswith("Validated (nothing written): 2 entities, 3 values changed; 1 failed\n")
    assert ok(store, "--describe") == before

    applied = run(store, "--alter", "--from-file", str(proposal), "--output", "json")
    assert applied.exit_code == 1
    doc = json.loads(applied.stdout)
    assert [d["error"] is None for d in doc] == [True, True, False]
    assert doc[1]["changes"]["request_percentage"] == {"old": None, "new": 12.5}
    # the good entities are written, the bad one not at all (its valid consumer_byte_rate neither)
    assert ok(store, "--describe", "--names", "user=user-one", "--strict") == (
        "{user=user-one}\n  consumer_byte_rate=4000000.0\n  producer_byte_rate=1048576.0\n")
    assert ok(store, "--describe", "--names", "user=new-user", "--strict") == (
        "{user=new-user}\n  producer_byte_rate=5000.0\n  request_percentage=12.5\n")
    assert ok(store, "--describe", "--names", "client-id=bad") == ""


def test_alter_from_file_shows_the_quota_in_force_where_the_entity_holds_none(store: str, tmp_path: Path) -> None:
    """Issue 35: the advisor's proposal applied to an entity that holds nothing printed ``- -> 1.0`` where a
    quota of 50 was in force through ``<default>``: the diff names what is in force and the entity it comes from."""
    proposal = tmp_path / "proposal.json"
    proposal.write_text(json.dumps([
        {"entity": {"user": "new-user", "client-id": "app"}, "values": {"request_percentage": 1.0}},
        {"entity": {"user": "user-one", "client-id": "other"}, "values": {"producer_byte_rate": 5000.0}},
        {"entity": {"user": "nobody", "client-id": "app"}, "values": {"connection_creation_rate": 3.0}},
    ]))
    checked = run(store, "--alter", "--from-file", str(proposal), "--validate-only")
    assert checked.exit_code == 1, checked.output  # connection_creation_rate is not a client quota: refused
    assert "{user=new-user, client-id=app}\n  request_percentage: - (12.3 in force from {user=<default>}) -> 1.0\n" \
        in checked.stdout
    assert "  producer_byte_rate: - (1048576.0 in force from {user=user-one}) -> 5000.0\n" in checked.stdout


def test_alter_from_file_rejects_a_malformed_file(store: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"entity": {"user": "u"}, "values": {"producer_byte_rate": "fast"}}]))
    result = run(store, "--alter", "--from-file", str(bad))
    assert result.exit_code == 1
    assert "entry 0: value of producer_byte_rate must be a number or null, got 'fast'" in result.stderr
    result = run(store, "--alter", "--from-file", str(bad), "--names", "user=u")
    assert result.exit_code == 1 and "--from-file names its entities" in result.stderr
