"""The seams between the gateway's authorization (gateway.auth.authorize), its own ACL / quota / SCRAM answers, the
authorizer's decision cache and KIP-599 metering (gateway.data.mutations): one order, one cluster check, one cache rule.

* Unauthorized topics and quotaflow's own are cut before the partition-count lookup of DeleteTopics /
  CreatePartitions: the gateway never asks the upstream (with its own rights) about a topic the client may not
  name, so neither the throttle time nor any timing says whether it exists or how many partitions it has.
* The gateway's own cluster-level APIs decide through ``authorize.cluster_allowed``: audited and counted as every
  other decision.
* A cached decision lives exactly as long as the authorizer's ``generation``: an ACL change made anywhere (another
  gateway, the CLI) and loaded from the store applies to the next request.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import CreateAclsRequest
from kafka.protocol.api_key import ApiKey

from quotaflow.admin.acls import AclAdmin
from quotaflow.core.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from quotaflow.core.authorizer import StandardAuthorizer
from quotaflow.gateway.auth import authorize
from quotaflow.gateway.auth.acl_admin import AclAdminHandler
from quotaflow.gateway.auth.authz_audit import AuthzAudit
from quotaflow.gateway.auth.hidden_topics import HiddenTopics
from quotaflow.gateway.data import api_handlers
from quotaflow.gateway.data.pending import Pending
from quotaflow.gateway.data.quota_admin import QuotaAdminHandler
from quotaflow.gateway.wire import protocol
from quotaflow.store.sqlite import SqliteStore

from ..memory_authorizer import Acl, MemoryAuthorizer

STORE = "qf-store"
HIDDEN = HiddenTopics({STORE, "__quotaflow_usage"})


class Counts:
    """``PartitionCounts`` as the hooks see it, recording what the gateway would ask the upstream."""

    def __init__(self) -> None:
        self.asked: list[tuple[list[str], list[uuid.UUID]]] = []

    async def refresh(self, names: Any, ids: Any = ()) -> None:
        self.asked.append((sorted(names), sorted(ids)))

    def count(self, name: str | None, topic_id: uuid.UUID | None = None) -> int | None:
        return None


class Enforcement:
    def mutations_metered(self, _user: str) -> bool:
        return True


@dataclass
class Sasl:
    pending_auth: bool = False
    passthrough: Any = None


@dataclass
class Gateway:
    access: authorize.Access
    partition_counts: Counts = field(default_factory=Counts)
    acl_admin: Any = None
    quota_admin: Any = None
    scram_admin: Any = None


@dataclass
class Scope:
    gateway: Gateway
    principal: str = "bob"
    client_ip: str = "10.0.0.9"
    listener: str = "PLAINTEXT"
    enforcement: Any = field(default_factory=Enforcement)
    sasl: Sasl = field(default_factory=Sasl)


def _frame(api: int, version: int, **fields: Any) -> bytes:
    message = protocol.REQUESTS[api][version](**fields)
    message.with_header(correlation_id=7, client_id="c")
    return bytes(message.encode(header=True))


def _access(authorizer: Any, rows: list[dict[str, Any]] | None = None) -> authorize.Access:
    return authorize.Access(authorizer, HIDDEN, AuthzAudit(rows.append if rows is not None else None))


# -- 1. metering after authorization ---------------------------------------------------------------------------

BOB_ALL = MemoryAuthorizer([Acl("User:bob", AclOperation.ALL, ResourceType.TOPIC, "bob-", prefixed=True)])


def test_delete_topics_looks_up_partition_counts_only_for_topics_the_client_may_delete() -> None:
    scope = Scope(Gateway(_access(BOB_ALL)))
    frame = _frame(ApiKey.DeleteTopics, 5, topic_names=["bob-1", STORE, "__quotaflow_usage", "alice-1"],
                   timeout_ms=10)
    asyncio.run(api_handlers.prepare_request(scope, frame))  # type: ignore[arg-type]
    assert scope.gateway.partition_counts.asked == [(["bob-1"], [])]


def test_create_partitions_of_refused_topics_asks_the_upstream_nothing() -> None:
    scope = Scope(Gateway(_access(BOB_ALL)))
    cls = protocol.REQUESTS[ApiKey.CreatePartitions]
    frame = _frame(ApiKey.CreatePartitions, 3, timeout_ms=10, validate_only=False,
                   topics=[cls.CreatePartitionsTopic(name=n, count=4, assignments=None)
                           for n in (STORE, "alice-1")])
    asyncio.run(api_handlers.prepare_request(scope, frame))  # type: ignore[arg-type]
    assert scope.gateway.partition_counts.asked == []


def test_without_an_authorizer_quotaflows_own_topics_are_never_looked_up() -> None:
    scope = Scope(Gateway(_access(None)))
    frame = _frame(ApiKey.DeleteTopics, 4, topic_names=["t", STORE, "__quotaflow_x"], timeout_ms=10)
    asyncio.run(api_handlers.prepare_request(scope, frame))  # type: ignore[arg-type]
    assert scope.gateway.partition_counts.asked == [(["t"], [])]


def test_topics_named_by_id_are_never_looked_up() -> None:
    """DeleteTopics v6 names topics by id: the gateway cannot authorize an id (the version is not offered and the
    connection is closed), so the upstream must not be asked which topic the id is, nor its partitions."""
    scope = Scope(Gateway(_access(None)))
    cls = protocol.REQUESTS[ApiKey.DeleteTopics]
    frame = _frame(ApiKey.DeleteTopics, 6, timeout_ms=10,
                   topics=[cls.DeleteTopicState(name=None, topic_id=uuid.uuid4())])
    asyncio.run(api_handlers.prepare_request(scope, frame))  # type: ignore[arg-type]
    assert scope.gateway.partition_counts.asked == []


def test_the_lookup_is_not_audited_twice() -> None:
    """The refusal is recorded once, by the request hook; the lookup's filter decides quietly."""
    rows: list[dict[str, Any]] = []
    scope = Scope(Gateway(_access(BOB_ALL, rows)))
    frame = _frame(ApiKey.DeleteTopics, 5, topic_names=["alice-1", STORE], timeout_ms=10)
    asyncio.run(api_handlers.prepare_request(scope, frame))  # type: ignore[arg-type]
    assert rows == [] and not scope.gateway.access.audit.counts and not scope.gateway.access.audit.hidden


