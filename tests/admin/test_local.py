"""quotaflow.admin over a real SQLite store: ClientQuotasRequestTest, ClientQuotaControlManagerTest, resolve."""

from __future__ import annotations

import csv
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotaflow.admin import Admin, Alteration, AlterResult, QuotaIndex, QuotaOp
from quotaflow.core.entities import DEFAULT, Part, QuotaEntity
from quotaflow.core.errors import InvalidRequestError, KafkaError, UnsupportedVersionError
from quotaflow.core.filters import FilterComponent, MatchType, QuotaFilter
from quotaflow.core.precedence import quota_limit
from quotaflow.store.sqlite import SqliteStore
from worked_example import PARTIAL_MATCH_COUNTS

E = FilterComponent.exact
D = FilterComponent.default
A = FilterComponent.any
PRODUCER = "producer_byte_rate"
CONSUMER = "consumer_byte_rate"
REQUEST = "request_percentage"
MUTATION = "controller_mutation_rate"
CONN = "connection_creation_rate"


def dns(host: str) -> bool:
    return host.endswith(".test")


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[Admin]:
    a = Admin(SqliteStore(tmp_path / "q.db"), resolver=dns)
    yield a
    a.close()


def alter1(admin: Admin, entity: dict[str | None, str | None], ops: list[tuple[str | None, float | None]],
           validate_only: bool = False) -> AlterResult:
    results = admin.alter([Alteration(entity, tuple(QuotaOp(k, v) for k, v in ops))], validate_only)
    assert len(results) == 1
    return results[0]


def exact(admin: Admin, entity: dict[str, str | None]) -> dict[str, float]:
    """Strict describe of exactly this entity (how ClientQuotasRequestTest reads quotas back)."""
    comps = [E(t, n) if n is not None else D(t) for t, n in entity.items()]
    found = admin.describe(QuotaFilter.contains_only(comps))
    assert len(found) <= 1
    return found[0].values if found else {}


# -- ClientQuotasRequestTest -------------------------------------------------------------------------------------


def test_alter_client_quotas_request(admin: Admin) -> None:
    ent: dict[str | None, str | None] = {"user": "user", "client-id": "client-id"}
    key: dict[str, str | None] = {"user": "user", "client-id": "client-id"}
    assert exact(admin, key) == {}
    steps: list[tuple[list[tuple[str | None, float | None]], dict[str, float]]] = [
        ([(PRODUCER, 10000.0), (CONSUMER, 20000.0)], {PRODUCER: 10000.0, CONSUMER: 20000.0}),
        ([(PRODUCER, 15000.0)], {PRODUCER: 15000.0, CONSUMER: 20000.0}),
        ([(PRODUCER, None)], {CONSUMER: 20000.0}),
        ([(REQUEST, None)], {CONSUMER: 20000.0}),
        ([(PRODUCER, 5000.0)], {PRODUCER: 5000.0, CONSUMER: 20000.0}),
        ([(PRODUCER, 20000.0), (CONSUMER, None), (REQUEST, 12.3)], {PRODUCER: 20000.0, REQUEST: 12.3}),
    ]
    for ops, expected in steps:
        assert alter1(admin, ent, ops).ok
        assert exact(admin, key) == expected


def test_alter_validate_only_writes_nothing(admin: Admin) -> None:
    ent: dict[str | None, str | None] = {"user": "user"}
    assert alter1(admin, ent, [(PRODUCER, 20000.0), (REQUEST, 23.45)]).ok
    seq = admin.store.last_seq()
    for ops in ([(CONSUMER, 50000.0)], [(PRODUCER, 10000.0)], [(REQUEST, None)],
                [(PRODUCER, 10000.0), (REQUEST, None), (CONSUMER, 1.0)]):
        assert alter1(admin, ent, ops, validate_only=True).ok
        assert exact(admin, {"user": "user"}) == {PRODUCER: 20000.0, REQUEST: 23.45}
    # validate_only reports the same errors as a real alter
    bad = alter1(admin, ent, [(PRODUCER, 1.5)], validate_only=True)
    assert bad.error.message == "producer_byte_rate cannot be a fractional value."
    assert admin.store.last_seq() == seq


