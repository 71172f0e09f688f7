"""Deterministic replay of Kafka's acceptors over a :class:`ConnectionQuotas` (the conformance mode ``conn``).

One acceptor per listener handles its connections FIFO. A connection is processed at
``max(arrival, acceptor free time)``: the broker/listener rates are recorded then, the acceptor blocks for the
delay, and the per-IP check runs at ``accept_time = process + delay`` (the acceptor is free again then).
Listeners interleave in global time; among candidate events (the next config change, the head of each idle
listener's queue, each busy listener's pending IP check) the smallest ``(time, input index)`` runs first.

Used by the conformance replay and, per broker, by the pipeline's backtests. Connection counts are not modelled
(connections never close in a replay).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeAlias

from quotaflow.core.errors import ConnectionThrottledError
from quotaflow.engine.connection import ConnectionQuotas


class ConnectResult(StrEnum):
    ACCEPTED = "ACCEPTED"
    IP_THROTTLED = "IP_THROTTLED"


@dataclass(frozen=True, slots=True)
class Connect:
    ts_ms: int
    listener: str
    ip: str


@dataclass(frozen=True, slots=True)
class AddListener:
    ts_ms: int
    listener: str
    rate: int | None = None


@dataclass(frozen=True, slots=True)
class ListenerRate:
    ts_ms: int
    listener: str
    rate: int | None


@dataclass(frozen=True, slots=True)
class BrokerRate:
    ts_ms: int
    rate: int


@dataclass(frozen=True, slots=True)
class IpRate:
    """``ip`` None is the default ip entity; ``rate`` None removes the quota."""

    ts_ms: int
    ip: str | None
    rate: int | None


ConfigEvent: TypeAlias = AddListener | ListenerRate | BrokerRate | IpRate
Event: TypeAlias = Connect | ConfigEvent


@dataclass(frozen=True, slots=True)
class ConnectOutcome:
    process_ms: int
    accept_delay_ms: int
    ip_throttle_ms: int
    result: ConnectResult
    accept_time_ms: int

    @property
    def close_time_ms(self) -> int | None:
        """When an IP-throttled socket is closed (held for its throttle); None for accepted connections."""
        return self.accept_time_ms + self.ip_throttle_ms if self.result is ConnectResult.IP_THROTTLED else None


def apply_config(quotas: ConnectionQuotas, event: ConfigEvent) -> None:
    if isinstance(event, AddListener):
        quotas.add_listener(event.listener, event.rate)
    elif isinstance(event, ListenerRate):
        quotas.update_listener_max_connection_rate(event.listener, event.rate)
    elif isinstance(event, BrokerRate):
        quotas.update_broker_max_connection_rate(event.rate)
    else:
        quotas.update_ip_connection_rate_quota(event.ip, event.rate)


_IDLE = -(1 << 62)


@dataclass(slots=True)
class _Acceptor:
    queue: deque[int]  # indexes of Connect events, sorted by (arrival, index)
    free_at: int = _IDLE
    pending: int | None = None  # index of the connection whose IP check is due at pending_at
    pending_at: int = 0
    pending_start: int = 0
    pending_delay: int = 0


class AcceptorSimulation:
    """Replays time-ordered config changes and connects; ``outcomes[i]`` is set for every ``Connect`` at index i.

    State (the quotas' rates and each acceptor's free time) carries over between :meth:`run` calls, so a stream
    can be replayed in consecutive time-ordered batches (each batch is drained completely)."""

    def __init__(self, quotas: ConnectionQuotas) -> None:
        self.quotas = quotas
        self.now_ms: int | None = None  # time of the last processed event
        self.free_at: dict[str, int] = {}  # per listener: when its acceptor is next free

    def run(self, events: Sequence[Event]) -> list[ConnectOutcome | None]:
        outcomes: list[ConnectOutcome | None] = [None] * len(events)
        configs = [i for i, e in enumerate(events) if not isinstance(e, Connect)]
        by_listener: dict[str, list[int]] = {}
        for i, e in enumerate(events):
            if isinstance(e, Connect):
                by_listener.setdefault(e.listener, []).append(i)
        acceptors = {
            name: _Acceptor(deque(sorted(idx, key=lambda i: (events[i].ts_ms, i))), self.free_at.get(name, _IDLE))
            for name, idx in by_listener.items()
        }
        next_config = 0
        while True:
            best: tuple[int, int] | None = None
            best_kind: str | _Acceptor | None = None
            if next_config < len(configs):
                i = configs[next_config]
                best, best_kind = (events[i].ts_ms, i), "config"
            for acc in acceptors.values():
                if acc.pending is not None:
                    cand = (acc.pending_at, acc.pending)
                elif acc.queue:
                    head = acc.queue[0]
                    cand = (max(events[head].ts_ms, acc.free_at), head)
                else:
                    continue
                if best is None or cand < best:
                    best, best_kind = cand, acc
            if best is None:
                self.free_at.update((name, acc.free_at) for name, acc in acceptors.items())
                return outcomes
            now, index = best
            self.now_ms = now if self.now_ms is None else max(self.now_ms, now)
            if best_kind == "config":
                event = events[index]
                assert not isinstance(event, Connect)
                apply_config(self.quotas, event)
                next_config += 1
                continue
            assert isinstance(best_kind, _Acceptor)
            acc = best_kind
            connect = events[index]
            assert isinstance(connect, Connect)
            if acc.pending is None:
                acc.queue.popleft()
                delay = self.quotas.record_connection_and_get_throttle_ms(connect.listener, now)
                acc.pending, acc.pending_at, acc.pending_start, acc.pending_delay = index, now + delay, now, delay
                continue
            acc.pending = None
            acc.free_at = now
            if acc.pending_delay > 0:
                self.quotas.record_acceptor_blocked(connect.listener, acc.pending_delay, now)
            try:
                self.quotas.record_ip_connection_maybe_throttle(connect.listener, connect.ip, now)
            except ConnectionThrottledError as e:
                outcomes[index] = ConnectOutcome(
                    acc.pending_start, acc.pending_delay, e.throttle_ms, ConnectResult.IP_THROTTLED, now
                )
            else:
                outcomes[index] = ConnectOutcome(acc.pending_start, acc.pending_delay, 0, ConnectResult.ACCEPTED, now)


def simulate(quotas: ConnectionQuotas, events: Sequence[Event]) -> list[ConnectOutcome | None]:
    """One-shot replay; see :class:`AcceptorSimulation`."""
    return AcceptorSimulation(quotas).run(events)
