"""Kafka's StandardAuthorizer decision, pinned by facts ported from Kafka's own tests (``StandardAuthorizerTest``,
``StandardAclTest``, ``BaseAuthorizerTest``/``AuthorizerTest``): same ACLs, same requests, same answers."""

from __future__ import annotations

import random

import pytest

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
    java_host_address,
    operation_from_name,
    pascal_name,
)
from quotaflow.core.authorizer import (
    AclIndex,
    StandardAuthorizer,
    authorizer_from_properties,
    operation_matches,
    parse_super_users,
)
from quotaflow.core.errors import CommandError

ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (AclOperation.ALL, AclOperation.READ, AclOperation.WRITE,
                                                      AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
                                                      AclOperation.DESCRIBE)
DESCRIBE_CONFIGS, ALTER_CONFIGS = AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
LOCAL = "127.0.0.1"


def acl(rt: ResourceType, name: str, pt: PatternType, principal: str, host: str, op: AclOperation,
        perm: AclPermissionType) -> AclBinding:
    return AclBinding(ResourcePattern(rt, name, pt), AccessControlEntry(principal, host, op, perm))


def authorizer(*bindings: AclBinding, supers: tuple[str, ...] = ("User:superman",),
               allow_if_none: bool = False) -> StandardAuthorizer:
    return StandardAuthorizer(supers, allow_if_none, bindings)


def check(a: StandardAuthorizer, user: str, actions: list[tuple[AclOperation, ResourceType, str]],
          host: str = LOCAL) -> list[bool]:
    return [a.authorize(f"User:{user}", host, op, rt, name) for op, rt, name in actions]


def foo_acl(op: AclOperation, perm: AclPermissionType) -> AclBinding:
    return acl(TOPIC, "foo_", PREFIXED, "User:bob", "*", op, perm)


def bar_acl(op: AclOperation, perm: AclPermissionType) -> AclBinding:
    return acl(GROUP, "bar", LITERAL, "User:*", "*", op, perm)


# -- StandardAuthorizerTest ---------------------------------------------------------------------------------------

def test_super_users_parse_like_kafka() -> None:
    assert parse_super_users(None) == frozenset()
    assert parse_super_users(" ") == frozenset()
    assert parse_super_users("User:bob;User:alice ") == {"User:bob", "User:alice"}
    assert parse_super_users(";  User:bob  ;  User:alice ") == {"User:bob", "User:alice"}
    with pytest.raises(CommandError, match="expected a string in format principalType:principalName but got bob"):
        parse_super_users("bob;:alice")