# -- 2. the gateway's own cluster-level APIs: one check, audited -----------------------------------------------

def _acl_pending(api: int, version: int) -> Pending:
    return Pending(protocol.RequestHeader(api, version, 7, "c", 0), 0, 0)


def test_acl_apis_cluster_check_is_audited_and_counted(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = []
    authorizer = StandardAuthorizer({"User:admin"})
    store = SqliteStore(tmp_path / "acls.db")
    access = _access(authorizer, rows)
    handler = AclAdminHandler(AclAdmin(store), authorizer, None)
    scope = Scope(Gateway(access, acl_admin=handler))
    creation = CreateAclsRequest.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3,
                                             principal="User:bob", host="*", operation=3, permission_type=3)
    request = CreateAclsRequest(creations=[creation])
    pending = asyncio.run(api_handlers._acl_admin(scope, request, _acl_pending(ApiKey.CreateAcls, 3)))  # type: ignore[arg-type]
    assert pending.local is not None
    response = protocol.decode_response(pending.local[4:], ApiKey.CreateAcls, 3)
    assert [r.error_code for r in response.results] == [31]
    assert [(r["principal"], r["resource_type"], r["operation"], r["allowed"]) for r in rows] == \
        [("User:bob", "CLUSTER", "ALTER", False)]
    assert access.audit.counts[(ApiKey.CreateAcls, int(ResourceType.CLUSTER), int(AclOperation.ALTER), False)] == 1
    store.close()


