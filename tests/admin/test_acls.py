"""ACL administration over a real SQLite store, pinned by the facts of Kafka's ``AclControlManagerTest`` (validation
messages, create idempotence, delete per filter with dedupe) and ``AclApis`` (CLUSTER name, empty name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from quotaflow.admin.acls import MAX_RECORDS_PER_USER_OP, AclAdmin, explain, resolve
from quotaflow.core.acl import (
    ANY_FILTER,
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
    binding_filter,
)
from quotaflow.core.errors import SUCCESS
from quotaflow.store.sqlite import SqliteStore

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def binding(rt: ResourceType, name: str, pt: PatternType, principal: str = "User:*", host: str = "*",
            op: AclOperation = AclOperation.ALTER, perm: AclPermissionType = ALLOW) -> AclBinding:
    return AclBinding(ResourcePattern(rt, name, pt), AccessControlEntry(principal, host, op, perm))


# StandardAclTest.TEST_ACLS-like: a literal topic, a prefixed group, a literal topic for another principal
TEST_ACLS = [
    binding(TOPIC, "foo", LITERAL, "User:bob", "*", AclOperation.READ, ALLOW),
    binding(GROUP, "mygroup", PREFIXED, "User:*", "*", AclOperation.READ, DENY),
    binding(TOPIC, "bar", LITERAL, "User:alice", "127.0.0.1", AclOperation.WRITE, ALLOW),
]


@pytest.fixture
def admin(tmp_path: Path) -> AclAdmin:
    return AclAdmin(SqliteStore(tmp_path / "acl.db"))


@pytest.mark.parametrize(("bad", "message"), [
    (binding(TOPIC, "*", PatternType.UNKNOWN), "Invalid patternType UNKNOWN"),
    (binding(TOPIC, "*", PatternType.MATCH), "Invalid patternType MATCH"),
    (binding(ResourceType.UNKNOWN, "*", LITERAL), "Invalid resourceType UNKNOWN"),
    (binding(ResourceType.ANY, "*", LITERAL), "Invalid resourceType ANY"),
    (binding(TOPIC, "*", LITERAL, op=AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
    (binding(TOPIC, "*", LITERAL, op=AclOperation.ANY), "Invalid operation ANY"),
    (binding(TOPIC, "*", LITERAL, perm=AclPermissionType.UNKNOWN), "Invalid permissionType UNKNOWN"),
    (binding(TOPIC, "", LITERAL), "Invalid empty resource name"),
    # a broker's AclApis checks run before the controller's: an empty name wins over a bad type or operation
    (binding(ResourceType.ANY, "", LITERAL), "Invalid empty resource name"),
    (binding(TOPIC, "", LITERAL, op=AclOperation.UNKNOWN), "Invalid empty resource name"),
    (binding(ResourceType.CLUSTER, "", LITERAL), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (binding(ResourceType.CLUSTER, "my-cluster", LITERAL),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (binding(TOPIC, "t", LITERAL, principal="alice"), "Could not parse principal from `alice`"),
])
def test_validate_new_acl(admin: AclAdmin, bad: AclBinding, message: str) -> None:
    [result] = admin.create([bad])
    assert result.code == 42 and result.message is not None and result.message.startswith(message)
    assert admin.describe(ANY_FILTER) == []


def test_create_acl_delete_acl(admin: AclAdmin) -> None:
    bad = binding(TOPIC, "*", PatternType.UNKNOWN)
    results = admin.create([*TEST_ACLS, bad])
    assert results[:3] == [SUCCESS] * 3 and results[3].message == "Invalid patternType UNKNOWN"
    assert set(admin.describe(ANY_FILTER)) == set(TEST_ACLS)
    deleted = admin.delete([AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, None, LITERAL)),
                            AclBindingFilter(ResourcePatternFilter(ResourceType.UNKNOWN, None, LITERAL))])
    assert len(deleted) == 2
    assert set(deleted[0].deleted) == {TEST_ACLS[0], TEST_ACLS[2]} and deleted[0].error == SUCCESS
    assert deleted[1].error.code == 42 and deleted[1].error.message == "Unknown patternFilter."
    assert admin.describe(ANY_FILTER) == [TEST_ACLS[1]]


def test_validate_filter(admin: AclAdmin) -> None:
    unknown_entry = AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, "*", PatternType.MATCH),
                                     AccessControlEntryFilter("User:*", "*", AclOperation.ANY,
                                                              AclPermissionType.UNKNOWN))
    [result] = admin.delete([unknown_entry])
    assert result.error.message == "Unknown entryFilter."
    [ok] = admin.delete([AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, "*", LITERAL),
                                          AccessControlEntryFilter("User:*", "*"))])
    assert ok.error == SUCCESS and ok.deleted == ()


def test_create_is_idempotent_and_delete_dedupes(admin: AclAdmin) -> None:
    acl = binding(TOPIC, "topic-1", LITERAL, "User:user", "10.0.0.1", AclOperation.ALL, ALLOW)
    assert admin.create([acl]) == [SUCCESS]
    version = admin.store.acl_version()
    assert admin.create([acl, acl]) == [SUCCESS, SUCCESS]
    assert admin.store.acl_version() == version  # nothing changed
    both = admin.delete([ANY_FILTER, binding_filter(acl)])
    assert [r.deleted for r in both] == [(acl,), (acl,)]  # both filters report it, it is removed once
    assert admin.describe(ANY_FILTER) == [] and admin.store.acl_version() == version + 1


def test_describe_with_match_and_any_filters(admin: AclAdmin) -> None:
    acls = [binding(TOPIC, "foo", LITERAL), binding(TOPIC, "*", LITERAL), binding(TOPIC, "fo", PREFIXED),
            binding(TOPIC, "foobar", PREFIXED), binding(GROUP, "foo", LITERAL)]
    admin.create(acls)
    match = admin.describe(AclBindingFilter(ResourcePatternFilter(TOPIC, "foo", PatternType.MATCH)))
    assert set(match) == set(acls[:3])
    exact = admin.describe(AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, "foo", PatternType.ANY)))
    assert set(exact) == {acls[0], acls[4]}


def test_delete_is_bounded_per_request(admin: AclAdmin) -> None:
    admin.create([binding(TOPIC, f"t{i}", LITERAL) for i in range(MAX_RECORDS_PER_USER_OP)])
    admin.create([binding(GROUP, "one-more", LITERAL)])
    [result] = admin.delete([ANY_FILTER])
    assert result.error.code == -1 and result.deleted == ()
    assert len(admin.describe(ANY_FILTER)) == MAX_RECORDS_PER_USER_OP + 1  # nothing removed


def test_create_is_bounded_per_request(admin: AclAdmin) -> None:
    many = [binding(TOPIC, f"t{i}", LITERAL) for i in range(MAX_RECORDS_PER_USER_OP + 1)]
    assert {r.code for r in admin.create(many)} == {-1}
    assert admin.describe(ANY_FILTER) == []  # nothing stored
    assert admin.create(many[:-1]) == [SUCCESS] * MAX_RECORDS_PER_USER_OP
    assert admin.create(many) == [SUCCESS] * len(many)  # only one of them is new now


def test_resolve_names_the_deciding_acl(admin: AclAdmin) -> None:
    deny = binding(TOPIC, "pay", PREFIXED, "User:bob", "*", AclOperation.READ, DENY)
    allow = binding(TOPIC, "*", LITERAL, "User:*", "*", AclOperation.ALL, ALLOW)
    admin.create([deny, allow])
    d = resolve(admin.store, "User:bob", "10.1.1.1", AclOperation.READ, TOPIC, "payments")
    assert not d.allowed and d.acl == deny
    assert "DENIED by ResourcePattern(resourceType=TOPIC, name=pay, patternType=PREFIXED)" in explain(
        d, "User:bob", AclOperation.READ, TOPIC, "payments")
    d = resolve(admin.store, "User:bob", "10.1.1.1", AclOperation.DESCRIBE, TOPIC, "payments")
    assert d.allowed and d.acl == allow  # DENY READ does not deny DESCRIBE; ALL allows it
    d = resolve(admin.store, "User:bob", "10.1.1.1", AclOperation.READ, GROUP, "g", super_users=["User:bob"])
    assert d.allowed and d.rule == "SuperUser"
    d = resolve(admin.store, "User:eve", "10.1.1.1", AclOperation.READ, GROUP, "g")
    assert not d.allowed and "allow.everyone.if.no.acl.found=false" in explain(d, "User:eve", AclOperation.READ,
                                                                               GROUP, "g")


def test_acls_filter(admin: AclAdmin) -> None:
    """AuthorizerTest.testAclsFilter: describe and delete filters; every filter is matched before anything is
    deleted, so a binding two filters match is reported by both."""
    r1 = ResourcePattern(TOPIC, "foo-1", LITERAL)
    r2 = ResourcePattern(TOPIC, "bar-2", LITERAL)
    prefixed = ResourcePattern(TOPIC, "bar-", PREFIXED)
    acl1 = AclBinding(r1, AccessControlEntry("User:alice", "*", AclOperation.READ, ALLOW))
    acl2 = AclBinding(r1, AccessControlEntry("User:alice", "192.168.0.1", AclOperation.WRITE, ALLOW))
    acl3 = AclBinding(r2, AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE, ALLOW))
    acl4 = AclBinding(prefixed, AccessControlEntry("User:*", "*", AclOperation.READ, ALLOW))
    assert admin.create([acl1, acl2, acl3, acl4]) == [SUCCESS] * 4

    def pattern_filter(p: ResourcePattern) -> AclBindingFilter:
        return AclBindingFilter(ResourcePatternFilter(p.resource_type, p.name, p.pattern_type))

    assert set(admin.describe(ANY_FILTER)) == {acl1, acl2, acl3, acl4}
    assert set(admin.describe(pattern_filter(r1))) == {acl1, acl2}
    assert set(admin.describe(pattern_filter(prefixed))) == {acl4}
    matching = AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, r2.name, PatternType.MATCH))
    assert set(admin.describe(matching)) == {acl3, acl4}
    results = admin.delete([matching, binding_filter(acl1), pattern_filter(r2),
                            AclBindingFilter(ResourcePatternFilter(TOPIC, "baz", PatternType.ANY))])
    assert all(r.error == SUCCESS for r in results)
    assert [set(r.deleted) for r in results] == [{acl3, acl4}, {acl1}, {acl3}, set()]
    assert admin.describe(ANY_FILTER) == [acl2]