def test_default_result_and_configure() -> None:
    assert authorizer_from_properties({}) is None
    a = authorizer_from_properties({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                    "super.users": "User:alice;User:chris",
                                    "allow.everyone.if.no.acl.found": "true"})
    assert a is not None and a.super_users == {"User:alice", "User:chris"} and a.allow_everyone_if_no_acl_found
    b = authorizer_from_properties({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"},
                                   admin_principals=["admin", "User:root"])
    assert b is not None and not b.allow_everyone_if_no_acl_found
    assert b.super_users == {"User:admin", "User:root"}
    with pytest.raises(CommandError, match=r"authorizer\.class\.name"):
        authorizer_from_properties({"authorizer.class.name": "com.example.MyAuthorizer"})


def test_allow_everyone_if_no_acl_found_enabled() -> None:
    # an ACL on topic1 (for someone else) means topic1 has ACLs: the default does not apply there
    a = authorizer(acl(TOPIC, "topic1", LITERAL, "User:Alice", "*", READ, ALLOW),
                   supers=("User:alice", "User:chris"), allow_if_none=True)
    assert check(a, "Bob", [(READ, TOPIC, "topic1"), (READ, TOPIC, "topic2")]) == [False, True]
    assert a.explain("User:Bob", LOCAL, READ, TOPIC, "topic2").rule == "DefaultAllow"


def test_allow_everyone_if_no_acl_found_disabled() -> None:
    a = authorizer(acl(TOPIC, "topic1", LITERAL, "User:Alice", "*", READ, ALLOW),
                   supers=("User:alice", "User:chris"), allow_if_none=False)
    assert check(a, "Bob", [(READ, TOPIC, "topic1"), (READ, TOPIC, "topic2")]) == [False, False]


def test_find_result_implication() -> None:
    def result(binding: AclBinding, op: AclOperation) -> bool:
        return operation_matches(op, binding.entry)

    for op in (DESCRIBE, READ, WRITE, DELETE, ALTER):  # all imply DESCRIBE
        assert result(foo_acl(op, ALLOW), DESCRIBE)
    assert not result(foo_acl(CREATE, ALLOW), DESCRIBE)  # CREATE does not
    for op in (READ, WRITE, DELETE, ALTER):  # deny ACLs don't do implication
        assert not result(foo_acl(op, DENY), DESCRIBE)
    assert result(foo_acl(DESCRIBE, DENY), DESCRIBE)
    for op in (DESCRIBE_CONFIGS, ALTER_CONFIGS):
        assert result(foo_acl(op, ALLOW), DESCRIBE_CONFIGS)
    assert not result(foo_acl(ALTER_CONFIGS, DENY), DESCRIBE_CONFIGS)
    assert result(foo_acl(ALTER_CONFIGS, DENY), ALTER_CONFIGS)
    # and through the whole decision
    a = authorizer(foo_acl(READ, DENY), foo_acl(DESCRIBE, ALLOW))
    assert check(a, "bob", [(DESCRIBE, TOPIC, "foo_bar"), (READ, TOPIC, "foo_bar")]) == [True, False]


def test_find_result_principal_matching() -> None:
    a = authorizer(foo_acl(READ, ALLOW), bar_acl(READ, DENY))
    assert check(a, "bob", [(READ, TOPIC, "foo_bar")]) == [True]
    assert check(a, "alice", [(READ, TOPIC, "foo_bar")]) == [False]  # principal does not match
    assert check(a, "alice", [(READ, GROUP, "bar")]) == [False]  # User:* matches everyone
    assert a.explain("User:alice", LOCAL, READ, GROUP, "bar").acl == bar_acl(READ, DENY)


def test_simple_authorizations() -> None:
    a = authorizer(foo_acl(READ, ALLOW), foo_acl(WRITE, ALLOW), bar_acl(DESCRIBE_CONFIGS, ALLOW),
                   bar_acl(ALTER_CONFIGS, ALLOW))
    assert check(a, "bob", [(READ, TOPIC, "foo_")]) == [True]
    assert check(a, "fred", [(ALTER_CONFIGS, GROUP, "bar")]) == [True]


def test_deny_precedence_with_operation_all() -> None:
    a = authorizer(acl(TOPIC, "foo", LITERAL, "User:alice", "*", ALL, DENY),
                   acl(TOPIC, "foo", PREFIXED, "User:alice", "*", READ, ALLOW),
                   acl(TOPIC, "foo", LITERAL, "User:*", "*", ALL, DENY),
                   acl(TOPIC, "foo", PREFIXED, "User:*", "*", DESCRIBE, ALLOW))
    assert check(a, "alice", [(WRITE, TOPIC, "foo"), (READ, TOPIC, "foo"), (DESCRIBE, TOPIC, "foo"),
                              (READ, TOPIC, "foobar")]) == [False, False, False, True]
    assert check(a, "bob", [(DESCRIBE, TOPIC, "foo"), (READ, TOPIC, "foo"), (WRITE, TOPIC, "foo"),
                            (DESCRIBE, TOPIC, "foobaz"), (READ, TOPIC, "foobaz")]) == [False, False, False, True,
                                                                                        False]


def test_topic_acl_with_operation_all() -> None:
    a = authorizer(acl(TOPIC, "foo", LITERAL, "User:*", "*", ALL, ALLOW),
                   acl(TOPIC, "bar", PREFIXED, "User:alice", "*", ALL, ALLOW),
                   acl(TOPIC, "baz", LITERAL, "User:bob", "*", ALL, ALLOW))
    assert check(a, "alice", [(WRITE, TOPIC, "foo"), (DESCRIBE_CONFIGS, TOPIC, "bar"),
                              (DESCRIBE, TOPIC, "baz")]) == [True, True, False]
    assert check(a, "bob", [(WRITE, TOPIC, "foo"), (READ, TOPIC, "bar"), (DESCRIBE, TOPIC, "baz")]) == [True, False,
                                                                                                         True]
    assert check(a, "malory", [(DESCRIBE, TOPIC, "foo"), (WRITE, TOPIC, "bar"), (READ, TOPIC, "baz")]) == [
        True, False, False]


def test_host_address_acl_validation() -> None:
    host1, host2, local = "192.168.1.1", "192.168.1.2", "10.0.0.7"
    a = authorizer(acl(TOPIC, "foo", LITERAL, "User:alice", host1, READ, DENY),
                   acl(TOPIC, "foo", LITERAL, "User:alice", "*", READ, ALLOW),
                   acl(TOPIC, "bar", LITERAL, "User:bob", host2, READ, ALLOW),
                   acl(TOPIC, "bar", LITERAL, "User:*", local, DESCRIBE, ALLOW))
    actions = [(READ, TOPIC, "foo"), (READ, TOPIC, "bar"), (DESCRIBE, TOPIC, "bar")]
    assert check(a, "alice", actions, local) == [True, False, True]
    assert check(a, "alice", actions, host1) == [False, False, False]
    assert check(a, "alice", actions, host2) == [True, False, False]
    assert check(a, "bob", actions, local) == [False, False, True]
    assert check(a, "bob", actions, host1) == [False, False, False]
    assert check(a, "bob", actions, host2) == [False, True, True]


def _many_acls() -> list[AclBinding]:
    return [acl(TOPIC, "green2", LITERAL, "User:*", "*", READ, ALLOW),
            acl(TOPIC, "green", PREFIXED, "User:bob", "*", READ, ALLOW),
            acl(TOPIC, "betamax4", LITERAL, "User:bob", "*", READ, ALLOW),
            acl(TOPIC, "betamax", LITERAL, "User:bob", "*", READ, ALLOW),
            acl(TOPIC, "beta", PREFIXED, "User:*", "*", READ, ALLOW),
            acl(TOPIC, "alpha", PREFIXED, "User:*", "*", READ, ALLOW),
            acl(TOPIC, "alp", PREFIXED, "User:bob", "*", READ, DENY),
            acl(GROUP, "*", LITERAL, "User:bob", "*", WRITE, ALLOW),
            acl(GROUP, "wheel", LITERAL, "User:*", "*", WRITE, DENY)]


def test_authorization_with_many_acls() -> None:
    a = authorizer(*_many_acls())
    assert check(a, "bob", [(READ, TOPIC, "green1"), (WRITE, GROUP, "wheel")]) == [True, False]
    assert check(a, "bob", [(READ, TOPIC, "alpha"), (WRITE, GROUP, "arbitrary"), (READ, TOPIC, "ala")]) == [
        False, True, False]
    decision = a.explain("User:bob", LOCAL, READ, TOPIC, "alpha")
    assert decision.acl == acl(TOPIC, "alp", PREFIXED, "User:bob", "*", READ, DENY)


def test_prefix_acls() -> None:
    a = authorizer(acl(TOPIC, "fooa", PREFIXED, "User:alice", "*", ALL, ALLOW),
                   acl(TOPIC, "foobar", LITERAL, "User:bob", "*", ALL, ALLOW),
                   acl(TOPIC, "f", PREFIXED, "User:bob", "*", ALL, ALLOW))
    assert check(a, "bob", [(WRITE, TOPIC, "foobarr"), (READ, TOPIC, "goobar"), (READ, TOPIC, "fooa")]) == [
        True, False, True]
    assert check(a, "alice", [(DESCRIBE, TOPIC, "fooa"), (WRITE, TOPIC, "bar"), (READ, TOPIC, "baz")]) == [
        True, False, False]


def test_literal_name_that_is_a_prefix_does_not_match() -> None:
    # a LITERAL "foo" is no PREFIXED "foo": it applies to "foo" only
    a = authorizer(acl(TOPIC, "foo", LITERAL, "User:bob", "*", READ, ALLOW))
    assert check(a, "bob", [(READ, TOPIC, "foo"), (READ, TOPIC, "foobar"), (READ, TOPIC, "fo")]) == [True, False,
                                                                                                      False]


def test_wildcard_resource_and_super_users() -> None:
    a = authorizer(acl(TOPIC, "*", LITERAL, "User:*", "*", ALL, DENY),
                   acl(TOPIC, "t", LITERAL, "User:bob", "*", READ, ALLOW), supers=("User:superman",))
    assert check(a, "bob", [(READ, TOPIC, "t"), (READ, TOPIC, "other")]) == [False, False]
    assert check(a, "superman", [(READ, TOPIC, "t"), (ALTER, CLUSTER, "kafka-cluster")]) == [True, True]
    assert a.explain("User:superman", LOCAL, READ, TOPIC, "t").rule == "SuperUser"
    # only the exact principal string is a super user (Kafka compares KafkaPrincipal.toString())
    assert not a.authorize("superman", LOCAL, READ, TOPIC, "t")


def test_wildcard_allow_applies_to_every_name_of_its_type_only() -> None:
    a = authorizer(acl(GROUP, "*", LITERAL, "User:bob", "*", READ, ALLOW))
    assert check(a, "bob", [(READ, GROUP, "g1"), (READ, GROUP, "*"), (READ, TOPIC, "g1")]) == [True, True, False]


# -- authorizeByResourceType (BaseAuthorizerTest) ------------------------------------------------------------------

H1, H2 = "192.168.1.1", "192.168.1.2"


def by_type(a: StandardAuthorizer, user: str, host: str, op: AclOperation, rt: ResourceType) -> bool:
    return a.authorize_by_resource_type(f"User:{user}", host, op, rt)


def test_by_resource_type_multiple_add_and_remove() -> None:
    allow = acl(TOPIC, "sb1", LITERAL, "User:user1", H1, READ, ALLOW)
    deny = acl(TOPIC, "sb1", LITERAL, "User:user1", H1, READ, DENY)
    assert not by_type(authorizer(), "user1", H1, READ, TOPIC)
    assert by_type(authorizer(allow), "user1", H1, READ, TOPIC)
    assert not by_type(authorizer(allow, deny), "user1", H1, READ, TOPIC)


def test_by_resource_type_unrelated_deny_does_not_dominate_allow() -> None:
    a = authorizer(acl(TOPIC, "sb1", LITERAL, "User:user1", H1, READ, DENY),
                   acl(TOPIC, "sb1", LITERAL, "User:user2", H1, READ, DENY),
                   acl(TOPIC, "sb1", LITERAL, "User:user1", H2, WRITE, DENY),
                   acl(TOPIC, "sb1", LITERAL, "User:user2", H2, READ, DENY),
                   acl(TOPIC, "sb1", LITERAL, "User:user1", H2, READ, ALLOW),
                   acl(TOPIC, "sb2", LITERAL, "User:user1", H2, READ, DENY),
                   acl(GROUP, "s", PREFIXED, "User:user1", H2, READ, DENY))
    assert not by_type(a, "user1", H1, READ, TOPIC)
    assert not by_type(a, "user1", H1, READ, GROUP)
    assert not by_type(a, "user1", H1, READ, ResourceType.TRANSACTIONAL_ID)
    assert not by_type(a, "user1", H1, READ, CLUSTER)
    assert by_type(a, "user1", H2, READ, TOPIC)


def test_by_resource_type_prefixed_deny_dominates() -> None:
    def ace(name: str, perm: AclPermissionType) -> AclBinding:
        return acl(GROUP, name, PREFIXED, "User:user1", H1, READ, perm)

    acls = [ace("abcde", ALLOW)]
    assert by_type(authorizer(*acls), "user1", H1, READ, GROUP)
    acls.append(ace("abcd", DENY))
    assert not by_type(authorizer(*acls), "user1", H1, READ, GROUP)
    acls.append(ace("abc", ALLOW))
    assert by_type(authorizer(*acls), "user1", H1, READ, GROUP)
    acls.append(ace("a", DENY))
    assert not by_type(authorizer(*acls), "user1", H1, READ, GROUP)
    acls.append(ace("ab", ALLOW))
    assert not by_type(authorizer(*acls), "user1", H1, READ, GROUP)


def test_by_resource_type_wildcard_deny_dominates() -> None:
    def ace(name: str, pt: PatternType, perm: AclPermissionType) -> AclBinding:
        return acl(GROUP, name, pt, "User:user1", H1, WRITE, perm)

    acls = [ace("hello", PREFIXED, ALLOW)]
    assert by_type(authorizer(*acls), "user1", H1, WRITE, GROUP)
    acls.append(ace("*", LITERAL, DENY))
    assert not by_type(authorizer(*acls), "user1", H1, WRITE, GROUP)
    acls += [ace("*", LITERAL, ALLOW), ace("aloha", LITERAL, ALLOW)]
    assert not by_type(authorizer(*acls), "user1", H1, WRITE, GROUP)


def test_by_resource_type_all_operation_and_no_implication() -> None:
    deny_write = acl(TOPIC, "sb1", LITERAL, "User:user1", H1, WRITE, DENY)
    allow_all = acl(TOPIC, "sb1", LITERAL, "User:user1", H1, ALL, ALLOW)
    deny_all = acl(TOPIC, "sb1", LITERAL, "User:user1", H1, ALL, DENY)
    assert by_type(authorizer(deny_write, allow_all), "user1", H1, READ, TOPIC)
    assert not by_type(authorizer(deny_write, allow_all, deny_all), "user1", H1, READ, TOPIC)
    # unlike authorize, no implication: WRITE on a topic is no DESCRIBE on "some topic" here
    write = acl(TOPIC, "sb1", LITERAL, "User:user1", H1, WRITE, ALLOW)
    assert not by_type(authorizer(write), "user1", H1, DESCRIBE, TOPIC)


def test_by_resource_type_host_and_principal_wildcards() -> None:
    acls = [acl(TOPIC, "sb1", LITERAL, "User:user1", H1, READ, ALLOW)]
    assert by_type(authorizer(*acls), "user1", H1, READ, TOPIC)
    acls.append(acl(TOPIC, "sb1", LITERAL, "User:user1", "*", READ, DENY))
    assert not by_type(authorizer(*acls), "user1", H1, READ, TOPIC)
    acls.append(acl(TOPIC, "sb2", LITERAL, "User:*", H1, READ, ALLOW))
    assert by_type(authorizer(*acls), "user2", H1, READ, TOPIC)
    acls.append(acl(TOPIC, "sb2", LITERAL, "User:*", H1, READ, DENY))
    assert not by_type(authorizer(*acls), "user2", H1, READ, TOPIC)


def test_by_resource_type_super_user_and_default() -> None:
    deny_all = [acl(rt, "*", LITERAL, "User:*", "*", ALL, DENY) for rt in (TOPIC, CLUSTER, GROUP,
                                                                           ResourceType.TRANSACTIONAL_ID)]
    a = authorizer(*deny_all, supers=("User:superuser1",))
    assert by_type(a, "superuser1", "192.0.4.4", READ, TOPIC)
    assert not by_type(a, "user1", "192.0.4.4", READ, TOPIC)
    # no ACL at all and allow.everyone.if.no.acl.found: the decision on "hardcode" allows
    assert by_type(authorizer(allow_if_none=True), "user1", H1, READ, TOPIC)
    with pytest.raises(ValueError):
        authorizer().authorize_by_resource_type("User:a", H1, AclOperation.ANY, TOPIC)


# -- filters (ResourcePatternFilter / AclBindingFilter) -------------------------------------------------------------

def test_pattern_filters_any_and_match() -> None:
    literal = ResourcePattern(TOPIC, "foo", LITERAL)
    wildcard = ResourcePattern(TOPIC, "*", LITERAL)
    prefixed = ResourcePattern(TOPIC, "fo", PREFIXED)
    other = ResourcePattern(TOPIC, "bar", PREFIXED)
    match = ResourcePatternFilter(TOPIC, "foo", PatternType.MATCH)
    assert [match.matches(p) for p in (literal, wildcard, prefixed, other)] == [True, True, True, False]
    any_ = ResourcePatternFilter(TOPIC, "foo", PatternType.ANY)
    assert [any_.matches(p) for p in (literal, wildcard, prefixed)] == [True, False, False]
    assert ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY).matches(other)
    assert not ResourcePatternFilter(GROUP, None, PatternType.ANY).matches(literal)
    assert not ResourcePatternFilter(TOPIC, "fo", LITERAL).matches(prefixed)
    assert ResourcePatternFilter(TOPIC, "fo", PREFIXED).matches(prefixed)
    entry = AccessControlEntry("User:a", "*", READ, ALLOW)
    assert AccessControlEntryFilter().matches(entry)
    assert not AccessControlEntryFilter(principal="User:b").matches(entry)
    assert not AccessControlEntryFilter(operation=WRITE).matches(entry)
    assert AclBindingFilter(match, AccessControlEntryFilter(host="*")).matches(AclBinding(literal, entry))


