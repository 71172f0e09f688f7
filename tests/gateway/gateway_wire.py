"""A raw Kafka connection for byte-level gateway tests (shared by the gateway server's test modules)."""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any


class Wire:
    """A raw Kafka connection for byte-level checks (over TLS with ``tls``, checked against ``address``'s host)."""

    def __init__(self, address: tuple[str, int], tls: ssl.SSLContext | None = None) -> None:
        sock = socket.create_connection(address, timeout=10)
        self.sock = sock if tls is None else tls.wrap_socket(sock, server_hostname=address[0])
        self.cid = 0

    def send(self, request: Any, version: int, client_id: str = "wire") -> None:
        self.cid += 1
        request.with_header(correlation_id=self.cid, client_id=client_id)
        self.sock.sendall(bytes(request.encode(version=version, header=True, framed=True)))

    def recv(self) -> bytes:
        size = struct.unpack(">i", self._exactly(4))[0]
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    def closed(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, TimeoutError):
            return False
