"""``queued.max.request.bytes`` (Kafka's memory pool for requests): the bytes of requests read but not yet passed on,
summed over all connections. While the pool is full the gateway reads no new request body, as Kafka mutes channels
until memory is free; -1 (Kafka's default) leaves it unbounded."""

from __future__ import annotations

import asyncio


class RequestMemory:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity  # < 0: unbounded
        self.used = 0
        self._freed: asyncio.Condition | None = None

    async def acquire(self, size: int) -> None:
        """Reserve ``size`` bytes, waiting while they do not fit. A request larger than the whole pool is let through
        when the pool is empty (Kafka requires the pool to hold at least one ``socket.request.max.bytes`` request)."""
        if self.capacity >= 0:
            if self._freed is None:
                self._freed = asyncio.Condition()
            async with self._freed:
                await self._freed.wait_for(lambda: self.used == 0 or self.used + size <= self.capacity)
        self.used += size

    def release(self, size: int) -> None:
        self.used -= size
        if self._freed is not None:
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        assert self._freed is not None
        async with self._freed:
            self._freed.notify_all()