def test_without_an_authorizer_every_cluster_api_uses_the_same_admin_list_rule() -> None:
    """``--admin-principal`` entries as ``alice`` or ``User:alice``; no list: everyone (a broker without an
    authorizer), except KIP-554, which is for super users only (nobody without a list)."""
    for admins, principal, open_api, super_only in [
        (None, "bob", True, False),
        (frozenset({"alice"}), "alice", True, True),
        (frozenset({"User:alice"}), "alice", True, True),
        (frozenset({"User:alice"}), "bob", False, False),
    ]:
        scope = Scope(Gateway(_access(None), quota_admin=QuotaAdminHandler(None, admins)), principal=principal)  # type: ignore[arg-type]
        access = scope.gateway.access
        assert authorize.cluster_allowed(access, scope, ApiKey.DescribeAcls, scope.client_ip,  # type: ignore[arg-type]
                                         AclOperation.DESCRIBE) is open_api
        assert authorize.cluster_allowed(access, scope, ApiKey.AlterUserScramCredentials,  # type: ignore[arg-type]
                                         scope.client_ip, AclOperation.ALTER, super_only=True) is super_only


# -- 3. the decision cache follows every ACL change ------------------------------------------------------------

def _read(principal: str, topic: str) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                      AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW))


def test_a_revoke_made_elsewhere_refuses_the_next_request(tmp_path: Path) -> None:
    """Gateway A caches bob's READ on ``orders``; the ACL is removed through another writer of the store (the CLI's
    admin layer, as another gateway would); A's store refresh loads it and the next decision is a refusal, then a
    re-grant is allowed again (the cache must not keep the deny either)."""
    db = tmp_path / "fleet.db"
    gateway_store, cli_store = SqliteStore(db), SqliteStore(db)
    AclAdmin(cli_store).create([_read("User:bob", "orders")])
    authorizer = StandardAuthorizer()

    def refresh() -> None:  # what the gateway's poll does (Gateway.reload_acls)
        snapshot = gateway_store.acls()
        authorizer.load(snapshot.bindings, snapshot.version)

    refresh()
    access = _access(authorizer)
    check = authorize.Check(access, "bob", "10.0.0.9", ApiKey.Fetch)
    assert check.topic(AclOperation.READ, "orders") and check.topic(AclOperation.READ, "orders")  # cached
    before = authorizer.generation
    AclAdmin(cli_store).delete([AclBindingFilter(
        ResourcePatternFilter(ResourceType.TOPIC, "orders", PatternType.LITERAL),
        AccessControlEntryFilter("User:bob", "*", AclOperation.READ, AclPermissionType.ALLOW))])
    refresh()
    assert authorizer.generation != before
    assert not check.topic(AclOperation.READ, "orders")
    AclAdmin(cli_store).create([_read("User:bob", "orders")])
    refresh()
    assert check.topic(AclOperation.READ, "orders")
    gateway_store.close()
    cli_store.close()


def test_every_load_moves_the_generation_even_at_the_same_store_version() -> None:
    """An authorizer built with fixed bindings (version 0) or reloaded at an equal version still announces the new
    index: the cache never outlives the index it was computed from."""
    authorizer = StandardAuthorizer()
    seen = {authorizer.generation}
    for bindings in ([_read("User:bob", "t")], [], [_read("User:bob", "t")]):
        authorizer.load(bindings)
        assert authorizer.generation not in seen
        seen.add(authorizer.generation)


def test_an_authorizer_without_a_generation_is_asked_every_time() -> None:
    acl = Acl("User:bob", AclOperation.READ, ResourceType.TOPIC, "t")
    authorizer = MemoryAuthorizer([acl])  # generation None: its ACLs change in place
    check = authorize.Check(_access(authorizer), "bob", "10.0.0.9", ApiKey.Fetch)
    assert check.topic(AclOperation.READ, "t") and check.topic(AclOperation.READ, "t")
    assert authorizer.calls == 2
    authorizer.acls.remove(acl)
    assert not check.topic(AclOperation.READ, "t")



# -- 4. the cached fast path of Produce and Fetch ------------------------------------------------------------------

@dataclass
class _Who:
    """What :func:`authorize.plan` reads of its scope: the principal."""

    principal: str


