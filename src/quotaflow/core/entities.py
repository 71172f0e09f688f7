"""Quota entities (KIP-55 / KIP-546 / KIP-612): who a quota is configured for.

An entity has up to three of Kafka's parts, ``user``, ``client-id`` and ``ip``. Each part is absent (``None``), the
default entity (``DEFAULT``) or a name. A literal name ``"<default>"`` is an ordinary name, distinct from
``DEFAULT``. On the wire (and in Kafka's records) the default is a null name.

Beyond Kafka's model (docs/quota-model.md): ``client-id-prefix`` (Redpanda's type and wire name), always alone and
never the default, and ``ip`` names that are CIDR ranges (``10.1.0.0/16``) for ``connection_creation_rate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, TypeAlias

from quotaflow.core.javaorder import hashmap_order
from quotaflow.core.sanitize import desanitize, sanitize


class _Default:
    """The default entity of a type (``<default>`` in Kafka's paths, a null name on the wire)."""

    _instance: _Default | None = None

    def __new__(cls) -> _Default:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "DEFAULT"

    def __reduce__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = _Default()
DefaultType: TypeAlias = _Default
Name: TypeAlias = str | _Default
Part: TypeAlias = str | _Default | None

DEFAULT_PATH_NAME: Final = "<default>"


class EntityType(StrEnum):
    USER = "user"
    CLIENT_ID = "client-id"
    IP = "ip"
    CLIENT_ID_PREFIX = "client-id-prefix"


ENTITY_TYPES: Final = frozenset(t.value for t in EntityType)
WireEntity: TypeAlias = Mapping[str, str | None]


def wire_name(part: Name) -> str | None:
    return None if part is DEFAULT else part  # type: ignore[return-value]


def from_wire_name(name: str | None) -> Name:
    return DEFAULT if name is None else name


def render_entity(entries: WireEntity) -> str:
    """Java's ``ClientQuotaEntity.toString``: ``ClientQuotaEntity(entries={user=alice, client-id=null})``."""
    body = ", ".join(f"{k}={'null' if entries[k] is None else entries[k]}" for k in hashmap_order(entries))
    return f"ClientQuotaEntity(entries={{{body}}})"


def entity_text(entries: WireEntity) -> str:
    """KIP-546's display form, parts in user, client-id, ip order: ``user=alice, client-id=<default>`` (the CLI
    wraps it in braces; an empty entity is the empty string)."""
    ordered = sorted(entries.items(), key=lambda kv: _DISPLAY_ORDER.get(kv[0], len(_DISPLAY_ORDER)))
    return ", ".join(f"{t}={DEFAULT_PATH_NAME if n is None else n}" for t, n in ordered)


_DISPLAY_ORDER: Final = {t.value: i for i, t in enumerate(EntityType)}
_PLURALS: Final = {"user": "users", "client-id": "clients", "ip": "ips", "client-id-prefix": "client-id-prefixes"}


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A validated entity: the parts that are present, each a name or ``DEFAULT``."""

    user: Part = None
    client_id: Part = None
    ip: Part = None
    client_id_prefix: Part = None

    @classmethod
    def from_wire(cls, entries: WireEntity) -> QuotaEntity:
        """From a type→name map (null name = default). Types must be known; validation reports the rest."""
        unknown = set(entries) - ENTITY_TYPES
        if unknown:
            raise ValueError(f"Unhandled client quota entity type: {sorted(unknown)[0]}")

        def part(t: EntityType) -> Part:
            return from_wire_name(entries[t.value]) if t.value in entries else None

        return cls(part(EntityType.USER), part(EntityType.CLIENT_ID), part(EntityType.IP),
                   part(EntityType.CLIENT_ID_PREFIX))

    def to_wire(self) -> dict[str, str | None]:
        """Type→name in the order user, client-id, ip; ``DEFAULT`` becomes ``None``."""
        out: dict[str, str | None] = {}
        for t, p in self.items():
            out[t.value] = wire_name(p)
        return out

    def items(self) -> list[tuple[EntityType, Name]]:
        pairs = ((EntityType.USER, self.user), (EntityType.CLIENT_ID, self.client_id), (EntityType.IP, self.ip),
                 (EntityType.CLIENT_ID_PREFIX, self.client_id_prefix))
        return [(t, p) for t, p in pairs if p is not None]

    @property
    def types(self) -> frozenset[str]:
        return frozenset(t.value for t, _ in self.items())

    def __len__(self) -> int:
        return len(self.items())

    def is_ip(self) -> bool:
        return self.ip is not None

    def is_prefix(self) -> bool:
        """A ``client-id-prefix`` entity (always alone: validation refuses it with other parts)."""
        return self.client_id_prefix is not None

    @property
    def path(self) -> str:
        """KIP-55 / KIP-612 entity path: ``users/<sanitized-user>/clients/<sanitized-client>``, ``ips/<ip>``."""
        segments = []
        for t, p in self.items():
            plural = _PLURALS[t.value]
            segments.append(f"{plural}/{DEFAULT_PATH_NAME if p is DEFAULT else sanitize(p)}")  # type: ignore[arg-type]
        return "/".join(segments)

    @classmethod
    def from_path(cls, path: str) -> QuotaEntity:
        """Inverse of :attr:`path`."""
        bits = path.split("/")
        if len(bits) % 2 or not bits:
            raise ValueError(f"Invalid entity path {path!r}")
        kinds = {plural: kind for kind, plural in _PLURALS.items()}
        entries: dict[str, str | None] = {}
        for plural, raw in zip(bits[::2], bits[1::2], strict=True):
            if plural not in kinds:
                raise ValueError(f"Invalid entity path {path!r}")
            entries[kinds[plural]] = None if raw == DEFAULT_PATH_NAME else desanitize(raw)
        return cls.from_wire(entries)

    def __str__(self) -> str:
        return render_entity(self.to_wire())
