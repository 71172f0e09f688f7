"""``HOST:PORT``, as every option and URL of quotaflow writes an address (``[::1]:9092`` for an IPv6 host)."""

from __future__ import annotations

from typing import Final

MAX_PORT: Final = 65535


def parse_host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port), the brackets of an IPv6 host dropped; ``ValueError`` unless there is a host and
    the port is a number up to 65535 (0 is allowed: a listener's "pick a free port")."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit() or int(port) > MAX_PORT:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)
