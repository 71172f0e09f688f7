"""Shadow quotas at the gateway (issue 36): a proposal evaluated on live traffic beside the enforced quotas, never
applied, and the promotion that makes it the enforced set on the whole fleet at one instant.

The quotas evaluated in shadow are always the enforced ones with the shadow set's changes applied
(``store.base.ShadowSet.changes``: a value sets a key, None removes it): :func:`shadow_entities` builds them from the
enforced entities, :class:`ShadowOverlay` passes every later enforced change on to the shadow's managers unless the
shadow overrides that key. Each upstream broker's :class:`~quotaflow.gateway.data.enforcement.Enforcement` then
holds a second ``Enforcement`` (``enforcement.shadow``) with the same settings, fed the same inputs at the same clock
reading by the decision paths (``api_handlers.decide_shadow``, ``Enforcement.network_time``); its decisions go to
the event log's ``shadow_*`` columns and to ``/metrics`` only.

A promote or rollback is one change-log batch (``store.base.Promotion``: ``first_seq..last_seq``) with an
``effective_ms``: :class:`PendingSwitch` holds the batch (and every change after it, so changes apply in log order)
until the first quota decision at or after ``effective_ms`` on the gateway's decision clock, which applies it before
deciding (``Enforcement.switch_ms``), so every row before that instant was decided by the old quotas and every row
from it by the new ones, on every gateway of the fleet (clocks synced by NTP).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from quotaflow.core.entities import QuotaEntity
from quotaflow.store.base import Change, EntityChange, Promotion

NEVER: Final = 1 << 62
"""``Enforcement.switch_ms`` while no promotion waits: later than any clock reading."""
MAX_COUNTED: Final = 10_000
"""(quota type, quota-id) pairs ``kafka_server_shadow_throttled_requests_total`` keeps per broker; beyond them a new
one is counted under ``user="*", client_id="*"`` (tenants choose client-ids: memory stays bounded)."""

Overrides = dict[QuotaEntity, dict[str, float | None]]


def overrides_of(changes: Iterable[EntityChange]) -> Overrides:
    """The shadow's changes per entity and key (a later one for the same key wins, as an alter file's)."""
    out: Overrides = {}
    for entity, values in changes:
        out.setdefault(entity, {}).update(values)
    return out


def shadow_entities(enforced: Mapping[QuotaEntity, Mapping[str, float]],
                    overrides: Overrides) -> dict[QuotaEntity, dict[str, float]]:
    """The enforced entities with the shadow's changes applied (an entity left without keys is gone)."""
    out = {entity: dict(values) for entity, values in enforced.items()}
    for entity, values in overrides.items():
        keys = out.setdefault(entity, {})
        for key, value in values.items():
            if value is None:
                keys.pop(key, None)
            else:
                keys[key] = value
        if not keys:
            del out[entity]
    return out


def passed_on(changes: Sequence[Change], overrides: Overrides) -> list[Change]:
    """The enforced changes that reach the shadow's managers: all but those of a key the shadow sets or removes."""
    return [c for c in changes if c.key not in overrides.get(c.entity, {})]


@dataclass(frozen=True, slots=True)
class ShadowDecisions:
    """One request decided under the shadow set: the event log's ``SHADOW_REQUEST_FIELDS``."""

    shadow_id: int
    throttle_ms_produce: int = 0
    throttle_ms_fetch: int = 0
    throttle_ms_request: int = 0
    throttle_ms: int = 0


@dataclass(slots=True)
class ThrottledCounts:
    """Requests the shadow would have throttled, per quota type and quota-id (the ``user`` / ``client-id`` tags of
    the shadow's throttle-time series, so a console can put both on one row), for one broker's managers."""

    counts: dict[tuple[str, str, str], int] = field(default_factory=dict)

    def add(self, quota_type: str, user: str, client_id: str) -> None:
        key = (quota_type, user, client_id)
        counts = self.counts
        if key not in counts and len(counts) >= MAX_COUNTED:
            key = (quota_type, "*", "*")
        counts[key] = counts.get(key, 0) + 1


@dataclass(slots=True)
class PendingSwitch:
    """Promotions (and rollbacks) read from the store whose batch waits for its ``effective_ms``."""

    waiting: list[Promotion] = field(default_factory=list)
    held: list[Change] = field(default_factory=list)
    """Changes read from the log from the first waiting batch on, in log order: applied when it switches."""

    @property
    def first_seq(self) -> int | None:
        return min((p.first_seq for p in self.waiting), default=None)

    @property
    def effective_ms(self) -> int:
        return min((p.effective_ms for p in self.waiting), default=NEVER)

    def split(self, changes: Sequence[Change]) -> list[Change]:
        """Keep the changes from the first waiting batch on; returns those before it (to apply now)."""
        first = self.first_seq
        if first is None:
            return list(changes)
        now = [c for c in changes if c.seq < first]
        self.held.extend(c for c in changes if c.seq >= first)
        return now

    def due(self, now_ms: int) -> tuple[list[Change], list[Promotion]]:
        """The held changes to apply at ``now_ms`` (those up to the last batch due, and the unrelated ones before
        the next batch still waiting) and the promotions they complete."""
        done = [p for p in self.waiting if p.effective_ms <= now_ms]
        if not done:
            return [], []
        self.waiting = [p for p in self.waiting if p.effective_ms > now_ms]
        first = self.first_seq
        if first is None:
            out, self.held = self.held, []
        else:
            out = [c for c in self.held if c.seq < first]
            self.held = [c for c in self.held if c.seq >= first]
        return out, done
