"""``quotaflow gateway --workers N``: N gateway processes accepting on the same listener ports (SO_REUSEPORT).

One gateway is one event loop on one core. The supervisor binds nothing it listens on: it reserves each listener
port (port 0 becomes a concrete port, held by a bound, non-listening ``SO_REUSEPORT`` socket so no other program
takes it), starts N ``quotaflow gateway --reuse-port`` children on those ports and the kernel spreads new
connections across them. Each worker is a whole gateway: its own engine, upstream connections, per-node ports and
``--metrics-port`` (PORT + i), its own event log under ``DIR/worker-<i>``. They share quotas and credentials
through a ``kafka://`` store and, with ``quotaflow.quota.scope=cluster``, the quotas themselves through
``__quotaflow_usage`` (docs/cluster-quotas.md). A worker that dies is restarted; SIGINT / SIGTERM stop them all.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final

log = logging.getLogger(__name__)

RESTART_DELAY_S: Final = 1.0
STOP_TIMEOUT_S: Final = 10.0
EARLY_EXIT_S: Final = 5.0  # a worker that exits this soon after starting, twice in a row, is a configuration error

ChildArgs = Callable[[int, Mapping[str, tuple[str, int]]], list[str]]  # (worker index, resolved listeners) -> argv


def reserve_ports(listeners: Mapping[str, tuple[str, int]]) -> tuple[dict[str, tuple[str, int]], list[socket.socket]]:
    """Concrete ports for every listener; the returned sockets hold them (bound, never listening) while the workers
    run."""
    resolved: dict[str, tuple[str, int]] = {}
    held: list[socket.socket] = []
    for name, (host, port) in listeners.items():
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            for s in held:
                s.close()
            raise
        held.append(sock)
        resolved[name] = (host, int(sock.getsockname()[1]))
    return resolved, held


class Supervisor:
    """Starts, restarts and stops the worker processes (by PID)."""

    def __init__(self, workers: int, child_args: ChildArgs, listeners: Mapping[str, tuple[str, int]]) -> None:
        self.workers = workers
        self.child_args = child_args
        self.listeners = listeners
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * workers
        self._started: list[float] = [0.0] * workers
        self._early_exits: list[int] = [0] * workers
        self.stopping = threading.Event()

    def command(self, index: int) -> list[str]:
        return [sys.executable, "-m", "quotaflow.cli.main", "gateway", *self.child_args(index, self.listeners)]

    def spawn(self, index: int) -> None:
        self.procs[index] = subprocess.Popen(self.command(index), stdin=subprocess.DEVNULL)
        self._started[index] = time.monotonic()

    def run(self) -> int:
        """Until SIGINT / SIGTERM (or a worker that cannot start); the exit status."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.stopping.set())
        for i in range(self.workers):
            self.spawn(i)
        status = 0
        while not self.stopping.wait(0.2):
            for i, proc in enumerate(self.procs):
                if proc is None or proc.poll() is None:
                    continue
                early = time.monotonic() - self._started[i] < EARLY_EXIT_S
                self._early_exits[i] = self._early_exits[i] + 1 if early else 0
                if self._early_exits[i] >= 2:
                    print(f"quotaflow gateway: worker {i} exited with status {proc.returncode} twice right after "
                          f"starting; stopping", file=sys.stderr, flush=True)
                    status = 1
                    self.stopping.set()
                    break
                print(f"quotaflow gateway: worker {i} (pid {proc.pid}) exited with status {proc.returncode}; "
                      f"restarting it", file=sys.stderr, flush=True)
                time.sleep(RESTART_DELAY_S)
                self.spawn(i)
        self.stop()
        return status

    def stop(self) -> None:
        procs = [p for p in self.procs if p is not None and p.poll() is None]
        for proc in procs:
            proc.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def supervise(workers: int, listeners: Mapping[str, tuple[str, int]], child_args: ChildArgs) -> int:
    """Reserve the ports, run ``workers`` gateway processes on them until stopped; the exit status."""
    resolved, held = reserve_ports(listeners)
    try:
        return Supervisor(workers, child_args, resolved).run()
    finally:
        for sock in held:
            sock.close()


def repeat(option: str, values: Sequence[str]) -> list[str]:
    return [arg for value in values for arg in (option, value)]
