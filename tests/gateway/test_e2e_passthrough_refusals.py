"""quotaflow's topics refused to librdkafka (confluent-kafka) through a SASL-passthrough gateway, on SASL_PLAINTEXT
and SASL_SSL (issue 34): the cluster authenticates and authorizes bob, yet a consumer reading ``__quotaflow_usage``
or a producer writing it gets TOPIC_AUTHORIZATION_FAILED from the gateway, parses it, and backs off, and an ACL
request naming it gets CLUSTER_AUTHORIZATION_FAILED; nothing naming the topic reaches the cluster.

The cluster is itself a gateway with Kafka's StandardAuthorizer (``passthrough_stack``) whose ACLs allow bob
everything on the topic and READ on his group, so only the front gateway stands between him and the topic; the
cluster's own hidden-topic
refusal count tells whether the front gateway let a request naming the topic through (librdkafka's broker
connections go to the cluster's node ports, not through the recording relay). Each librdkafka step runs in its own
process (``rd_refusals.py``): an abort fails the test instead of killing pytest.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from quotaflow.gateway.server import GatewayThread
from quotaflow.testing.tansu import Tansu

from .authz_gateway import sasl
from .passthrough_stack import PassthroughStack, passthrough_stack

pytestmark = [pytest.mark.broker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).parent / "rd_refusals.py"
USAGE = "__quotaflow_usage"
GROUP = "pt-rd"
TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 31
FETCH_SECONDS = 6.0
MAX_REQUEST_RATE = 50.0  # refused requests naming the topic per second: librdkafka backs off (Kafka's answer)


@pytest.fixture(scope="module", params=["SASL_PLAINTEXT", "SASL_SSL"])
def stack(request: pytest.FixtureRequest, tansu: Tansu,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[PassthroughStack]:
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap, "log_level": 0})
    try:  # the topic exists on the cluster, with a leader: only the gateway keeps the client from it
        admin.create_topics([NewTopic(USAGE, 1, 1)])[USAGE].result(20)
    except KafkaException as e:
        if e.args[0].code() != 36:  # TOPIC_ALREADY_EXISTS
            raise
    with passthrough_stack(tansu.bootstrap, tmp_path_factory.mktemp("pt-rd"),
                           tls=request.param == "SASL_SSL") as pt:
        # the cluster lets bob do anything with the topic and read his group: only the gateway keeps him out
        cluster_admin = AdminClient({"bootstrap.servers": pt.cluster.bootstrap(), **sasl("admin")})
        grants = [AclBinding(ResourceType.TOPIC, USAGE, ResourcePatternType.LITERAL, "User:bob", "*",
                             AclOperation.ALL, AclPermissionType.ALLOW),
                  AclBinding(ResourceType.GROUP, GROUP, ResourcePatternType.LITERAL, "User:bob", "*",
                             AclOperation.READ, AclPermissionType.ALLOW)]
        for future in cluster_admin.create_acls(grants, request_timeout=20).values():
            future.result()
        yield pt


def _hidden_refusals(gw: GatewayThread) -> int:
    """Requests the gateway refused for naming quotaflow's topics, every API."""
    assert gw.gateway is not None
    return sum(gw.gateway.authz_audit.hidden.values())


def rd_step(stack: PassthroughStack, step: str, **extra: Any) -> dict[str, Any]:
    """One confluent-kafka step as bob (authenticated by the cluster) in a child process."""
    spec = {"bootstrap": stack.front.bootstrap(stack.listener), "user": "bob", "password": "bob-secret",
            "step": step, "topic": USAGE, "group": GROUP, "ssl_ca": stack.ca_file, **extra}
    done = subprocess.run([sys.executable, str(CHILD), json.dumps(spec)], capture_output=True, text=True,
                          timeout=120, check=False, cwd=ROOT)
    assert done.returncode == 0, f"librdkafka's {step} died with {done.returncode}: {done.stderr.strip()[-800:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("step", ["subscribe", "fetch"])
def test_a_consumer_reading_quotaflows_topic_gets_29_and_backs_off(stack: PassthroughStack, step: str) -> None:
    """Subscribed (librdkafka reports the topic's metadata error to the application) or assigned partition 0
    (librdkafka marks the topic's error permanent and only refreshes its metadata, as against Kafka for a topic
    without DESCRIBE): no parse failure, and the refused requests come at librdkafka's back-off pace."""
    front_before, cluster_before = _hidden_refusals(stack.front), _hidden_refusals(stack.cluster)
    started = time.monotonic()
    result = rd_step(stack, step, seconds=FETCH_SECONDS)
    elapsed = time.monotonic() - started  # the child's start-up counts too: a generous denominator
    refused = _hidden_refusals(stack.front) - front_before
    codes = [TOPIC_AUTHORIZATION_FAILED] if step == "subscribe" else []
    assert result == {"codes": codes, "parse_errors": 0}, result
    assert refused >= 1, "the consumer never asked the gateway for the topic"
    assert refused / elapsed < MAX_REQUEST_RATE, f"{refused} refused requests in {elapsed:.1f} s"
    assert _hidden_refusals(stack.cluster) == cluster_before  # nothing naming it reached the cluster


def test_a_producer_writing_quotaflows_topic_gets_29(stack: PassthroughStack) -> None:
    cluster_before = _hidden_refusals(stack.cluster)
    result = rd_step(stack, "produce")
    assert result == {"codes": [TOPIC_AUTHORIZATION_FAILED], "parse_errors": 0}, result
    assert _hidden_refusals(stack.cluster) == cluster_before


@pytest.mark.parametrize("step", ["create_acls", "describe_acls", "delete_acls"])
def test_acl_requests_naming_quotaflows_topic_get_31(stack: PassthroughStack, step: str) -> None:
    """The ACL APIs are the cluster's in passthrough, except for quotaflow's topics: librdkafka parses the
    gateway's refusal (Kafka's answer to an ACL request it does not allow) and the cluster never sees it."""
    cluster_before = _hidden_refusals(stack.cluster)
    front_before = _hidden_refusals(stack.front)
    result = rd_step(stack, step)
    # librdkafka's describe_acls drops DescribeAcls' top-level error and yields an empty list (docs/security.md)
    codes = [] if step == "describe_acls" else [CLUSTER_AUTHORIZATION_FAILED]
    assert result == {"codes": codes, "parse_errors": 0}, result
    assert _hidden_refusals(stack.front) > front_before  # the gateway's refusal, not the cluster's answer
    assert _hidden_refusals(stack.cluster) == cluster_before

