"""Connection decisions as usage events: the listener's ``ConnectionQuotas``, observed.

The listener (``quotaflow.gateway.listener``) asks the engine two questions per accepted socket: the acceptor delay
(broker / listener rate) and the per-IP verdict. This subclass answers them unchanged and reports each outcome, so
the event log holds one connection row per TCP accept with ``accept_delay_ms``, ``ip_throttle_ms`` and ``result``.

While a shadow quota set runs (issue 36, ``gateway.data.shadow``) a second ``ConnectionQuotas`` (:attr:`shadow`:
the same broker settings, the ip and principal ``connection_creation_rate`` of the shadow's quotas) is asked the
same questions for the same sockets and never obeyed: the delay at the arrival, the IP verdict at the arrival plus
the shadow's own delay (where the engine's acceptor replay, ``quotaflow replay``, checks it), and a principal's rate
at the same reading as the live check. Its answers go to the row's ``shadow_*`` columns and to
``kafka_server_shadow_connections_total{result=delayed|refused}``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from quotaflow.core.errors import ConnectionThrottledError
from quotaflow.engine.connection import ConnectionQuotaConfig, ConnectionQuotas
from quotaflow.engine.metrics import MetricSample
from quotaflow.events import RESULT_ACCEPTED, RESULT_IP_THROTTLED

ConnectionEventSink = Callable[[dict[str, Any]], None]
DELAYED = "delayed"
REFUSED = "refused"


class ObservedConnectionQuotas(ConnectionQuotas):
    def __init__(self, config: ConnectionQuotaConfig | None = None, sink: ConnectionEventSink | None = None) -> None:
        super().__init__(config)
        self.config = config or ConnectionQuotaConfig()
        self.sink = sink
        # each listener has one acceptor, which asks for the delay and then the IP verdict of one socket at a time
        self._arrival: dict[str, tuple[int, int, int]] = {}
        self.shadow: ConnectionQuotas | None = None
        self.shadow_id: int | None = None
        # (result, listener, shadow id) -> connections; the last set's kept after it ends, until the next starts
        self.shadow_counts: dict[tuple[str, str, int], int] = {}

    def reconfigure(self, cfg: ConnectionQuotaConfig) -> None:
        super().reconfigure(cfg)
        self.config = cfg
        if self.shadow is not None:
            self.shadow.reconfigure(cfg)

    def start_shadow(self, shadow_id: int) -> ConnectionQuotas:
        """A fresh shadow beside these quotas (the same settings and listeners); the caller gives it the shadow's
        ip and principal rates."""
        shadow = ConnectionQuotas(self.config)
        shadow.inter_broker_listener = self.inter_broker_listener
        for name in self.listeners:
            shadow.add_listener(name)
        self.shadow, self.shadow_id = shadow, shadow_id
        self.shadow_counts = {key: n for key, n in self.shadow_counts.items() if key[2] == shadow_id}  # bounded
        return shadow

    def stop_shadow(self) -> None:
        self.shadow, self.shadow_id = None, None

    def add_listener(self, listener: str, rate: int | None = None, max_connections: int | None = None) -> None:
        super().add_listener(listener, rate, max_connections)
        if self.shadow is not None:
            self.shadow.add_listener(listener, rate, max_connections)

    def record_connection_and_get_throttle_ms(self, listener: str, now_ms: int) -> int:
        delay = super().record_connection_and_get_throttle_ms(listener, now_ms)
        shadow_delay = 0
        if self.shadow is not None:
            shadow_delay = self.shadow.record_connection_and_get_throttle_ms(listener, now_ms)
        self._arrival[listener] = (now_ms, delay, shadow_delay)
        return delay

    def record_ip_connection_maybe_throttle(self, listener: str, ip: str, now_ms: int) -> None:
        arrived, delay, shadow_delay = self._arrival.pop(listener, (now_ms, 0, 0))
        shadow = self._shadow_verdict(listener, ip, arrived, shadow_delay)
        try:
            super().record_ip_connection_maybe_throttle(listener, ip, now_ms)
        except ConnectionThrottledError as e:
            self._emit(arrived, listener, ip, delay, e.throttle_ms, RESULT_IP_THROTTLED, shadow)
            raise
        self._emit(arrived, listener, ip, delay, 0, RESULT_ACCEPTED, shadow)

    def record_principal_connection_and_get_throttle_ms(self, principal: str, now_ms: int) -> int:
        if self.shadow is not None and self.shadow.record_principal_connection_and_get_throttle_ms(principal, now_ms):
            self._count(REFUSED, "")
        return super().record_principal_connection_and_get_throttle_ms(principal, now_ms)

    def _shadow_verdict(self, listener: str, ip: str, arrived: int, delay: int) -> dict[str, Any] | None:
        shadow = self.shadow
        if shadow is None:
            return None
        throttle, result = 0, RESULT_ACCEPTED
        try:
            shadow.record_ip_connection_maybe_throttle(listener, ip, arrived + delay)
        except ConnectionThrottledError as e:
            throttle, result = e.throttle_ms, RESULT_IP_THROTTLED
            self._count(REFUSED, listener)
        if delay > 0:
            self._count(DELAYED, listener)
        return {"shadow_id": self.shadow_id, "shadow_accept_delay_ms": delay, "shadow_ip_throttle_ms": throttle,
                "shadow_result": result}

    def _count(self, result: str, listener: str) -> None:
        if self.shadow_id is not None:
            key = (result, listener, self.shadow_id)
            self.shadow_counts[key] = self.shadow_counts.get(key, 0) + 1

    def _emit(self, ts_ms: int, listener: str, ip: str, delay: int, ip_throttle: int, result: str,
              shadow: dict[str, Any] | None) -> None:
        if self.sink is not None:
            row = {"ts_ms": ts_ms, "listener": listener, "client_ip": ip, "accept_delay_ms": delay,
                   "ip_throttle_ms": ip_throttle, "result": result}
            if shadow is not None:
                row.update(shadow)
            self.sink(row)

    def expire_sensors(self, now_ms: int) -> None:
        super().expire_sensors(now_ms)
        if self.shadow is not None:
            self.shadow.expire_sensors(now_ms)

    def metric_samples(self, now_ms: int) -> Iterator[MetricSample]:
        yield from super().metric_samples(now_ms)
        for (result, listener, shadow_id), count in list(self.shadow_counts.items()):
            yield MetricSample("connections-total", "Shadow",
                               (("result", result), ("listener", listener), ("shadow_id", str(shadow_id))),
                               float(count), "Connections the shadow quota set would have delayed (broker or "
                               "listener rate) or refused (ip or principal connection_creation_rate)")
