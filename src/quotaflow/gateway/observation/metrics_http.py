"""A small asyncio HTTP endpoint: ``/metrics`` in Prometheus text, plus optional JSON routes.

Scrapes read the engine sources on the event loop, the same thread that mutates them, so no locking is needed.
``/metrics`` renders a private prometheus-client registry holding one
:class:`~quotaflow.engine.metrics.PrometheusCollector`; more sources are added with :meth:`MetricsServer.add_source`
and JSON routes (e.g. ``/resolve``) with :meth:`MetricsServer.add_json_route`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeAlias
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from quotaflow.engine.metrics import MetricSource, PrometheusCollector

log = logging.getLogger(__name__)

JsonRoute: TypeAlias = Callable[[dict[str, list[str]]], Any]
_REASONS: Final = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Server Error"}
MAX_HEADER_BYTES: Final = 16 * 1024


class MetricsServer:
    """HTTP on ``host:port`` (port 0 picks a free one; see :attr:`address` after :meth:`start`)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        sources: Iterable[MetricSource] = (),
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._host, self._port = host, port
        self.collector = PrometheusCollector(sources, clock_ms)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self._routes: dict[str, JsonRoute] = {}
        self._server: asyncio.Server | None = None
        self.address: tuple[str, int] = (host, port)

    def add_source(self, source: MetricSource) -> None:
        self.collector.add(source)

    def add_json_route(self, path: str, route: JsonRoute) -> None:
        """Serve ``GET path?query`` as JSON: ``route(parsed_query)``; a ``ValueError`` becomes 400."""
        if path == "/metrics":
            raise ValueError("/metrics is reserved")
        self._routes[path] = route

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        sock = self._server.sockets[0].getsockname()
        self.address = (sock[0], sock[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def render(self, method: str, target: str) -> tuple[int, str, bytes]:
        """Status, content type and body for one request (separate from the socket code, for tests)."""
        if method not in ("GET", "HEAD"):
            return 405, "text/plain; charset=utf-8", b"method not allowed\n"
        url = urlsplit(target)
        if url.path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        route = self._routes.get(url.path)
        if route is None:
            return 404, "text/plain; charset=utf-8", b"not found\n"
        try:
            payload = route(parse_qs(url.query, keep_blank_values=True))
        except ValueError as e:
            return 400, "application/json", json.dumps({"error": str(e)}).encode()
        return 200, "application/json", json.dumps(payload).encode()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            if len(head) > MAX_HEADER_BYTES:
                raise ValueError("header too large")
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split(" ")
            if len(parts) != 3:
                status, ctype, body = 400, "text/plain; charset=utf-8", b"bad request\n"
                method = "GET"
            else:
                method = parts[0]
                try:
                    status, ctype, body = self.render(method, parts[1])
                except Exception:
                    log.exception("metrics request %s failed", request_line)
                    status, ctype, body = 500, "text/plain; charset=utf-8", b"error\n"
            header = (
                f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode("latin-1")
            writer.write(header if method == "HEAD" else header + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
