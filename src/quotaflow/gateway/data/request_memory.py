"""The memory pools for request frames larger than a connection's receive buffer.

``queued.max.request.bytes`` (Kafka's memory pool for requests) bounds the bytes of such frames held by
authenticated (or non-SASL) connections, summed over all connections; frames before SASL authentication draw on a
pool of their own (``quotaflow.sasl.queued.max.request.bytes``), so unauthenticated sockets can never take the
memory authenticated clients need. Small frames (up to the receive buffer every connection has anyway) need no
pool memory at all: whatever the pools hold, an ApiVersions or a SaslHandshake is always read.

Memory is reserved as a frame's body arrives, never from the size it announces: the body is read into chunks, and
each chunk is reserved just before bytes are read into it (chunks double from 64 KiB, so a frame holds at most about
twice what it has received, plus 64 KiB). A connection whose next chunk does not fit stops being read and waits for
memory to be released; waiters whose frames need the least go first (frames that announce far more than they send
wait behind those about to finish). The oldest holder may always take its next chunk, even past the capacity: with
reservations made piecemeal, two half-read frames could otherwise wait on each other for ever; so the pool holds at
most ``capacity + one frame`` (docs/gateway.md). A frame that is not finished within
``quotaflow.request.body.timeout.ms`` closes its connection, which releases what it held. While someone waits for
memory, so does a frame that holds some and has received nothing for ``STALLED_S`` though it was read, or has waited
that long for more while it needs more than a waiter that could finish sooner (the gateway's housekeeping): half-sent
frames cannot keep the pool from clients that send theirs.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Final

STALLED_S: Final = 2.0  # under contention: a frame holding pool memory that received nothing for this long closes


class RequestMemory:
    """A pool of bytes shared by connections; ``capacity < 0`` is unbounded."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._holders: dict[object, int] = {}  # insertion order: the oldest holder first
        # holders paused until memory is released: holder -> (ticket, remaining, wake); woken in (remaining,
        # ticket) order
        self._waiting: dict[object, tuple[int, int, Callable[[], None]]] = {}
        self._queue: list[tuple[int, int]] = []  # heap of (remaining bytes, ticket)
        self._by_ticket: dict[int, object] = {}
        self._tickets = itertools.count()

    def reserve(self, holder: object, size: int, wake: Callable[[], None], remaining: int = 0) -> bool:
        """Reserve ``size`` more bytes for ``holder``: True if granted; else False, and ``wake()`` is called once
        memory has been released (the holder then asks again). ``remaining``: the bytes its frame still needs in
        all; waiters needing the least go first (then the earliest), so frames that announce more than they send
        wait behind those about to finish."""
        held = self._holders.get(holder)
        if (self.capacity < 0 or self.used + size <= self.capacity or not self._holders
                or (held is not None and next(iter(self._holders)) is holder)):
            self.used += size
            self._holders[holder] = (held or 0) + size
            self._unqueue(holder)
            return True
        self._unqueue(holder)
        ticket = next(self._tickets)
        self._waiting[holder] = (ticket, remaining, wake)
        self._by_ticket[ticket] = holder
        if len(self._queue) > 2 * len(self._waiting) + 64:  # mostly entries of holders gone since: rebuild
            self._queue = [(r, t) for t, r, _wake in self._waiting.values()]
            heapq.heapify(self._queue)
        else:
            heapq.heappush(self._queue, (remaining, ticket))
        return False

    def _unqueue(self, holder: object) -> None:
        entry = self._waiting.pop(holder, None)
        if entry is not None:
            self._by_ticket.pop(entry[0], None)  # its heap entry is skipped when it comes up

    @property
    def contended(self) -> bool:
        """Someone waits for memory."""
        return bool(self._waiting)

    def neediest(self) -> int:
        """The least any waiter's frame still needs (0 when nobody waits)."""
        return min((remaining for _t, remaining, _w in self._waiting.values()), default=0)

    def held(self, holder: object) -> int:
        return self._holders.get(holder, 0)

    def release(self, holder: object) -> None:
        """Release everything ``holder`` holds (its frame was passed on, or its connection closed) and wake waiting
        holders in order while there is room; one that still does not fit stops the round (it stays first)."""
        self._unqueue(holder)
        size = self._holders.pop(holder, 0)
        if not size:
            return
        self.used -= size
        while self._queue and not (0 <= self.capacity <= self.used and self._holders):
            _remaining, ticket = heapq.heappop(self._queue)
            waiter = self._by_ticket.pop(ticket, None)
            if waiter is None:
                continue  # no longer waiting, or queued again since under a newer ticket
            wake = self._waiting.pop(waiter)[2]
            wake()  # reserves at once, or queues itself again
            if waiter in self._waiting:
                break
