"""Producers flat out through gateways, counting acked bytes: how much a quota admitted, for the cluster-quota tests
and the fleet curve of bench/scale.py. Rates are means over whole multiples of Kafka's rate window: a throttled
producer is let through in bursts (a window's worth at once, then silence)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

VALUE = b"c" * 8_000


class AckedRate:
    """One confluent-kafka producer, flat out through one bootstrap; acked bytes per second of the monotonic clock."""

    def __init__(self, bootstrap: str, topic: str, client_id: str) -> None:
        from confluent_kafka import Producer  # a test and bench dependency, not the product's

        self.topic = topic
        self.acked: list[tuple[float, int]] = []
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                                  "batch.size": 16_384, "max.in.flight": 5, "acks": 1,
                                  "queue.buffering.max.kbytes": 256, "message.timeout.ms": 60_000})
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error: object, message: object) -> None:
        if error is None:
            self.acked.append((time.monotonic(), len(VALUE)))

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.producer.produce(self.topic, VALUE, on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.01)
        self.producer.purge()
        self.producer.flush(5)

    def rate(self, start: float, end: float) -> float:
        return sum(n for t, n in self.acked if start <= t < end) / (end - start)


@contextmanager
def producers(bootstraps: Sequence[str], topic: str, client_id: str) -> Iterator[list[AckedRate]]:
    """One flat-out producer per bootstrap, all with ``client_id``; stopped (and their threads joined) on exit."""
    running = [AckedRate(b, topic, client_id) for b in bootstraps]
    for p in running:
        p.thread.start()
    try:
        yield running
    finally:
        for p in running:
            p.stop.set()
        for p in running:
            p.thread.join(30)
