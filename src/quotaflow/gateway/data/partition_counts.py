"""Partition counts from the upstream's metadata, for KIP-599 permits of DeleteTopics and CreatePartitions.

Deleting a topic costs as many permits as it has partitions; adding partitions costs the new ones (requested count
minus current). Neither number is in the request, so before such a request is decided the gateway asks the upstream
(one Metadata request, the topics named, never auto-creating them, over a gateway-owned connection) and keeps the
answers here; the request hook, which runs right after, reads them. A topic the upstream does not know costs
nothing here: the upstream refuses it with its own error.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from kafka.protocol.api_key import ApiKey

from quotaflow.core.errors import QuotaflowError
from quotaflow.gateway.data.brokers import UpstreamLeg
from quotaflow.gateway.observation.ratelog import RateLimitedLog
from quotaflow.gateway.wire import protocol

log = logging.getLogger(__name__)

Connect = Callable[[], Awaitable[UpstreamLeg]]
Versions = Callable[[], Awaitable[list[tuple[int, int, int]]]]
MAX_ENTRIES: Final = 100_000  # bounded by the cluster's topics; cleared if it ever gets larger
TIMEOUT_S: Final = 5.0
FRAME_LIMIT: Final = 64 << 20
METADATA_MAX: Final = 12
METADATA_MIN: Final = 4  # allow_auto_topic_creation=false exists from v4: older versions could create the topic
METADATA_IDS: Final = 10  # topic ids


class PartitionCounts:
    """Topic -> partition count as of the last refresh that named it."""

    def __init__(self, connect: Connect, versions: Versions) -> None:
        self._connect = connect
        self._versions = versions
        self.by_name: dict[str, int] = {}
        self.by_id: dict[uuid.UUID, tuple[str, int]] = {}
        self._warnings = RateLimitedLog(log)  # a tenant repeating DeleteTopics must not flood the log

    def count(self, name: str | None, topic_id: uuid.UUID | None = None) -> int | None:
        if name:
            return self.by_name.get(name)
        if topic_id is not None:
            found = self.by_id.get(topic_id)
            return None if found is None else found[1]
        return None

    async def refresh(self, names: Iterable[str], ids: Iterable[uuid.UUID] = ()) -> None:
        """Ask the upstream for these topics now; on failure they are forgotten (metered as unknown)."""
        names, ids = sorted(set(names)), sorted(set(ids))
        for n in names:
            self.by_name.pop(n, None)
        for i in ids:
            self.by_id.pop(i, None)
        if not names and not ids:
            return
        try:
            async with asyncio.timeout(TIMEOUT_S):
                topics = await self._metadata(names, ids)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, QuotaflowError) as e:
            self._warnings.warning("partition counts unavailable from the upstream (%s): those topics are not metered",
                                   e)
            return
        if len(self.by_name) + len(topics) > MAX_ENTRIES:
            self.by_name.clear()
            self.by_id.clear()
        for t in topics:
            if t.error_code != 0 or t.name is None:
                continue
            self.by_name[t.name] = len(t.partitions)
            topic_id = getattr(t, "topic_id", None)
            if topic_id is not None and topic_id != uuid.UUID(int=0):
                self.by_id[topic_id] = (t.name, len(t.partitions))

    async def _metadata(self, names: list[str], ids: list[uuid.UUID]) -> list[Any]:
        upstream = {key: hi for key, _lo, hi in await self._versions()}.get(ApiKey.Metadata, -1)
        version = min(METADATA_MAX, upstream)
        if version < METADATA_MIN:
            raise ValueError(f"the upstream's Metadata v{upstream} could auto-create topics")
        if version < METADATA_IDS:
            ids = []
        cls = protocol.REQUESTS[ApiKey.Metadata][version]
        entry = cls.MetadataRequestTopic
        request = cls(topics=[entry(name=n) for n in names] + [entry(topic_id=i, name=None) for i in ids],
                      allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        request.with_header(correlation_id=1, client_id="quotaflow-gateway")
        reader, writer, _node, _at = await self._connect()
        try:
            writer.write(bytes(request.encode(version=version, header=True, framed=True)))
            await writer.drain()
            size = protocol.SIZE.unpack(await reader.readexactly(4))[0]
            if not 0 < size <= FRAME_LIMIT:
                raise ValueError(f"upstream answered Metadata with a {size}-byte frame")
            frame = await reader.readexactly(size)
        finally:
            writer.close()
        try:
            response = protocol.decode_response(frame, ApiKey.Metadata, version)
        except Exception as e:  # kafka-python raises assorted errors on malformed input
            raise ValueError(f"undecodable Metadata response: {e}") from e
        return list(response.topics)