def test_names_and_strings_as_kafka_prints_them() -> None:
    assert operation_from_name("IdempotentWrite") == AclOperation.IDEMPOTENT_WRITE
    assert operation_from_name("READ") == READ and operation_from_name("Read") == READ
    assert operation_from_name("nope") == AclOperation.UNKNOWN
    assert pascal_name(AclOperation.DESCRIBE_CONFIGS) == "DescribeConfigs"
    b = acl(TOPIC, "t", LITERAL, "User:alice", "*", READ, ALLOW)
    assert str(b.pattern) == "ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)"
    assert str(b.entry) == "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"


# -- the index agrees with a direct reading of Kafka's rule ------------------------------------------------------

def _reference(bindings: list[AclBinding], principal: str, host: str, op: AclOperation, rt: ResourceType,
               name: str, default: bool) -> bool:
    """Kafka's rule read literally: scan every ACL (no index)."""
    applicable = [b for b in bindings if b.pattern.resource_type == rt and (
        (b.pattern.pattern_type == LITERAL and b.pattern.name in (name, "*"))
        or (b.pattern.pattern_type == PREFIXED and name.startswith(b.pattern.name)))]
    matching = [b for b in applicable if b.entry.principal in (principal, "User:*")
                and b.entry.host in ("*", host) and operation_matches(op, b.entry)]
    if any(b.entry.permission_type == DENY for b in matching):
        return False
    if matching:
        return True
    return default if not applicable else False


