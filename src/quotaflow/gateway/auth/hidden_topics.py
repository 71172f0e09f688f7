"""quotaflow's own topics, which no client reaches through a gateway (every mode, every principal, super users too).

The store topic of ``--store kafka://.../TOPIC`` holds every quota and credential, ``__quotaflow_usage`` (or
``quotaflow.quota.cluster.usage.topic``) every gateway's usage reports: a client that could read or write them would
own the fleet. Hidden are the configured names and every name starting with the reserved prefix ``__quotaflow``
(the default names and any topic a later quotaflow version adds), so another gateway's differently configured store
is hidden too as long as it keeps a default name.

The check runs on every request that names a topic, so it is made cheap: :meth:`HiddenTopics.may_name` is one
substring search of the raw frame (a request that does not contain any hidden name's bytes cannot name a hidden
topic), and only frames that do are decoded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Final

RESERVED_PREFIX: Final = "__quotaflow"
# the cluster-usage topic of ``quotaflow.quota.scope=cluster`` (:mod:`quotaflow.gateway.data.cluster_quota`, which
# takes its name from here: the data plane imports auth, never the other way)
USAGE_TOPIC: Final = "quotaflow.quota.cluster.usage.topic"
DEFAULT_USAGE_TOPIC: Final = "__quotaflow_usage"


class HiddenTopics:
    """The set of hidden topic names: ``names`` plus every name starting with :data:`RESERVED_PREFIX`."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = frozenset(names)
        extra = sorted(n for n in self.names if not n.startswith(RESERVED_PREFIX))
        # the byte patterns whose absence from a frame proves it names no hidden topic (the gateway's compiled
        # connection core tests them itself on the Produce path: gateway.data.connection._names_any)
        self.needles: tuple[bytes, ...] = (RESERVED_PREFIX.encode(), *(n.encode() for n in extra))
        self.may_name: Callable[[bytes | memoryview], object] = self._scan
        """Falsy when a frame cannot name a hidden topic (none of their bytes occur in it)."""
        if len(self.needles) == 1:
            # the usual case (every hidden name has the reserved prefix): a compiled literal's C-level search,
            # asked for every Produce and Fetch without a Python frame of its own (and faster than ``in`` for a
            # literal this short); an alternation of several is ten times slower than ``_scan``'s loop
            self.may_name = re.compile(re.escape(self.needles[0])).search

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name.startswith(RESERVED_PREFIX) or name in self.names)

    def _scan(self, frame: bytes | memoryview) -> bool:
        data = frame if type(frame) is bytes else bytes(frame)
        for needle in self.needles:  # noqa: SIM110  (a loop, not any(<generator>): runs for every Produce, Fetch)
            if needle in data:
                return True
        return False

    def __repr__(self) -> str:
        return f"HiddenTopics({sorted(self.names)!r} + {RESERVED_PREFIX}*)"


def hidden_topics_for(store: object, extra: Mapping[str, str]) -> HiddenTopics:
    """The topics a gateway hides: its ``kafka://`` store's topic, the cluster-usage topic, the reserved prefix."""
    names = {DEFAULT_USAGE_TOPIC, (extra.get(USAGE_TOPIC) or DEFAULT_USAGE_TOPIC).strip() or DEFAULT_USAGE_TOPIC}
    spec = getattr(store, "spec", None)
    topic = getattr(spec, "topic", None)
    if isinstance(topic, str):
        names.add(topic)
    for attr in ("internal_topics", "topics"):  # a store that keeps more than one topic names them all
        more = getattr(store, attr, None)
        if isinstance(more, list | tuple | frozenset | set):
            names.update(t for t in more if isinstance(t, str))
    return HiddenTopics(names)
