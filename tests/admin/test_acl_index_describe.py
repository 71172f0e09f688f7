"""DescribeAcls / DeleteAcls answered from an ACL index (the gateway's) give exactly the answers of the store-backed
brute force (:class:`AclAdmin` reading the whole set and matching every binding), over random bindings and filters:
ANY / MATCH / LITERAL / PREFIXED pattern filters, wildcard and prefix names, principal / host / operation /
permission filters, an index built at once and one kept by changes. And the index answers without reading the
store's whole set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotaflow.admin.acls import MAX_RECORDS_PER_USER_OP, SORT_RUN, AclAdmin, sort_bindings
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
from quotaflow.core.authorizer import AclIndex
from quotaflow.store.base import AclSnapshot
from quotaflow.store.sqlite import SqliteStore

# a few short names over a small alphabet, so that literal names, prefixes of each other and "*" collide often
NAMES = st.text(alphabet="ab*", min_size=1, max_size=3)
TYPES = st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID])
PRINCIPALS = st.sampled_from(["User:a", "User:b", "User:*"])
HOSTS = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])
OPERATIONS = st.sampled_from([AclOperation.READ, AclOperation.WRITE, AclOperation.ALL, AclOperation.DESCRIBE])
PERMISSIONS = st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY])

bindings_st = st.builds(
    lambda rt, name, pt, principal, host, op, perm: AclBinding(ResourcePattern(rt, name, pt),
                                                               AccessControlEntry(principal, host, op, perm)),
    TYPES, NAMES, st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]), PRINCIPALS, HOSTS, OPERATIONS,
    PERMISSIONS)

filters_st = st.builds(
    lambda rt, name, pt, principal, host, op, perm: AclBindingFilter(
        ResourcePatternFilter(rt, name, pt), AccessControlEntryFilter(principal, host, op, perm)),
    st.sampled_from([ResourceType.ANY, ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID,
                     ResourceType.CLUSTER]),
    st.none() | NAMES,
    st.sampled_from([PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED]),
    # any entry most of the time, so that the pattern part decides often
    st.sampled_from([None, None, None, "User:a", "User:b", "User:*", "User:nobody"]),
    st.sampled_from([None, None, None, "*", "10.0.0.1"]),
    st.sampled_from([AclOperation.ANY, AclOperation.ANY, AclOperation.ANY, AclOperation.READ, AclOperation.ALL]),
    st.sampled_from([AclPermissionType.ANY, AclPermissionType.ANY, AclPermissionType.DENY]))

# every pattern filter over the names the bindings are made of (and longer ones), with any entry
GRID_NAMES = (None, "*", "a", "b", "a*", "*a", "ab", "ba", "aa", "ab*", "aab", "abab", "b*a")
GRID = [AclBindingFilter(ResourcePatternFilter(rt, name, pt))
        for rt in (ResourceType.ANY, ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER)
        for name in GRID_NAMES
        for pt in (PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED)]


class CountingStore(SqliteStore):
    """A SQLite store that counts reads of its whole ACL set."""

    whole_reads = 0

    def acls(self) -> AclSnapshot:
        self.whole_reads += 1
        return super().acls()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CountingStore]:
    with CountingStore(tmp_path / "acls.db") as s:
        yield s


def _replace(store: SqliteStore, bindings: set[AclBinding]) -> None:
    store.remove_acls(list(store.acls().bindings))
    store.add_acls(sorted(bindings, key=AclBinding.sort_key))


def _indexes(bindings: set[AclBinding], churn: set[AclBinding]) -> list[AclIndex]:
    """The set indexed at once, and reached by changes (``churn`` held first and removed, the rest added)."""
    half = sorted(bindings, key=AclBinding.sort_key)[::2]
    kept = AclIndex([*half, *churn]).updated(bindings - set(half), churn - bindings)
    assert kept.bindings == bindings
    return [AclIndex(bindings), kept]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sets(bindings_st, max_size=40), st.sets(bindings_st, max_size=8), st.lists(filters_st, min_size=1,
                                                                                     max_size=6))
def test_describe_from_the_index_is_the_brute_force_answer(store: CountingStore, bindings: set[AclBinding],
                                                          churn: set[AclBinding],
                                                          filters: list[AclBindingFilter]) -> None:
    _replace(store, bindings)
    admin = AclAdmin(store)
    for index in _indexes(bindings, churn):
        for f in filters:
            expected = admin.describe(f)
            before = store.whole_reads
            assert admin.describe(f, index) == expected, f
            assert store.whole_reads == before  # answered without the store's whole set
            assert expected == sorted((b for b in bindings if f.matches(b)), key=AclBinding.sort_key)
        for f in GRID:
            assert sort_bindings(index.matching(f)) == sort_bindings(b for b in bindings if f.matches(b)), f


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sets(bindings_st, max_size=40), st.lists(filters_st | st.just(AclBindingFilter(
    ResourcePatternFilter(ResourceType.TOPIC, "a", PatternType.UNKNOWN))), min_size=1, max_size=4))
def test_delete_from_the_index_is_the_brute_force_answer(tmp_path_factory: pytest.TempPathFactory,
                                                        bindings: set[AclBinding],
                                                        filters: list[AclBindingFilter]) -> None:
    tmp = tmp_path_factory.mktemp("delete")
    with CountingStore(tmp / "brute.db") as brute, CountingStore(tmp / "indexed.db") as indexed:
        _replace(brute, bindings)
        _replace(indexed, bindings)
        expected = AclAdmin(brute).delete(filters)
        reads = indexed.whole_reads
        assert AclAdmin(indexed).delete(filters, AclIndex(bindings)) == expected
        assert indexed.whole_reads == reads
        assert indexed.acls().bindings == brute.acls().bindings


def _topic(i: int) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, f"t-{i}", PatternType.LITERAL),
                      AccessControlEntry(f"User:u{i % 7}", "*", AclOperation.READ, AclPermissionType.ALLOW))


def test_delete_past_kafkas_bound_fails_that_filter_only(store: CountingStore) -> None:
    """Over the index as over the store: the filter that takes the request past 10,000 records fails
    (UNKNOWN_SERVER_ERROR, no message), the others stand, and only theirs are removed."""
    every = {_topic(i) for i in range(MAX_RECORDS_PER_USER_OP + 5)}
    store.add_acls(sorted(every, key=AclBinding.sort_key))
    one = AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC, "t-3", PatternType.LITERAL))
    results = AclAdmin(store).delete([one, AclBindingFilter()], AclIndex(every))
    assert [(r.error.code, r.error.message, len(r.deleted)) for r in results] == [(0, None, 1), (-1, None, 0)]
    assert store.acls().bindings == every - {_topic(3)}


def test_a_long_answer_is_sorted_in_runs_to_the_same_order() -> None:
    bindings = [_topic(i) for i in range(3 * SORT_RUN + 17)]
    assert sort_bindings(reversed(bindings)) == sorted(bindings, key=AclBinding.sort_key)


def test_a_filter_naming_a_resource_looks_at_its_patterns_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The work follows the answer: at 20,000 ACLs, a LITERAL / PREFIXED / MATCH / ANY-pattern filter naming a
    resource (or an unnamed one naming a principal) tests only the bindings of the patterns it names."""
    held = [_topic(i) for i in range(20_000)]
    held += [AclBinding(ResourcePattern(ResourceType.TOPIC, prefix, PatternType.PREFIXED),
                        AccessControlEntry("User:p", "*", AclOperation.WRITE, AclPermissionType.ALLOW))
             for prefix in ("t-", "t-1", "t-12", "x")]
    held.append(AclBinding(ResourcePattern(ResourceType.TOPIC, "*", PatternType.LITERAL),
                           AccessControlEntry("User:w", "*", AclOperation.READ, AclPermissionType.ALLOW)))
    index = AclIndex(held)
    tested: list[AclBinding] = []
    matches = AclBindingFilter.matches
    monkeypatch.setattr(AclBindingFilter, "matches", lambda self, b: tested.append(b) or matches(self, b))
    topic = ResourceType.TOPIC
    for f, answer in [
        (AclBindingFilter(ResourcePatternFilter(topic, "t-123", PatternType.LITERAL)), 1),
        (AclBindingFilter(ResourcePatternFilter(topic, "t-1", PatternType.PREFIXED)), 1),
        (AclBindingFilter(ResourcePatternFilter(topic, "t-1", PatternType.ANY)), 2),
        (AclBindingFilter(ResourcePatternFilter(topic, "t-123", PatternType.MATCH)), 5),  # t-123, *, t-, t-1, t-12
        (AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, "t-123", PatternType.MATCH)), 5),
        (AclBindingFilter(entry_filter=AccessControlEntryFilter(principal="User:p")), 4),
    ]:
        tested.clear()
        assert len(list(index.matching(f))) == answer, f
        assert len(tested) == answer, f
    tested.clear()
    assert len(list(index.matching(AclBindingFilter()))) == len(held)  # an unnamed filter: a scan, as its answer
    assert len(tested) == len(held)
