"""``quotaflow configs`` / ``client-quotas`` with ``--bootstrap-server``: same answers as with ``--store``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from quotaflow.cli.main import cli

from .conftest import GatewayFactory, RunningGateway

pytestmark = pytest.mark.broker


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def ok(*args: str, env: dict[str, str] | None = None) -> str:
    result = run(*args, env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_round_trip_through_the_gateway(gateway: RunningGateway, tmp_path: Path) -> None:
    wire = ("--bootstrap-server", gateway.bootstrap)
    local = ("--store", str(gateway.store_path))
    ok("client-quotas", *wire, "--alter", "--names", "user=alice", "--add", "producer_byte_rate=1024")
    ok("client-quotas", *wire, "--alter", "--names", "user=alice,client-id=app", "--add", "request_percentage=50")
    assert (
        ok(
            "configs",
            *wire,
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "bob",
            "--add-config",
            "consumer_byte_rate=2048,producer_byte_rate=4096",
        )
        == "Completed updating config for user bob.\n"
    )
    ok(
        "configs",
        *wire,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-default",
        "--add-config",
        "producer_byte_rate=512",
    )
    ok(
        "configs",
        *wire,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "bob",
        "--delete-config",
        "producer_byte_rate",
    )
    for args in (
        ("configs", "--describe", "--entity-type", "users"),
        ("configs", "--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients"),
        ("configs", "--describe", "--entity-type", "clients", "--entity-default"),
        ("client-quotas", "--describe", "--output", "json"),
        ("client-quotas", "--describe", "--names", "user=alice"),
    ):
        over_wire, from_store = ok(*args, *wire), ok(*args, *local)
        assert over_wire == from_store
        assert over_wire.strip()
    # without admin principals anyone may describe quotas but nobody SCRAM users (KIP-554 needs a super user):
    # the quota lines stand, and stderr says what is missing
    users = run("configs", "--describe", "--entity-type", "users", *wire)
    assert users.exit_code == 0 and "Quota configs for user-principal 'bob'" in users.stdout
    assert users.stderr == ("Error retrieving SCRAM credential configs: "
                            "org.apache.kafka.common.errors.ClusterAuthorizationException: Cluster authorization "
                            "failed.\n")
    described = json.loads(ok("client-quotas", "--describe", "--output", "json", *wire))
    assert {"entity": {"user": "bob"}, "values": {"consumer_byte_rate": 2048.0}} in described
    # resolve goes to the gateway's HTTP endpoint, named in the --command-config file
    props = tmp_path / "client.properties"
    props.write_text(f"quotaflow.http.url={gateway.http_url}\n")
    resolve = ("client-quotas", "--resolve", "--names", "user=alice,client-id=app", "--output", "json")
    assert ok(*resolve, *wire, "--command-config", str(props)) == ok(*resolve, *local)
    missing = run(*resolve, *wire)
    assert missing.exit_code == 1 and "quotaflow.http.url" in missing.output


def test_sasl_from_the_command_config(gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    gw = gateway_factory(admin_principals=frozenset({"admin"}))
    # the credential is made by `quotaflow users add` (full-strength PBKDF2) while the gateway runs
    assert ok("users", "add", "admin", "--password", "admin secret", "--store", str(gw.store_path)) == (
        "Added user admin\n"
    )
    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin secret";\n'
    )
    alter = ("--alter", "--names", "user=carol", "--add", "consumer_byte_rate=100")
    refused = run("client-quotas", "--bootstrap-server", gw.bootstrap, *alter)
    assert refused.exit_code == 1
    assert "org.apache.kafka.common.errors.ClusterAuthorizationException" in refused.output
    ok("client-quotas", "--bootstrap-server", gw.bootstrap, "--command-config", str(props), *alter)
    # configs reads its own arguments; it takes the client properties from $QUOTAFLOW_COMMAND_CONFIG
    described = ok(
        "configs",
        "--bootstrap-server",
        gw.bootstrap,
        "--describe",
        "--entity-type",
        "users",
        env={"QUOTAFLOW_COMMAND_CONFIG": str(props)},
    )
    assert "carol" in described and "consumer_byte_rate=100.0" in described


def test_scram_credentials_through_the_gateway_as_against_the_store(gateway_factory: GatewayFactory,
                                                                    tmp_path: Path) -> None:
    """kafka-configs' SCRAM configs over KIP-554 at the gateway: the same lines and errors as against its store."""
    gateway = gateway_factory(admin_principals=frozenset({"admin"}))
    ok("users", "add", "admin", "--password", "admin secret", "--store", str(gateway.store_path))
    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin secret";\n'
    )
    wire = ("--bootstrap-server", gateway.bootstrap, "--command-config", str(props))
    local = ("--store", str(gateway.store_path))
    ok("configs", *local, "--alter", "--user", "sam", "--add-config", "producer_byte_rate=1024")
    anonymous = run("configs", "--bootstrap-server", gateway.bootstrap, "--alter", "--user", "sam", "--add-config",
                    "SCRAM-SHA-256=[password=p]")
    assert anonymous.exit_code == 1
    assert anonymous.stderr.splitlines()[1] == ("org.apache.kafka.common.errors.ClusterAuthorizationException: "
                                                "Cluster authorization failed.")
    assert ok("configs", *wire, "--alter", "--entity-type", "users", "--entity-name", "sam", "--add-config",
              "SCRAM-SHA-256=[iterations=8192,password=p],SCRAM-SHA-512=[password=p]") == (
        "Completed updating config for user sam.\n")
    described = ("configs", "--describe", "--entity-type", "users", "--entity-name", "sam")
    expected = ("Quota configs for user-principal 'sam' are producer_byte_rate=1024.0\n"
                "SCRAM credential configs for user-principal 'sam' are SCRAM-SHA-256=iterations=8192, "
                "SCRAM-SHA-512=iterations=4096\n")
    assert ok(*described, *wire) == ok(*described, *local) == expected
    refused = run(*described, "--bootstrap-server", gateway.bootstrap)  # anonymous: neither quotas nor SCRAM
    assert refused.exit_code == 1 and "ClusterAuthorizationException" in refused.stderr
    # the credentials are real: librdkafka logs in with each mechanism and produces as sam
    from confluent_kafka import Producer

    reports: dict[str, object] = {}
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        producer = Producer({"bootstrap.servers": gateway.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": mechanism, "sasl.username": "sam", "sasl.password": "p",
                             "log_level": 0})
        producer.produce(f"scram-cli-{mechanism.lower()}", b"v", partition=0,
                         on_delivery=lambda err, _m, m=mechanism: reports.__setitem__(m, err))
        assert producer.flush(30) == 0
    assert reports == {"SCRAM-SHA-256": None, "SCRAM-SHA-512": None}
    ok("configs", *wire, "--alter", "--user", "sam", "--delete-config", "SCRAM-SHA-512")
    assert ok(*described, *local).endswith("are SCRAM-SHA-256=iterations=8192\n")
    for args in (("--delete-config", "SCRAM-SHA-512"), ("--add-config", "SCRAM-SHA-256=[iterations=16385,password=p]")):
        over_wire, from_store = run("configs", *wire, "--alter", "--user", "sam", *args), \
            run("configs", *local, "--alter", "--user", "sam", *args)
        assert over_wire.exit_code == from_store.exit_code == 1
        assert over_wire.stderr.splitlines()[1] == from_store.stderr.splitlines()[1]
