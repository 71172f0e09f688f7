"""Shadow quotas over any store (issue 36): try a proposal on live traffic, then promote it fleet-wide or drop it.

The rollout loop is ``quotaflow recommend`` (a proposal) → ``quotaflow backtest`` (its effect on recorded traffic)
→ :func:`start` (every gateway evaluates it beside the enforced quotas, enforcing only those) → :func:`promote`
(one store batch every gateway applies at the same instant) or :func:`stop`; :func:`rollback` undoes a promotion.

A proposal is validated by the very code ``client-quotas --alter --from-file`` runs (:func:`read_proposal`,
:meth:`Admin.plan`, Kafka's per-entity rules), but all-or-nothing: one invalid entity refuses the whole set, since a
shadow that silently lacks part of its proposal would measure something else. The store keeps the set and the
history (:class:`~quotaflow.store.base.ShadowStore`); this module decides what to ask of it and how to show it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from quotaflow.admin.batch import read_proposal
from quotaflow.admin.local import Admin, Alteration
from quotaflow.core.errors import CommandError, ShadowStateError, StoreError
from quotaflow.core.validation import render_raw_entity
from quotaflow.store.base import EntityChange, Promotion, QuotaStore, ShadowSet, ShadowStore
from quotaflow.store.shadowing import encode_value

DEFAULT_GRACE_S: Final = 5.0
"""How far ahead a promotion takes effect by default: every gateway (polling every ``quotaflow.store.poll.ms``,
250 ms by default) has read the batch well before, so the fleet switches at the same instant."""
MAX_GRACE_S: Final = 24 * 3600.0
MAX_NAME_CHARS: Final = 200


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def shadow_store(store: QuotaStore) -> ShadowStore:
    """The store as a :class:`ShadowStore` (both stores are); a :class:`StoreError` for one that is not."""
    if not isinstance(store, ShadowStore):
        raise StoreError(f"the quota store {getattr(store, 'path', store)} keeps no shadow sets")
    return store


def validate(store: QuotaStore, alterations: Sequence[Alteration], source: str = "proposal") -> list[EntityChange]:
    """The store changes of a proposal, validated as ``client-quotas --alter`` validates them (KRaft's
    ``ClientQuotaControlManager`` rules, duplicates included); any invalid entity refuses the whole proposal, each
    named with Kafka's message."""
    results, changes = Admin(store).plan(alterations)
    failed = [r for r in results if not r.ok]
    if failed:
        shown = "; ".join(f"{render_raw_entity(r.entity)}: {r.error.message}" for r in failed[:5])
        more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
        raise CommandError(f"{source}: {len(failed)} of {len(results)} entities are invalid, the shadow set was not "
                           f"started ({shown}{more})")
    if not changes:
        raise CommandError(f"{source}: the proposal changes nothing")
    return changes


def start(store: QuotaStore, alterations: Sequence[Alteration], name: str, by: str,
          source: str = "proposal") -> ShadowSet:
    """Validate and start (a running set is replaced, and ends ``replaced``)."""
    name = name.strip()
    if not name or len(name) > MAX_NAME_CHARS:
        raise CommandError(f"a shadow set needs a name of 1 to {MAX_NAME_CHARS} characters")
    changes = validate(store, alterations, source)
    return shadow_store(store).start_shadow(name, by, changes)


def start_from_file(store: QuotaStore, path: Path, name: str, by: str) -> ShadowSet:
    """``shadow start --from-file``: the file ``client-quotas --alter --from-file`` takes."""
    return start(store, read_proposal(path), name, by, str(path))


def status(store: QuotaStore) -> ShadowSet | None:
    return shadow_store(store).shadow()


def stop(store: QuotaStore, by: str) -> ShadowSet:
    """End the running set without enforcing it; a :class:`ShadowStateError` when none runs."""
    stopped = shadow_store(store).stop_shadow(by)
    if stopped is None:
        raise ShadowStateError("no shadow set is running: nothing to stop")
    return stopped


def effective_at(grace_s: float, clock_ms: Callable[[], int] = _now_ms) -> int:
    """``now + grace`` in epoch ms; the grace between 0 (at once) and a day."""
    if not 0 <= grace_s <= MAX_GRACE_S:
        raise CommandError(f"--in must be between 0 and {MAX_GRACE_S:g} seconds, got {grace_s:g}")
    return clock_ms() + round(grace_s * 1000)


def promote(store: QuotaStore, by: str, grace_s: float = DEFAULT_GRACE_S,
            clock_ms: Callable[[], int] = _now_ms) -> Promotion:
    """The running set becomes enforced: one batch, applied by every gateway at ``now + grace_s``."""
    return shadow_store(store).promote_shadow(by, effective_at(grace_s, clock_ms))


def rollback(store: QuotaStore, by: str, grace_s: float = DEFAULT_GRACE_S, *, force: bool = False,
             clock_ms: Callable[[], int] = _now_ms) -> Promotion:
    """Undo the newest promotion not rolled back yet, as one batch likewise; refused over keys changed since that
    promotion unless ``force``."""
    return shadow_store(store).rollback(by, effective_at(grace_s, clock_ms), force=force)


@dataclass(frozen=True, slots=True)
class History:
    shadows: list[ShadowSet]
    promotions: list[Promotion]


def history(store: QuotaStore) -> History:
    s = shadow_store(store)
    return History(s.shadow_sets(), s.promotions())


# -- JSON ----------------------------------------------------------------------------------------------------------


def changes_json(changes: Sequence[EntityChange]) -> list[dict[str, Any]]:
    """Entity changes in the proposal shape (``client-quotas --describe --output json``): a shadow set's changes
    written to a file start the same set again."""
    return [{"entity": entity.to_wire(), "values": {k: encode_value(v) for k, v in ops.items()}}
            for entity, ops in changes]


def shadow_json(shadow: ShadowSet) -> dict[str, Any]:
    return {"id": shadow.id, "name": shadow.name, "started_by": shadow.started_by, "started_ms": shadow.started_ms,
            "outcome": shadow.outcome, "ended_by": shadow.ended_by, "ended_ms": shadow.ended_ms,
            "changes": changes_json(shadow.changes)}


def promotion_json(p: Promotion) -> dict[str, Any]:
    return {"id": p.id, "kind": p.kind, "shadow_id": p.shadow_id, "shadow_name": p.shadow_name, "by": p.by,
            "at_ms": p.at_ms, "effective_ms": p.effective_ms, "first_seq": p.first_seq, "last_seq": p.last_seq,
            "previous": changes_json(p.previous), "applied": changes_json(p.applied)}


def history_json(h: History) -> dict[str, Any]:
    return {"shadow_sets": [shadow_json(s) for s in h.shadows], "promotions": [promotion_json(p) for p in h.promotions]}
