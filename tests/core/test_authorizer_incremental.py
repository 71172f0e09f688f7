"""The ACL index made from the previous one and a change: the same decisions as an index built from scratch after
any sequence of additions and removals, and the work per change is the change (before, every ACL change re-indexed
every ACL)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaflow.core.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from quotaflow.core.authorizer import AclIndex, StandardAuthorizer

TYPES = [ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER]
NAMES = ["foo", "foo-1", "fo", "f", "*", "bar", "kafka-cluster"]
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
HOSTS = ["*", "127.0.0.1", "10.0.0.1"]
OPS = [AclOperation.ALL, AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALTER_CONFIGS,
       AclOperation.DESCRIBE_CONFIGS]
bindings = st.builds(
    lambda rt, name, pt, who, host, op, perm: AclBinding(ResourcePattern(rt, name, pt),
                                                         AccessControlEntry(who, host, op, perm)),
    st.sampled_from(TYPES), st.sampled_from(NAMES), st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(PRINCIPALS), st.sampled_from(HOSTS), st.sampled_from(OPS),
    st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY]),
)
# each step: bindings added, bindings removed (one CreateAcls / DeleteAcls, or a poll that saw several)
steps = st.lists(st.tuples(st.lists(bindings, max_size=4), st.lists(bindings, max_size=4)), max_size=25)


def decisions(index: AclIndex) -> list[object]:
    a = StandardAuthorizer(("User:super",), False)
    a.load(index)
    out: list[object] = [len(index), index.bindings]
    for who, host, op, rt, name in itertools.product(["User:alice", "User:bob", "User:carol"],
                                                     ["127.0.0.1", "10.0.0.2"], OPS, TYPES,
                                                     ["foo", "foo-12", "fo", "bar", "baz", "kafka-cluster"]):
        d = a.explain(who, host, op, rt, name)
        out.append((d.allowed, d.rule, a.authorize(who, host, op, rt, name)))
        if d.acl is not None:  # the deciding ACL is one that is held and names a pattern applying to the resource
            assert d.acl in index.bindings
    for who, op, rt in itertools.product(["User:alice", "User:carol"], OPS[1:], TYPES):
        out.append(a.authorize_by_resource_type(who, "127.0.0.1", op, rt))
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(bindings, max_size=12), steps)
def test_updated_index_decides_as_a_full_rebuild(start: list[AclBinding],
                                                 changes: list[tuple[list[AclBinding], list[AclBinding]]]) -> None:
    index = AclIndex(start)
    held = set(start)
    for added, removed in changes:
        index = index.updated(added, removed)
        held = (held - set(removed)) | set(added)
        assert index.bindings == held
    assert decisions(index) == decisions(AclIndex(held))


@settings(max_examples=100, deadline=None)
@given(st.lists(bindings, max_size=12), st.lists(bindings, max_size=12))
def test_load_of_the_stores_set_lands_on_that_set(before: list[AclBinding], after: list[AclBinding]) -> None:
    """``load`` of the store's whole set (what the gateway's poll reads) diffs against the index it holds."""
    a = StandardAuthorizer(("User:super",), False, before)
    a.load(frozenset(after), 2)
    assert decisions(a.index) == decisions(AclIndex(after))


def topic_acl(i: int, who: str = "User:alice") -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, f"topic-{i}", PatternType.LITERAL),
                      AccessControlEntry(who, "*", AclOperation.WRITE, AclPermissionType.ALLOW))


def test_one_acl_change_indexes_one_acl_not_all() -> None:
    """With 20,000 ACLs held, loading the store's set after one CreateAcls (or one DeleteAcls) indexes one binding."""
    held = frozenset(topic_acl(i) for i in range(20_000))
    a = StandardAuthorizer((), False)
    a.load(held, 1)
    assert a.index.indexed == 20_000
    a.load(held | {topic_acl(20_000, "User:bob")}, 2)
    assert a.index.indexed == 1
    assert a.authorize("User:bob", "127.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "topic-20000")
    a.load(held - {topic_acl(5)}, 3)
    assert a.index.indexed == 2  # bob's removed, topic-5's removed
    assert not a.authorize("User:alice", "127.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "topic-5")
    assert a.authorize("User:alice", "127.0.0.1", AclOperation.WRITE, ResourceType.TOPIC, "topic-6")
    assert len(a.index) == 19_999


@settings(max_examples=150, deadline=None)
@given(st.lists(bindings, max_size=12), steps)
def test_updates_read_from_the_store_decide_as_a_full_rebuild(
        start: list[AclBinding], changes: list[tuple[list[AclBinding], list[AclBinding]]]) -> None:
    """What the gateway's ACL poll does with the store's delta (``StandardAuthorizer.update``, one per poll, from
    the version held to the delta's last): the same decisions as an authorizer loaded with the whole set."""
    a = StandardAuthorizer(("User:super",), False)
    a.load(frozenset(start), 1)
    held = set(start)
    for version, (added, removed) in enumerate(changes, start=2):
        net_removed = set(removed) - set(added)
        assert a.update(set(added), net_removed, version - 1, version)
        held = (held - net_removed) | set(added)
        assert a.version == version and a.index.bindings == held
    assert decisions(a.index) == decisions(AclIndex(held))


def test_an_update_from_a_version_no_longer_held_changes_nothing() -> None:
    """Two loaders raced (the poll, a CreateAcls through this gateway): a delta read from an older version than the
    one now held is refused, so the caller reads it again from there and nothing is applied twice or lost."""
    a = StandardAuthorizer((), False)
    a.load(frozenset({topic_acl(1)}), 5)
    generation = a.generation
    assert not a.update({topic_acl(2)}, set(), 4, 6)
    assert a.version == 5 and a.generation == generation and a.index.bindings == {topic_acl(1)}
    assert a.update({topic_acl(2)}, {topic_acl(1)}, 5, 7)
    assert a.version == 7 and a.generation == generation + 1 and a.index.bindings == {topic_acl(2)}
    assert a.index.indexed == 2


def test_one_change_copies_only_the_shards_it_touches() -> None:
    """At 20,000 ACLs, the index after one change shares every map shard but the changed binding's with the one
    before (before: the set of bindings and the name maps were copied whole per change, one C call each that held
    the GIL for milliseconds at 100,000 ACLs)."""
    from quotaflow.core.authorizer import SHARDS

    before = AclIndex(topic_acl(i) for i in range(20_000))
    after = before.updated([topic_acl(20_000, "User:bob")], [topic_acl(3)])
    assert len(after) == 20_000 and topic_acl(20_000, "User:bob") in after and topic_acl(3) not in after
    assert after.bindings == (before.bindings - {topic_acl(3)}) | {topic_acl(20_000, "User:bob")}

    def shared(a: object, b: object) -> int:
        return sum(x is y for x, y in zip(a._maps, b._maps, strict=True))  # type: ignore[attr-defined]

    assert shared(before._held, after._held) >= SHARDS - 2
    old, new = before._types[ResourceType.TOPIC], after._types[ResourceType.TOPIC]
    assert shared(old.literal, new.literal) >= SHARDS - 2
    assert shared(old.by_principal, new.by_principal) >= SHARDS - 2


many_bindings = st.builds(
    lambda rt, i, pt, who, op, perm: AclBinding(ResourcePattern(rt, f"t{i}" if i else "*", pt),
                                                AccessControlEntry(f"User:u{who}", "*", op, perm)),
    st.sampled_from(TYPES), st.integers(0, 400), st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.integers(0, 150), st.sampled_from(OPS), st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY]),
)


