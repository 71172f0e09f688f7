"""What both stores decide the same way about shadow sets (pure, no I/O): which keys a promotion changes, which
promotion a rollback undoes and whether it may, and the JSON form of a set of entity changes.

A promotion records only the keys it *changes* (a value equal to the enforced one, or the removal of an absent key,
changes nothing, as in ``alter``): ``previous`` holds their values before (None: absent) and ``applied`` after. A
rollback undoes the newest promotion not rolled back yet (so rollbacks walk back through the promotions, newest
first) by applying its ``previous``; it is refused when one of those keys no longer holds the value the promotion
applied (someone changed it since), unless forced: restoring would silently undo that later change.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from quotaflow.core.entities import QuotaEntity, entity_text
from quotaflow.core.errors import ShadowStateError
from quotaflow.core.javafmt import java_double_str
from quotaflow.store.base import EntityChange, Promotion, Values

PROMOTE: Final = "promote"
ROLLBACK: Final = "rollback"
RUNNING: Final = "running"
STOPPED: Final = "stopped"
REPLACED: Final = "replaced"
PROMOTED: Final = "promoted"
OUTCOMES: Final = frozenset({RUNNING, STOPPED, REPLACED, PROMOTED})
_NON_FINITE: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def same(a: float | None, b: float | None) -> bool:
    """Equal as stored values (None: absent); NaN equals NaN, as Java's ``Double.equals`` (the stores' rule)."""
    if a is None or b is None:
        return a is b
    return a == b or (math.isnan(a) and math.isnan(b))


def effective(changes: Sequence[EntityChange], current: Callable[[QuotaEntity], Values]
              ) -> tuple[tuple[EntityChange, ...], tuple[EntityChange, ...]]:
    """``(previous, applied)``: per entity, the keys ``changes`` really change, with their values before and after
    (entities in the changes' order, keys in each entity's order)."""
    previous: list[EntityChange] = []
    applied: list[EntityChange] = []
    for entity, ops in changes:
        now = current(entity)
        before: dict[str, float | None] = {}
        after: dict[str, float | None] = {}
        for key, value in ops.items():
            if not same(now.get(key), value):
                before[key] = now.get(key)
                after[key] = value
        if after:
            previous.append((entity, before))
            applied.append((entity, after))
    return tuple(previous), tuple(applied)


def rollback_target(promotions: Sequence[Promotion]) -> Promotion:
    """The newest promotion not rolled back yet (a rollback names its promotion's shadow set, promoted once)."""
    undone = {p.shadow_id for p in promotions if p.kind == ROLLBACK}
    for promotion in reversed(promotions):
        if promotion.kind == PROMOTE and promotion.shadow_id not in undone:
            return promotion
    if any(p.kind == PROMOTE for p in promotions):
        raise ShadowStateError("nothing to roll back: every promotion has been rolled back already")
    raise ShadowStateError("nothing to roll back: no shadow set was ever promoted")


def rollback_conflicts(promotion: Promotion, current: Callable[[QuotaEntity], Values]) -> list[str]:
    """The keys of ``promotion`` that no longer hold the value it applied, one ``{entity} key: applied -> now``
    each."""
    out = []
    for entity, ops in promotion.applied:
        now = current(entity)
        for key, value in ops.items():
            if not same(now.get(key), value):
                out.append(f"{{{entity_text(entity.to_wire())}}} {key}: {_show(value)} -> {_show(now.get(key))}")
    return out


def check_rollback(promotion: Promotion, current: Callable[[QuotaEntity], Values], force: bool) -> None:
    """Refuse (:class:`ShadowStateError`) a rollback over keys changed since the promotion, unless ``force``."""
    conflicts = [] if force else rollback_conflicts(promotion, current)
    if conflicts:
        shown = "; ".join(conflicts[:5]) + (f"; and {len(conflicts) - 5} more" if len(conflicts) > 5 else "")
        raise ShadowStateError(
            f"rollback refused: {len(conflicts)} key(s) that promotion {promotion.id} (shadow set "
            f"{promotion.shadow_name!r}) applied changed since ({shown}); restoring them would undo those later "
            f"changes; --force restores them anyway")


def _show(value: float | None) -> str:
    return "absent" if value is None else java_double_str(value)


# -- JSON ----------------------------------------------------------------------------------------------------------


def encode_value(value: float | None) -> float | str | None:
    """A quota value in JSON (``allow_nan=False``): non-finite ones as strings."""
    if value is None or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def decode_value(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"not a quota value: {value!r}")


def changes_to_json(changes: Sequence[EntityChange]) -> list[dict[str, Any]]:
    """``[{"entity": path, "ops": {key: value | null}}]``, the entity by its canonical store path."""
    return [{"entity": entity.path, "ops": {k: encode_value(v) for k, v in ops.items()}} for entity, ops in changes]


def changes_from_json(doc: Any) -> tuple[EntityChange, ...]:
    """The inverse of :func:`changes_to_json`; a ``ValueError`` for anything else. Values are not validated here:
    the Kafka store's reader validates them as it validates quota records."""
    if not isinstance(doc, list):
        raise ValueError("changes are a list")
    out: list[EntityChange] = []
    for entry in doc:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("ops"), Mapping):
            raise ValueError("a change is {entity, ops}")
        entity = QuotaEntity.from_path(str(entry["entity"]))
        out.append((entity, {str(k): decode_value(v) for k, v in entry["ops"].items()}))
    return tuple(out)
