"""DescribeClientQuotas filters exactly as KRaft's ``ClientQuotasImage.describe``.

A filter is a list of components (exact name / default / any specified name, the default included) plus
``strict``. Unlike alter errors, a filter error fails the whole request; an unknown entity type is
UNSUPPORTED_VERSION, not INVALID_REQUEST.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from quotaflow.core.entities import DEFAULT, ENTITY_TYPES, EntityType, QuotaEntity
from quotaflow.core.errors import InvalidRequestError, UnsupportedVersionError


class MatchType(IntEnum):
    """Wire values of ``MatchType``."""

    EXACT = 0
    DEFAULT = 1
    SPECIFIED = 2


_ATTRS: dict[str, str] = {"user": "user", "client-id": "client_id", "ip": "ip", "client-id-prefix": "client_id_prefix"}
_MATCH_RULES: dict[int, tuple[bool, str]] = {
    MatchType.EXACT: (True, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    MatchType.DEFAULT: (False, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    MatchType.SPECIFIED: (False, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
}


@dataclass(frozen=True, slots=True)
class FilterComponent:
    """One ``ComponentData``: entity type, match type (an int, since the wire may carry unknown ones), match."""

    entity_type: str
    match_type: int
    match: str | None = None

    @classmethod
    def exact(cls, entity_type: str, name: str) -> FilterComponent:
        """``ClientQuotaFilterComponent.ofEntity``."""
        return cls(entity_type, MatchType.EXACT, name)

    @classmethod
    def default(cls, entity_type: str) -> FilterComponent:
        """``ofDefaultEntity``."""
        return cls(entity_type, MatchType.DEFAULT, None)

    @classmethod
    def any(cls, entity_type: str) -> FilterComponent:
        """``ofEntityType``: any specified name of the type, *including* the default."""
        return cls(entity_type, MatchType.SPECIFIED, None)

    def matches(self, entries: Mapping[str, str | None]) -> bool:
        if self.entity_type not in entries:
            return False
        if self.match_type == MatchType.SPECIFIED:
            return True
        name = entries[self.entity_type]
        if self.match_type == MatchType.DEFAULT:
            return name is None
        return name is not None and name == self.match


@dataclass(frozen=True, slots=True)
class QuotaFilter:
    """``ClientQuotaFilter``: ``contains(components)`` is strict=False, ``contains_only`` is strict=True."""

    components: tuple[FilterComponent, ...] = field(default_factory=tuple)
    strict: bool = False

    @classmethod
    def contains(cls, components: Sequence[FilterComponent]) -> QuotaFilter:
        return cls(tuple(components), False)

    @classmethod
    def contains_only(cls, components: Sequence[FilterComponent]) -> QuotaFilter:
        return cls(tuple(components), True)

    @classmethod
    def all(cls) -> QuotaFilter:
        return cls((), False)

    def validate(self) -> None:
        """Raise the whole-request error Kafka returns for a bad filter, checking components in order."""
        seen: set[str] = set()
        for c in self.components:
            if c.entity_type == "":
                raise InvalidRequestError("Invalid empty entity type.")
            if c.entity_type in seen:
                raise InvalidRequestError(f"Entity type {c.entity_type} cannot appear more than once in the filter.")
            seen.add(c.entity_type)
            if c.entity_type not in ENTITY_TYPES:
                raise UnsupportedVersionError(f"Unsupported entity type {c.entity_type}")
            if c.match_type not in _MATCH_RULES:
                raise InvalidRequestError(f"Unknown match type {c.match_type}")
            needs_match, message = _MATCH_RULES[c.match_type]
            if (c.match is not None) != needs_match:
                raise InvalidRequestError(message)
        if EntityType.IP.value in seen and (EntityType.USER.value in seen or EntityType.CLIENT_ID.value in seen):
            raise InvalidRequestError(
                "Invalid entity filter component combination. IP filter component should not be used with "
                "user or clientId filter component."
            )
        if EntityType.CLIENT_ID_PREFIX.value in seen and len(seen) > 1:  # beyond Kafka: a prefix entity is alone
            raise InvalidRequestError(
                "Invalid entity filter component combination. A client-id-prefix filter component should not be "
                "used with any other filter component."
            )

    def matches(self, entity: QuotaEntity | Mapping[str, str | None]) -> bool:
        """Whether a stored entity (type -> name, None = default) is selected. Call :meth:`validate` first."""
        if isinstance(entity, QuotaEntity):
            return self._matches_entity(entity)
        if self.strict and len(entity) != len(self.components):
            return False
        return all(c.matches(entity) for c in self.components)

    def _matches_entity(self, entity: QuotaEntity) -> bool:
        """The same rules read straight off the entity's parts (describe scans every stored entity)."""
        if self.strict and len(self.components) != (
            (entity.user is not None) + (entity.client_id is not None) + (entity.ip is not None)
            + (entity.client_id_prefix is not None)
        ):
            return False
        for c in self.components:
            part = getattr(entity, _ATTRS[c.entity_type])
            if part is None:
                return False
            if c.match_type == MatchType.DEFAULT and part is not DEFAULT:
                return False
            if c.match_type == MatchType.EXACT and (part is DEFAULT or part != c.match):
                return False
        return True

    def exact_entity(self) -> QuotaEntity | None:
        """The one entity a strict filter of only exact / default components can match, else None."""
        if not self.strict or not self.components:
            return None
        if any(c.match_type not in (MatchType.EXACT, MatchType.DEFAULT) for c in self.components):
            return None
        return QuotaEntity.from_wire({c.entity_type: c.match for c in self.components})
