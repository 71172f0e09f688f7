"""``quotaflow gateway --workers N``: N gateway processes accepting on the same listener ports (SO_REUSEPORT).

One gateway is one event loop on one core. The supervisor listens on nothing: it reserves each listener port (port
0 becomes a concrete port, held by a bound, never-listening ``SO_REUSEPORT`` socket so no other program takes it),
forks N workers that each run a whole gateway on those ports, and the kernel spreads new connections across them.
Each worker has its own engine, upstream connections, node ports, ``--metrics-port`` (PORT + i) and event log
(``DIR/worker-<i>``). They share quotas and credentials through a ``kafka://`` store and, with
``quotaflow.quota.scope=cluster``, the quotas themselves through ``__quotaflow_usage`` (docs/cluster-quotas.md).

A worker that dies is restarted in its slot after a backoff that doubles with each failure in a row (capped, and
forgotten once the slot has run for :data:`BACKOFF_RESET_S`), so a crash loop costs little CPU and never touches the
other slots: the healthy workers keep serving. Restarts are logged and counted in every worker's ``/metrics``
(``kafka_server_gateway_workers_restarts{worker="i"}``). The supervisor gives up (exit status 1) only when no worker
ever became ready and every slot has failed :data:`GIVE_UP_FAILURES` times: a configuration that cannot work.
SIGINT / SIGTERM stop them all (by PID).
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Final

from quotaflow.engine.metrics import MetricSample

log = logging.getLogger(__name__)

BACKOFF_INITIAL_S: Final = 0.5  # the first restart of a slot
BACKOFF_MAX_S: Final = 30.0  # doubling stops here
BACKOFF_RESET_S: Final = 60.0  # a worker that ran this long has "recovered": its slot's next restart is immediate-ish
GIVE_UP_FAILURES: Final = 2  # per slot, when no worker ever became ready
STOP_TIMEOUT_S: Final = 10.0
POLL_S: Final = 0.2
GROUP: Final = "GatewayWorkers"

Listeners = Mapping[str, tuple[str, int]]


class SlotBoard:
    """Per-slot state in memory shared with the forked workers: a worker marks itself ready there; the supervisor
    writes restart counts there, and every worker's ``/metrics`` reads them (the supervisor serves no HTTP)."""

    def __init__(self, workers: int, context: multiprocessing.context.BaseContext) -> None:
        self.workers = workers
        self._ready = context.RawArray("b", workers)  # 1 once slot i's current worker serves; 0 while restarting
        self._restarts = context.RawArray("q", workers)

    def mark_ready(self, index: int) -> None:
        self._ready[index] = 1

    def is_ready(self, index: int) -> bool:
        return bool(self._ready[index])

    def clear_ready(self, index: int) -> None:
        self._ready[index] = 0

    def restarts(self, index: int) -> int:
        return int(self._restarts[index])

    def count_restart(self, index: int) -> None:
        self._restarts[index] += 1

    def metric_samples(self, now_ms: int) -> Iterable[MetricSample]:
        for i in range(self.workers):
            tags = (("worker", str(i)),)
            yield MetricSample("restarts", GROUP, tags, float(self._restarts[i]),
                               "Times the supervisor restarted this worker slot")
            yield MetricSample("ready", GROUP, tags, float(self._ready[i]),
                               "1 while this worker slot serves, 0 while it is being restarted")


Worker = Callable[[int, Listeners, SlotBoard], int]  # (slot, listeners with concrete ports, board) -> exit status


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


def _child(worker: Worker, index: int, listeners: Listeners, board: SlotBoard) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):  # the supervisor's handlers are not the worker's
        signal.signal(sig, signal.SIG_DFL)
    sys.exit(worker(index, listeners, board))


def describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


@dataclass
class Backoff:
    """Exponential restart delay of one slot: initial, doubling per failure in a row, capped."""

    initial_s: float = BACKOFF_INITIAL_S
    max_s: float = BACKOFF_MAX_S
    reset_after_s: float = BACKOFF_RESET_S

    def delay(self, failures_in_a_row: int) -> float:
        return float(min(self.max_s, self.initial_s * 2 ** max(0, failures_in_a_row - 1)))


class Supervisor:
    """Forks, restarts (with backoff) and stops the worker processes."""

    def __init__(self, workers: int, worker: Worker, listeners: Listeners, *, backoff: Backoff | None = None,
                 give_up_failures: int = GIVE_UP_FAILURES) -> None:
        self.workers = workers
        self.worker = worker
        self.listeners = listeners
        self.backoff = backoff or Backoff()
        self.give_up_failures = give_up_failures
        # fork: the worker runs the function it is given, with the settings already parsed and checked
        self._context = multiprocessing.get_context("fork")
        self.board = SlotBoard(workers, self._context)
        self.procs: list[BaseProcess | None] = [None] * workers
        self._started = [0.0] * workers
        self._failures = [0] * workers  # in a row, per slot
        self._restart_at: list[float | None] = [None] * workers
        self.ever_ready = False
        self.stopping = threading.Event()

    def spawn(self, index: int) -> BaseProcess:
        self.board.clear_ready(index)
        proc = self._context.Process(target=_child, args=(self.worker, index, self.listeners, self.board),
                                     name=f"quotaflow-gateway-{index}")
        proc.start()
        self.procs[index] = proc
        self._started[index] = time.monotonic()
        self._restart_at[index] = None
        return proc

    def run(self) -> int:
        """Until SIGINT / SIGTERM (or until no worker could ever start); the exit status."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.stopping.set())
        for i in range(self.workers):
            self.spawn(i)
        status = 0
        while not self.stopping.wait(POLL_S):
            if self.step(time.monotonic()):
                log.error("quotaflow gateway: no worker became ready; every slot failed %d times: stopping",
                          self.give_up_failures)
                status = 1
                break
        self.stop()
        return status

    def step(self, now: float) -> bool:
        """Notice exited workers, schedule and perform due restarts; True when it is time to give up."""
        for i, proc in enumerate(self.procs):
            if self.board.is_ready(i):
                self.ever_ready = True
            if proc is not None and proc.exitcode is not None:
                self._exited(i, proc, now)
            restart_at = self._restart_at[i]
            if restart_at is not None and now >= restart_at and not self._hopeless():
                self.board.count_restart(i)
                log.warning("quotaflow gateway: worker %d restarted (pid %s, restart %d)", i, self.spawn(i).pid,
                            self.board.restarts(i))
        return self._hopeless()

    def _exited(self, index: int, proc: BaseProcess, now: float) -> None:
        ran = now - self._started[index]
        self._failures[index] = 1 if ran >= self.backoff.reset_after_s else self._failures[index] + 1
        delay = self.backoff.delay(self._failures[index])
        self.procs[index] = None
        self.board.clear_ready(index)
        self._restart_at[index] = now + delay
        log.warning("quotaflow gateway: worker %d (pid %s) %s after %.1f s; restarting it in %.3g s "
                    "(failure %d in a row)", index, proc.pid, describe_exit(proc.exitcode), ran, delay,
                    self._failures[index])

    def _hopeless(self) -> bool:
        return not self.ever_ready and all(f >= self.give_up_failures for f in self._failures)

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