def test_alter_ip_quotas(admin: Admin) -> None:
    ip: dict[str | None, str | None] = {"ip": "1.2.3.4"}
    default: dict[str | None, str | None] = {"ip": None}
    assert exact(admin, {"ip": "1.2.3.4"}) == {}
    assert alter1(admin, ip, [(CONN, 100.0)]).ok
    assert exact(admin, {"ip": "1.2.3.4"}) == {CONN: 100.0}
    assert admin.resolve_ip("1.2.3.4").quotas[CONN].value == 100.0
    assert alter1(admin, ip, [(CONN, 150.0)]).ok
    assert alter1(admin, default, [(CONN, 200.0)]).ok
    assert exact(admin, {"ip": None}) == {CONN: 200.0}
    unknown = admin.resolve_ip("2.3.4.5").quotas[CONN]
    assert (unknown.value, unknown.level, unknown.entity) == (200.0, 2, QuotaEntity(ip=DEFAULT))
    assert len(admin.describe(QuotaFilter.contains([A("ip")]))) == 2
    assert alter1(admin, ip, [(CONN, None)]).ok
    assert exact(admin, {"ip": "1.2.3.4"}) == {}
    assert alter1(admin, default, [(CONN, None)]).ok
    assert admin.describe(QuotaFilter.contains([A("ip")])) == []
    assert admin.resolve_ip("2.3.4.5").quotas[CONN].unlimited


@pytest.mark.parametrize(
    ("entity", "ops"),
    [
        ({"user": ""}, [(REQUEST, 12.34)]),
        ({"client-id": ""}, [(REQUEST, 12.34)]),
        ({"": "name"}, [(REQUEST, 12.34)]),
        ({}, [(PRODUCER, 10000.5)]),
        ({"user": "user"}, [("bad", 1.0)]),
        ({"user": "user"}, [(PRODUCER, 10000.5)]),
    ],
)
def test_alter_invalid_requests(admin: Admin, entity: dict[str | None, str | None],
                                ops: list[tuple[str | None, float | None]]) -> None:
    result = alter1(admin, entity, ops)
    assert isinstance(result.error.exception(), InvalidRequestError)
    assert admin.store.last_seq() == 0


def test_alter_invalid_entity_combination_and_bad_ip(admin: Admin) -> None:
    for ent in ({"user": "u", "ip": "1.2.3.4"}, {"client-id": "c", "ip": "1.2.3.4"}):
        assert "Invalid quota entity combination" in (alter1(admin, dict(ent), [(CONN, 1.0)]).error.message or "")
    for host in ("not a valid host because it has spaces", "RFC2606.invalid"):
        assert "not a valid IP" in (alter1(admin, {"ip": host}, [(CONN, 1.0)]).error.message or "")
    assert alter1(admin, {"ip": "broker.test"}, [(CONN, 1.0)]).ok


def test_describe_invalid_filters_fail_whole_request(admin: Admin) -> None:
    for comps in ([A("ip"), A("user")], [A("ip"), A("client-id")]):
        with pytest.raises(InvalidRequestError, match="Invalid entity filter component combination"):
            admin.describe(QuotaFilter.contains(comps))
    with pytest.raises(UnsupportedVersionError):
        admin.describe(QuotaFilter.contains([A("other")]))


WORKED: list[tuple[dict[str, str | None], float]] = [
    ({"user": "user-1", "client-id": "client-id-1"}, 50.50),
    ({"user": "user-2", "client-id": "client-id-1"}, 51.51),
    ({"user": "user-3", "client-id": "client-id-2"}, 52.52),
    ({"user": None, "client-id": "client-id-1"}, 53.53),
    ({"user": "user-1", "client-id": None}, 54.54),
    ({"user": "user-3", "client-id": None}, 55.55),
    ({"user": "user-1"}, 56.56),
    ({"user": "user-2"}, 57.57),
    ({"user": "user-3"}, 58.58),
    ({"user": None}, 59.59),
    ({"client-id": "client-id-2"}, 60.60),
]


