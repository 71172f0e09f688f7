"""``quotaflow gateway --workers N``: N gateway processes accepting on the same listener ports (SO_REUSEPORT).

One gateway is one event loop on one core. The supervisor listens on nothing: it reserves each listener port (port
0 becomes a concrete port, held by a bound, never-listening ``SO_REUSEPORT`` socket so no other program takes it),
forks N workers that each run a whole gateway on those ports, and the kernel spreads new connections across them.
Each worker has its own engine, upstream connections, node ports, ``--metrics-port`` (PORT + i) and event log
(``DIR/worker-<i>``). They share quotas and credentials through a ``kafka://`` store and, with
``quotaflow.quota.scope=cluster``, the quotas themselves through ``__quotaflow_usage`` (docs/cluster-quotas.md).
A worker that dies is restarted; SIGINT / SIGTERM stop them all (by PID).
"""

from __future__ import annotations

import multiprocessing
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing.process import BaseProcess
from typing import Final

RESTART_DELAY_S: Final = 1.0
STOP_TIMEOUT_S: Final = 10.0
EARLY_EXIT_S: Final = 5.0  # a worker that exits this soon after starting, twice in a row, is a configuration error

Listeners = Mapping[str, tuple[str, int]]
Worker = Callable[[int, Listeners], int]  # (worker index, listeners with concrete ports) -> exit status


def reserve_ports(listeners: Listeners) -> tuple[dict[str, tuple[str, int]], list[socket.socket]]:
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


def _child(worker: Worker, index: int, listeners: Listeners) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):  # the supervisor's handlers are not the worker's
        signal.signal(sig, signal.SIG_DFL)
    sys.exit(worker(index, listeners))


class Supervisor:
    """Forks, restarts and stops the worker processes."""

    def __init__(self, workers: int, worker: Worker, listeners: Listeners) -> None:
        self.workers = workers
        self.worker = worker
        self.listeners = listeners
        self.procs: list[BaseProcess | None] = [None] * workers
        self._started = [0.0] * workers
        self._early_exits = [0] * workers
        self.stopping = threading.Event()
        # fork: the worker runs the function it is given, with the settings already parsed and checked
        self._context = multiprocessing.get_context("fork")

    def spawn(self, index: int) -> None:
        proc = self._context.Process(target=_child, args=(self.worker, index, self.listeners),
                                     name=f"quotaflow-gateway-{index}")
        proc.start()
        self.procs[index] = proc
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
                if proc is None or proc.exitcode is None:
                    continue
                early = time.monotonic() - self._started[i] < EARLY_EXIT_S
                self._early_exits[i] = self._early_exits[i] + 1 if early else 0
                if self._early_exits[i] >= 2:
                    print(f"quotaflow gateway: worker {i} exited with status {proc.exitcode} twice right after "
                          f"starting; stopping", file=sys.stderr, flush=True)
                    status = 1
                    self.stopping.set()
                    break
                print(f"quotaflow gateway: worker {i} (pid {proc.pid}) exited with status {proc.exitcode}; "
                      f"restarting it", file=sys.stderr, flush=True)
                time.sleep(RESTART_DELAY_S)
                self.spawn(i)
        self.stop()
        return status

    def stop(self) -> None:
        procs = [p for p in self.procs if p is not None and p.exitcode is None]
        for proc in procs:
            proc.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in procs:
            proc.join(max(0.1, deadline - time.monotonic()))
            if proc.exitcode is None:
                proc.kill()
                proc.join()


def supervise(workers: int, listeners: Listeners, worker: Worker) -> int:
    """Reserve the ports, run ``workers`` forked gateway processes on them until stopped; the exit status."""
    resolved, held = reserve_ports(listeners)
    try:
        return Supervisor(workers, worker, resolved).run()
    finally:
        for sock in held:
            sock.close()
