"""AlterClientQuotas validation exactly as KRaft's ``ClientQuotaControlManager``.

Every check raises the Kafka error type with Kafka's exact message (the "shouldnot" typo included), so callers turn
it into the per-entity ``ApiError``. Maps are walked in Java ``HashMap`` order because the *first* failing check is
the one Kafka reports. Resolving a host name is I/O, so the ip check takes an injectable resolver.
"""

from __future__ import annotations

import ipaddress
import math
import socket
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Final, TypeAlias, TypeVar

from quotaflow.core.cidr import cidr_error, is_cidr
from quotaflow.core.entities import ENTITY_TYPES, EntityType, render_entity
from quotaflow.core.errors import InvalidRequestError, UnknownServerError
from quotaflow.core.javaorder import hashmap_order
from quotaflow.core.keys import (
    CLIENT_QUOTA_KEYS,
    INT_MAX,
    IP_QUOTA_KEYS,
    LONG_MAX,
    QUOTA_KEYS,
    USER_QUOTA_KEYS,
    ConfigType,
)

# A requested entity: type -> name, where a None name is the default and a None type is what a malformed request
# can carry (Kafka reports it as "Unhandled client quota entity type: null").
RawEntity: TypeAlias = Mapping[str | None, str | None]
HostResolver: TypeAlias = Callable[[str], bool]
K = TypeVar("K", str, None, str | None)

_NULL_SLOT: Final = "\x00"  # String.hashCode of "\0" is 0, the bucket HashMap uses for a null key

SHOULDNOT_COMBINE: Final = "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
EMPTY_ENTITY: Final = "Invalid empty client quota entity"
# beyond Kafka's model (Kafka's own messages above are unchanged)
PREFIX_COMBINED: Final = ("Invalid quota entity combination, a client-id-prefix entity cannot be combined with user, "
                          "client-id or ip")
PREFIX_DEFAULT: Final = "Invalid client quota entity: client-id-prefix has no default entity, name a prefix"


def java_map_order(keys: Iterable[K]) -> list[K]:
    """``HashMap`` iteration order for keys that may include null (bucket 0, like ``""`` and ``"\\0"``)."""
    return list(_map_order(tuple(keys)))


@lru_cache(maxsize=4096)
def _map_order(keys: tuple[K, ...]) -> tuple[K, ...]:
    keyed: dict[str, K] = {}
    for k in keys:
        slot = k if k is not None else _NULL_SLOT
        while slot in keyed and keyed[slot] != k:  # a real "\0" key next to null: keep both, null first wins
            slot += _NULL_SLOT
        keyed.setdefault(slot, k)
    return tuple(keyed[s] for s in hashmap_order(keyed))


def render_raw_entity(entries: RawEntity) -> str:
    """``ClientQuotaEntity.toString`` for any requested entity, null types included."""
    if all(k is not None for k in entries):
        return render_entity({k: v for k, v in entries.items() if k is not None})
    body = ", ".join(
        f"{'null' if k is None else k}={'null' if entries[k] is None else entries[k]}" for k in java_map_order(entries)
    )
    return f"ClientQuotaEntity(entries={{{body}}})"


def resolves(host: str) -> bool:
    """``InetAddress.getByName`` succeeds: an IP literal, or a name the system resolver knows."""
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError, ValueError):
        return False
    return True


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]") if ":" in name else name)
    except ValueError:
        return False
    return True


def is_valid_ip_entity(name: str | None, resolver: HostResolver = resolves) -> bool:
    """``ClientQuotaControlManager.isValidIpEntity``: the default, an IP literal, or a resolvable host."""
    if name is None:
        return True
    if is_ip_literal(name):
        return True
    if not name or any(c.isspace() for c in name):
        return False
    return resolver(name)


def validate_entity(entries: RawEntity) -> None:
    """``validateEntity``: known types, no empty names."""
    if not entries:
        raise InvalidRequestError(EMPTY_ENTITY)
    for entity_type in java_map_order(entries):
        if entity_type not in ENTITY_TYPES:
            shown = "null" if entity_type is None else entity_type
            raise InvalidRequestError(f"Unhandled client quota entity type: {shown}")
        if entries[entity_type] == "":
            raise InvalidRequestError(f"Empty {entity_type} not supported")


def config_keys_for_entity(entries: RawEntity, resolver: HostResolver = resolves) -> frozenset[str]:
    """``configKeysForEntityType``: the keys this entity may hold; rejects ip combined with user or client-id."""
    has_ip = EntityType.IP.value in entries
    has_user = EntityType.USER.value in entries
    has_client = has_user or EntityType.CLIENT_ID.value in entries
    if has_ip and has_client:
        raise InvalidRequestError(SHOULDNOT_COMBINE)
    if EntityType.CLIENT_ID_PREFIX.value in entries:
        if len(entries) > 1:
            raise InvalidRequestError(PREFIX_COMBINED)
        if entries[EntityType.CLIENT_ID_PREFIX.value] is None:
            raise InvalidRequestError(PREFIX_DEFAULT)
        return CLIENT_QUOTA_KEYS
    if has_ip:
        name = entries[EntityType.IP.value]
        if name is not None and is_cidr(name):
            reason = cidr_error(name)
            if reason is not None:
                raise InvalidRequestError(f"{name} is not a valid CIDR range: {reason}.")
            return IP_QUOTA_KEYS
        if not is_valid_ip_entity(name, resolver):
            raise InvalidRequestError(f"{name} is not a valid IP or resolvable host.")
        return IP_QUOTA_KEYS
    if has_user and EntityType.CLIENT_ID.value not in entries:
        return USER_QUOTA_KEYS  # a per-principal connection_creation_rate besides Kafka's four keys
    if has_client:
        return CLIENT_QUOTA_KEYS
    raise InvalidRequestError(EMPTY_ENTITY)


def validate_quota_key_value(allowed: frozenset[str], key: str | None, value: float) -> None:
    """``validateQuotaKeyValue``: a set op's key is allowed for the entity and its value fits the key's type."""
    if key is None or key not in allowed:
        raise InvalidRequestError(f"Invalid configuration key {'null' if key is None else key}")
    if value <= 0.0:
        raise InvalidRequestError(f"Quota {key} must be greater than 0")
    config_type = QUOTA_KEYS[key].config_type
    if config_type is ConfigType.DOUBLE:
        return
    if config_type is ConfigType.SHORT:
        if value > 32767.0:
            raise InvalidRequestError(f"Proposed value for {key} is too large for a SHORT.")
    elif config_type is ConfigType.INT:
        if value > float(INT_MAX):
            raise InvalidRequestError(f"Proposed value for {key} is too large for an INT.")
    elif config_type is ConfigType.LONG:
        if value > float(LONG_MAX):
            raise InvalidRequestError(f"Proposed value for {key} is too large for a LONG.")
    else:  # pragma: no cover - every ConfigType is handled above
        raise UnknownServerError(f"Unexpected config type {config_type.value} should be Long or Double")
    # Java's % keeps the dividend's sign (fmod); NaN fails the comparison and so counts as fractional.
    if not abs(math.fmod(value, 1.0)) <= 1e-6:
        raise InvalidRequestError(f"{key} cannot be a fractional value.")
