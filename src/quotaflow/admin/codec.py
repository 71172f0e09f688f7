"""The JSON documents of describe, alter and resolve results.

One form everywhere: ``quotaflow client-quotas --output json`` prints it, the gateway serves a resolution at
``GET /resolve`` in it, and :class:`~quotaflow.admin.wire.WireAdmin` reads it back. Entities are Kafka's wire form
(``{"user": "alice", "client-id": null}``, null being the default entity).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from quotaflow.admin.local import AlterResult, Contribution, DescribedEntity, Resolution, ResolvedQuota
from quotaflow.core.entities import QuotaEntity


def describe_to_json(found: Sequence[DescribedEntity]) -> list[dict[str, object]]:
    """Described entities: ``[{"entity": {...}, "values": {key: value}}]``, keys sorted."""
    return [{"entity": d.entity.to_wire(), "values": dict(sorted(d.values.items()))} for d in found]


def alter_to_json(results: Sequence[AlterResult]) -> list[dict[str, object]]:
    """Per-entity alter results: ``error`` is null on success, else Kafka's code, name and message."""
    return [
        {
            "entity": dict(r.entity),
            "error": None if r.ok else {"code": r.error.code, "name": r.error.name, "message": r.error.message},
        }
        for r in results
    ]


def resolution_to_json(res: Resolution) -> dict[str, object]:
    """A resolution: the entity, the store sequence it was read at, and per key who supplies what it overrides."""
    quotas: dict[str, object] = {}
    for key in sorted(res.quotas):
        q = res.quotas[key]
        quotas[key] = {
            "value": q.value,
            "unlimited": q.unlimited,
            "entity": None if q.entity is None else q.entity.to_wire(),
            "level": q.level,
            "overridden": [{"level": c.level, "entity": c.entity.to_wire(), "value": c.value} for c in q.overridden],
            "quota_id": q.quota_id,
        }
    return {"entity": res.entity.to_wire(), "seq": res.seq, "quotas": quotas}


def _entity_from(doc: Mapping[str, str | None] | None) -> QuotaEntity | None:
    return None if doc is None else QuotaEntity.from_wire(doc)


def resolution_from_json(doc: Mapping[str, Any]) -> Resolution:
    """The :class:`Resolution` of a :func:`resolution_to_json` document; KeyError/TypeError/ValueError if malformed."""
    entity = QuotaEntity.from_wire(doc["entity"])
    quotas = {
        key: ResolvedQuota(
            key=key,
            value=None if q["value"] is None else float(q["value"]),
            entity=_entity_from(q["entity"]),
            level=q["level"],
            overridden=tuple(
                Contribution(int(c["level"]), QuotaEntity.from_wire(c["entity"]), float(c["value"]))
                for c in q["overridden"]
            ),
            quota_id=q["quota_id"],
        )
        for key, q in doc["quotas"].items()
    }
    return Resolution(entity, int(doc["seq"]), quotas)
