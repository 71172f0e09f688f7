"""An ASGI app (the console) served by uvicorn on a thread, on a free loopback port: for tests and benchmarks."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from quotaflow.testing.ports import LOOPBACK

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` on a free loopback port; yields its URL, stops the server on exit."""
    sock = socket.socket()
    sock.bind((LOOPBACK, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            sock.close()
            raise RuntimeError("the app did not start")
        time.sleep(0.02)
    try:
        yield f"http://{LOOPBACK}:{port}"
    finally:
        server.should_exit = True
        thread.join(STOP_TIMEOUT_S)
        sock.close()
