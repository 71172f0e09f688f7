"""Transactions through a gateway with Kafka's StandardAuthorizer (``--config``), librdkafka on both sides: the
ACLs are created with librdkafka's admin client by the super user; a transactional producer works with WRITE on
its transactional id and topic, is refused TRANSACTIONAL_ID_AUTHORIZATION_FAILED on someone else's id, and an
idempotent producer is allowed by WRITE on some topic (KafkaApis' IDEMPOTENT_WRITE fallback)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from quotaflow.testing.tansu import Tansu

from .authz_gateway import sasl, start_authorizing_gateway

pytestmark = pytest.mark.broker


def test_transactions_need_write_on_their_transactional_id(tansu: Tansu, tmp_path: Path) -> None:
    gw = start_authorizing_gateway(tansu.bootstrap, tmp_path)
    try:
        bootstrap = gw.bootstrap()
        stamp = uuid.uuid4().hex[:6]
        topic, tx = f"bob-{stamp}", f"bob-tx-{stamp}"
        admin = AdminClient({"bootstrap.servers": bootstrap, **sasl("admin")})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
        grants = [AclBinding(ResourceType.TOPIC, "bob-", ResourcePatternType.PREFIXED, "User:bob", "*",
                             AclOperation.ALL, AclPermissionType.ALLOW),
                  AclBinding(ResourceType.TRANSACTIONAL_ID, tx, ResourcePatternType.LITERAL, "User:bob", "*",
                             AclOperation.WRITE, AclPermissionType.ALLOW)]
        for future in admin.create_acls(grants, request_timeout=20).values():
            future.result()

        producer = Producer({"bootstrap.servers": bootstrap, **sasl("bob"), "transactional.id": tx})
        producer.init_transactions(30)
        producer.begin_transaction()
        delivered: list[Any] = []
        producer.produce(topic, b"in a transaction", on_delivery=lambda err, _m: delivered.append(err))
        producer.commit_transaction(30)
        assert delivered == [None]

        thief = Producer({"bootstrap.servers": bootstrap, **sasl("bob"), "transactional.id": f"alice-tx-{stamp}"})
        with pytest.raises(KafkaException) as refused:
            thief.init_transactions(30)
        assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

        idempotent = Producer({"bootstrap.servers": bootstrap, **sasl("bob"), "enable.idempotence": True})
        delivered.clear()
        idempotent.produce(topic, b"idempotent", on_delivery=lambda err, _m: delivered.append(err))
        idempotent.flush(30)
        assert delivered == [None]  # WRITE on some topic stands in for IDEMPOTENT_WRITE on the cluster
    finally:
        gw.stop()