@pytest.fixture
def worked(admin: Admin) -> Admin:
    alts = [Alteration.of(dict(e), {REQUEST: v}) for e, v in WORKED]
    alts += [Alteration.of({"ip": "1.2.3.4"}, {CONN: 10.0}), Alteration.of({"ip": "2.3.4.5"}, {CONN: 20.0})]
    assert all(r.ok for r in admin.alter(alts))
    return admin


def test_describe_match_exact(worked: Admin) -> None:
    for entity, value in WORKED:
        assert exact(worked, entity) == {REQUEST: value}
    absent: list[dict[str, str | None]] = [
        {"user": "user-1", "client-id": "client-id-2"}, {"user": "user-3", "client-id": "client-id-1"},
        {"user": "user-2", "client-id": None}, {"user": "user-4"}, {"user": None, "client-id": "client-id-2"},
        {"client-id": "client-id-1"}, {"client-id": "client-id-3"},
    ]
    for entity in absent:
        assert exact(worked, entity) == {}


@pytest.mark.parametrize(("flt", "count"), PARTIAL_MATCH_COUNTS)
def test_describe_match_partial(worked: Admin, flt: QuotaFilter, count: int) -> None:
    assert len(worked.describe(flt)) == count


def test_sanitized_and_default_named_entities(admin: Admin) -> None:
    assert alter1(admin, {"user": "user with spaces"}, [(PRODUCER, 20000.0)]).ok
    (found,) = admin.describe(QuotaFilter.contains_only([E("user", "user with spaces")]))
    assert found.entity.to_wire() == {"user": "user with spaces"}
    assert alter1(admin, {"client-id": "<default>"}, [(PRODUCER, 20000.0)]).ok
    assert exact(admin, {"client-id": "<default>"}) == {PRODUCER: 20000.0}
    assert admin.describe(QuotaFilter.contains_only([D("client-id")])) == []


def test_kraft_cluster_client_quotas(admin: Admin) -> None:
    ent: dict[str | None, str | None] = {"user": "testkit"}
    read = {"user": "testkit"}
    assert alter1(admin, ent, [(REQUEST, 0.99)]).ok and len(exact(admin, read)) == 1
    assert alter1(admin, ent, [(REQUEST, 0.97), (PRODUCER, 10000.0), (CONSUMER, 10001.0)]).ok
    assert len(exact(admin, read)) == 3
    assert alter1(admin, ent, [(REQUEST, 0.95), (PRODUCER, None), (CONSUMER, None)]).ok
    assert exact(admin, read) == {REQUEST: 0.95}
    assert alter1(admin, ent, [(REQUEST, None)]).ok and exact(admin, read) == {}
    assert alter1(admin, ent, [(PRODUCER, 9999.0)]).ok
    assert alter1(admin, {"user": "testkit", "client-id": "some-client"}, [(PRODUCER, 9998.0)]).ok
    found = admin.describe(QuotaFilter.contains([E("user", "testkit")]))
    assert sorted(d.values[PRODUCER] for d in found) == [9998.0, 9999.0]


# -- ClientQuotaControlManagerTest -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entity",
    [{"foo": "bar"}, {None: "null"}, {"user": "user-1", "foo": "bar"}, {"foo": "bar", "ip": "1.2.3.4"},
     {"user": "user-1", "ip": "1.2.3.4"}, {"client-id": "user-1", "ip": "1.2.3.4"}, {}],
)
def test_invalid_entities(admin: Admin, entity: dict[str | None, str | None]) -> None:
    result = alter1(admin, entity, [(PRODUCER, 10000.0)])
    assert result.error.code == 42
    assert admin.store.last_seq() == 0


@pytest.mark.parametrize(
    "ops", [[("not.a.quota.key", 0.0), (REQUEST, 99.9)], [(REQUEST, 99.9), ("not.a.quota.key", 0.0)], [(None, 99.9)]]
)
def test_invalid_keys(admin: Admin, ops: list[tuple[str | None, float | None]]) -> None:
    result = alter1(admin, {"user": "user-1"}, ops)
    assert result.error.code == 42 and (result.error.message or "").startswith("Invalid configuration key ")
    assert admin.store.last_seq() == 0


