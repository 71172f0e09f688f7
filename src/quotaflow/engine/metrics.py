"""Kafka-named metrics and their Prometheus export.

Every engine component exposes ``metric_samples(now_ms)`` yielding :class:`MetricSample` (Kafka's metric name,
group and tags, e.g. ``byte-rate`` / ``Produce`` / ``{user, client-id}``). :class:`PrometheusCollector` turns
any number of such sources into Prometheus gauges: ``kafka_server_<group>_<name>`` in snake case, tags as labels
with ``-`` → ``_`` (``kafka_server_produce_byte_rate{user="alice",client_id="c1"}``). Reading a rate purges
expired samples exactly as a JMX read does in Kafka.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

_SNAKE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|[^A-Za-z0-9]+")


@dataclass(frozen=True, slots=True)
class MetricSample:
    name: str
    group: str
    tags: tuple[tuple[str, str], ...]
    value: float
    description: str = field(default="", compare=False)

    @property
    def kafka_name(self) -> str:
        """``kafka.server:type=<group>,<tag>=<value>,...`` name ``<name>`` (empty tag values omitted, as JMX)."""
        tags = "".join(f",{k}={v}" for k, v in self.tags if v)
        return f"kafka.server:type={self.group}{tags} {self.name}"


class MetricSource(Protocol):
    def metric_samples(self, now_ms: int) -> Iterable[MetricSample]: ...


def snake(s: str) -> str:
    return _SNAKE.sub("_", s).strip("_").lower()


def prometheus_name(group: str, name: str) -> str:
    """``kafka_server_<group>_<name>``: ``Produce``/``byte-rate`` → ``kafka_server_produce_byte_rate``."""
    return f"kafka_server_{snake(group)}_{snake(name)}"


def prometheus_label(tag: str) -> str:
    return snake(tag)


class PrometheusCollector(Collector):
    """A prometheus-client collector over engine metric sources, read at scrape time."""

    def __init__(self, sources: Iterable[MetricSource], clock_ms: Callable[[], int] | None = None) -> None:
        self._sources = list(sources)
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)

    def add(self, source: MetricSource) -> None:
        self._sources.append(source)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self._clock_ms()
        families: dict[tuple[str, tuple[str, ...]], GaugeMetricFamily] = {}
        for source in self._sources:
            for s in source.metric_samples(now):
                labels = tuple(prometheus_label(k) for k, _ in s.tags)
                key = (prometheus_name(s.group, s.name), labels)
                fam = families.get(key)
                if fam is None:
                    fam = families[key] = GaugeMetricFamily(key[0], s.description or s.name, labels=list(labels))
                fam.add_metric([v for _, v in s.tags], s.value)
        yield from families.values()
