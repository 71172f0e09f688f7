"""Kafka metric names/tags from the managers, exported through prometheus-client."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from quotaflow.engine import MetricSample, PrometheusCollector, QuotaManagers

T = 1_000_000


def test_manager_metrics_and_prometheus_names() -> None:
    managers = QuotaManagers.create()
    managers.produce.update_quota("alice", None, 100)
    managers.controller_mutation.update_quota(None, "c1", 5)
    ms = managers.produce.record_and_get_throttle_ms("alice", "app", 5000, T)
    managers.produce.throttle("alice", "app", ms, T)
    managers.controller_mutation.record_and_get_throttle_ms("bob", "c1", 2, T)

    samples = list(managers.metric_samples(T))
    by_key = {(s.group, s.name, s.tags): s.value for s in samples}
    assert by_key[("Produce", "byte-rate", (("user", "alice"), ("client-id", "")))] == 500
    assert by_key[("Produce", "throttle-time", (("user", "alice"), ("client-id", "")))] == ms
    assert by_key[("Produce", "queue-size", ())] == 1
    assert by_key[("ControllerMutation", "tokens", (("user", ""), ("client-id", "c1")))] == 11 * 5 - 2
    assert ("Request", "exempt-request-time", ()) in by_key

    registry = CollectorRegistry()
    registry.register(PrometheusCollector([managers], clock_ms=lambda: T))
    text = generate_latest(registry).decode()
    assert 'kafka_server_produce_byte_rate{client_id="",user="alice"} 500.0' in text
    assert "kafka_server_produce_queue_size 1.0" in text
    assert 'kafka_server_controller_mutation_tokens{client_id="c1",user=""} 53.0' in text
    assert "kafka_server_request_exempt_request_time" in text


def test_jmx_style_name_omits_empty_tags() -> None:
    s = MetricSample("byte-rate", "Produce", (("user", ""), ("client-id", "c1")), 1.0)
    assert s.kafka_name == "kafka.server:type=Produce,client-id=c1 byte-rate"
