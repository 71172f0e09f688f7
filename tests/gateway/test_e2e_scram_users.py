"""SCRAM through a real gateway socket: what a client sees for a user that exists and one that does not must be the
same (issue 22 item 3), and old librdkafka's repeated client nonce is refused with its cause named, or accepted
under ``quotaflow.sasl.scram.legacy.client.nonce=true`` (issue 22 item 7).

The SCRAM messages are built by hand (the gateway's own ``ScramClient`` for the RFC 5802 arithmetic), so the test
sees every byte the gateway answers: the salt, the iteration count, the error code and message, and the time taken.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import statistics
import time
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, Producer
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from quotaflow.gateway.auth.scram import ScramClient
from quotaflow.gateway.config import GatewayConfig
from quotaflow.store import open_store
from quotaflow.store.scram import HASHES, digest, hmac_digest, scram_credential

from .conftest import GatewayFactory, RunningGateway
from .gateway_wire import Wire

pytestmark = pytest.mark.broker

MECHANISM = "SCRAM-SHA-256"
SASL_ERROR = 58  # SASL_AUTHENTICATION_FAILED


@dataclass
class Seen:
    """What one failed SCRAM login shows a client."""

    salt_bytes: int
    iterations: int
    error_code: int
    error_message: str
    first_s: float  # client-first -> server-first round trip
    closed: bool


def _sasl_gateway(gateway_factory: GatewayFactory, **props: str) -> RunningGateway:
    config = GatewayConfig.from_properties({"listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT",
                                           "connection.failed.authentication.delay.ms": "0", **props})
    gw = gateway_factory(config=config, listeners={"SASL_PLAINTEXT": "127.0.0.1:0"})
    with open_store(gw.store_path) as store:  # a user added with the store's defaults (salt, iterations)
        store.put_scram_credential(scram_credential("alice", MECHANISM, "alice-secret"))
    return gw


def _authenticate(wire: Wire, token: bytes) -> SaslAuthenticateResponse:
    wire.send(SaslAuthenticateRequest[2](auth_bytes=token), 2)
    return SaslAuthenticateResponse.decode(wire.recv(), version=2, header=True)


def _handshake(wire: Wire) -> None:
    wire.send(SaslHandshakeRequest[1](mechanism=MECHANISM), 1)
    assert SaslHandshakeResponse.decode(wire.recv(), version=1, header=True).error_code == 0


def _login(gw: RunningGateway, user: str, password: str) -> Seen:
    wire = Wire(gw.address)
    try:
        _handshake(wire)
        client = ScramClient(MECHANISM, user, password)
        start = time.perf_counter()
        first = _authenticate(wire, client.first())
        first_s = time.perf_counter() - start
        assert first.error_code == 0, first.error_message
        attrs = dict(part.split("=", 1) for part in bytes(first.auth_bytes).decode().split(","))
        final = _authenticate(wire, client.final(bytes(first.auth_bytes)))
        return Seen(len(base64.b64decode(attrs["s"])), int(attrs["i"]), final.error_code, final.error_message or "",
                    first_s, wire.closed())
    finally:
        wire.sock.close()


def test_an_unknown_user_looks_like_a_known_one_with_a_wrong_password(gateway_factory: GatewayFactory) -> None:
    gw = _sasl_gateway(gateway_factory)
    # interleaved, so a change in the machine's load hits both the same (a ratio of timings belongs in bench/; this
    # one is only a loose sanity bound)
    pairs = [(_login(gw, "alice", "wrong"), _login(gw, f"nobody-{i % 3}", "wrong")) for i in range(15)]
    known, unknown = [k for k, _ in pairs], [u for _, u in pairs]
    k, u = known[0], unknown[0]
    assert (u.salt_bytes, u.iterations) == (k.salt_bytes, k.iterations) == (32, 8192)
    assert (u.error_code, u.error_message, u.closed) == (k.error_code, k.error_message, k.closed)
    assert k.error_code == SASL_ERROR and "invalid credentials with SASL mechanism SCRAM-SHA-256" in k.error_message
    # the made-up salt is stable per name within the process (asking twice tells nothing), and differs by name
    salts = {_salt(gw, "nobody-0") for _ in range(2)}
    assert len(salts) == 1 and salts != {_salt(gw, "nobody-1")}
    # no timing difference of note: medians of the first round trip (loose bound, the machine is shared)
    k_med, u_med = (statistics.median(s.first_s for s in seen) for seen in (known, unknown))
    assert u_med < 3 * k_med + 0.005 and k_med < 3 * u_med + 0.005, (k_med, u_med)


def _librdkafka_error(gw: RunningGateway, user: str) -> tuple[int, str]:
    """The first error confluent-kafka reports for a SCRAM login as ``user`` with a wrong password."""
    host, port = gw.address
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": f"{host}:{port}", "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": MECHANISM, "sasl.username": user, "sasl.password": "wrong",
                         "error_cb": errors.append, "log_level": 0})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors, f"no error for {user}"
    return errors[0].code(), re.sub(r"\(after \d+ms", "(after N ms", errors[0].str())  # librdkafka's own clock


def test_a_real_client_sees_the_same_failure_for_both(gateway_factory: GatewayFactory) -> None:
    gw = _sasl_gateway(gateway_factory)
    known, unknown = _librdkafka_error(gw, "alice"), _librdkafka_error(gw, "nobody")
    assert known == unknown and known[0] == KafkaError._AUTHENTICATION, (known, unknown)


def _salt(gw: RunningGateway, user: str) -> str:
    wire = Wire(gw.address)
    try:
        _handshake(wire)
        first = _authenticate(wire, ScramClient(MECHANISM, user, "x").first())
        return dict(p.split("=", 1) for p in bytes(first.auth_bytes).decode().split(","))["s"]
    finally:
        wire.sock.close()


def _legacy_login(gw: RunningGateway) -> tuple[SaslAuthenticateResponse, Wire]:
    wire = Wire(gw.address)
    _handshake(wire)
    cnonce = "rOprNGfwEbeRWgbNEkqO"
    first = _authenticate(wire, f"n,,n=alice,r={cnonce}".encode())
    assert first.error_code == 0
    server_first = bytes(first.auth_bytes).decode()
    server_nonce = dict(p.split("=", 1) for p in server_first.split(","))["r"]
    # what old librdkafka sends: r = its nonce again, then the server's combined nonce, with a valid proof over it
    final = _proof_over(cnonce, server_first, f"c=biws,r={cnonce}{server_nonce}")
    return _authenticate(wire, final.encode()), wire


def _proof_over(cnonce: str, server_first: str, without_proof: str) -> str:
    """``without_proof,p=proof`` with alice's proof computed over the AuthMessage the server will check (RFC 5802)."""
    attrs = dict(p.split("=", 1) for p in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(HASHES[MECHANISM], b"alice-secret", base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac_digest(MECHANISM, salted, b"Client Key")
    auth_message = f"n=alice,r={cnonce},{server_first},{without_proof}".encode()
    signature = hmac_digest(MECHANISM, digest(MECHANISM, client_key), auth_message)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}"


def test_a_repeated_client_nonce_is_refused_with_its_cause_logged(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka 4.x's strict RFC 5802 check (CVE-2024-56128), by default; the log names the cause and the way out."""
    gw = _sasl_gateway(gateway_factory)
    with caplog.at_level(logging.WARNING, logger="quotaflow.gateway.auth.scram"):
        answer, wire = _legacy_login(gw)
        wire.sock.close()
    assert answer.error_code == SASL_ERROR
    causes = [r.getMessage() for r in caplog.records if "repeated its nonce" in r.getMessage()]
    assert len(causes) == 1, caplog.text
    assert "librdkafka < 2.6.1" in causes[0] and "quotaflow.sasl.scram.legacy.client.nonce=true" in causes[0]


def test_the_legacy_setting_accepts_old_librdkafka_nonce(gateway_factory: GatewayFactory) -> None:
    """Kafka 3.8.1-3.9's rule under ``quotaflow.sasl.scram.legacy.client.nonce=true``: the final nonce need only end
    with the server's. The proof is still checked: a wrong password is refused the same way."""
    gw = _sasl_gateway(gateway_factory, **{"quotaflow.sasl.scram.legacy.client.nonce": "true"})
    answer, wire = _legacy_login(gw)
    try:
        assert answer.error_code == 0, answer.error_message
        assert bytes(answer.auth_bytes).startswith(b"v=")
        wire.send(MetadataRequest[1](topics=[]), 1)  # authenticated: other requests are served
        assert MetadataResponse.decode(wire.recv(), version=1, header=True).brokers
    finally:
        wire.sock.close()
    assert _login(gw, "alice", "wrong").error_code == SASL_ERROR
