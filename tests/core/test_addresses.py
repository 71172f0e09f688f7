"""HOST:PORT parsing shared by --listen, --bootstrap-server and the like."""

from __future__ import annotations

import pytest

from quotaflow.core.addresses import parse_host_port


@pytest.mark.parametrize(
    ("text", "address"),
    [("127.0.0.1:9092", ("127.0.0.1", 9092)), (" localhost:0 ", ("localhost", 0)), ("[::1]:9092", ("::1", 9092)),
     ("::1:9092", ("::1", 9092))],
)
def test_parse_host_port(text: str, address: tuple[str, int]) -> None:
    assert parse_host_port(text) == address


@pytest.mark.parametrize("text", ["8080", ":9092", "[]:9092", "host:", "host:port", "host:65536", "host:-1"])
def test_parse_host_port_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_host_port(text)
