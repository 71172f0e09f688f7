"""One gateway following its store's shadow quota set and promotions (issue 36), on the store poll.

Each poll reads the change log first and then, only when ``ShadowStore.shadow_version()`` moved, the running shadow
set and the promotion history (:meth:`ShadowFollower.read`, off the event loop). In that order a promotion's batch is
never seen in the change log before the promotion itself: a change of a batch read in one poll has its promotion read
in the same poll, so it is always held. :meth:`ShadowFollower.update` (on the loop) then

* starts, replaces or stops the shadow set on every broker's managers (``BrokerQuotas.start_shadow``), on the
  connection quotas (``ObservedConnectionQuotas.start_shadow``) and in the event log (request rows go to its shadow
  queue while a shadow runs, so they carry the ``shadow_*`` columns);
* holds a new promotion's batch, and every change after it, until ``effective_ms`` on the gateway's decision clock
  (``BrokerQuotas.set_switch``: the first decision at or after it applies them first; a timer does it too when no
  request comes), keeping the promoted shadow running until then; a batch read after its ``effective_ms`` is applied
  at once, and how late is logged (``late_ms``).

A store without the protocol (``ShadowStore``) has no shadow: nothing here runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quotaflow.gateway.data.shadow import NEVER, PendingSwitch, passed_on
from quotaflow.store.base import Change, Promotion, QuotaStore, ShadowSet, ShadowStore

if TYPE_CHECKING:
    from quotaflow.gateway.data.broker_quotas import BrokerQuotas
    from quotaflow.gateway.listener import ConnectionQuotaReloader
    from quotaflow.gateway.observation.connection_events import ObservedConnectionQuotas

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ShadowState:
    """What the store says at one poll."""

    version: int
    shadow: ShadowSet | None
    promotions: list[Promotion]


@dataclass(frozen=True, slots=True)
class Switched:
    """A promotion or rollback this gateway applied: at which decision-clock reading, and how late."""

    promotion: Promotion
    applied_ms: int
    late_ms: int


class ShadowFollower:
    def __init__(self, store: QuotaStore, broker_quotas: BrokerQuotas, connections: ObservedConnectionQuotas,
                 clock_ms: Callable[[], int], rows: Callable[[bool], None]) -> None:
        self.store: ShadowStore | None = store if isinstance(store, ShadowStore) else None
        self.broker_quotas = broker_quotas
        self.connections = connections
        self.clock_ms = clock_ms  # the gateway's decision clock
        self._rows = rows  # point the event log's request rows at its shadow queue (True) or back
        self.reloader: ConnectionQuotaReloader | None = None
        self.version: int | None = None
        self.known: set[int] = set()  # promotion ids already seen (or older than the snapshot)
        self.pending = PendingSwitch()
        self.switched: list[Switched] = []
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def shadow(self) -> ShadowSet | None:
        return self.broker_quotas.shadow

    # -- reading the store (executor) ------------------------------------------------------------------------

    def read(self) -> ShadowState | None:
        """The store's shadow state when its version moved since the last :meth:`update`, else None."""
        store = self.store
        if store is None:
            return None
        version = store.shadow_version()
        if version == self.version:
            return None
        return ShadowState(version, store.shadow(), store.promotions())

    # -- applying it (event loop) ----------------------------------------------------------------------------

    async def start(self, snapshot_seq: int) -> None:
        """At gateway start (after the snapshot at ``snapshot_seq`` is loaded): the running shadow, and every
        promotion the snapshot already holds is history."""
        if self.store is None:
            return
        state = await asyncio.get_running_loop().run_in_executor(None, self.read)
        if state is None:
            return
        now = self.clock_ms()
        for promotion in state.promotions:
            if promotion.last_seq > snapshot_seq:
                continue  # its batch comes with the change log: held as any
            self.known.add(promotion.id)
            if promotion.effective_ms > now:
                self._hold_loaded(promotion, snapshot_seq)
        await self.update(state, [])

    def _hold_loaded(self, promotion: Promotion, snapshot_seq: int) -> None:
        """A batch the snapshot already holds while its ``effective_ms`` is still ahead (this gateway started
        during the grace): its keys go back to their values before it until then, as on every other gateway, unless
        a later change moved them since. (Connection-rate keys are left as loaded.)"""
        current = self.broker_quotas.entities
        revert: list[Change] = []
        held: list[Change] = []
        previous = {(entity, key): value for entity, values in promotion.previous for key, value in values.items()}
        for entity, values in promotion.applied:
            for key, value in values.items():
                if current.get(entity, {}).get(key) != value:
                    continue
                revert.append(Change(snapshot_seq, promotion.at_ms, entity, key, previous.get((entity, key))))
                held.append(Change(snapshot_seq, promotion.at_ms, entity, key, value))
        if revert:
            self.broker_quotas.apply_changes(revert)
        self.pending.waiting.append(Promotion(
            promotion.id, promotion.kind, promotion.shadow_id, promotion.shadow_name, promotion.by, promotion.at_ms,
            promotion.effective_ms, snapshot_seq, snapshot_seq, promotion.previous, promotion.applied))
        self.pending.held.extend(held)
        log.info("%s %d takes effect at %d, after this gateway started: its %d keys keep their previous values "
                 "until then", promotion.kind, promotion.id, promotion.effective_ms, len(held))

    async def update(self, state: ShadowState | None, changes: Sequence[Change]) -> list[Change]:
        """Take the store's new shadow state (None: unchanged) and this poll's changes; returns the changes to
        apply to the enforced quotas now (the rest are held for their promotion's ``effective_ms``)."""
        late: list[tuple[Promotion, int]] = []
        if state is not None:
            self.version = state.version
            now = self.clock_ms()
            for promotion in state.promotions:
                if promotion.id in self.known:
                    continue
                self.known.add(promotion.id)
                self.pending.waiting.append(promotion)
                if promotion.effective_ms <= now:
                    late.append((promotion, now - promotion.effective_ms))
                log.info("%s %d of shadow set %d (%r) by %s read: changes %d..%d take effect at %d (in %d ms)",
                         promotion.kind, promotion.id, promotion.shadow_id, promotion.shadow_name, promotion.by,
                         promotion.first_seq, promotion.last_seq, promotion.effective_ms,
                         promotion.effective_ms - now)
            await self._follow(state.shadow)
        now_changes = self.pending.split(changes)
        if self.pending.waiting:
            self._arm()
        if late:
            self.switch(self.clock_ms(), late=dict((p.id, ms) for p, ms in late))
        return now_changes

    async def _follow(self, shadow: ShadowSet | None) -> None:
        current = self.broker_quotas.shadow
        if shadow is None and current is not None and any(
                p.kind == "promote" and p.shadow_id == current.id for p in self.pending.waiting):
            return  # promoted: it runs until its batch takes effect
        if shadow is not None and current is not None and shadow.id == current.id:
            return
        if current is not None:
            self._stop()
        if shadow is not None:
            await self._start(shadow)

    async def _start(self, shadow: ShadowSet) -> None:
        # managers and row queue in one step (no await between): a row decided under the shadow must never reach
        # the plain queue, whose files have no shadow columns
        self.broker_quotas.start_shadow(shadow)
        quotas = self.connections.start_shadow(shadow.id)
        self._rows(True)
        if self.reloader is not None:  # awaits only to resolve a hostname entity
            await self.reloader.apply_to(quotas, self.broker_quotas.shadow_entities())
        log.info("shadow quota set %d (%r, started by %s) evaluated beside the enforced quotas: %d entities "
                 "changed", shadow.id, shadow.name, shadow.started_by, len(shadow.changes))

    def _stop(self) -> None:
        current = self.broker_quotas.shadow
        self.broker_quotas.stop_shadow()
        self.connections.stop_shadow()
        self._rows(False)
        if current is not None:
            log.info("shadow quota set %d (%r) no longer evaluated", current.id, current.name)

    async def enforced_changes(self, changes: Sequence[Change]) -> None:
        """Enforced ip / principal connection-rate changes reach the shadow's connection quotas too, unless the
        shadow sets that key (the client-quota managers get theirs in ``BrokerQuotas.apply_changes``)."""
        shadow = self.connections.shadow
        if shadow is None or self.reloader is None or not changes:
            return
        await self.reloader.apply_changes_to(shadow, passed_on(changes, self.broker_quotas.overrides))

    # -- the switch at effective_ms ----------------------------------------------------------------------------

    def _arm(self) -> None:
        """The first decision at or after the next ``effective_ms`` switches (exact); a timer switches too, so
        the change also happens while no request comes."""
        effective = self.pending.effective_ms
        self.broker_quotas.set_switch(effective, self.switch)
        if self._timer is not None:
            self._timer.cancel()
        if effective < NEVER:
            delay = max(0.0, (effective - self.clock_ms()) / 1000)
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = self.clock_ms()
        if now >= self.pending.effective_ms:
            self.switch(now)
        elif self.pending.waiting:
            self._arm()  # the wall clock was behind the loop's timer: look again

    def switch(self, now_ms: int, late: dict[int, int] | None = None) -> None:
        """Apply every batch due at ``now_ms`` to the enforced quotas (and the promoted shadow ends)."""
        changes, done = self.pending.due(now_ms)
        if done:
            if changes:
                self.broker_quotas.apply_changes(changes)
                if self.reloader is not None:
                    task = asyncio.get_running_loop().create_task(self.reloader.apply_store_changes(changes))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            current = self.broker_quotas.shadow
            for promotion in done:
                late_ms = (late or {}).get(promotion.id, 0)
                self.switched.append(Switched(promotion, now_ms, late_ms))
                if late_ms:
                    log.warning("%s %d read %d ms after its effective time %d: applied now", promotion.kind,
                                promotion.id, late_ms, promotion.effective_ms)
                else:
                    log.info("%s %d applied at %d (effective %d)", promotion.kind, promotion.id, now_ms,
                             promotion.effective_ms)
                if promotion.kind == "promote" and current is not None and promotion.shadow_id == current.id:
                    self._stop()
                    current = None
        self.broker_quotas.set_switch(self.pending.effective_ms, self.switch)
        if not self.pending.waiting and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in self._tasks:
            task.cancel()
