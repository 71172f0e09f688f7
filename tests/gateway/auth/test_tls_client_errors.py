"""Issue 22.6: TLS errors a client causes (a renegotiation attempt, a handshake that fails) are one INFO line naming
the client, never an ERROR traceback ("handler failed"), and the gateway goes on serving."""

from __future__ import annotations

import logging
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
import trustme

from quotaflow.gateway.config import GatewayConfig
from quotaflow.testing.tansu import api_versions_probe

from ..conftest import GatewayFactory, RunningGateway

pytestmark = pytest.mark.broker

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"


@pytest.fixture
def tls_gateway(gateway_factory: GatewayFactory, tmp_path: Path) -> tuple[RunningGateway, str]:
    ca = trustme.CA()
    server = tmp_path / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(server))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    props = {"listener.security.protocol.map": "SSL:SSL,PLAINTEXT:PLAINTEXT",
             "listener.name.ssl.ssl.keystore.location": str(server)}
    gw = gateway_factory(config=GatewayConfig.from_properties(props),
                         listeners={"SSL": "127.0.0.1:0", "PLAINTEXT": "127.0.0.1:0"})
    return gw, str(tmp_path / "ca.pem")


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("quotaflow.gateway")]


def _wait(caplog: pytest.LogCaptureFixture, needle: str, timeout: float = 30.0) -> logging.LogRecord:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in _records(caplog):
            if needle in r.getMessage():
                return r
        time.sleep(0.05)
    raise AssertionError(f"no log line with {needle!r}: {[r.getMessage() for r in _records(caplog)]}")


def test_a_renegotiation_attempt_is_one_info_line(tls_gateway: tuple[RunningGateway, str],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A real TLS 1.2 client (openssl s_client, its interactive ``R`` command) asks to renegotiate; the gateway
    refuses it (OpenSSL's no-renegotiation) and logs that once, at INFO."""
    gw, ca = tls_gateway
    host, port = gw.thread.address("SSL")
    caplog.set_level(logging.INFO, logger="quotaflow")
    proc = subprocess.Popen([OPENSSL, "s_client", "-tls1_2", "-connect", f"{host}:{port}", "-CAfile", ca],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert proc.stdin is not None
        time.sleep(1.0)  # the handshake first (s_client reads its commands only afterwards)
        proc.stdin.write(b"R\n")
        proc.stdin.flush()
        record = _wait(caplog, "TLS error")
        proc.stdin.close()
        proc.wait(30)
        assert proc.stdout is not None
        output = proc.stdout.read().decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert "RENEGOTIATING" in output, output[-2000:]
    assert record.levelno == logging.INFO and record.exc_info is None
    assert f"{host}:" in record.getMessage() and "SSL" in record.getMessage()
    assert not [r for r in _records(caplog) if r.levelno >= logging.WARNING], [
        (r.levelname, r.getMessage()) for r in _records(caplog) if r.levelno >= logging.WARNING]
    plain_host, plain_port = gw.thread.address("PLAINTEXT")
    assert api_versions_probe(plain_host, plain_port, timeout=10)  # and everyone else is served


def test_a_failed_handshake_is_one_info_line(tls_gateway: tuple[RunningGateway, str],
                                             caplog: pytest.LogCaptureFixture) -> None:
    """A client that does not trust the gateway's certificate aborts the handshake; a plain-text client on the TLS
    port sends garbage for a ClientHello. Both: one INFO line each, no traceback."""
    gw, _ca = tls_gateway
    host, port = gw.thread.address("SSL")
    caplog.set_level(logging.INFO, logger="quotaflow")
    with pytest.raises(ssl.SSLCertVerificationError):  # the default trust store does not know the test CA
        ssl.create_default_context().wrap_socket(socket.create_connection((host, port), timeout=10),
                                                 server_hostname=host)
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(b"\x00\x00\x00\x10" + b"\x00" * 16)  # a Kafka frame, not a ClientHello
        s.settimeout(10)
        try:
            while s.recv(4096):  # until the gateway closes it
                pass
        except ConnectionResetError:
            pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len([r for r in _records(caplog) if "TLS" in r.getMessage()]) < 2:
        time.sleep(0.05)
    lines = [r for r in _records(caplog) if "TLS" in r.getMessage()]
    assert len(lines) >= 2, [r.getMessage() for r in _records(caplog)]
    assert all(r.levelno == logging.INFO and r.exc_info is None for r in lines)
    assert not [r for r in _records(caplog) if r.levelno >= logging.WARNING]
