"""One librdkafka (confluent-kafka) client step against a gateway, in its own process: librdkafka aborts the process
on some responses (SIGABRT), which must fail the test that runs it rather than kill pytest.

usage: python rd_refusals.py '<json spec>'; spec: {bootstrap, user, password, step, topic, group, seconds, and
ssl_ca: the CA file of a SASL_SSL listener (absent: SASL_PLAINTEXT)}
steps: fetch (assign partition 0 and poll ``seconds``), join (subscribe in ``group`` for up to ``seconds``, until the
first error), subscribe (as join, polling all ``seconds``: the errors and the back-off between them), produce,
create_topics, delete_topics, describe_configs, describe_scram, create_acls / describe_acls / delete_acls (a
LITERAL topic pattern or filter naming ``topic``, bob the principal). Prints one JSON line: {"codes": [Kafka error codes
the client reported], "parse_errors": n}.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)


def _codes_of(futures: dict[Any, Any]) -> list[int]:
    found = []
    for future in futures.values():
        try:
            future.result(20)
        except KafkaException as e:
            found.append(int(e.args[0].code()))
    return found


def main(spec: dict[str, Any]) -> dict[str, Any]:
    logs: list[str] = []
    conf = {"bootstrap.servers": spec["bootstrap"], "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": spec["user"], "sasl.password": spec["password"],
            "logger": _logs(logs), "log_level": 3}
    if spec.get("ssl_ca"):
        conf |= {"security.protocol": "SASL_SSL", "ssl.ca.location": spec["ssl_ca"]}
    step, topic, seconds = spec["step"], spec["topic"], float(spec.get("seconds", 5))
    codes: list[int] = []
    if step in ("fetch", "join", "subscribe"):
        consumer = Consumer({**conf, "group.id": spec["group"], "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                             "heartbeat.interval.ms": 1000})
        if step == "fetch":
            consumer.assign([TopicPartition(topic, 0, 0)])
        else:
            consumer.subscribe([topic])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is not None:
                codes.append(int(message.error().code()))
                if step == "join":
                    break
        consumer.close()
    elif step == "produce":
        producer = Producer({**conf, "message.timeout.ms": 10_000, "allow.auto.create.topics": False})
        reports: list[Any] = []
        producer.produce(topic, b"v", partition=0, on_delivery=lambda err, _m: reports.append(err))
        producer.flush(20)
        codes = [int(e.code()) for e in reports if e is not None]
    else:
        admin = AdminClient(conf)
        if step == "create_topics":
            codes = _codes_of(admin.create_topics([NewTopic(f"{topic}-new", 1, 1)], request_timeout=20))
        elif step == "delete_topics":
            codes = _codes_of(admin.delete_topics([topic], request_timeout=20))
        elif step == "describe_configs":
            codes = _codes_of(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=20))
        elif step == "describe_scram":
            codes = _codes_of(admin.describe_user_scram_credentials(["admin"], request_timeout=20))
        elif step == "create_acls":
            codes = _codes_of(admin.create_acls([AclBinding(
                ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.READ,
                AclPermissionType.ALLOW)], request_timeout=20))
        elif step in ("describe_acls", "delete_acls"):
            acl_filter = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                                          AclOperation.ANY, AclPermissionType.ANY)
            if step == "describe_acls":
                codes = _codes_of({0: admin.describe_acls(acl_filter, request_timeout=20)})
            else:
                codes = _codes_of(admin.delete_acls([acl_filter], request_timeout=20))
        else:
            raise SystemExit(f"unknown step {step}")
    return {"codes": sorted(set(codes)), "parse_errors": sum("parse failure" in line for line in logs)}


def _logs(lines: list[str]) -> logging.Logger:
    """A logger that keeps librdkafka's log lines, to count protocol parse failures."""

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("rdkafka")
    logger.addHandler(Keep())
    logger.propagate = False
    return logger


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
