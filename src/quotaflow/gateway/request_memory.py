"""The memory pools for request frames larger than a connection's receive buffer.

``queued.max.request.bytes`` (Kafka's memory pool for requests) bounds the bytes of such frames held by
authenticated (or non-SASL) connections, summed over all connections; frames before SASL authentication draw on a
pool of their own (``quotaflow.sasl.queued.max.request.bytes``), so unauthenticated sockets can never take the
memory authenticated clients need. Small frames (up to the receive buffer every connection has anyway) need no
pool memory at all: whatever the pools hold, an ApiVersions or a SaslHandshake is always read.

Memory is reserved as a frame's body arrives, never from the size it announces: the body is read into chunks, and
each chunk is reserved just before bytes are read into it (chunks double from 64 KiB, so a frame holds at most about
twice what it has received, plus 64 KiB). A connection whose next chunk does not fit stops being read and waits, in
order, for memory to be released. The oldest holder may always take its next chunk, even past the capacity: with
reservations made piecemeal, two half-read frames could otherwise wait on each other for ever; so the pool holds at
most ``capacity + one frame`` (docs/gateway.md). A frame that is not finished within
``quotaflow.request.body.timeout.ms`` closes its connection, which releases what it held.
"""

from __future__ import annotations

from collections.abc import Callable


class RequestMemory:
    """A pool of bytes shared by connections; ``capacity < 0`` is unbounded."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._holders: dict[object, int] = {}  # insertion order: the oldest holder first
        self._waiting: dict[object, Callable[[], None]] = {}  # FIFO of holders paused until memory is released

    def reserve(self, holder: object, size: int, wake: Callable[[], None]) -> bool:
        """Reserve ``size`` more bytes for ``holder``: True if granted; else False, and ``wake()`` is called once
        memory has been released (the holder then asks again)."""
        held = self._holders.get(holder)
        if (self.capacity < 0 or self.used + size <= self.capacity or not self._holders
                or (held is not None and next(iter(self._holders)) is holder)):
            self.used += size
            self._holders[holder] = (held or 0) + size
            self._waiting.pop(holder, None)
            return True
        self._waiting[holder] = wake
        return False

    def held(self, holder: object) -> int:
        return self._holders.get(holder, 0)

    def release(self, holder: object) -> None:
        """Release everything ``holder`` holds (its frame was passed on, or its connection closed) and wake waiting
        holders, oldest first, while there is room."""
        self._waiting.pop(holder, None)
        size = self._holders.pop(holder, 0)
        if not size:
            return
        self.used -= size
        for waiter in list(self._waiting):
            if 0 <= self.capacity <= self.used and self._holders:
                break
            wake = self._waiting.pop(waiter, None)
            if wake is not None:
                wake()  # reserves at once, or queues itself again at the end
