"""KIP-55 precedence and quota-ids (Kafka's ``ClientQuotaManager`` metric tags), over any map of configured
(user, client-id) parts.

Names are opaque here: the engine keys its overrides by *sanitized* user (as Kafka does), so the tags it gets back
are sanitized too. ``resolve`` in :mod:`quotaflow.admin` does the same over the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Final, Generic, TypeAlias, TypeVar

from quotaflow.core.entities import DEFAULT, Part

V = TypeVar("V")
ClientKey: TypeAlias = tuple[Part, Part]  # (user part, client-id part)


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
}


def candidates(user: str, client_id: str) -> tuple[tuple[int, ClientKey], ...]:
    """The eight configured entities that can supply a quota for (user, client_id), most specific first."""
    return (
        (1, (user, client_id)),
        (2, (user, DEFAULT)),
        (3, (user, None)),
        (4, (DEFAULT, client_id)),
        (5, (DEFAULT, DEFAULT)),
        (6, (DEFAULT, None)),
        (7, (None, client_id)),
        (8, (None, DEFAULT)),
    )


@dataclass(frozen=True, slots=True)
class Match(Generic[V]):
    level: int
    key: ClientKey
    value: V


def resolve(overrides: Mapping[ClientKey, V], user: str, client_id: str) -> Match[V] | None:
    """The most specific configured entity for (user, client_id), or None (unlimited)."""
    for level, key in candidates(user, client_id):
        if key in overrides:
            return Match(level, key, overrides[key])
    return None


def all_matches(overrides: Mapping[ClientKey, V], user: str, client_id: str) -> list[Match[V]]:
    """Every configured entity that applies, most specific first (the first one wins)."""
    return [Match(lvl, key, overrides[key]) for lvl, key in candidates(user, client_id) if key in overrides]


def entity_bit(user: Part, client_id: Part) -> QuotaTypeBit:
    """Which ``quotaTypesEnabled`` bit an entity of this shape sets."""
    if user is not None and client_id is not None:
        return QuotaTypeBit.USER_CLIENT_ID
    if user is not None:
        return QuotaTypeBit.USER
    return QuotaTypeBit.CLIENT_ID


def quota_tags(overrides: Mapping[ClientKey, object], mask: int, user: str, client_id: str) -> tuple[str, str]:
    """``DefaultQuotaCallback.quotaMetricTags``: the (user, client-id) tag pair that names the shared quota."""
    if mask in (0, QuotaTypeBit.CLIENT_ID):
        return ("", client_id)
    if mask == QuotaTypeBit.USER:
        return (user, "")
    if mask == QuotaTypeBit.USER_CLIENT_ID:
        return (user, client_id)
    for level, key in candidates(user, client_id)[:6]:
        if key in overrides:
            return (user, "") if level in (3, 6) else (user, client_id)
    return ("", client_id)


def quota_limit(overrides: Mapping[ClientKey, V], tag_user: str, tag_client_id: str) -> V | None:
    """``DefaultQuotaCallback.quotaLimit``: the configured value for a tag pair, None meaning unlimited."""
    keys: tuple[ClientKey, ...]
    if tag_user and tag_client_id:
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
