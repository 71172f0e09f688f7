"""The Quotas page and ``/api/quotas``: describe filters from query parameters, alterations from JSON bodies.

Filters take, per entity type ``T`` (``user``, ``client-id``, ``ip``, ``client-id-prefix``), ``T_match`` = ``exact`` /
``default`` / ``any`` and ``T`` = the name for ``exact`` (a name alone means exact), plus ``strict`` (containsOnly):
the same four choices as ``client-quotas --describe --names/--defaults/--any/--strict``. An alteration is
``{"entity": {"user": "u1", "client-id": null}, "ops": [{"key": "...", "value": 12.5 | null}], "validate_only": b}``
(null name = the default entity, null value = remove the key, a string value read as Java's ``Double.parseDouble``),
validated by :class:`quotaflow.admin.Admin` with Kafka's exact messages. :func:`field_of` tells the page which
form field an error belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from quotaflow.admin import Alteration, QuotaOp
from quotaflow.core.errors import InvalidRequestError
from quotaflow.core.filters import FilterComponent, MatchType, QuotaFilter
from quotaflow.core.javafmt import parse_double
from quotaflow.core.keys import CLIENT_QUOTA_KEYS, CONNECTION_CREATION_RATE

ENTITY_TYPES: Final = ("user", "client-id", "ip", "client-id-prefix")
MATCHES: Final = ("exact", "default", "any")
QUOTA_KEYS: Final = (*sorted(CLIENT_QUOTA_KEYS), CONNECTION_CREATION_RATE)


@dataclass(frozen=True, slots=True)
class FilterForm:
    """What the filter form shows: per type (match, name), and strict."""

    parts: dict[str, tuple[str, str]]
    strict: bool

    def to_filter(self) -> QuotaFilter:
        comps = []
        for entity_type, (match, name) in self.parts.items():
            if match == "exact":  # no name: Kafka's own error for an exact match of null
                comps.append(FilterComponent(entity_type, MatchType.EXACT, name or None))
            elif match == "default":
                comps.append(FilterComponent.default(entity_type))
            elif match == "any":
                comps.append(FilterComponent.any(entity_type))
        return QuotaFilter(tuple(comps), self.strict)


def filter_form(query: Mapping[str, str]) -> FilterForm:
    """Read a filter from query parameters; an unknown match is Kafka's INVALID_REQUEST."""
    parts: dict[str, tuple[str, str]] = {}
    for entity_type in ENTITY_TYPES:
        name = query.get(entity_type, "")
        match = query.get(f"{entity_type}_match", "") or ("exact" if name else "")
        if match and match not in MATCHES:
            raise InvalidRequestError(f"Unknown match type {match!r} for {entity_type}: exact, default or any")
        if match:
            parts[entity_type] = (match, name)
    strict = query.get("strict", "").lower() in ("1", "true", "on", "yes")
    return FilterForm(parts, strict)


def _value(key: str | None, raw: Any) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool):
        raise InvalidRequestError(f"Cannot parse quota configuration value for {key}: {raw}")
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):  # what the page sends when it is not a JS number: read as kafka-configs.sh reads it
        try:
            return parse_double(raw)
        except ValueError:
            pass
    raise InvalidRequestError(f"Cannot parse quota configuration value for {key}: {raw}")


def parse_alteration(body: Any) -> tuple[Alteration, bool]:
    """The alteration and validate_only flag of a POST body; a malformed body is INVALID_REQUEST."""
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object with entity, ops and validate_only")
    entity = body.get("entity")
    ops = body.get("ops")
    validate_only = body.get("validate_only", False)
    if not isinstance(entity, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in entity.items()
    ):
        raise InvalidRequestError("entity must be an object of entity type -> name (null for the default)")
    if not isinstance(ops, list) or not ops:
        raise InvalidRequestError("ops must be a non-empty list of {key, value} (value null removes the key)")
    if not isinstance(validate_only, bool):
        raise InvalidRequestError("validate_only must be true or false")
    parsed: list[QuotaOp] = []
    for op in ops:
        if not isinstance(op, dict) or "key" not in op:
            raise InvalidRequestError("each op must be an object with a key and a value")
        key = op["key"]
        if key is not None and not isinstance(key, str):
            raise InvalidRequestError("an op's key must be a string")
        parsed.append(QuotaOp(key, _value(key, op.get("value"))))
    return Alteration(dict(entity.items()), tuple(parsed)), validate_only


def op_keys(body: Any) -> list[str | None]:
    """The op keys of a POST body, as far as it has any: to place an error about a body that did not parse."""
    ops = body.get("ops") if isinstance(body, dict) else None
    if not isinstance(ops, list):
        return []
    return [op.get("key") if isinstance(op, dict) and isinstance(op.get("key"), str) else None for op in ops]


def field_of(message: str | None, keys: Sequence[str | None]) -> dict[str, Any]:
    """Which form field an error message is about: ``{"op": i, "part": "key"|"value"}`` or ``{"entity": True}``.
    ``keys`` are the alteration's op keys, in order.

    Kafka's messages name the key they reject (``Invalid configuration key k``, ``Quota k must be greater than 0``,
    ``Proposed value for k ...``, ``k cannot be a fractional value``); a key given twice makes Kafka answer
    ``Ignoring duplicate entity``, shown at the second occurrence; the others are about the entity."""
    text = message or ""
    if text.startswith("Ignoring duplicate entity"):  # Kafka's answer to one key given twice for an entity
        seen: set[str | None] = set()
        for i, op_key in enumerate(keys):
            if op_key in seen:
                return {"op": i, "part": "key"}
            seen.add(op_key)
    for i, op_key in enumerate(keys):
        key = "null" if op_key is None else op_key
        if text.startswith(("Invalid configuration key ", "Duplicate quota key ")) and f" {key}" in text:
            return {"op": i, "part": "key"}
        value_messages = (
            f"Quota {key} ",
            f"Proposed value for {key} ",
            f"{key} cannot be",
            f"Cannot parse quota configuration value for {key}:",
        )
        if key and text.startswith(value_messages):
            return {"op": i, "part": "value"}
    return {"entity": True}