def _write(principal: str, topic: str, *, prefixed: bool = False, op: AclOperation = AclOperation.WRITE,
           allow: bool = True) -> AclBinding:
    pattern = PatternType.PREFIXED if prefixed else PatternType.LITERAL
    permission = AclPermissionType.ALLOW if allow else AclPermissionType.DENY
    return AclBinding(ResourcePattern(ResourceType.TOPIC, topic, pattern),
                      AccessControlEntry(principal, "*", op, permission))


def _produce_frame(version: int, topics: list[str], transactional_id: str | None) -> bytes:
    cls = protocol.REQUESTS[ApiKey.Produce][version]
    partition = cls.TopicProduceData.PartitionProduceData
    fields: dict[str, Any] = {"acks": 1, "timeout_ms": 10, "topic_data": [cls.TopicProduceData(
        name=t, partition_data=[partition(index=0, records=b"r" * 20)]) for t in topics]}
    if version >= 3:
        fields["transactional_id"] = transactional_id
    message = cls(**fields)
    message.with_header(correlation_id=3, client_id="c")
    return bytes(message.encode(header=True))


def _fetch_frame(version: int, topics: list[str], *, replica_id: int, epoch: int) -> bytes:
    cls = protocol.REQUESTS[ApiKey.Fetch][version]
    message = cls(replica_id=replica_id, max_wait_ms=10, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                  session_id=0, session_epoch=epoch, rack_id="", forgotten_topics_data=[],
                  topics=[cls.FetchTopic(topic=t, partitions=[cls.FetchTopic.FetchPartition(
                      partition=0, current_leader_epoch=-1, fetch_offset=1, log_start_offset=-1,
                      partition_max_bytes=1 << 20)]) for t in topics])
    message.with_header(correlation_id=4, client_id="c")
    return bytes(message.encode(header=True))


def _shape(plan: authorize.Plan | None) -> object:
    """What a plan does, without its merge closure's identity."""
    return None if plan is None else (plan.forward, plan.local, plan.merge is None, plan.merge_if_named)