def test_index_agrees_with_a_full_scan_on_random_acls() -> None:
    rng = random.Random(19)
    names = ["a", "ab", "abc", "abd", "b", "ba", "*", "x"]
    ops = [ALL, READ, WRITE, DESCRIBE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE]
    for round_ in range(30):
        bindings = [acl(rng.choice([TOPIC, GROUP]), rng.choice(names), rng.choice([LITERAL, PREFIXED]),
                        rng.choice(["User:u1", "User:u2", "User:*"]), rng.choice(["*", H1, H2]),
                        rng.choice(ops), rng.choice([ALLOW, DENY])) for _ in range(rng.randint(0, 25))]
        default = round_ % 2 == 0
        a = authorizer(*bindings, supers=(), allow_if_none=default)
        for _ in range(200):
            args = ("User:" + rng.choice(["u1", "u2", "u3"]), rng.choice([H1, H2]), rng.choice(ops[1:]),
                    rng.choice([TOPIC, GROUP]), rng.choice(["a", "ab", "abc", "abcd", "b", "bad", "x", "*", "q"]))
            assert a.authorize(*args) == _reference(bindings, *args, default=default), (bindings, args)


def test_load_swaps_the_whole_set() -> None:
    a = authorizer()
    assert not a.authorize("User:bob", LOCAL, READ, TOPIC, "t")
    a.load([acl(TOPIC, "t", LITERAL, "User:bob", "*", READ, ALLOW)], version=7)
    assert a.authorize("User:bob", LOCAL, READ, TOPIC, "t") and a.version == 7
    a.load(AclIndex())
    assert not a.authorize("User:bob", LOCAL, READ, TOPIC, "t") and len(a.index) == 0


