"""CLI plumbing: which backend a command gets, and how a failure is printed (kafka-configs.sh's way)."""

from __future__ import annotations

import math
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from quotaflow.cli.common import java_exception_line, open_backend, parse_java_double
from quotaflow.cli.main import cli
from quotaflow.core.errors import (
    BrokerConnectionError,
    CommandError,
    InvalidConfigurationError,
    StoreError,
    ThrottlingQuotaExceededError,
)
from quotaflow.testing.ports import LOOPBACK


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (InvalidConfigurationError("bad"), "org.apache.kafka.common.errors.InvalidConfigurationException: bad"),
        (ThrottlingQuotaExceededError(), "org.apache.kafka.common.errors.ThrottlingQuotaExceededException: "
                                         "The throttling quota has been exceeded."),
        (CommandError("no"), "java.lang.IllegalArgumentException: no"),
        (StoreError("locked"), "StoreError: locked"),
        (BrokerConnectionError("gone"), "BrokerConnectionError: gone"),
    ],
)  # fmt: skip
def test_java_exception_line(error: Exception, line: str) -> None:
    assert java_exception_line(error) == line  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "value"), [("1", 1.0), ("1e7", 1e7), (" 2.5d ", 2.5), ("+Infinity", math.inf), ("-1F", -1.0)]
)
def test_parse_java_double(text: str, value: float) -> None:
    assert parse_java_double("k", text) == value
    assert math.isnan(parse_java_double("k", "NaN"))
    with pytest.raises(CommandError, match="Cannot parse quota configuration value for k: 1,5"):
        parse_java_double("k", "1,5")


def test_store_and_bootstrap_server_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="cannot be used together"):
        open_backend(str(tmp_path / "q.db"), "127.0.0.1:9092")


def test_an_unreachable_gateway_is_a_kafka_style_failure() -> None:
    """Nothing listens on the port: exit 1 with the tools' two stderr lines, no traceback."""
    with socket.socket() as s:  # a port that is bound and not listening refuses connections
        s.bind((LOOPBACK, 0))
        port = s.getsockname()[1]
        args = ["--bootstrap-server", f"{LOOPBACK}:{port}", "--describe", "--names", "user=alice"]
        result = CliRunner().invoke(cli, ["client-quotas", *args])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[0] == f"Error while executing client-quotas command with args '{' '.join(args)}'"
    assert lines[1].startswith(f"BrokerConnectionError: cannot connect to {LOOPBACK}:{port}: ")
    assert result.exception is None or isinstance(result.exception, SystemExit)
