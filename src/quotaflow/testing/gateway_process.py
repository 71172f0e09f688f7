"""``quotaflow gateway`` as a child process on loopback ports: for the bench and the demo, which need the gateway on
its own interpreter (its own GIL) next to a client. Started with the CLI on port 0 (no race for a free port), ready
once it prints its ready line (which names the ports it bound) and answers ApiVersions there, stopped by PID
(terminate, then kill)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from quotaflow.core.errors import QuotaflowError
from quotaflow.testing.ports import LOOPBACK
from quotaflow.testing.processes import stop_process
from quotaflow.testing.tansu import api_versions_probe

_READY = re.compile(r"quotaflow gateway ready: PLAINTEXT=[^\s:]+:(\d+)(?: metrics=http://[^\s:]+:(\d+))?")


class GatewayProcessError(QuotaflowError):
    """The gateway child process did not come up."""


class GatewayProcess:
    """``with GatewayProcess(upstream, store, workdir) as gw: gw.bootstrap``; its log is ``workdir/gateway.log``."""

    def __init__(
        self,
        upstream: str,
        store: Path | str,  # a --store value: a SQLite file or a kafka:// URL
        workdir: Path,
        *,
        event_log: Path | None = None,
        metrics: bool = False,
        extra_args: tuple[str, ...] = (),
        start_timeout: float = 30.0,
        nofile: int | None = None,
    ) -> None:
        self.upstream = upstream
        self.store = store
        self.workdir = workdir
        self.event_log = event_log
        self.metrics = metrics
        self.port = 0  # known once started
        self.metrics_port: int | None = None
        self.extra_args = extra_args
        self.start_timeout = start_timeout
        self.nofile = nofile  # RLIMIT_NOFILE (soft and hard) of the child: a gateway with few descriptors
        self.log_path = workdir / "gateway.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def http_url(self) -> str | None:
        return None if self.metrics_port is None else f"http://{LOOPBACK}:{self.metrics_port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "quotaflow.cli.main", "gateway", "--upstream", self.upstream,
            "--listen", f"PLAINTEXT={LOOPBACK}:0", "--store", str(self.store),
        ]  # fmt: skip
        if self.event_log is not None:
            cmd += ["--event-log", str(self.event_log)]
        if self.metrics:
            cmd += ["--metrics-port", "0"]
        return [*cmd, *self.extra_args]

    def start(self) -> GatewayProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port, self.metrics_port = 0, None
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=None if self.nofile is None else self._limit_descriptors,
            )
        deadline = time.monotonic() + self.start_timeout
        while not (self._read_ready(offset) and api_versions_probe(LOOPBACK, self.port, timeout=0.5)):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise GatewayProcessError(f"the gateway did not start on {self.bootstrap}:\n{tail}")
            time.sleep(0.1)
        return self

    def _limit_descriptors(self) -> None:
        """In the child, before exec: its open-file limit, soft and hard."""
        import resource

        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def _read_ready(self, offset: int) -> bool:
        """Take the bound ports from the ready line this run printed (the log may hold earlier runs)."""
        if self.port:
            return True
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            found = _READY.search(f.read().decode(errors="replace"))
        if found is None:
            return False
        self.port = int(found.group(1))
        self.metrics_port = int(found.group(2)) if found.group(2) else None
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (the gateway closes its connections and flushes its event log), then SIGKILL after ``timeout``."""
        proc, self._proc = self._proc, None
        stop_process(proc, timeout)

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