# -- AuthorizerTest ----------------------------------------------------------------------------------------------

VALID_OPS = [op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY, AclOperation.ALL)]


def test_acl_inheritance() -> None:
    """ALLOW X implies exactly X and its implied operations; DENY X denies exactly X (ALL: everything)."""
    cluster = (CLUSTER, "kafka-cluster")
    implied_by_allow = {ALL: set(VALID_OPS), READ: {DESCRIBE}, WRITE: {DESCRIBE}, DELETE: {DESCRIBE},
                        ALTER: {DESCRIBE}, ALTER_CONFIGS: {DESCRIBE_CONFIGS}}
    for parent, implied in implied_by_allow.items():
        a = authorizer(acl(CLUSTER, "kafka-cluster", LITERAL, "User:alice", "*", parent, ALLOW))
        for op in VALID_OPS:
            assert a.authorize("User:alice", "192.168.3.1", op, *cluster) == (op in implied or op == parent), (
                parent, op)
    for parent, denied in {ALL: set(VALID_OPS), DESCRIBE: set(), DESCRIBE_CONFIGS: set()}.items():
        a = authorizer(acl(CLUSTER, "kafka-cluster", LITERAL, "User:alice", "*", parent, DENY),
                       acl(CLUSTER, "kafka-cluster", LITERAL, "User:alice", "*", ALL, ALLOW))
        for op in VALID_OPS:
            assert a.authorize("User:alice", "192.168.3.1", op, *cluster) == (op not in denied and op != parent), (
                parent, op)


