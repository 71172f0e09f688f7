"""free_port: a loopback port nobody holds right now (tests never use fixed ports)."""

from __future__ import annotations

import socket

from quotaflow.testing.ports import LOOPBACK, free_port


def test_free_port_is_bindable_on_loopback() -> None:
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as s:
        s.bind((LOOPBACK, port))  # raises if the port were taken
        assert s.getsockname() == (LOOPBACK, port)
