"""The wire client's offline parts: --command-config properties, bootstrap parsing, the /resolve document."""

from __future__ import annotations

import pytest

from quotaflow.core.errors import CommandError

wire = pytest.importorskip("quotaflow.admin.wire")


def test_sasl_plain_from_a_jaas_line() -> None:
    props = {
        "security.protocol": "sasl_plaintext",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="al ice" '
        'password="p\\"w";',
    }
    assert wire.sasl_from_properties(props) == wire.SaslPlain("al ice", 'p"w')
    assert wire.SaslPlain("u", "p").message() == b"\x00u\x00p"


def test_sasl_plain_from_librdkafka_names_and_plaintext() -> None:
    props = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p",
    }
    assert wire.sasl_from_properties(props) == wire.SaslPlain("u", "p")
    assert wire.sasl_from_properties({}) is None


@pytest.mark.parametrize(
    "props",
    [
        {"security.protocol": "SSL"},
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u"},
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
    ],
)
def test_unsupported_client_properties_are_command_errors(props: dict[str, str]) -> None:
    with pytest.raises(CommandError):
        wire.sasl_from_properties(props)


def test_bootstrap_parsing() -> None:
    assert wire.parse_bootstrap("127.0.0.1:9092,127.0.0.2:9093") == ("127.0.0.1", 9092)
    assert wire.parse_bootstrap("[::1]:9092") == ("::1", 9092)
    with pytest.raises(CommandError):
        wire.parse_bootstrap("localhost")


def test_a_malformed_resolve_document_is_a_broker_connection_error() -> None:
    with pytest.raises(wire.BrokerConnectionError, match="unexpected /resolve document") as info:
        wire.WireAdmin._resolution({"entity": {"user": "x"}})
    assert isinstance(info.value.__cause__, KeyError)


class FakeBroker:
    """Answers ApiVersions only: UNSUPPORTED_VERSION (with its range, as a v0 body) above ``max_version``."""

    def __init__(self, max_version: int) -> None:
        import socket
        import threading

        self.max_version = max_version
        self.seen: list[int] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import struct

        from kafka.protocol.metadata.api_versions import ApiVersionsResponse

        conn, _ = self.server.accept()
        with conn:
            while True:
                head = conn.recv(4, 0x100)  # MSG_WAITALL
                if len(head) < 4:
                    return
                (size,) = struct.unpack(">i", head)
                frame = conn.recv(size, 0x100)
                _key, version, correlation_id = struct.unpack(">hhi", frame[:8])
                self.seen.append(version)
                ranges = [ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=self.max_version)]
                if version > self.max_version:
                    response = ApiVersionsResponse[0](error_code=35, api_keys=ranges)
                else:
                    response = ApiVersionsResponse[version](error_code=0, api_keys=ranges)
                response.with_header(correlation_id=correlation_id)
                conn.sendall(response.encode(header=True, framed=True))

    def close(self) -> None:
        self.server.close()


def test_api_versions_falls_back_as_kip_511_says() -> None:
    broker = FakeBroker(max_version=2)
    try:
        conn = wire.KafkaWireConnection("127.0.0.1", broker.port, timeout=5)
        try:
            assert conn.versions == {18: (0, 2)}
            assert broker.seen == [4, 2]  # our max first, then the broker's max from the v0 error body
            with pytest.raises(wire.UnsupportedVersionError):
                conn.version_for(wire.DESCRIBE_CLIENT_QUOTAS, 1)
        finally:
            conn.close()
    finally:
        broker.close()
