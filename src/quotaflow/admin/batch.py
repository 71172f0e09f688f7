"""Alterations from a file: a ``client-quotas --describe --output json`` document (``quotaflow recommend``'s
``proposal.json``) applied entity by entity, with what each one changes.

Each entry ``{"entity": {type: name | null}, "values": {key: number | null}}`` is one ``AlterClientQuotas`` entry
(a null value removes the key). Kafka validates and applies each entity all-or-nothing; one bad entity does not stop
the others. :func:`plan_changes` reads the current values first so the caller can say what changes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quotaflow.admin.local import AdminBackend, Alteration, AlterResult, QuotaOp
from quotaflow.core.errors import CommandError, KafkaError
from quotaflow.core.filters import FilterComponent, QuotaFilter


def read_proposal(path: Path) -> list[Alteration]:
    """The alterations of a proposal file (``client-quotas --alter --from-file``, ``shadow start --from-file``)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CommandError(f"Cannot read {path}: {e}") from e
    return alterations_from_json(doc, str(path))


def alterations_from_json(doc: Any, source: str = "proposal") -> list[Alteration]:
    """The alterations of a describe-shaped document; a clear error naming the entry that is malformed."""
    if not isinstance(doc, list):
        raise CommandError(f"{source}: expected a JSON list of {{\"entity\": ..., \"values\": ...}} entries")
    out = []
    for i, entry in enumerate(doc):
        where = f"{source}: entry {i}"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("entity"), Mapping) or not isinstance(
                entry.get("values"), Mapping):  # fmt: skip
            raise CommandError(f"{where}: expected {{\"entity\": {{...}}, \"values\": {{...}}}}")
        entity = entry["entity"]
        if not all(isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in entity.items()):
            raise CommandError(f"{where}: entity parts are type: name (a string, or null for the default)")
        ops = []
        for key, value in entry["values"].items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or not math.isfinite(value)):  # fmt: skip
                raise CommandError(f"{where}: value of {key} must be a number or null, got {value!r}")
            ops.append(QuotaOp(key, None if value is None else float(value)))
        if not ops:
            raise CommandError(f"{where}: no values")
        out.append(Alteration(dict(entity.items()), tuple(ops)))
    return out


@dataclass(frozen=True, slots=True)
class KeyChange:
    key: str | None
    old: float | None
    new: float | None

    @property
    def changed(self) -> bool:
        return self.old != self.new


@dataclass(frozen=True, slots=True)
class EntityChanges:
    """One entity of the file: its keys' current and proposed values, and the alter result once applied."""

    alteration: Alteration
    keys: tuple[KeyChange, ...]
    result: AlterResult | None = None

    @property
    def changed(self) -> int:
        return sum(k.changed for k in self.keys)


def current_values(backend: AdminBackend, entity: Mapping[str | None, str | None]) -> dict[str, float]:
    """What the store holds for exactly this entity ({} when nothing, or when the entity is not valid)."""
    parts = [(t, n) for t, n in entity.items() if t is not None]
    if not parts or len(parts) != len(entity):
        return {}
    comps = tuple(FilterComponent.default(t) if n is None else FilterComponent.exact(t, n) for t, n in parts)
    try:
        found = backend.describe(QuotaFilter(comps, True))
    except (KafkaError, ValueError):  # an invalid entity: alter reports it, with Kafka's error
        return {}
    return dict(found[0].values) if found else {}


def plan_changes(backend: AdminBackend, alterations: Sequence[Alteration]) -> list[EntityChanges]:
    out = []
    for a in alterations:
        now = current_values(backend, a.entity)
        out.append(EntityChanges(a, tuple(KeyChange(op.key, now.get(op.key or ""), op.value) for op in a.ops)))
    return out


def apply(backend: AdminBackend, alterations: Sequence[Alteration],
          validate_only: bool = False) -> list[EntityChanges]:  # fmt: skip
    """Current values, then one ``alter`` call (Kafka: each entity validated and applied all-or-nothing)."""
    planned = plan_changes(backend, alterations)
    results = backend.alter(alterations, validate_only)
    by_entity = {frozenset(r.entity.items()): r for r in results}
    return [EntityChanges(p.alteration, p.keys, by_entity.get(frozenset(p.alteration.entity.items())))
            for p in planned]  # fmt: skip


def changes_to_json(changes: Sequence[EntityChanges]) -> list[dict[str, object]]:
    return [
        {
            "entity": dict(c.alteration.entity),
            "changes": {str(k.key): {"old": k.old, "new": k.new} for k in c.keys},
            "error": None if c.result is None or c.result.ok else {
                "code": c.result.error.code, "name": c.result.error.name, "message": c.result.error.message},
        }
        for c in changes
    ]  # fmt: skip