def test_alter_and_remove(admin: Admin) -> None:
    ent: dict[str | None, str | None] = {"user": "user-1"}
    user1 = QuotaEntity(user="user-1")

    def now() -> dict[QuotaEntity, dict[str, float]]:
        return admin.store.snapshot().entities

    assert alter1(admin, ent, [(PRODUCER, 10000.0)]).ok and now() == {user1: {PRODUCER: 10000.0}}
    assert alter1(admin, ent, [(PRODUCER, 10001.0), (CONSUMER, 20000.0)]).ok and len(now()[user1]) == 2
    assert alter1(admin, ent, [(PRODUCER, None)]).ok and now() == {user1: {CONSUMER: 20000.0}}
    seq = admin.store.last_seq()
    assert alter1(admin, ent, [(REQUEST, None)]).ok and admin.store.last_seq() == seq  # absent: no record
    assert alter1(admin, ent, [(CONSUMER, None)]).ok and now() == {}
    assert alter1(admin, ent, [(CONSUMER, None)]).ok and now() == {}
    ops: list[tuple[str | None, float | None]] = [(REQUEST, 99.0), (MUTATION, None), (PRODUCER, 10002.0),
                                                  (CONSUMER, 20001.0)]
    assert alter1(admin, ent, ops).ok
    assert now() == {user1: {REQUEST: 99.0, PRODUCER: 10002.0, CONSUMER: 20001.0}}
    seq = admin.store.last_seq()
    assert alter1(admin, ent, [(REQUEST, 99.0)]).ok and admin.store.last_seq() == seq  # equal: no record


def test_entity_types_emit_one_record_each(admin: Admin) -> None:
    results = admin.alter([Alteration.of(dict(e), {REQUEST: v}) for e, v in WORKED])
    assert [r.error.code for r in results] == [0] * 11 and all(r.error.message is None for r in results)
    changes = admin.store.changes_since(0)
    assert len(changes) == 11
    assert [(c.entity.to_wire(), c.key, c.value) for c in changes] == [(e, REQUEST, v) for e, v in WORKED]


def test_duplicate_key_and_duplicate_entity(admin: Admin) -> None:
    u1: dict[str | None, str | None] = {"user": "u1"}
    u2: dict[str | None, str | None] = {"user": "u2", "client-id": None}
    results = admin.alter([
        Alteration(u1, (QuotaOp(PRODUCER, 1.0), QuotaOp(PRODUCER, 2.0))),  # duplicate key
        Alteration(u2, (QuotaOp(PRODUCER, 10.0),)),
        Alteration(u2, (QuotaOp(PRODUCER, 20.0),)),  # duplicate entity: the first one is still applied
        Alteration({"user": "u3"}, (QuotaOp(PRODUCER, 30.0),)),
    ])
    assert [(r.entity, r.error.code, r.error.message) for r in results] == [
        (u1, 42, "Ignoring duplicate entity ClientQuotaEntity(entries={user=u1})"),
        # Java HashMap order: "client-id" hashes to bucket 12, "user" to 13
        (u2, 42, "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=null, user=u2})"),
        ({"user": "u3"}, 0, None),
    ]
    assert admin.store.snapshot().entities == {
        QuotaEntity(user="u2", client_id=DEFAULT): {PRODUCER: 10.0},
        QuotaEntity(user="u3"): {PRODUCER: 30.0},
    }


def test_first_failing_op_fails_only_its_entity(admin: Admin) -> None:
    results = admin.alter([
        Alteration.of({"user": "a"}, {PRODUCER: 100.0, CONSUMER: 0.0}),
        Alteration.of({"user": "b"}, {PRODUCER: 100.0}),
    ])
    assert [r.error.message for r in results] == ["Quota consumer_byte_rate must be greater than 0", None]
    assert admin.store.snapshot().entities == {QuotaEntity(user="b"): {PRODUCER: 100.0}}


def test_empty_request(admin: Admin) -> None:
    assert admin.alter([]) == []


def test_nan_for_double_key_is_accepted(admin: Admin) -> None:
    assert alter1(admin, {"user": "u"}, [(REQUEST, math.nan)]).ok
    assert math.isnan(exact(admin, {"user": "u"})[REQUEST])


# -- resolve ------------------------------------------------------------------------------------------------------


