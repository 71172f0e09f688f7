"""``quotaflow configs``: kafka-configs.sh output lines and messages (ConfigCommandTest)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from quotaflow.cli.main import cli
from quotaflow.store.sqlite import SqliteStore


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "q.db")


def run(store: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["configs", "--store", store, *args])


def ok(store: str, *args: str) -> str:
    result = run(store, *args)
    assert result.exit_code == 0, result.output + result.stderr
    return result.stdout


def seq(store: str) -> int:
    with SqliteStore(store) as s:
        return s.last_seq()


def test_alter_then_describe_golden(store: str) -> None:
    assert ok(store, "--alter", "--entity-type", "users", "--entity-name", "user1", "--add-config",
              "consumer_byte_rate=20000") == "Completed updating config for user user1.\n"
    assert ok(store, "--describe", "--entity-type", "users", "--entity-name", "user1") == (
        "Quota configs for user-principal 'user1' are consumer_byte_rate=20000.0\n"
    )
    assert ok(store, "--alter", "--user-defaults", "--add-config",
              "request_percentage=12.3,producer_byte_rate=1e7") == (
        "Completed updating default config for users in the cluster.\n"
    )
    # key order is Java HashMap order, as ConfigCommand prints a HashMap
    assert ok(store, "--describe", "--entity-type", "users", "--entity-default") == (
        "Quota configs for the default user-principal are request_percentage=12.3, producer_byte_rate=1.0E7\n"
    )
    assert ok(store, "--alter", "--client", "c1", "--user", "u2", "--add-config", "producer_byte_rate=1024") == (
        "Completed updating config for client c1.\n"
    )
    assert ok(store, "--describe", "--user", "u2", "--client", "c1") == (
        "Quota configs for user-principal 'u2', client-id 'c1' are producer_byte_rate=1024.0\n"
    )
    # a bare type is "any name", and describe is strict: user-only entities, default included
    assert ok(store, "--describe", "--entity-type", "users") == (
        "Quota configs for the default user-principal are request_percentage=12.3, producer_byte_rate=1.0E7\n"
        "Quota configs for user-principal 'user1' are consumer_byte_rate=20000.0\n"
    )


def test_ip_configs(store: str) -> None:
    assert ok(store, "--alter", "--entity-type", "ips", "--entity-name", "1.2.3.4", "--add-config",
              "connection_creation_rate=100") == "Completed updating config for ip 1.2.3.4.\n"
    assert ok(store, "--alter", "--ip-defaults", "--add-config", "connection_creation_rate=50") == (
        "Completed updating default config for ips in the cluster.\n"
    )
    assert ok(store, "--describe", "--ip", "1.2.3.4") == (
        "Quota configs for ip '1.2.3.4' are connection_creation_rate=100.0\n"
    )
    assert ok(store, "--describe", "--entity-default", "--entity-type", "ips") == (
        "Quota configs for the default ip are connection_creation_rate=50.0\n"
    )
    assert len(ok(store, "--describe", "--entity-type", "ips").splitlines()) == 2
    assert ok(store, "--alter", "--ip", "1.2.3.4", "--delete-config", "connection_creation_rate")
    assert ok(store, "--describe", "--ip", "1.2.3.4") == ""


COMBOS = [  # ConfigCommandTest.shouldAddClientConfig: (user, client); "" = default, None = absent
    ("test-user-1", "test-client-1"), ("test-user-2", ""), ("test-user-3", None), ("", "test-client-2"),
    ("", ""), ("", None), (None, "test-client-3"), (None, ""),
]


@pytest.mark.parametrize(("user", "client"), COMBOS)
def test_add_and_delete_in_one_alter(store: str, user: str | None, client: str | None) -> None:
    parts: list[str] = []
    if user is not None:
        parts += ["--entity-type", "users"] + (["--entity-name", user] if user else ["--entity-default"])
    if client is not None:
        parts += ["--entity-type", "clients"] + (["--entity-name", client] if client else ["--entity-default"])
    ok(store, "--alter", *parts, "--add-config", "request_percentage=50")
    done = ok(store, "--alter", *parts, "--add-config", "consumer_byte_rate=20000,producer_byte_rate=10000",
              "--delete-config", "request_percentage")
    first_type, first_name = ("users", user) if user is not None else ("clients", client)
    if first_name:
        assert done == f"Completed updating config for {first_type[:-1]} {first_name}.\n"
    else:
        assert done == f"Completed updating default config for {first_type} in the cluster.\n"
    (line,) = ok(store, "--describe", *parts).splitlines()
    assert line.endswith(" are producer_byte_rate=10000.0, consumer_byte_rate=20000.0")  # Java HashMap order
    who = []
    if user is not None:
        who.append(f"user-principal '{user}'" if user else "the default user-principal")
    if client is not None:
        who.append(f"client-id '{client}'" if client else "the default client-id")
    assert line.startswith(f"Quota configs for {', '.join(who)} are ")


def test_sanitized_user_name(store: str) -> None:
    ok(store, "--alter", "--user", "CN=Test,O=Apache", "--add-config", "producer_byte_rate=10")
    assert ok(store, "--describe", "--user", "CN=Test,O=Apache") == (
        "Quota configs for user-principal 'CN=Test,O=Apache' are producer_byte_rate=10.0\n"
    )
    with SqliteStore(store) as s:
        assert [c.path for c in s.changes_since(0)] == ["users/CN%3DTest%2CO%3DApache"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--describe", "--alter", "--user", "u"], "Command must include exactly one action: --describe, --alter"),
        (["--alter", "--user", "u", "--entity-type", "users"],
         "--entity-{type,name,default} should not be used in conjunction with specific entity flags"),
        (["--alter", "--user", "u", "--ip", "1.2.3.4", "--add-config", "producer_byte_rate=1"],
         "Only 'users' and 'clients' entity types may be specified together"),
        (["--alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"],
         "An entity-name or default entity must be specified with --alter of users, clients, brokers or ips"),
        (["--alter", "--entity-type", "users", "--entity-name", "u", "--entity-type", "clients",
          "--add-config", "producer_byte_rate=1"],
         "An entity-name or default entity must be specified with --alter of users, clients, brokers or ips"),
        (["--alter", "--ip", "not a valid host", "--add-config", "connection_creation_rate=1"],
         "The entity name for ips must be a valid IP or resolvable host, but it is: not a valid host"),
        (["--alter", "--ip", "127.0.0.1", "--add-config", "connection_creation_rate=10000,some_config=10"],
         "Only connection quota configs can be added for 'ips' using --bootstrap-server. "
         "Unexpected config names: some_config"),
        (["--alter", "--ip", "127.0.0.1", "--delete-config", "some_config"],
         "Only connection quota configs can be added for 'ips' using --bootstrap-server. "
         "Unexpected config names: some_config"),
        (["--alter", "--client", "c", "--add-config", "some_config=10"],
         "Only quota configs can be added for 'clients' using --bootstrap-server. "
         "Unexpected config names: some_config"),
        (["--alter", "--user", "u", "--add-config", "some_config=10"],
         "Only quota and SCRAM credential configs can be added for 'users' using --bootstrap-server. "
         "Unexpected config names: some_config"),
        (["--alter", "--user", "u", "--add-config", "producer_byte_rate=fast"],
         "Cannot parse quota configuration value for producer_byte_rate: fast"),
        (["--alter", "--user", "u", "--add-config", "producer_byte_rate"],
         'Invalid entity config: all configs to be added must be in the format "key=val".'),
        (["--alter", "--user", "u"],
         "At least one of --add-config, --add-config-file, or --delete-config must be specified with --alter"),
        (["--describe", "--entity-type", "topics"], "Invalid entity-type topics"),
    ],
)
def test_invalid_arguments(store: str, args: list[str], message: str) -> None:
    result = run(store, *args)
    assert result.exit_code == 1
    assert result.stdout == ""
    header, detail = result.stderr.splitlines()
    assert header.startswith(f"Error while executing config command with args '--store {store} ")
    assert detail.startswith("java.lang.IllegalArgumentException: " + message)
    assert seq(store) == 0


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--alter", "--user", "u", "--add-config", "producer_byte_rate=1.5"],
         "org.apache.kafka.common.errors.InvalidRequestException: producer_byte_rate cannot be a fractional value."),
        (["--alter", "--user", "u", "--add-config", "consumer_byte_rate=0"],
         "org.apache.kafka.common.errors.InvalidRequestException: Quota consumer_byte_rate must be greater than 0"),
        (["--alter", "--ip", "1.2.3.4", "--add-config", "connection_creation_rate=2147483648"],
         "org.apache.kafka.common.errors.InvalidRequestException: Proposed value for connection_creation_rate is too "
         "large for an INT."),
        (["--alter", "--user", "u", "--delete-config", "producer_byte_rate,request_percentage"],
         "org.apache.kafka.common.errors.InvalidConfigurationException: Invalid config(s): "
         "producer_byte_rate,request_percentage"),
    ],
)
def test_server_side_errors(store: str, args: list[str], line: str) -> None:
    result = run(store, *args)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[1] == line
    assert seq(store) == 0


def test_error_header_shows_the_arguments(store: str) -> None:
    result = run(store, "--alter", "--user", "u", "--add-config", "producer_byte_rate=0")
    assert result.stderr.splitlines()[0] == (
        f"Error while executing config command with args '--store {store} --alter --user u --add-config "
        "producer_byte_rate=0'"
    )


# -- SCRAM credentials for users, as kafka-configs.sh (KIP-554) ------------------------------------------------------

def test_scram_add_describe_delete_as_kafka_configs(store: str) -> None:
    from quotaflow.store.scram import scram_credential

    assert ok(store, "--alter", "--entity-type", "users", "--entity-name", "u", "--add-config",
              "SCRAM-SHA-256=[iterations=8192,password=p],SCRAM-SHA-512=[password=p]") == (
        "Completed updating config for user u.\n")
    with SqliteStore(store) as s:  # Kafka's credential for the password, not the password, at 4096 by default
        for mechanism, iterations in (("SCRAM-SHA-256", 8192), ("SCRAM-SHA-512", 4096)):
            stored = s.get_scram_credential("u", mechanism)
            assert stored == scram_credential("u", mechanism, "p", iterations=iterations, salt=stored.salt)
    assert ok(store, "--describe", "--entity-type", "users", "--entity-name", "u") == (
        "SCRAM credential configs for user-principal 'u' are SCRAM-SHA-256=iterations=8192, "
        "SCRAM-SHA-512=iterations=4096\n")
    ok(store, "--alter", "--user", "u", "--add-config", "producer_byte_rate=1024")
    ok(store, "--alter", "--user", "other", "--add-config", "consumer_byte_rate=10")
    assert ok(store, "--alter", "--user", "u", "--delete-config", "SCRAM-SHA-512") == (
        "Completed updating config for user u.\n")
    # a bare type describes every user: the quota lines, then every user with a SCRAM credential
    assert ok(store, "--describe", "--entity-type", "users") == (
        "Quota configs for user-principal 'other' are consumer_byte_rate=10.0\n"
        "Quota configs for user-principal 'u' are producer_byte_rate=1024.0\n"
        "SCRAM credential configs for user-principal 'u' are SCRAM-SHA-256=iterations=8192\n")
    # no SCRAM lines for a user without a credential, a default, or a (user, client) pair
    assert ok(store, "--describe", "--user", "other") == (
        "Quota configs for user-principal 'other' are consumer_byte_rate=10.0\n")
    assert ok(store, "--describe", "--user", "u", "--client", "c") == ""
    assert ok(store, "--describe", "--user-defaults") == ""


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--add-config", "SCRAM-SHA-256=[iterations=100,password=x]"],
         "java.lang.IllegalArgumentException: Iterations 100 is less than the minimum 4096 required for "
         "SCRAM-SHA-256"),
        (["--add-config", "SCRAM-SHA-512=[iterations=,password=x]"],
         'java.lang.IllegalArgumentException: For input string: ""'),
        (["--add-config", "SCRAM-SHA-256=[iterations=8k,password=x]"],  # not echoed whole: it holds the password
         None),
        (["--add-config", "SCRAM-SHA-256=[salt=abc,iterations=8192]"],
         "java.lang.IllegalArgumentException: Invalid credential property SCRAM_SHA_256=salt=abc,iterations=8192"),
        (["--add-config", "SCRAM-SHA-256=[iterations=16385,password=x]"],
         "org.apache.kafka.common.errors.UnacceptableCredentialException: Too many iterations"),
        (["--add-config", "SCRAM-SHA-256=[password=x],producer_byte_rate=5"],
         "java.lang.IllegalArgumentException: Cannot alter both quota and SCRAM credential configs simultaneously "
         "for 'users' using --bootstrap-server."),
        (["--delete-config", "SCRAM-SHA-512"],
         "org.apache.kafka.common.errors.ResourceNotFoundException: Attempt to delete a user credential that does "
         "not exist"),
        (["--add-config", "SCRAM-SHA-1=[password=x]"],
         "java.lang.IllegalArgumentException: Only quota and SCRAM credential configs can be added for 'users' "
         "using --bootstrap-server. Unexpected config names: SCRAM-SHA-1"),
        (["--delete-config", "password"],
         "java.lang.IllegalArgumentException: Only quota and SCRAM credential configs can be deleted for 'users' "
         "using --bootstrap-server. Unexpected config names: password"),
    ],
)
def test_scram_errors_in_kafkas_words(store: str, args: list[str], line: str | None) -> None:
    result = run(store, "--alter", "--user", "u", *args)
    assert result.exit_code == 1 and result.stdout == ""
    header, detail = result.stderr.splitlines()
    assert "password=x" not in header  # the password stays out of the error header
    if line is None:
        assert detail == "java.lang.IllegalArgumentException: Invalid credential property SCRAM_SHA_256=" \
                         "iterations=8k,password=[hidden]"
    else:
        assert detail == line
    assert seq(store) == 0


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--alter", "--user-defaults", "--add-config", "SCRAM-SHA-256=[password=x]"],
         "The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials using "
         "--bootstrap-server."),
        (["--alter", "--client", "c", "--add-config", "SCRAM-SHA-256=[password=x]"],
         "Only quota configs can be added for 'clients' using --bootstrap-server. Unexpected config names: "
         "SCRAM-SHA-256"),
        (["--alter", "--user", "u", "--client", "c", "--delete-config", "SCRAM-SHA-256"],
         "Only quota configs can be deleted for 'clients' using --bootstrap-server. Unexpected config names: "
         "SCRAM-SHA-256"),
    ],
)
def test_scram_only_for_a_named_user(store: str, args: list[str], line: str) -> None:
    result = run(store, *args)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[1] == "java.lang.IllegalArgumentException: " + line
    assert seq(store) == 0


def test_add_config_keeps_bracketed_values_together() -> None:
    from quotaflow.cli.configs import parse_add_config

    assert parse_add_config(["a=1, b = [x=1,y=2] ,c=[]", "a=2,"]) == {"a": "2", "b": "x=1,y=2", "c": ""}
    with pytest.raises(Exception, match='format "key=val"'):
        parse_add_config(["a=1=2"])
