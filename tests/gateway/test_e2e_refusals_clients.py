"""Every refusal the gateway builds, parsed by clients no one here wrote (issue 34): librdkafka (confluent-kafka, each
step in its own process so that an abort fails the test instead of killing pytest) and @platformatic/kafka (Node),
in front of tansu, Kafka's StandardAuthorizer at the gateway, super user admin.

bob may DESCRIBE the topic and READ group ``ok`` and nothing else: his Fetch, Produce, JoinGroup of another group,
CreateTopics, DeleteTopics, DescribeConfigs and DescribeUserScramCredentials are refused, and each client must
report Kafka's error code for it, parse the response, and back off as it would against Kafka: a refused consumer's
Fetch rate is counted at the gateway (librdkafka, given null records in a refused partition, re-sent its Fetch
about 4,000 times a second; the bound here is generous, not a timing check).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka.protocol.api_key import ApiKey

from quotaflow.core.acl import AclOperation as Op
from quotaflow.core.acl import ResourceType as Rt
from quotaflow.gateway.server import GatewayThread
from quotaflow.testing.tansu import Tansu

from .authz_gateway import sasl, start_authorizing_gateway

pytestmark = [pytest.mark.broker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).parent / "rd_refusals.py"
NODE_SCRIPT = Path(__file__).parent / "node" / "refusals.mjs"
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 30, 31
FETCH_SECONDS = 6.0
MAX_FETCH_RATE = 50.0  # refused Fetch requests per second: librdkafka backs off (fetch.error.backoff.ms, 500 ms)


class Setup:
    def __init__(self, gw: GatewayThread, topic: str, ok_group: str) -> None:
        self.gw = gw
        self.topic = topic
        self.ok_group = ok_group

    @property
    def bootstrap(self) -> str:
        return str(self.gw.bootstrap())

    def refused_fetches(self) -> int:
        """Fetch requests the gateway refused READ on (one decision per refused topic)."""
        return self.gw.gateway.authz_audit.counts[(int(ApiKey.Fetch), int(Rt.TOPIC), int(Op.READ), False)]


@pytest.fixture(scope="module")
def setup(tansu: Tansu, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    gw = start_authorizing_gateway(tansu.bootstrap, tmp_path_factory.mktemp("refusals"))
    try:
        topic, ok_group = f"refused-{uuid.uuid4().hex[:6]}", f"ok-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": gw.bootstrap(), **sasl("admin")})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
        grants = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*",
                             AclOperation.DESCRIBE, AclPermissionType.ALLOW),
                  AclBinding(ResourceType.GROUP, ok_group, ResourcePatternType.LITERAL, "User:bob", "*",
                             AclOperation.READ, AclPermissionType.ALLOW)]
        for future in admin.create_acls(grants, request_timeout=20).values():
            future.result()
        yield Setup(gw, topic, ok_group)
    finally:
        gw.stop()


def rd_step(setup: Setup, step: str, **extra: Any) -> dict[str, Any]:
    """One confluent-kafka step as bob in a child process; fails the test if the child dies (e.g. SIGABRT)."""
    spec = {"bootstrap": setup.bootstrap, "user": "bob", "password": "bob-secret", "step": step,
            "topic": setup.topic, "group": setup.ok_group, **extra}
    done = subprocess.run([sys.executable, str(CHILD), json.dumps(spec)], capture_output=True, text=True,
                          timeout=120, check=False, cwd=ROOT)
    assert done.returncode == 0, (f"librdkafka's {step} died with {done.returncode}: "
                                  f"{done.stderr.strip()[-800:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_consumer_refused_read_gets_29_and_backs_off(setup: Setup) -> None:
    before = setup.refused_fetches()
    started = time.monotonic()
    result = rd_step(setup, "fetch", seconds=FETCH_SECONDS)
    elapsed = time.monotonic() - started  # the child's start-up counts too: a generous denominator
    fetches = setup.refused_fetches() - before
    assert result["parse_errors"] == 0, result
    assert TOPIC_AUTHORIZATION_FAILED in result["codes"], result
    assert fetches >= 1, "the consumer never fetched"
    assert fetches / elapsed < MAX_FETCH_RATE, f"{fetches} refused Fetch requests in {elapsed:.1f} s"


@pytest.mark.parametrize(("step", "code"), [
    ("produce", TOPIC_AUTHORIZATION_FAILED),
    ("join", GROUP_AUTHORIZATION_FAILED),
    ("create_topics", TOPIC_AUTHORIZATION_FAILED),
    ("delete_topics", TOPIC_AUTHORIZATION_FAILED),
    ("describe_configs", TOPIC_AUTHORIZATION_FAILED),
])
def test_librdkafka_parses_each_refusal(setup: Setup, step: str, code: int) -> None:
    extra = {"group": f"denied-{uuid.uuid4().hex[:6]}", "seconds": 30} if step == "join" else {}
    result = rd_step(setup, step, **extra)
    assert result == {"codes": [code], "parse_errors": 0}


@pytest.mark.xfail(strict=True, reason=(
    "librdkafka (2.16 and before) frees a pointer it never allocated when a DescribeUserScramCredentials "
    "response carries a top-level error, Kafka's own getErrorResponse included (SIGABRT munmap_chunk); the "
    "gateway's refusal is Kafka's, byte for byte (tests/gateway/auth/test_scram_admin.py). docs/security.md"))
def test_librdkafka_describe_user_scram_credentials_refused(setup: Setup) -> None:
    assert rd_step(setup, "describe_scram") == {"codes": [CLUSTER_AUTHORIZATION_FAILED], "parse_errors": 0}


def test_platformatic_kafka_parses_each_refusal(setup: Setup) -> None:
    node = shutil.which("node")
    if node is None or not (ROOT / "node_modules" / "@platformatic" / "kafka").is_dir():
        pytest.skip("node or @platformatic/kafka is not installed (make setup installs them)")
    spec = {"bootstrap": setup.bootstrap, "username": "bob", "password": "bob-secret", "topic": setup.topic,
            "okGroup": setup.ok_group, "deniedGroup": f"denied-{uuid.uuid4().hex[:6]}", "seconds": FETCH_SECONDS}
    before = setup.refused_fetches()
    started = time.monotonic()
    done = subprocess.run([node, str(NODE_SCRIPT), json.dumps(spec)], capture_output=True, text=True, timeout=180,
                          check=False, cwd=ROOT)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"produce": [TOPIC_AUTHORIZATION_FAILED], "fetch": [TOPIC_AUTHORIZATION_FAILED],
                      "join": [GROUP_AUTHORIZATION_FAILED], "createTopics": [TOPIC_AUTHORIZATION_FAILED],
                      "deleteTopics": [TOPIC_AUTHORIZATION_FAILED], "describeConfigs": [TOPIC_AUTHORIZATION_FAILED],
                      "describeScram": [CLUSTER_AUTHORIZATION_FAILED]}, result
    fetches = setup.refused_fetches() - before
    assert fetches >= 1 and fetches / elapsed < MAX_FETCH_RATE, f"{fetches} refused Fetch requests in {elapsed:.1f} s"
