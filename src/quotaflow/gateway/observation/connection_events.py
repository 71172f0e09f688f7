"""Connection decisions as usage events: the listener's ``ConnectionQuotas``, observed.

The listener (``quotaflow.gateway.listener``) asks the engine two questions per accepted socket: the acceptor delay
(broker / listener rate) and the per-IP verdict. This subclass answers them unchanged and reports each outcome, so
the event log holds one connection row per TCP accept with ``accept_delay_ms``, ``ip_throttle_ms`` and ``result``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from quotaflow.core.errors import ConnectionThrottledError
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.events import RESULT_ACCEPTED, RESULT_IP_THROTTLED

ConnectionEventSink = Callable[[dict[str, Any]], None]


class ObservedConnectionQuotas(ConnectionQuotas):
    def __init__(self, config: ConnectionQuotaConfig | None = None, sink: ConnectionEventSink | None = None) -> None:
        super().__init__(config)
        self.sink = sink
        # each listener has one acceptor, which asks for the delay and then the IP verdict of one socket at a time
        self._arrival: dict[str, tuple[int, int]] = {}

    def record_connection_and_get_throttle_ms(self, listener: str, now_ms: int) -> int:
        delay = super().record_connection_and_get_throttle_ms(listener, now_ms)
        self._arrival[listener] = (now_ms, delay)
        return delay

    def record_ip_connection_maybe_throttle(self, listener: str, ip: str, now_ms: int) -> None:
        arrived, delay = self._arrival.pop(listener, (now_ms, 0))
        try:
            super().record_ip_connection_maybe_throttle(listener, ip, now_ms)
        except ConnectionThrottledError as e:
            self._emit(arrived, listener, ip, delay, e.throttle_ms, RESULT_IP_THROTTLED)
            raise
        self._emit(arrived, listener, ip, delay, 0, RESULT_ACCEPTED)

    def _emit(self, ts_ms: int, listener: str, ip: str, delay: int, ip_throttle: int, result: str) -> None:
        if self.sink is not None:
            self.sink({"ts_ms": ts_ms, "listener": listener, "client_ip": ip, "accept_delay_ms": delay,
                       "ip_throttle_ms": ip_throttle, "result": result})
