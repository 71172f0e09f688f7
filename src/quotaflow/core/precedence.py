"""KIP-55 precedence and quota-ids (Kafka's ``ClientQuotaManager`` metric tags), over any map of configured
(user, client-id) parts.

Names are opaque here: the engine keys its overrides by *sanitized* user (as Kafka does), so the tags it gets back
are sanitized too. ``resolve`` in :mod:`quotaflow.admin` does the same over the store.

Beyond Kafka's model, a ``client-id-prefix`` entity is keyed ``(None, ClientIdPrefix(p))``. It ranks after
Kafka's level 7 (an exact client-id) and before level 8 (the default client-id); the longest matching prefix wins.
Its number is :data:`PREFIX_LEVEL` (9), after Kafka's eight so theirs do not move. Its quota-id is the tag pair
``(PREFIX_TAG_USER, p)``: a sanitized user name can never be ``<client-id-prefix>`` (``<`` is sanitized to
``%3C``), so the bucket cannot collide with any Kafka quota-id, and the pair fits every place a (user, client-id)
tag pair goes (sensors, metrics, event and backtest layouts). A store without prefixes gets Kafka's answers
exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, Generic, TypeAlias, TypeVar

from quotaflow.core.entities import DEFAULT, Part
from quotaflow.core.prefixes import PrefixIndex

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class ClientIdPrefix:
    """The client part of a ``client-id-prefix`` entity's key (never equal to a client-id string)."""

    prefix: str


ClientPart: TypeAlias = Part | ClientIdPrefix
ClientKey: TypeAlias = tuple[Part, ClientPart]  # (user part, client-id part)
PREFIX_LEVEL: Final = 9
PREFIX_TAG_USER: Final = "<client-id-prefix>"
"""The user tag of a prefix bucket's quota-id (no sanitized principal name can be this)."""


class QuotaTypeBit(IntEnum):
    """Bits of ``quotaTypesEnabled``."""

    CLIENT_ID = 1
    USER = 2
    USER_CLIENT_ID = 4
    CUSTOM = 8


LEVEL_NAMES: Final = {
    1: "(user, client-id)",
    2: "(user, <default> client-id)",
    3: "user",
    4: "(<default> user, client-id)",
    5: "(<default> user, <default> client-id)",
    6: "<default> user",
    7: "client-id",
    8: "<default> client-id",
    PREFIX_LEVEL: "client-id-prefix",
}
RANK: Final = (1, 2, 3, 4, 5, 6, 7, PREFIX_LEVEL, 8)
"""Levels from most to least specific (the prefix level sits between Kafka's 7 and 8)."""


def prefix_index(overrides: Mapping[ClientKey, object]) -> PrefixIndex:
    """The prefixes configured in an override map."""
    return PrefixIndex(k[1].prefix for k in overrides if isinstance(k[1], ClientIdPrefix))


def candidates(user: str, client_id: str,
               prefixes: PrefixIndex | None = None) -> tuple[tuple[int, ClientKey], ...]:  # fmt: skip
    """The configured entities that can supply a quota for (user, client_id), most specific first: Kafka's eight,
    with every matching client-id prefix (longest first) between levels 7 and 8."""
    matched: tuple[tuple[int, ClientKey], ...] = ()
    if prefixes:
        matched = tuple((PREFIX_LEVEL, (None, ClientIdPrefix(p))) for p in prefixes.matches(client_id))
    return (
        (1, (user, client_id)),
        (2, (user, DEFAULT)),
        (3, (user, None)),
        (4, (DEFAULT, client_id)),
        (5, (DEFAULT, DEFAULT)),
        (6, (DEFAULT, None)),
        (7, (None, client_id)),
        *matched,
        (8, (None, DEFAULT)),
    )


@dataclass(frozen=True, slots=True)
class Match(Generic[V]):
    level: int
    key: ClientKey
    value: V


def resolve(overrides: Mapping[ClientKey, V], user: str, client_id: str,
            prefixes: PrefixIndex | None = None) -> Match[V] | None:  # fmt: skip
    """The most specific configured entity for (user, client_id), or None (unlimited)."""
    for level, key in candidates(user, client_id, prefixes):
        if key in overrides:
            return Match(level, key, overrides[key])
    return None


def all_matches(overrides: Mapping[ClientKey, V], user: str, client_id: str,
                prefixes: PrefixIndex | None = None) -> list[Match[V]]:  # fmt: skip
    """Every configured entity that applies, most specific first (the first one wins)."""
    return [Match(lvl, key, overrides[key]) for lvl, key in candidates(user, client_id, prefixes) if key in overrides]


def entity_bit(user: Part, client_id: ClientPart) -> QuotaTypeBit:
    """Which ``quotaTypesEnabled`` bit an entity of this shape sets (a client-id prefix counts as client-id)."""
    if user is not None and client_id is not None:
        return QuotaTypeBit.USER_CLIENT_ID
    if user is not None:
        return QuotaTypeBit.USER
    return QuotaTypeBit.CLIENT_ID


def _client_tags(overrides: Mapping[ClientKey, object], client_id: str,
                 prefixes: PrefixIndex | None) -> tuple[str, str]:  # fmt: skip
    """Tags of a client no user-level entity claims: Kafka's ``("", client_id)``, unless no exact client-id entity
    exists and a prefix matches (then the longest prefix's bucket)."""
    if prefixes and (None, client_id) not in overrides:
        prefix = prefixes.longest(client_id)
        if prefix is not None:
            return (PREFIX_TAG_USER, prefix)
    return ("", client_id)


def quota_tags(overrides: Mapping[ClientKey, object], mask: int, user: str, client_id: str,
               prefixes: PrefixIndex | None = None) -> tuple[str, str]:  # fmt: skip
    """``DefaultQuotaCallback.quotaMetricTags``: the (user, client-id) tag pair that names the shared quota.

    ``prefixes`` are the override map's client-id prefixes (:func:`prefix_index`); without any, Kafka's answer."""
    if mask in (0, QuotaTypeBit.CLIENT_ID):
        return _client_tags(overrides, client_id, prefixes) if mask else ("", client_id)
    if mask == QuotaTypeBit.USER:
        return (user, "")
    if mask == QuotaTypeBit.USER_CLIENT_ID:
        return (user, client_id)
    for level, key in candidates(user, client_id)[:6]:
        if key in overrides:
            return (user, "") if level in (3, 6) else (user, client_id)
    return _client_tags(overrides, client_id, prefixes)


def is_prefix_tags(tag_user: str) -> bool:
    return tag_user == PREFIX_TAG_USER


def quota_limit(overrides: Mapping[ClientKey, V], tag_user: str, tag_client_id: str) -> V | None:
    """``DefaultQuotaCallback.quotaLimit``: the configured value for a tag pair, None meaning unlimited (a prefix
    bucket's pair: that prefix's value)."""
    keys: tuple[ClientKey, ...]
    if tag_user == PREFIX_TAG_USER:
        keys = ((None, ClientIdPrefix(tag_client_id)),)
    elif tag_user and tag_client_id:
        keys = ((tag_user, tag_client_id), (tag_user, DEFAULT), (DEFAULT, tag_client_id), (DEFAULT, DEFAULT))
    elif tag_user:
        keys = ((tag_user, None), (DEFAULT, None))
    elif tag_client_id:
        keys = ((None, tag_client_id), (None, DEFAULT))
    else:
        return None
    for key in keys:
        if key in overrides:
            return overrides[key]
    return None