@pytest.mark.parametrize("log_allowed", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_granted_answers_and_counts_as_plan_does(seed: int, log_allowed: bool) -> None:
    """``authorize.granted`` (the hot path of an authorizing gateway: the request hook and the connection core ask
    it first) gives the plan :func:`authorize.plan` gives, and leaves the same counters and event-log rows, over
    random Produce and Fetch traffic of two principals while the ACLs are reloaded (grants and revokes, a deny that
    overrides), with hidden topics, transactional ids, follower fetches and sessions among it."""
    rng = random.Random(seed)
    topics = ["bob-1", "bob-2", "alice-1", "shared", STORE, "__quotaflow_x"]
    acl_sets = [
        [_write("User:bob", "bob-", prefixed=True), _write("User:bob", "bob-", prefixed=True, op=AclOperation.READ)],
        [_write("User:bob", "bob-1"), _write("User:alice", "alice-1"),
         _write("User:bob", "shared", op=AclOperation.ALL)],
        [_write("User:bob", "*", op=AclOperation.ALL), _write("User:bob", "bob-2", allow=False)],
        [],
    ]
    authorizer = StandardAuthorizer()
    authorizer.load(acl_sets[0])
    rows_fast: list[dict[str, Any]] = []
    rows_plan: list[dict[str, Any]] = []
    fast = authorize.Access(authorizer, HIDDEN, AuthzAudit(rows_fast.append, log_allowed=log_allowed))
    slow = authorize.Access(authorizer, HIDDEN, AuthzAudit(rows_plan.append, log_allowed=log_allowed))
    answered = 0
    for step in range(400):
        if step % 50 == 49:
            authorizer.load(rng.choice(acl_sets))
        principal = rng.choice(["bob", "bob", "bob", "alice"])
        names = rng.sample(topics[:4], rng.randint(1, 2)) if rng.random() < 0.9 else [rng.choice(topics)]
        if rng.random() < 0.5:
            frame = _produce_frame(rng.randint(3, 9), names, "tx" if rng.random() < 0.1 else None)
        else:
            frame = _fetch_frame(rng.randint(4, 12), names, replica_id=1 if rng.random() < 0.05 else -1,
                                 epoch=rng.choice([0, -1]))
        header = protocol.parse_request_header(frame)
        got = authorize.granted(fast, principal, "10.0.0.9", header, frame)
        if got is authorize.UNDECIDED:
            got = authorize.plan(fast, _Who(principal), header, frame, "10.0.0.9")  # type: ignore[arg-type]
        else:
            answered += 1
        want = authorize.plan(slow, _Who(principal), header, frame, "10.0.0.9")  # type: ignore[arg-type]
        assert _shape(got) == _shape(want), (step, principal, names)
        assert fast.audit.counts == slow.audit.counts and fast.audit.hidden == slow.audit.hidden, step
    strip = [{k: v for k, v in r.items() if k != "ts_ms"} for r in rows_fast]
    assert strip == [{k: v for k, v in r.items() if k != "ts_ms"} for r in rows_plan]
    if log_allowed:
        assert answered == 0  # every allowed decision is a row: plan writes them
    else:
        assert answered >= 20 and any(not r["allowed"] for r in rows_plan)


def test_granted_does_not_outlive_a_revoke() -> None:
    """bob's WRITE on ``orders`` is cached and answered by ``granted``; once the ACLs are reloaded without it the
    next Produce goes to :func:`authorize.plan`, which refuses it."""
    authorizer = StandardAuthorizer()
    authorizer.load([_write("User:bob", "orders")])
    access = authorize.Access(authorizer, HIDDEN, AuthzAudit())
    frame = _produce_frame(9, ["orders"], None)
    header = protocol.parse_request_header(frame)
    assert authorize.granted(access, "bob", "10.0.0.9", header, frame) is authorize.UNDECIDED  # nothing cached yet
    assert authorize.plan(access, _Who("bob"), header, frame, "10.0.0.9") is None  # type: ignore[arg-type]
    assert authorize.granted(access, "bob", "10.0.0.9", header, frame) is None
    assert authorize.granted(access, "bob", "10.0.0.8", header, frame) is authorize.UNDECIDED  # another host
    authorizer.load([])
    assert authorize.granted(access, "bob", "10.0.0.9", header, frame) is authorize.UNDECIDED
    refused = authorize.plan(access, _Who("bob"), header, frame, "10.0.0.9")  # type: ignore[arg-type]
    assert refused is not None and refused.forward is None and refused.local
    assert access.audit.counts[(ApiKey.Produce, int(ResourceType.TOPIC), int(AclOperation.WRITE), False)] == 1


def test_granted_never_forwards_a_hidden_topic_even_with_a_cached_allow() -> None:
    """A tenant whose ACLs allow every topic (``*``) names quotaflow's own store topic in a Produce. Even with an
    allowed WRITE on that name in the decision cache (any path that ever asked the authorizer about it), ``granted``
    leaves the request to :func:`authorize.plan`, which refuses the hidden topic whatever the ACLs say."""
    authorizer = StandardAuthorizer()
    authorizer.load([_write("User:bob", "*", op=AclOperation.ALL)])
    access = authorize.Access(authorizer, HIDDEN, AuthzAudit())
    warm = _produce_frame(9, ["bob-1"], None)
    warm_header = protocol.parse_request_header(warm)
    assert authorize.plan(access, _Who("bob"), warm_header, warm, "10.0.0.9") is None  # type: ignore[arg-type]
    assert authorize.granted(access, "bob", "10.0.0.9", warm_header, warm) is None  # the fast path is live
    for name in (STORE, "__quotaflow_anything"):
        assert access.decide(authorizer, "User:bob", "10.0.0.9", AclOperation.WRITE, ResourceType.TOPIC, name)
        frame = _produce_frame(9, ["bob-1", name], None)
        header = protocol.parse_request_header(frame)
        assert authorize.granted(access, "bob", "10.0.0.9", header, frame) is authorize.UNDECIDED
        refused = authorize.plan(access, _Who("bob"), header, frame, "10.0.0.9")  # type: ignore[arg-type]
        assert refused is not None and refused.forward is not None and name.encode() not in refused.forward
    assert access.audit.hidden[ApiKey.Produce] == 2