def test_topic_acl() -> None:
    h1, h2 = "192.168.1.1", "192.168.1.2"
    a = authorizer(acl(TOPIC, "t", LITERAL, "User:alice", h1, READ, ALLOW),
                   acl(TOPIC, "t", LITERAL, "User:alice", h2, READ, ALLOW),
                   acl(TOPIC, "t", LITERAL, "User:alice", h1, READ, DENY),
                   acl(TOPIC, "t", LITERAL, "User:alice", h1, WRITE, ALLOW),
                   acl(TOPIC, "t", LITERAL, "User:alice", "*", DESCRIBE, ALLOW),
                   acl(TOPIC, "t", LITERAL, "User:rob", "*", READ, ALLOW),
                   acl(TOPIC, "t", LITERAL, "User:batman", "*", WRITE, ALLOW))
    assert check(a, "alice", [(READ, TOPIC, "t")], h2) == [True]
    assert check(a, "alice", [(READ, TOPIC, "t")], h1) == [False]  # the deny on host1
    assert check(a, "alice", [(WRITE, TOPIC, "t")], h1) == [True]
    assert check(a, "alice", [(WRITE, TOPIC, "t")], h2) == [False]
    assert check(a, "alice", [(DESCRIBE, TOPIC, "t")], h1) == [True]
    assert check(a, "alice", [(DESCRIBE, TOPIC, "t")], h2) == [True]
    assert check(a, "alice", [(ALTER, TOPIC, "t")], h1) == check(a, "alice", [(ALTER, TOPIC, "t")], h2) == [False]
    assert check(a, "rob", [(DESCRIBE, TOPIC, "t"), (READ, TOPIC, "t")], h1) == [True, True]
    assert check(a, "batman", [(DESCRIBE, TOPIC, "t"), (WRITE, TOPIC, "t")], h1) == [True, True]


