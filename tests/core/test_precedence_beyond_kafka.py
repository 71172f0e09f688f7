"""Where client-id prefixes and CIDR ranges stand in Kafka's precedence (docs/quota-model.md), pinned.

The table in the docs is this test: every level of KIP-55 with a prefix next to it, a longest-prefix race, the
quota-id of a prefix bucket, and the longest-range lookup with its probe bound."""

from __future__ import annotations

import random

import pytest

from quotaflow.core.cidr import RangeIndex, canonical_cidr, cidr_error
from quotaflow.core.entities import DEFAULT, QuotaEntity
from quotaflow.core.precedence import (
    PREFIX_LEVEL,
    PREFIX_TAG_USER,
    RANK,
    ClientIdPrefix,
    ClientKey,
    QuotaTypeBit,
    entity_bit,
    prefix_index,
    quota_limit,
    quota_tags,
    resolve,
)
from quotaflow.core.prefixes import PrefixIndex

P = ClientIdPrefix


def _overrides(*keys: ClientKey) -> dict[ClientKey, float]:
    return {k: float(i + 1) for i, k in enumerate(keys)}


# (configured entities, expected winning level) for user "u", client "etl-1": a prefix "etl-" everywhere
PRECEDENCE = [
    ([("u", "etl-1"), (None, P("etl-"))], 1),
    ([("u", DEFAULT), (None, P("etl-"))], 2),
    ([("u", None), (None, P("etl-"))], 3),
    ([(DEFAULT, "etl-1"), (None, P("etl-"))], 4),
    ([(DEFAULT, DEFAULT), (None, P("etl-"))], 5),
    ([(DEFAULT, None), (None, P("etl-"))], 6),
    ([(None, "etl-1"), (None, P("etl-"))], 7),  # an exact client-id beats the prefix
    ([(None, P("etl-")), (None, DEFAULT)], PREFIX_LEVEL),  # the prefix beats the default client-id
    ([(None, DEFAULT)], 8),
]


@pytest.mark.parametrize(("keys", "level"), PRECEDENCE)
def test_prefix_level_in_kafkas_precedence(keys: list[ClientKey], level: int) -> None:
    overrides = _overrides(*keys)
    found = resolve(overrides, "u", "etl-1", prefix_index(overrides))
    assert found is not None and found.level == level
    assert RANK.index(PREFIX_LEVEL) == RANK.index(7) + 1 == RANK.index(8) - 1


def test_longest_prefix_wins_and_shares_one_quota_id() -> None:
    overrides = {(None, P("etl-")): 100.0, (None, P("etl-big-")): 500.0, (None, DEFAULT): 7.0}
    prefixes = prefix_index(overrides)
    mask = int(entity_bit(None, P("etl-")))
    assert mask == QuotaTypeBit.CLIENT_ID
    tags = {c: quota_tags(overrides, mask, "u", c, prefixes) for c in ("etl-1", "etl-2", "etl-big-1", "other")}
    assert tags["etl-1"] == tags["etl-2"] == (PREFIX_TAG_USER, "etl-")  # one bucket, named by the prefix
    assert tags["etl-big-1"] == (PREFIX_TAG_USER, "etl-big-")
    assert tags["other"] == ("", "other")  # Kafka's answer: its own bucket at the default's limit
    assert quota_limit(overrides, *tags["etl-1"]) == 100.0
    assert quota_limit(overrides, *tags["etl-big-1"]) == 500.0
    assert quota_limit(overrides, *tags["other"]) == 7.0


def test_exact_client_id_named_like_the_prefix_does_not_collide() -> None:
    overrides = {(None, P("etl-")): 100.0, (None, "etl-"): 3.0}
    prefixes = prefix_index(overrides)
    exact = quota_tags(overrides, 1, "u", "etl-", prefixes)
    shared = quota_tags(overrides, 1, "u", "etl-7", prefixes)
    assert exact == ("", "etl-") and shared == (PREFIX_TAG_USER, "etl-") and exact != shared
    assert quota_limit(overrides, *exact) == 3.0 and quota_limit(overrides, *shared) == 100.0


def test_user_levels_keep_kafkas_tags_next_to_a_prefix() -> None:
    overrides = {(None, P("etl-")): 100.0, ("u", None): 9.0}
    mask = QuotaTypeBit.CLIENT_ID | QuotaTypeBit.USER
    prefixes = prefix_index(overrides)
    assert quota_tags(overrides, mask, "u", "etl-1", prefixes) == ("u", "")  # level 3 first, as Kafka
    assert quota_tags(overrides, mask, "v", "etl-1", prefixes) == (PREFIX_TAG_USER, "etl-")


def test_without_prefixes_the_answer_is_kafkas() -> None:
    overrides = {(None, DEFAULT): 1.0, ("u", "c"): 2.0}
    for mask in range(8):
        assert quota_tags(overrides, mask, "u", "c") == quota_tags(overrides, mask, "u", "c", PrefixIndex())


