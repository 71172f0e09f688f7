"""Principals excluded from client quotas (``quotaflow.quota.excluded.principals``, beyond Kafka's model).

Operators, replicators and operators' tools (the Strimzi quota plugin's ``excluded.principal.name.list``) should
never be throttled by the default user quotas meant for tenants. An excluded principal's requests are never
throttled and record nothing into any client-quota sensor (so they never eat into a bucket they share with others);
their thread time is metered as exempt (``exempt-request-time``), and their usage stays visible in metrics. The
gateway, backtest and replay read the same setting (docs/quota-model.md).
"""

from __future__ import annotations

from typing import Final

from quotaflow.core.errors import InvalidConfigurationError

EXCLUDED_PRINCIPALS: Final = "quotaflow.quota.excluded.principals"
USER_TYPE: Final = "User"


def parse_excluded_principals(raw: str) -> frozenset[str]:
    """``User:ops;User:replicator`` (``,`` also separates) -> the principal names; other principal types are an
    error (the quota model names users only)."""
    names: set[str] = set()
    for item in raw.replace(",", ";").split(";"):
        entry = item.strip()
        if not entry:
            continue
        kind, sep, name = entry.partition(":")
        if not sep or kind != USER_TYPE or not name:
            raise InvalidConfigurationError(
                f"Invalid value {raw} for configuration {EXCLUDED_PRINCIPALS}: each principal must be "
                f"{USER_TYPE}:<name> (separated by ';'), not {entry!r}"
            )
        names.add(name)
    return frozenset(names)
