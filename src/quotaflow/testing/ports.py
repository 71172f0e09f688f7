"""Loopback ports for test brokers and gateways: never a fixed port, since other runs share the machine."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port the kernel just handed out on ``host`` (bind port 0, read it, close); racy but retried by callers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port