def bucket(entries: Mapping[str, Iterable[object]] | None) -> dict[str, frozenset[object]] | None:
    """A pattern's entries per principal, order aside (the order within one principal decides nothing)."""
    return None if entries is None else {who: frozenset(es) for who, es in entries.items()}


def contents(index: AclIndex) -> dict[object, object]:
    """What an index holds, map by map (the sharded maps read back as plain dicts)."""
    out: dict[object, object] = {"held": set(index._held)}
    for rt, t in index._types.items():
        if not t:
            continue  # a type whose every binding was removed: an empty table or none, the same decisions
        out[rt] = ({k: bucket(t.literal.get(k)) for k in t.literal}, {k: bucket(t.prefixed.get(k)) for k in t.prefixed},
                   {k: t.by_principal.get(k) for k in t.by_principal}, bucket(t.wildcard), t.prefix_lengths)
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(many_bindings, max_size=200), st.lists(st.tuples(st.lists(many_bindings, max_size=3),
                                                                st.lists(many_bindings, max_size=3)), max_size=30))
def test_sharded_index_holds_what_a_full_rebuild_holds(
        start: list[AclBinding], changes: list[tuple[list[AclBinding], list[AclBinding]]]) -> None:
    """Hundreds of bindings over many names and principals (every shard in use): after each change the sharded
    maps hold exactly what an index built from scratch holds, and the new index shares with the one before every
    shard of its set of bindings but the (at most) one per binding changed; removals of absent bindings and
    additions of held ones change nothing."""
    from quotaflow.core.authorizer import SHARDS

    index = AclIndex(start)
    held = set(start)
    for added, removed in changes:
        before = index
        index = index.updated(added, removed)
        changed = (held - set(removed)) | set(added)
        assert contents(index) == contents(AclIndex(changed))
        assert len(index) == len(changed) and all(b in index for b in changed)
        copied = sum(x is not y for x, y in zip(before._held._maps, index._held._maps, strict=True))
        assert copied <= min(SHARDS, len(held ^ changed))
        held = changed
    assert decisions(index) == decisions(AclIndex(held))
