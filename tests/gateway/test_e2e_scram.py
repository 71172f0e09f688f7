"""SCRAM-SHA-256/512 terminated at the gateway with real clients, against keys ``quotaflow users add`` stored."""

from __future__ import annotations

import struct
import time
import uuid
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError as KafkaErrorCode
from confluent_kafka import Producer
from kafka import KafkaProducer
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

from quotaflow.cli.main import cli
from quotaflow.events import REQUESTS_DIR, read_dataset
from quotaflow.gateway.auth.scram import ScramClient
from quotaflow.gateway.config import GatewayConfig
from quotaflow.store import open_store
from quotaflow.store.scram import scram_credential

from .conftest import GatewayFactory
from .gateway_wire import Wire

pytestmark = pytest.mark.broker


def test_scram_clients_carry_their_principal(gateway_factory: GatewayFactory) -> None:
    config = GatewayConfig.from_properties({"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT"})
    gw = gateway_factory(config=config, listeners={"SASL_PLAINTEXT": "127.0.0.1:0"})
    result = CliRunner().invoke(cli, ["users", "add", "carol", "--password", "carol-secret", "--mechanism",
                                      "SCRAM-SHA-256", "--mechanism", "SCRAM-SHA-512", "--iterations", "4096",
                                      "--store", str(gw.store_path)])
    assert result.exit_code == 0, result.output
    with open_store(gw.store_path) as store:  # only derived keys are stored, and no PLAIN hash was asked for
        stored = store.get_scram_credential("carol", "SCRAM-SHA-256")
        assert stored is not None and stored.iterations == 4096 and b"carol-secret" not in stored.stored_key
        assert store.get_credential("carol") is None
    topic = f"scram-{uuid.uuid4().hex[:8]}"
    confluent = Producer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol",
                          "sasl.password": "carol-secret", "client.id": "scram-256", "log_level": 0})
    reports: list[Any] = []
    for i in range(10):
        confluent.produce(topic, b"c%d" % i, partition=0, on_delivery=lambda err, _m: reports.append(err))
    assert confluent.flush(30) == 0 and len(reports) == 10 and not any(reports)
    kp = KafkaProducer(bootstrap_servers=gw.bootstrap, client_id="scram-512", security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="carol",
                       sasl_plain_password="carol-secret")
    try:
        assert kp.send(topic, b"k", partition=0).get(timeout=15).offset == 10
    finally:
        kp.close()
    gw.flush_events()
    events = read_dataset(gw.events, REQUESTS_DIR)
    assert events is not None
    rows = [r for r in events.to_pylist() if r["client_id"] in ("scram-256", "scram-512") and r["api_key"] == 0]
    assert {r["client_id"] for r in rows} == {"scram-256", "scram-512"} and {r["user"] for r in rows} == {"carol"}
    # a wrong password: Kafka's SCRAM failure, seen by librdkafka as an authentication error
    errors: list[KafkaErrorCode] = []
    bad = Producer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": "wrong",
                    "error_cb": errors.append, "log_level": 0})
    bad.produce(topic, b"x")
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        bad.poll(0.1)
    bad.purge()
    assert errors and errors[0].code() == KafkaErrorCode._AUTHENTICATION
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in errors[0].str()


def test_legacy_handshake_v0_runs_scram_over_raw_tokens(gateway_factory: GatewayFactory) -> None:
    """SaslHandshake v0, then the SCRAM messages as raw length-prefixed tokens (no Kafka header), as old clients do."""
    config = GatewayConfig.from_properties({"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT"})
    gw = gateway_factory(config=config, listeners={"SASL_PLAINTEXT": "127.0.0.1:0"})
    with open_store(gw.store_path) as store:
        store.put_scram_credential(scram_credential("dan", "SCRAM-SHA-256", "dan-secret", iterations=4096))
    wire = Wire(gw.address)
    wire.send(SaslHandshakeRequest[0](mechanism="SCRAM-SHA-256"), 0)
    assert SaslHandshakeResponse.decode(wire.recv(), version=0, header=True).error_code == 0
    client = ScramClient("SCRAM-SHA-256", "dan", "dan-secret")

    def raw(token: bytes) -> bytes:
        wire.sock.sendall(struct.pack(">i", len(token)) + token)
        return wire.recv()

    client.verify(raw(client.final(raw(client.first()))))  # the server's signature checks out
    wire.send(MetadataRequest[1](topics=[]), 1)  # authenticated: other requests are served
    assert MetadataResponse.decode(wire.recv(), version=1, header=True).brokers
    gw.flush_events()
    events = read_dataset(gw.events, REQUESTS_DIR)
    assert events is not None
    assert {r["user"] for r in events.to_pylist() if r["api_key"] == 3} == {"dan"}


def _server_first(gw_address: tuple[str, int], user: str) -> tuple[bytes, int]:
    """The gateway's answer to ``user``'s SCRAM-SHA-256 client-first message (salt, iterations)."""
    import base64

    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse

    wire = Wire(gw_address)
    try:
        wire.send(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-256"), 1)
        assert SaslHandshakeResponse.decode(wire.recv(), version=1, header=True).error_code == 0
        wire.send(SaslAuthenticateRequest[1](auth_bytes=f"n,,n={user},r=probe-nonce".encode()), 1)
        answer = SaslAuthenticateResponse.decode(wire.recv(), version=1, header=True)
        assert answer.error_code == 0
        attrs = dict(p.split("=", 1) for p in bytes(answer.auth_bytes).decode().split(","))
        return base64.b64decode(attrs["s"]), int(attrs["i"])
    finally:
        wire.sock.close()


def test_an_unknown_user_is_answered_like_the_stored_users(gateway_factory: GatewayFactory) -> None:
    """Issue 34: users made with kafka-configs' 4096 iterations answered 4096, an unknown user 8192: the count told
    who exists. Now an unknown user gets the stored users' iteration count and salt length, the same salt each
    time it is asked about."""
    config = GatewayConfig.from_properties({"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT"})
    gw = gateway_factory(config=config, listeners={"SASL_PLAINTEXT": "127.0.0.1:0"})
    with open_store(gw.store_path) as store:
        for user in ("erin", "frank", "gina"):
            store.put_scram_credential(scram_credential(user, "SCRAM-SHA-256", f"{user}-pw", iterations=4096))
    known_salt, known_iterations = _server_first(gw.address, "erin")
    unknown_salt, unknown_iterations = _server_first(gw.address, "mallory")
    assert known_iterations == 4096
    assert (len(unknown_salt), unknown_iterations) == (len(known_salt), known_iterations)
    assert _server_first(gw.address, "mallory")[0] == unknown_salt  # repeated probes agree
    assert _server_first(gw.address, "erin")[0] == known_salt
