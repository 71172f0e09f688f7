"""``quotaflow acls``: kafka-acls.sh's options, expansion, checks and lines over a real SQLite store; ``--import`` of
a ``--list`` output; ``--authorize``; and the gateway refusing an unknown ``authorizer.class.name`` at startup."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from quotaflow.cli.main import cli
from quotaflow.store.sqlite import SqliteStore


def run(store: Path, *args: str, stdin: str = "") -> Result:
    return CliRunner().invoke(cli, ["acls", "--store", str(store), *args], input=stdin)


def bindings(store: Path) -> set[tuple[str, str, str, str, str, str, str]]:
    with SqliteStore(store) as s:
        return {(b.pattern.resource_type.name, b.pattern.name, b.pattern.pattern_type.name, b.entry.principal,
                 b.entry.host, b.entry.operation.name, b.entry.permission_type.name) for b in s.acls().bindings}


def test_add_prints_kafkas_lines_and_stores_the_product(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    r = run(db, "--add", "--allow-principal", "User:alice", "--allow-principal", "User:bob", "--allow-host",
            "10.0.0.1", "--operation", "Read", "--topic", "t")
    assert r.exit_code == 0, r.output
    assert r.output == (
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`: \n"
        " \t(principal=User:alice, host=10.0.0.1, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:bob, host=10.0.0.1, operation=READ, permissionType=ALLOW) \n\n")
    assert bindings(db) == {("TOPIC", "t", "LITERAL", "User:alice", "10.0.0.1", "READ", "ALLOW"),
                            ("TOPIC", "t", "LITERAL", "User:bob", "10.0.0.1", "READ", "ALLOW")}


def test_producer_and_consumer_shortcuts_expand_as_kafka(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    r = run(db, "--add", "--producer", "--consumer", "--idempotent", "--allow-principal", "User:app", "--topic",
            "orders", "--group", "g", "--transactional-id", "tx")
    assert r.exit_code == 0, r.output
    assert bindings(db) == {
        *(("TOPIC", "orders", "LITERAL", "User:app", "*", op, "ALLOW") for op in ("WRITE", "DESCRIBE", "CREATE",
                                                                                   "READ")),
        ("GROUP", "g", "LITERAL", "User:app", "*", "READ", "ALLOW"),
        ("TRANSACTIONAL_ID", "tx", "LITERAL", "User:app", "*", "WRITE", "ALLOW"),
        ("TRANSACTIONAL_ID", "tx", "LITERAL", "User:app", "*", "DESCRIBE", "ALLOW"),
        ("CLUSTER", "kafka-cluster", "LITERAL", "User:app", "*", "IDEMPOTENT_WRITE", "ALLOW"),
    }


def test_kafkas_argument_checks(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    cases = [
        (["--add", "--list", "--topic", "t"], "Command must include exactly one action"),
        (["--add", "--allow-principal", "User:a", "--operation", "Read", "--operation", "Write",
          "--transactional-id", "x", "--operation", "Read"], "ResourceType TRANSACTIONAL_ID only supports"),
        (["--add", "--allow-principal", "alice", "--topic", "t"],
         "expected a string in format principalType:principalName but got alice"),
        (["--add", "--topic", "t"], "You must specify one of: --allow-principal, --deny-principal"),
        (["--add", "--allow-principal", "User:a"], "You must provide at least one resource"),
        (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
         "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls."),
        (["--add", "--producer", "--allow-principal", "User:a", "--group", "g"],
         "With --producer you must specify a --topic"),
        (["--add", "--consumer", "--allow-principal", "User:a", "--topic", "t"],
         "With --consumer you must specify a --topic and a --group"),
        (["--add", "--producer", "--operation", "Read", "--allow-principal", "User:a", "--topic", "t"],
         "can't be used with option"),
        (["--remove", "--principal", "User:a", "--topic", "t"], "The --principal option is only available"),
    ]
    for args, message in cases:
        r = run(db, *args)
        assert r.exit_code == 1 and message in r.output, (args, r.output)
    assert bindings(db) == set()


def test_remove_prompts_unless_forced_and_filters(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    run(db, "--add", "--allow-principal", "User:a", "--operation", "Read", "--operation", "Write", "--topic", "t")
    r = run(db, "--remove", "--allow-principal", "User:a", "--operation", "Write", "--topic", "t", stdin="n\n")
    assert "Are you sure you want to remove ACLs: \n \t(principal=User:a, host=*, operation=WRITE" in r.output
    assert len(bindings(db)) == 2  # answered no
    r = run(db, "--remove", "--allow-principal", "User:a", "--operation", "Write", "--topic", "t", stdin="y\n")
    assert r.exit_code == 0 and {b[5] for b in bindings(db)} == {"READ"}
    r = run(db, "--remove", "--topic", "t", "--force")
    assert r.exit_code == 0 and bindings(db) == set()


def test_list_import_round_trip_and_authorize(tmp_path: Path) -> None:
    src, dst = tmp_path / "cluster.db", tmp_path / "gateway.db"
    run(src, "--add", "--allow-principal", "User:*", "--operation", "Describe", "--topic", "pay-",
        "--resource-pattern-type", "prefixed")
    run(src, "--add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.66", "--operation", "All",
        "--topic", "*")
    run(src, "--add", "--allow-principal", "User:ops", "--operation", "Alter", "--cluster")
    listed = run(src, "--list")
    assert listed.exit_code == 0 and listed.output.count("Current ACLs for resource") == 3
    dump = tmp_path / "kafka-acls.txt"
    dump.write_text("[2025-01-01 10:00:00] WARN something a tool printed (kafka.admin.AclCommand)\n" + listed.output)
    imported = run(dst, "--import", str(dump))
    assert imported.exit_code == 0 and "Imported 3 ACLs" in imported.output, imported.output
    assert bindings(dst) == bindings(src)
    # --list with a MATCH filter: every pattern that applies to pay-eu
    matched = run(dst, "--list", "--topic", "pay-eu", "--resource-pattern-type", "match")
    assert "name=pay-, patternType=PREFIXED" in matched.output and "name=*, patternType=LITERAL" in matched.output
    decided = run(dst, "--authorize", "--principal", "User:mallory", "--host", "10.0.0.66", "--operation",
                  "Describe", "--topic", "pay-eu")
    assert decided.exit_code == 2  # DENIED: a script can branch on it (1 stays "the command failed")
    assert decided.output.startswith("User:mallory DESCRIBE on TOPIC:pay-eu: DENIED by ResourcePattern("
                                     "resourceType=TOPIC, name=*, patternType=LITERAL)")
    config = tmp_path / "server.properties"
    config.write_text("super.users=User:mallory\n")
    decided = run(dst, "--authorize", "--principal", "User:mallory", "--host", "10.0.0.66", "--operation",
                  "Describe", "--topic", "pay-eu", "--config", str(config))
    assert "ALLOWED (User:mallory is a super user)" in decided.output and decided.exit_code == 0


def test_import_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    dump = tmp_path / "bad.txt"
    dump.write_text(" \t(principal=User:a, host=*, operation=READ, permissionType=ALLOW) \n")
    r = run(tmp_path / "q.db", "--import", str(dump))
    assert r.exit_code == 1 and "line 1: an ACL entry outside a resource block" in r.output


def test_gateway_refuses_an_unknown_authorizer_class(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text("authorizer.class.name=com.example.Nope\n")
    r = CliRunner().invoke(cli, ["gateway", "--upstream", "127.0.0.1:9", "--listen", "PLAINTEXT=127.0.0.1:0",
                                 "--store", str(tmp_path / "q.db"), "--config", str(config)])
    assert r.exit_code == 1
    assert "Invalid value com.example.Nope for configuration authorizer.class.name" in r.output



def test_import_reads_the_zookeeper_era_listing(tmp_path: Path) -> None:
    dump = tmp_path / "zk-acls.txt"
    dump.write_text(
        "Current ACLs for resource `Topic:LITERAL:orders`: \n"
        " \tUser:alice has Allow permission for operations: Read from hosts: * \n"
        "\tUser:mallory has Deny permission for operations: All from hosts: 10.0.0.66 \n\n"
        "Current ACLs for resource `Group:PREFIXED:app-`: \n"
        " \tUser:alice has Allow permission for operations: Read,Describe from hosts: * \n\n"
        "Current ACLs for resource `Cluster:kafka-cluster`: \n"
        " \tUser:ops has Allow permission for operations: IdempotentWrite from hosts: * \n\n")
    db = tmp_path / "q.db"
    r = run(db, "--import", str(dump))
    assert r.exit_code == 0 and "Imported 5 ACLs" in r.output, r.output
    assert bindings(db) == {
        ("TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", "User:mallory", "10.0.0.66", "ALL", "DENY"),
        ("GROUP", "app-", "PREFIXED", "User:alice", "*", "READ", "ALLOW"),
        ("GROUP", "app-", "PREFIXED", "User:alice", "*", "DESCRIBE", "ALLOW"),
        ("CLUSTER", "kafka-cluster", "LITERAL", "User:ops", "*", "IDEMPOTENT_WRITE", "ALLOW"),
    }


def test_version_and_usage_text_as_kafka_acls(tmp_path: Path) -> None:
    from quotaflow import __version__

    version = CliRunner().invoke(cli, ["acls", "--version"])
    assert version.exit_code == 0 and version.stdout == f"{__version__}\n"
    bare = CliRunner().invoke(cli, ["acls"])
    assert bare.exit_code == 1 and bare.stderr.splitlines()[0] == "This tool helps to manage acls on kafka."
    # printUsageAndExit: the message, then the usage text, on stderr; nothing on stdout
    bad = run(tmp_path / "q.db", "--add", "--allow-principal", "User:a")
    assert bad.exit_code == 1 and bad.stdout == ""
    lines = bad.stderr.splitlines()
    assert lines[0].startswith("You must provide at least one resource")
    assert lines[1].startswith("Usage: ") and lines[1].endswith(" acls [OPTIONS]")
    assert "--resource-pattern-type" in bad.stderr and "Exit status: 0 done" in bad.stderr


def test_an_unknown_operation_is_worded_as_kafka_words_it(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    result = run(db, "--add", "--allow-principal", "User:a", "--operation", "Foo", "--topic", "t")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == (
        "ResourceType TOPIC only supports operations [ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, "
        "DESCRIBE_CONFIGS, ALTER_CONFIGS]")
    assert not db.exists()  # a usage error opens (and creates) no store


def test_authorize_exit_status(tmp_path: Path) -> None:
    db = tmp_path / "q.db"
    run(db, "--add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "t")
    ask = ("--authorize", "--operation", "Read", "--topic", "t", "--principal")
    assert run(db, *ask, "User:a").exit_code == 0
    denied = run(db, *ask, "User:b")
    assert denied.exit_code == 2 and "DENIED" in denied.stdout
    # one DENIED among several resources is enough
    assert run(db, *ask, "User:a", "--topic", "other").exit_code == 2
    assert run(db, "--authorize", "--operation", "Read", "--topic", "t").exit_code == 1  # no --principal


def test_a_write_to_a_store_not_named_says_which_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """acls, configs, client-quotas and users follow one rule: without --store, stderr names the store written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("QUOTAFLOW_STORE", raising=False)
    default = "Using the quota store quotaflow.db (the default: no --store given and $QUOTAFLOW_STORE is not set)"
    writes = [
        ["acls", "--add", "--allow-principal", "User:a", "--operation", "Read", "--topic", "t"],
        ["configs", "--alter", "--user", "u", "--add-config", "producer_byte_rate=1024"],
        ["client-quotas", "--alter", "--names", "user=v", "--add", "consumer_byte_rate=10"],
        ["users", "add", "w", "--password", "pw", "--mechanism", "PLAIN"],
        ["acls", "--remove", "--force", "--topic", "t"],
    ]
    for args in writes:
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, (args, result.output)
        assert result.stderr == default + "\n", args
    # reading names nothing; an explicit --store names nothing; $QUOTAFLOW_STORE is named as such
    read = CliRunner().invoke(cli, ["configs", "--describe", "--user", "u"])
    assert read.exit_code == 0 and read.stderr == ""
    named = CliRunner().invoke(cli, ["configs", "--store", "quotaflow.db", "--alter", "--user", "u",
                                     "--add-config", "request_percentage=50"])
    assert named.exit_code == 0 and named.stderr == ""
    monkeypatch.setenv("QUOTAFLOW_STORE", str(tmp_path / "env.db"))
    from_env = CliRunner().invoke(cli, ["users", "add", "x", "--password", "pw", "--mechanism", "PLAIN"])
    assert from_env.stderr == f"Using the quota store {tmp_path / 'env.db'} (from $QUOTAFLOW_STORE)\n"
