"""DescribeClientQuotas filters (ClientQuotasImage.describe, ClientQuotasRequestTest) over in-memory entities."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import InvalidRequestError, KafkaError, UnsupportedVersionError
from quotaflow.core.filters import FilterComponent, MatchType, QuotaFilter
from worked_example import PARTIAL_MATCH_COUNTS

E = FilterComponent.exact
D = FilterComponent.default
A = FilterComponent.any

# ClientQuotasRequestTest's worked example: 11 user/client entities and two ip entities
WORKED: list[dict[str, str | None]] = [
    {"user": "user-1", "client-id": "client-id-1"},
    {"user": "user-2", "client-id": "client-id-1"},
    {"user": "user-3", "client-id": "client-id-2"},
    {"user": None, "client-id": "client-id-1"},
    {"user": "user-1", "client-id": None},
    {"user": "user-3", "client-id": None},
    {"user": "user-1"},
    {"user": "user-2"},
    {"user": "user-3"},
    {"user": None},
    {"client-id": "client-id-2"},
    {"ip": "1.2.3.4"},
    {"ip": "2.3.4.5"},
]


@pytest.mark.parametrize(("flt", "count"), PARTIAL_MATCH_COUNTS)
def test_worked_example_counts(flt: QuotaFilter, count: int) -> None:
    flt.validate()
    assert sum(flt.matches(e) for e in WORKED) == count


def test_default_literal_name_is_not_default() -> None:
    stored = {"client-id": "<default>"}
    assert QuotaFilter.contains_only([E("client-id", "<default>")]).matches(stored)
    assert not QuotaFilter.contains_only([D("client-id")]).matches(stored)


def error(flt: QuotaFilter) -> tuple[type[KafkaError], str | None]:
    with pytest.raises(KafkaError) as info:
        flt.validate()
    return type(info.value), info.value.message


@pytest.mark.parametrize(
    ("components", "kind", "text"),
    [
        ([FilterComponent("", MatchType.SPECIFIED)], InvalidRequestError, "Invalid empty entity type."),
        ([A("user"), E("user", "x")], InvalidRequestError,
         "Entity type user cannot appear more than once in the filter."),
        ([A("other")], UnsupportedVersionError, "Unsupported entity type other"),
        ([FilterComponent("user", MatchType.EXACT, None)], InvalidRequestError,
         "Request specified MATCH_TYPE_EXACT, but set match string to null."),
        ([FilterComponent("user", MatchType.DEFAULT, "x")], InvalidRequestError,
         "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
        ([FilterComponent("user", MatchType.SPECIFIED, "x")], InvalidRequestError,
         "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
        ([FilterComponent("user", 7, None)], InvalidRequestError, "Unknown match type 7"),
        ([A("ip"), A("user")], InvalidRequestError, "Invalid entity filter component combination. IP filter component "
         "should not be used with user or clientId filter component."),
        ([A("client-id"), A("ip")], InvalidRequestError, "Invalid entity filter component combination. IP filter "
         "component should not be used with user or clientId filter component."),
        # checked per component in order: the unknown type is reported before the later bad combination
        ([A("other"), A("ip"), A("user")], UnsupportedVersionError, "Unsupported entity type other"),
    ],
)
def test_validation_errors(components: list[FilterComponent], kind: type[KafkaError], text: str) -> None:
    assert error(QuotaFilter.contains(components)) == (kind, text)


NAMES = st.one_of(st.none(), st.sampled_from(["a", "b", "<default>"]))


@st.composite
def stored_entities(draw: st.DrawFn) -> dict[str, str | None]:
    if draw(st.booleans()) and draw(st.booleans()):
        return {"ip": draw(NAMES)}
    types = draw(st.sets(st.sampled_from(["user", "client-id"]), min_size=1))
    return {t: draw(NAMES) for t in types}


@st.composite
def filters(draw: st.DrawFn) -> QuotaFilter:
    pool = draw(st.sampled_from([["user", "client-id"], ["ip"]]))
    types = draw(st.lists(st.sampled_from(pool), unique=True))
    comps = []
    for t in types:
        kind = draw(st.sampled_from(list(MatchType)))
        name = draw(st.sampled_from(["a", "b", "<default>"]))
        comps.append(FilterComponent(t, kind, name if kind == MatchType.EXACT else None))
    return QuotaFilter(tuple(comps), draw(st.booleans()))


def brute_force(flt: QuotaFilter, entity: dict[str, str | None]) -> bool:
    """The matching rules of ClientQuotasImage.describe spelled out one case at a time."""
    if flt.strict and set(entity) != {c.entity_type for c in flt.components}:
        return False
    for c in flt.components:
        if c.entity_type not in entity:
            return False
        name = entity[c.entity_type]
        if c.match_type == MatchType.EXACT and name != c.match:
            return False
        if c.match_type == MatchType.DEFAULT and name is not None:
            return False
    return True


@given(filters(), st.lists(stored_entities(), max_size=12))
def test_filter_equals_brute_force(flt: QuotaFilter, entities: list[dict[str, str | None]]) -> None:
    flt.validate()
    expected = [brute_force(flt, e) for e in entities]
    assert [flt.matches(e) for e in entities] == expected
    assert [flt.matches(QuotaEntity.from_wire(e)) for e in entities] == expected  # the fast path on entities
    single = flt.exact_entity()
    if single is not None:  # a strict exact/default filter selects exactly that one entity
        assert [QuotaEntity.from_wire(e) == single for e in entities] == expected