def test_empty_resource_name_and_wildcard() -> None:
    assert not authorizer().authorize("User:alice", LOCAL, READ, GROUP, "")
    a = authorizer(acl(GROUP, "*", LITERAL, "User:alice", "*", READ, ALLOW))
    assert a.authorize("User:alice", LOCAL, READ, GROUP, "")


def test_wildcard_acls() -> None:
    h1 = "192.168.3.1"
    read_all = acl(TOPIC, "*", LITERAL, "User:alice", h1, READ, ALLOW)
    assert check(authorizer(read_all), "alice", [(READ, TOPIC, "t")], h1) == [True]
    write_t = acl(TOPIC, "t", LITERAL, "User:alice", h1, WRITE, ALLOW)
    deny_write_all = acl(TOPIC, "*", LITERAL, "User:alice", h1, WRITE, DENY)
    assert check(authorizer(read_all, write_t, deny_write_all), "alice", [(WRITE, TOPIC, "t")], h1) == [False]


def test_single_character_resource_acls() -> None:
    a = authorizer(acl(TOPIC, "f", LITERAL, "User:alice", "*", READ, ALLOW))
    assert check(a, "alice", [(READ, TOPIC, "f"), (READ, TOPIC, "foo")]) == [True, False]
    a = authorizer(acl(TOPIC, "f", LITERAL, "User:alice", "*", READ, ALLOW),
                   acl(TOPIC, "_", PREFIXED, "User:alice", "*", READ, ALLOW))
    assert check(a, "alice", [(READ, TOPIC, "_foo"), (READ, TOPIC, "_"), (READ, TOPIC, "foo_")]) == [True, True,
                                                                                                      False]