def test_prefix_index_matches_a_scan() -> None:
    rng = random.Random(5)
    words = ["".join(rng.choice("ab-") for _ in range(rng.randint(1, 6))) for _ in range(300)]
    index = PrefixIndex(words)
    for _ in range(500):
        s = "".join(rng.choice("ab-") for _ in range(rng.randint(0, 8)))
        scan = [w for w in set(words) if s.startswith(w)]
        assert index.longest(s) == (max(scan, key=len) if scan else None)
        assert index.matches(s) == sorted(scan, key=len, reverse=True)
    index.discard("a")
    assert "a" not in index


def test_prefix_entity_path_and_wire_form() -> None:
    e = QuotaEntity(client_id_prefix="etl/ä ")
    assert e.to_wire() == {"client-id-prefix": "etl/ä "}
    assert QuotaEntity.from_path(e.path) == e
    assert e.path == "client-id-prefixes/etl%2F%C3%A4%20"
    assert QuotaEntity.from_wire({"client-id-prefix": "etl-"}).is_prefix()


def test_cidr_ranges_longest_match() -> None:
    idx: RangeIndex[int] = RangeIndex()
    for cidr, v in (("10.0.0.0/8", 1), ("10.1.0.0/16", 2), ("10.1.2.0/24", 3), ("0.0.0.0/0", 0),
                    ("2001:db8::/32", 6), ("2001:db8:1::/48", 7)):
        idx.set(cidr, v)
    assert idx.longest("10.1.2.3") == ("10.1.2.0/24", 3)
    assert idx.longest("10.1.9.9") == ("10.1.0.0/16", 2)
    assert idx.longest("10.9.9.9") == ("10.0.0.0/8", 1)
    assert idx.longest("192.168.0.1") == ("0.0.0.0/0", 0)
    assert idx.longest("2001:db8:1::5") == ("2001:db8:1::/48", 7)
    assert idx.longest("2001:db8:2::5") == ("2001:db8::/32", 6)
    assert idx.longest("2001:db9::1") is None  # no IPv6 catch-all
    assert idx.longest("not-an-ip") is None
    assert idx.longest("::ffff:10.1.2.3") == ("10.1.2.0/24", 3)  # IPv4-mapped: the IPv4 address
    assert [c for c, _ in idx.matches("10.1.2.3")] == ["10.1.2.0/24", "10.1.0.0/16", "10.0.0.0/8", "0.0.0.0/0"]
    assert idx.rate_for("10.1.2.3", {"10.1.2.3": 99}, -1) == 99  # the exact ip first
    idx.remove("10.1.2.0/24")
    assert idx.longest("10.1.2.3") == ("10.1.0.0/16", 2)
    assert canonical_cidr("2001:0db8::/32") == "2001:db8::/32"
    assert cidr_error("10.1.0.1/16") == "10.1.0.1/16 has host bits set"


def test_cidr_lookup_matches_a_scan() -> None:
    import ipaddress

    rng = random.Random(9)
    nets = {ipaddress.ip_network((rng.getrandbits(32), rng.randint(4, 32)), strict=False) for _ in range(400)}
    idx: RangeIndex[str] = RangeIndex()
    for n in nets:
        idx.set(n.with_prefixlen, n.with_prefixlen)
    for _ in range(2000):
        addr = ipaddress.ip_address(rng.getrandbits(32))
        holding = [n for n in nets if addr in n]
        best = max(holding, key=lambda n: n.prefixlen).with_prefixlen if holding else None
        found = idx.longest(str(addr))
        assert (found[0] if found else None) == best


def test_a_prefix_filter_component_stands_alone() -> None:
    from quotaflow.core.errors import InvalidRequestError
    from quotaflow.core.filters import FilterComponent, QuotaFilter

    QuotaFilter.contains([FilterComponent.any("client-id-prefix")]).validate()
    with pytest.raises(InvalidRequestError, match="client-id-prefix filter component should not be used"):
        QuotaFilter.contains([FilterComponent.any("client-id-prefix"), FilterComponent.any("user")]).validate()
    found = QuotaFilter.contains([FilterComponent.exact("client-id-prefix", "etl-")])
    assert found.matches(QuotaEntity(client_id_prefix="etl-")) and not found.matches(QuotaEntity(client_id="etl-"))


def test_resolve_names_the_range_and_refuses_a_range_as_an_address() -> None:
    from quotaflow.admin.local import IP_RANGE_LEVEL, QuotaIndex
    from quotaflow.core.errors import InvalidRequestError
    from quotaflow.store.base import Snapshot

    index = QuotaIndex(Snapshot(1, {QuotaEntity(ip="10.1.0.0/16"): {"connection_creation_rate": 5.0},
                                    QuotaEntity(ip="10.1.2.0/24"): {"connection_creation_rate": 9.0},
                                    QuotaEntity(ip=DEFAULT): {"connection_creation_rate": 50.0}}))
    q = index.resolve_ip("10.1.2.3").quotas["connection_creation_rate"]
    assert (q.value, q.level, q.entity) == (9.0, IP_RANGE_LEVEL, QuotaEntity(ip="10.1.2.0/24"))
    assert [(c.level, c.value) for c in q.overridden] == [(IP_RANGE_LEVEL, 5.0), (2, 50.0)]
    with pytest.raises(InvalidRequestError, match="is a CIDR range: resolve an address"):
        index.resolve_ip("10.1.0.0/16")
