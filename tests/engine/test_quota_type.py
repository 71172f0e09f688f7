"""QuotaType: one per client-quota key, with the metric group and names Kafka's ClientQuotaManager registers."""

from __future__ import annotations

import pytest

from quotaflow.core.keys import CLIENT_QUOTA_KEYS, CONNECTION_CREATION_RATE, IP_QUOTA_KEYS
from quotaflow.engine.quota_type import QuotaType


def test_every_client_quota_key_has_exactly_one_type() -> None:
    assert {t.key for t in QuotaType} == set(CLIENT_QUOTA_KEYS)
    for key in CLIENT_QUOTA_KEYS:
        quota_type = QuotaType.for_key(key)
        assert quota_type is not None and quota_type.key == key


@pytest.mark.parametrize("key", [*sorted(IP_QUOTA_KEYS), "leader.replication.throttled.rate", ""])
def test_other_keys_have_no_client_quota_type(key: str) -> None:
    assert QuotaType.for_key(key) is None
    assert CONNECTION_CREATION_RATE in IP_QUOTA_KEYS


@pytest.mark.parametrize(
    ("quota_type", "group", "metric", "key"),
    [
        (QuotaType.PRODUCE, "Produce", "byte-rate", "producer_byte_rate"),
        (QuotaType.FETCH, "Fetch", "byte-rate", "consumer_byte_rate"),
        (QuotaType.REQUEST, "Request", "request-time", "request_percentage"),
        (QuotaType.CONTROLLER_MUTATION, "ControllerMutation", "tokens", "controller_mutation_rate"),
    ],
)
def test_kafka_metric_group_and_names(quota_type: QuotaType, group: str, metric: str, key: str) -> None:
    """The group is the ``quota.type`` tag / sensor prefix Kafka uses (``Produce-user:client``)."""
    assert (quota_type.group, quota_type.metric_name, quota_type.key) == (group, metric, key)
    assert quota_type.description.startswith("Tracking ") and quota_type.description.endswith("per user/client-id")
