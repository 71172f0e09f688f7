"""The Python floor for a Kafka proxy: cut the client's stream into frames by their 4-byte length, forward them, and
forward the broker's bytes back untouched. Nothing else (no header parse, no quota, no log).

    python bench/l4_forwarder.py --upstream HOST:PORT [--upstream-tls HOST:PORT --cert PEM] [--port P] [--tls-port P]

Listens on 127.0.0.1: plaintext in front of the first upstream and, with ``--cert``, TLS in front of the second
(``--port`` / ``--tls-port``, else free ports), and prints ``forwarder ready: PORT [TLS_PORT]``. One
``asyncio.Protocol`` per side on uvloop (when installed): the cheapest frame-aware forwarding Python can do, which
bench/gateway_cpu.py reports as the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
import sys


class _Upstream(asyncio.Protocol):
    def __init__(self, client: asyncio.Transport) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        self.client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class _Client(asyncio.Protocol):
    """A client connection: frames are cut by length and written upstream whole (a frame is never split)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.connecting: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio subclasses
        transport.pause_reading()  # until the upstream connection is up
        self.connecting = asyncio.ensure_future(self._connect())

    async def _connect(self) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        try:
            upstream, _ = await loop.create_connection(lambda: _Upstream(self.transport),  # type: ignore[arg-type]
                                                       self.host, self.port)
        except OSError:
            self.transport.close()
            return
        self.upstream = upstream
        if self.buf:  # bytes that arrived before the upstream was up (a pause may come too late to stop them)
            self.data_received(b"")
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.upstream is None:
            self.buf += data
            return
        buf = self.buf
        if not buf:  # the common case: whole frames in one read, forwarded without a copy
            end = _complete(data)
            if end == len(data):
                self.upstream.write(data)
                return
            if end:
                self.upstream.write(data[:end])
            buf += memoryview(data)[end:]
            return
        buf += data
        end = _complete(buf)
        if end:
            self.upstream.write(bytes(buf[:end]))
            del buf[:end]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None:
            self.upstream.close()


def _complete(data: bytes | bytearray) -> int:
    """How many leading bytes of ``data`` are whole frames."""
    end, n = 0, len(data)
    while n - end >= 4:
        size = int.from_bytes(data[end:end + 4], "big")
        if n - end - 4 < size:
            break
        end += 4 + size
    return end


def _address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host, int(port)


async def _serve(upstream: str, upstream_tls: str | None, cert: str | None, port: int, tls_port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    host, up_port = _address(upstream)
    servers = [await loop.create_server(lambda: _Client(host, up_port), "127.0.0.1", port)]
    if upstream_tls is not None and cert is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert)
        tls_host, tls_up_port = _address(upstream_tls)
        servers.append(await loop.create_server(lambda: _Client(tls_host, tls_up_port), "127.0.0.1", tls_port,
                                                ssl=context))
    ports = " ".join(str(s.sockets[0].getsockname()[1]) for s in servers)
    print(f"forwarder ready: {ports}", flush=True)
    await stop.wait()
    for s in servers:
        s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--upstream-tls", default=None)
    ap.add_argument("--cert", default=None, help="PEM with the key and certificate chain of the TLS listener")
    ap.add_argument("--port", type=int, default=0, help="plaintext listener port on 127.0.0.1 (0: any free one)")
    ap.add_argument("--tls-port", type=int, default=0, help="TLS listener port on 127.0.0.1 (0: any free one)")
    args = ap.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve(args.upstream, args.upstream_tls, args.cert, args.port, args.tls_port))
    else:
        uvloop.run(_serve(args.upstream, args.upstream_tls, args.cert, args.port, args.tls_port))
    sys.exit(0)


if __name__ == "__main__":
    main()