def part(s: str) -> Part:
    return None if s == "" else DEFAULT if s == "<default>" else s


def run_client_vector(vectors_dir: Path, name: str, key: str, admin: Admin) -> list[tuple[dict[str, str], int]]:
    """Drive a Kafka client-quota trace through alter/resolve; compare limits, tags and masks on every row."""
    checked = []
    for row in csv.DictReader((vectors_dir / f"{name}.expected.csv").open()):
        if row["timestamp_ms"].startswith("#"):
            continue
        entity = QuotaEntity(user=part(row["user"]), client_id=part(row["client_id"]))
        if row["op"] == "set_quota":
            value = float(row["value"]) if row["value"] else None
            assert admin.alter([Alteration.of(entity, {key: value})])[0].ok
            assert admin.index().mask(key) == int(row["quota_types_enabled"]), row
            continue
        index = admin.index()
        got = index.resolve(row["user"], row["client_id"]).quotas[key]
        if row["quota_limit"] == "unlimited":
            assert got.unlimited, row
        else:
            assert got.value == float(row["quota_limit"]), row
        if int(row["quota_types_enabled"]) == 0:
            assert got.quota_id is None
        else:
            assert got.quota_id == {"user": row["tag_user"], "client-id": row["tag_client_id"]}, row
        checked.append((row, got.level))
    return [({"user": r["user"], "client": r["client_id"]}, lvl or 0) for r, lvl in checked]


# testQuotaConfigPrecedence (TEST-CASES §3.4): the level of the supplying entity for each of the 25 records,
# read off the table against KIP-55's 8-level precedence.
PRECEDENCE_LEVELS = [1, 3, 3, 1, 1, 2, 2, 5, 5, 5, 6, 6, 6, 6, 8, 8, 8, 8, 3, 3, 1, 1, 3, 1, 2]


def test_resolve_quota_config_precedence(vectors_dir: Path, admin: Admin) -> None:
    rows = run_client_vector(vectors_dir, "client_produce_kafka_testQuotaConfigPrecedence", PRODUCER, admin)
    assert [lvl for _, lvl in rows] == PRECEDENCE_LEVELS


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("client_produce_removal_refcount", PRODUCER),
        ("client_quota_types_refcount", MUTATION),
        ("client_produce_sanitized_names", PRODUCER),
        ("client_produce_multi_entity_sharing", PRODUCER),
    ],
)
def test_resolve_matches_kafka_traces(vectors_dir: Path, admin: Admin, name: str, key: str) -> None:
    run_client_vector(vectors_dir, name, key, admin)


def test_resolve_reports_overridden_entries(admin: Admin) -> None:
    admin.alter([
        Alteration.of(QuotaEntity(user="alice", client_id="app"), {PRODUCER: 5000.0}),
        Alteration.of(QuotaEntity(user="alice"), {PRODUCER: 4000.0, CONSUMER: 100.0}),
        Alteration.of(QuotaEntity(user=DEFAULT), {PRODUCER: 1000.0}),
        Alteration.of(QuotaEntity(client_id=DEFAULT), {REQUEST: 50.0}),
    ])
    res = admin.resolve("alice", "app")
    p = res.quotas[PRODUCER]
    assert (p.value, p.level, p.entity) == (5000.0, 1, QuotaEntity(user="alice", client_id="app"))
    assert [(c.level, c.value) for c in p.overridden] == [(3, 4000.0), (6, 1000.0)]
    assert p.quota_id == {"user": "alice", "client-id": "app"}
    c = res.quotas[CONSUMER]
    assert (c.value, c.level, c.quota_id) == (100.0, 3, {"user": "alice", "client-id": ""})
    r = res.quotas[REQUEST]
    assert (r.value, r.level, r.quota_id) == (50.0, 8, {"user": "", "client-id": "app"})
    m = res.quotas[MUTATION]
    assert m.unlimited and m.entity is None and m.quota_id is None and m.overridden == ()


