"""A TCP relay in front of a real broker that records every request passing through it: what reached the upstream.

The gateway is started with the relay's address as its ``--upstream``: a client's connection on the gateway's
bootstrap port is forwarded to the first bootstrap address, so every request a raw-wire test sends there and the
gateway forwards crosses the relay, which keeps its header (API key and version) and its bytes. A test then asserts
what the upstream never saw: a version above the gateway's ceiling, the name or the id of one of quotaflow's topics.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Seen:
    """One request frame (without its size prefix) as it reached the upstream."""

    api_key: int
    version: int
    frame: bytes


class RecordingUpstream:
    """``with RecordingUpstream("127.0.0.1:9092") as relay``: ``relay.bootstrap`` is its address."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._lock = threading.Lock()
        self._seen: list[Seen] = []
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stopped = False

    @property
    def bootstrap(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"{host}:{port}"

    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def mark(self) -> int:
        """How many requests were seen so far: ``since(mark)`` gives the ones after."""
        with self._lock:
            return len(self._seen)

    def since(self, mark: int) -> list[Seen]:
        with self._lock:
            return self._seen[mark:]

    def __enter__(self) -> RecordingUpstream:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped = True
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(5)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            self._spawn(self._requests, client, upstream)
            self._spawn(self._copy, upstream, client)

    def _requests(self, source: socket.socket, sink: socket.socket) -> None:
        """Client -> upstream, frame by frame, each recorded before it is passed on."""
        buffer = b""
        try:
            while True:
                chunk = source.recv(65536)
                if not chunk:
                    break
                buffer += chunk
                while len(buffer) >= 4:
                    size = struct.unpack_from(">i", buffer)[0]
                    if len(buffer) < 4 + size:
                        break
                    frame, buffer = buffer[4:4 + size], buffer[4 + size:]
                    if len(frame) >= 4:
                        key, version = struct.unpack_from(">hh", frame)
                        with self._lock:
                            self._seen.append(Seen(key, version, frame))
                    sink.sendall(struct.pack(">i", size) + frame)
        except OSError:
            pass
        finally:
            _close(sink)

    @staticmethod
    def _copy(source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                chunk = source.recv(65536)
                if not chunk:
                    break
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