def test_authorize_with_prefixed_resource_among_many_denies() -> None:
    denies = [acl(TOPIC, name, pt, "User:alice", "*", READ, DENY) for name, pt in (
        ("a_other", LITERAL), ("a_other", PREFIXED), ("foo-1", PREFIXED), ("foo-2-zzz", PREFIXED),
        ("fooo-3", PREFIXED), ("fo-4", PREFIXED), ("fop-5", PREFIXED), ("fon-", PREFIXED), ("z_other", PREFIXED),
        ("z_other", LITERAL))]
    a = authorizer(*denies, acl(TOPIC, "foo", PREFIXED, "User:alice", "*", READ, ALLOW))
    assert a.authorize("User:alice", LOCAL, READ, TOPIC, "foo-x")


def test_client_addresses_are_compared_as_java_writes_them() -> None:
    assert java_host_address("10.0.0.1") == "10.0.0.1"
    assert java_host_address("::1") == "0:0:0:0:0:0:0:1"
    assert java_host_address("fe80::1%eth0") == "fe80:0:0:0:0:0:0:1%eth0"
    assert java_host_address("::ffff:10.1.2.3") == "10.1.2.3"
    a = authorizer(acl(TOPIC, "t", LITERAL, "User:alice", "0:0:0:0:0:0:0:1", READ, ALLOW),
                   acl(TOPIC, "t", LITERAL, "User:bob", "::1", READ, ALLOW))
    # Kafka matches the ACL written in Java's form; one written "::1" never matches a client (getHostAddress)
    assert check(a, "alice", [(READ, TOPIC, "t")], "::1") == [True]
    assert check(a, "bob", [(READ, TOPIC, "t")], "::1") == [False]