def test_resolve_sanitizes_users_and_keeps_client_ids_raw(admin: Admin) -> None:
    admin.alter([Alteration.of(QuotaEntity(user="a b", client_id="c@#"), {PRODUCER: 10.0})])
    q = admin.resolve("a b", "c@#").quotas[PRODUCER]
    assert q.value == 10.0 and q.quota_id == {"user": "a%20b", "client-id": "c@#"}
    assert admin.resolve("a%20b", "c@#").quotas[PRODUCER].unlimited


def test_resolve_value_is_the_limit_kafka_enforces(admin: Admin) -> None:
    """Empty names: Kafka's quotaLimit(tags) wins over the plain precedence walk."""
    admin.alter([Alteration.of(QuotaEntity(user=DEFAULT, client_id=DEFAULT), {PRODUCER: 7.0})])
    assert admin.resolve("u", "c").quotas[PRODUCER].value == 7.0
    empty_user = admin.resolve("", "c").quotas[PRODUCER]  # tags ("", c): only client-level entities count
    assert empty_user.unlimited and [o.level for o in empty_user.overridden] == [5]


def test_index_resolve_agrees_with_quota_limit(worked: Admin) -> None:
    index: QuotaIndex = worked.index()
    overrides = {}
    for entity, value in WORKED:
        e = QuotaEntity.from_wire(entity)
        overrides[(e.user, e.client_id)] = value
    for user in ("user-1", "user-2", "user-3", "user-9"):
        for client in ("client-id-1", "client-id-2", "client-id-9"):
            q = index.resolve(user, client).quotas[REQUEST]
            assert q.quota_id is not None
            assert q.value == quota_limit(overrides, q.quota_id["user"], q.quota_id["client-id"])


def test_store_error_surfaces_as_kafka_error_type() -> None:
    assert issubclass(InvalidRequestError, KafkaError)


# -- property: describe over a real store equals a brute-force matcher --------------------------------------------

_NAMES = st.one_of(st.none(), st.sampled_from(["a", "b", "<default>", "x y"]))


@st.composite
def _entities(draw: st.DrawFn) -> dict[str | None, str | None]:
    if draw(st.integers(0, 3)) == 0:
        return {"ip": draw(st.sampled_from([None, "1.2.3.4", "::1"]))}
    types = draw(st.sets(st.sampled_from(["user", "client-id"]), min_size=1))
    return {t: draw(_NAMES) for t in types}


@st.composite
def _filters(draw: st.DrawFn) -> QuotaFilter:
    pool = draw(st.sampled_from([["user", "client-id"], ["ip"]]))
    comps = []
    for t in draw(st.lists(st.sampled_from(pool), unique=True)):
        kind = draw(st.sampled_from(["exact", "default", "any"]))
        name = draw(st.sampled_from(["a", "b", "<default>", "x y", "1.2.3.4"]))
        comps.append(E(t, name) if kind == "exact" else D(t) if kind == "default" else A(t))
    return QuotaFilter(tuple(comps), draw(st.booleans()))


def _brute(flt: QuotaFilter, entity: dict[str, str | None]) -> bool:
    if flt.strict and len(entity) != len(flt.components):
        return False
    for c in flt.components:
        if c.entity_type not in entity:
            return False
        if c.match_type == MatchType.EXACT and entity[c.entity_type] != c.match:
            return False
        if c.match_type == MatchType.DEFAULT and entity[c.entity_type] is not None:
            return False
    return True


@settings(max_examples=25, deadline=None)
@given(st.lists(_entities(), max_size=15), st.lists(_filters(), min_size=1, max_size=5))
def test_describe_equals_brute_force_on_random_stores(
    entities: list[dict[str | None, str | None]], flts: list[QuotaFilter]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        admin = Admin(SqliteStore(Path(tmp) / "q.db"), resolver=dns)
        try:
            alts = [Alteration.of(e, {CONN if "ip" in e else PRODUCER: float(i + 1)}) for i, e in enumerate(entities)]
            admin.alter(alts)
            stored = [e.to_wire() for e in admin.store.snapshot().entities]
            assert len(stored) == len({frozenset(e.items()) for e in entities})
            for flt in flts:
                got = sorted(str(d.entity.to_wire()) for d in admin.describe(flt))
                assert got == sorted(str(e) for e in stored if _brute(flt, e))
        finally:
            admin.close()
